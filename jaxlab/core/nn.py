"""Shared Flax Linen networks: :class:`MLP`, :class:`ConvNet` and :class:`Transformer`.

Every method builds its networks from these instead of writing a local copy. Layer names are
Flax's automatic ones (``Dense_0``, ``Dense_1``, ..., ``Dropout_0``, ...), so an :class:`MLP`
placed where a hand-written ``Dense`` loop used to be has the same parameter tree and, for the same
key, the same initial values. A wrapper that adds pre/post-processing and wants the MLP's layers at
its own level (no ``MLP_0`` in the path) calls it under ``nn.share_scope(self, mlp)`` in ``setup``.

Initialisation schemes (``init_scheme=``, a module field: ``init`` is Flax's method):

- ``"lecun"`` (Flax's default): kernel ``lecun_normal``, bias zero;
- ``"torch"``: PyTorch's ``nn.Linear`` / ``nn.Conv`` default, kernel and bias both
  ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` (what official PyTorch codes get without asking);
- ``"xavier_uniform"``: kernel Glorot-uniform (scaled by ``init_gain``), bias zero;
- ``"orthogonal"``: kernel orthogonal (gain ``init_gain``), bias zero.

An :class:`MLP`'s output layer can have its own scheme and gain (``output_init_scheme``,
``output_init_gain``): the small last-layer gains of CORL's SAC / CQL networks.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.checks import check_in_range, check_int, check_key, check_scalar

Activation = str | Callable[[jax.Array], jax.Array]

_ACTIVATIONS: dict[str, Callable[..., jax.Array]] = {
    "relu": nn.relu,
    "tanh": jnp.tanh,
    "gelu": lambda x: nn.gelu(x, approximate=False),
    "gelu_tanh": lambda x: nn.gelu(x, approximate=True),
    "silu": nn.silu,
    "sigmoid": nn.sigmoid,
    "softplus": nn.softplus,
    "elu": nn.elu,
    "identity": lambda x: x,
}
INIT_SCHEMES = ("lecun", "torch", "xavier_uniform", "orthogonal")

__all__ = [
    "HEAD_SPACES",
    "INIT_SCHEMES",
    "MLP",
    "POSITION_ENCODINGS",
    "ConvNet",
    "Generation",
    "HeadProjection",
    "KVCache",
    "LayerCache",
    "SelfAttention",
    "Transformer",
    "TransformerAux",
    "TransformerBlock",
    "activation_fn",
    "dense_init",
    "generate",
    "rope",
    "smeared_keys",
    "sinusoidal_embedding",
    "torch_uniform",
]


def activation_fn(activation: Activation | None, negative_slope: float = 0.01) -> Callable:
    """Resolve an activation name (``"relu"``, ``"tanh"``, ``"leaky_relu"``, ...) or callable.

    ``None`` is the identity. ``"leaky_relu"`` uses ``negative_slope``.
    """
    if activation is None:
        return _ACTIVATIONS["identity"]
    if callable(activation):
        return activation
    if activation == "leaky_relu":
        return lambda x: nn.leaky_relu(x, negative_slope)
    if activation not in _ACTIVATIONS:
        names = sorted([*_ACTIVATIONS, "leaky_relu"])
        raise ValueError(f"`activation` must be a callable or one of {names}, got {activation!r}.")
    return _ACTIVATIONS[activation]


def torch_uniform(fan_in: int) -> Callable:
    """``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``: PyTorch's default Linear/Conv weight and bias.

    Without a ``dtype`` the values have the default float type (float64 under ``enable_x64``),
    like flax's own initializers.
    """
    bound = 1.0 / float(check_int(fan_in, "fan_in", minimum=1)) ** 0.5

    def init(key, shape, dtype=None):
        return jax.random.uniform(key, shape, float if dtype is None else dtype, -bound, bound)

    return init


def dense_init(scheme: str, fan_in: int, gain: float = 1.0) -> dict[str, Callable]:
    """``{"kernel_init": ..., "bias_init": ...}`` for one layer of input width ``fan_in``."""
    check_int(fan_in, "fan_in", minimum=1)
    if scheme == "lecun":
        return {"kernel_init": nn.initializers.lecun_normal(), "bias_init": nn.initializers.zeros}
    if scheme == "torch":
        return {"kernel_init": torch_uniform(fan_in), "bias_init": torch_uniform(fan_in)}
    if scheme == "xavier_uniform":
        kernel = nn.initializers.variance_scaling(gain**2, "fan_avg", "uniform")
        return {"kernel_init": kernel, "bias_init": nn.initializers.zeros}
    if scheme == "orthogonal":
        return {"kernel_init": nn.initializers.orthogonal(gain), "bias_init": nn.initializers.zeros}
    raise ValueError(f"`init_scheme` must be one of {INIT_SCHEMES}, got {scheme!r}.")


def _check_features(features: Sequence[int], name: str) -> None:
    def positive_int(f) -> bool:
        return not isinstance(f, bool) and isinstance(f, int | np.integer) and f >= 1

    ok = isinstance(features, Sequence) and not isinstance(features, str)
    if not (ok and len(features) > 0 and all(positive_int(f) for f in features)):
        raise ValueError(f"`{name}` must be a non-empty tuple of positive ints; got {features!r}")


class MLP(nn.Module):
    """``Dense [-> LayerNorm] -> act [-> Dropout]`` per width in ``features[:-1]``, then
    ``Dense(features[-1])``.

    Attributes:
      features: layer widths, the last one the output width (``(64, 64, 10)``: two hidden layers).
      activation: hidden activation, a name (see :func:`activation_fn`) or a callable.
      output_activation: applied to the output (``None``: linear output).
      dropout: dropout rate after every hidden activation (active when ``deterministic=False``;
        needs a ``"dropout"`` rng).
      init_scheme: initialisation scheme, one of :data:`INIT_SCHEMES`.
      init_gain: gain of the ``"orthogonal"`` and ``"xavier_uniform"`` schemes.
      output_init_scheme, output_init_gain: the output layer's scheme and gain (``None``: as
        the hidden layers').
      negative_slope: slope of ``"leaky_relu"``.
      use_bias: add a bias in every layer.
      layer_norm: a ``LayerNorm`` after every hidden ``Dense``, before the activation (the
        offline-RL critics of CORL / SSAR).

    Call: ``mlp.apply(params, x [..., d_in], deterministic=True) -> [..., features[-1]]``.
    """

    features: Sequence[int]
    activation: Activation = "relu"
    output_activation: Activation | None = None
    dropout: float = 0.0
    init_scheme: str = "lecun"
    init_gain: float = 1.0
    output_init_scheme: str | None = None
    output_init_gain: float | None = None
    negative_slope: float = 0.01
    use_bias: bool = True
    layer_norm: bool = False

    @nn.compact
    def __call__(self, x: jax.Array, deterministic: bool = True) -> jax.Array:
        _check_features(self.features, "features")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"`dropout` must be in [0, 1), got {self.dropout}.")
        act = activation_fn(self.activation, self.negative_slope)
        first = self.variables.get("params", {}).get("Dense_0", {}).get("kernel")
        if first is not None and np.shape(x)[-1:] != np.shape(first)[:1]:
            raise ValueError(
                f"MLP: `x` has {np.shape(x)[-1:]} input features but the parameters expect "
                f"{np.shape(first)[0]} (params built for another input width?)."
            )
        for width in self.features[:-1]:
            x = nn.Dense(int(width), use_bias=self.use_bias, **self._init(x))(x)
            if self.layer_norm:
                x = nn.LayerNorm()(x)
            x = act(x)
            if self.dropout > 0.0:
                x = nn.Dropout(self.dropout)(x, deterministic=deterministic)
        out_init = self._init(x, self.output_init_scheme, self.output_init_gain)
        x = nn.Dense(int(self.features[-1]), use_bias=self.use_bias, **out_init)(x)
        return activation_fn(self.output_activation)(x)

    def _init(self, x: jax.Array, scheme: str | None = None, gain: float | None = None):
        scheme = self.init_scheme if scheme is None else scheme
        return dense_init(scheme, x.shape[-1], self.init_gain if gain is None else gain)


class ConvNet(nn.Module):
    """A small convolutional encoder: ``[Conv(3x3) -> act -> (avg-pool 2)]`` per width, then a head.

    Input ``[B, H, W, C]`` (NHWC). Every block is a 3x3 ``SAME`` convolution and the activation;
    blocks listed in ``pool`` (default: all but the first) are followed by a 2x2 average pool. The
    feature map is then averaged over space (``global_pool=True``) or flattened, and mapped by an
    :class:`MLP` with ``head`` widths (no head: the pooled features are returned).

    Attributes:
      channels: output channels of each conv block.
      head: widths of the MLP head after pooling, the last one the output width (``()``: none).
      activation: activation of the conv blocks and the head's hidden layers.
      pool: indices of the blocks followed by a 2x2 average pool (``None``: all but the first).
      global_pool: average over space before the head (else flatten).
      init_scheme: initialisation scheme of every layer (see :data:`INIT_SCHEMES`).
    """

    channels: Sequence[int] = (32, 64)
    head: Sequence[int] = ()
    activation: Activation = "relu"
    pool: Sequence[int] | None = None
    global_pool: bool = True
    init_scheme: str = "lecun"

    @nn.compact
    def __call__(self, x: jax.Array, deterministic: bool = True) -> jax.Array:
        if x.ndim != 4:
            raise ValueError(f"ConvNet: `x` must be [B, H, W, C], got shape {x.shape}.")
        _check_features(self.channels, "channels")
        act = activation_fn(self.activation)
        pool = range(1, len(self.channels)) if self.pool is None else self.pool
        for i, ch in enumerate(self.channels):
            fan_in = 9 * x.shape[-1]
            x = act(
                nn.Conv(int(ch), (3, 3), padding="SAME", **dense_init(self.init_scheme, fan_in))(x)
            )
            if i in pool:
                x = nn.avg_pool(x, (2, 2), strides=(2, 2))
        x = x.mean(axis=(1, 2)) if self.global_pool else x.reshape(x.shape[0], -1)
        if len(self.head) == 0:
            return x
        return MLP(tuple(self.head), activation=self.activation, init_scheme=self.init_scheme)(
            x, deterministic=deterministic
        )


# --------------------------------------------------------------------------------------------------
# Transformer
# --------------------------------------------------------------------------------------------------

POSITION_ENCODINGS = ("rope", "learned", "none")
HEAD_SPACES = ("output", "residual")
_EMBED_INIT = nn.initializers.normal(stddev=0.02)


def rope(
    x: jax.Array, positions: jax.Array, *, base: float = 10000.0, scale: float = 1.0
) -> jax.Array:
    """Rotary position embedding (RoPE) with position interpolation, rotate-half convention.

    Channel ``i < D/2`` is paired with channel ``i + D/2``; the pair is rotated by the angle
    ``(scale * p) * base ** (-2 i / D)``. In complex form, with ``z = x[:D/2] + 1j * x[D/2:]``,
    ``rope(x) = z * exp(1j * scale * p * theta)``. ``scale`` is the position-interpolation factor
    (Chen et al. 2023): to run a model trained at length ``L_base`` on ``L_long`` tokens use
    ``scale = L_base / L_long``; ``scale = 1`` is plain RoPE, and factor ``s`` at positions ``p``
    equals factor 1 at positions ``s * p``.

    Args:
      x: ``[B, T, H, D]`` (queries or keys; ``D`` even).
      positions: ``[B, T]`` or ``[T]`` position ids (int or float).
      base: the RoPE frequency base.
      scale: the position-interpolation factor (> 0).

    Returns:
      ``[B, T, H, D]``, same dtype as ``x`` (computed in float32, or float64 for float64 ``x``).
    """
    if x.ndim != 4:
        raise ValueError(f"rope: `x` must be [B, T, H, D], got shape {x.shape}.")
    d = x.shape[-1]
    if d % 2:
        raise ValueError(f"rope: the head dimension (last axis of `x`) must be even, got {d}.")
    positions = jnp.asarray(positions)
    if positions.ndim == 1 and positions.shape[0] == x.shape[1]:
        positions = jnp.broadcast_to(positions[None, :], x.shape[:2])
    if positions.shape != x.shape[:2]:
        raise ValueError(
            f"rope: `positions` must be [B, T] = {x.shape[:2]} or [T], got shape {positions.shape}."
        )
    check_scalar(scale, "scale", 0.0, low_open=True)
    check_scalar(base, "base", 0.0, low_open=True)
    ct = jnp.promote_types(x.dtype, jnp.float32)  # at least float32 (float64 stays float64)
    inv_freq = base ** (-jnp.arange(0, d, 2, dtype=ct) / d)  # [D/2]
    angles = (positions.astype(ct) * scale)[:, :, None] * inv_freq[None, None, :]
    cos, sin = jnp.cos(angles)[:, :, None, :], jnp.sin(angles)[:, :, None, :]  # [B, T, 1, D/2]
    x1, x2 = x[..., : d // 2].astype(ct), x[..., d // 2 :].astype(ct)
    out = jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)
    return out.astype(x.dtype)


def sinusoidal_embedding(t: jax.Array, dim: int, max_period: float = 10000.0) -> jax.Array:
    """Transformer/DDPM sinusoidal features of a scalar per element: ``[...] -> [..., dim]``.

    ``[cos(t w_0), ..., cos(t w_{dim/2-1}), sin(t w_0), ...]`` with
    ``w_i = max_period ** (-i / (dim / 2))``; use it (then an :class:`MLP`) to build a per-token
    time embedding for :class:`Transformer`'s ``cond``, e.g. ``sinusoidal_embedding(1000 * t, 128)``
    for ``t [B, T]``.
    """
    if isinstance(dim, bool) or not isinstance(dim, int | np.integer) or dim < 2 or dim % 2:
        raise ValueError(f"sinusoidal_embedding: `dim` must be an even int >= 2, got {dim!r}.")
    check_scalar(max_period, "max_period", 0.0, low_open=True)
    t = jnp.asarray(t, jnp.float32)
    freqs = max_period ** (-jnp.arange(dim // 2, dtype=jnp.float32) / (dim // 2))
    args = t[..., None] * freqs.reshape((1,) * t.ndim + (dim // 2,))
    return jnp.concatenate([jnp.cos(args), jnp.sin(args)], axis=-1)


class KVCache(NamedTuple):
    """Keys and values of every layer for incremental (autoregressive) decoding.

    Slots are filled left to right, the same slot range for the whole batch; a left-padded prompt
    marks its padding slots ``False`` in ``mask`` and sets ``position`` per example.

    Fields:
      k: a tuple of ``L`` arrays ``[B, H, D_head, S]``, each layer's keys (after RoPE, before
        ``smear_keys``) of the ``S`` slots, slot axis last.
      v: a tuple of ``L`` arrays ``[B, H, S, D_head]``, each layer's values.

    One buffer per layer, in the layouts XLA's CPU dots read in place: a cache step writes and
    reads only its own layer's slots. With one stacked ``[L, B, S, H, D]`` array per side each
    decode step transposed every layer's whole cache (measured on 2 CPU cores, 16 sequences x 268
    slots x 4 heads x 16: 0.50 ms per layer-step against 0.14 ms in these layouts).
      mask: ``[B, S]`` bool, True where a slot holds a real (non-padding) token.
      index: ``[]`` int32, number of slots filled so far (the next write starts here).
      position: ``[B]`` int32, the position id the next token of each example gets by default.
    """

    k: jax.Array
    v: jax.Array
    mask: jax.Array
    index: jax.Array
    position: jax.Array

    @staticmethod
    def create(
        num_layers: int,
        batch_size: int,
        max_len: int,
        num_heads: int,
        d_head: int,
        dtype: Any = jnp.float32,
    ) -> KVCache:
        """An empty cache of ``max_len`` slots (zeros, ``mask`` all False, ``index = 0``)."""
        k_shape = (batch_size, num_heads, d_head, max_len)
        v_shape = (batch_size, num_heads, max_len, d_head)
        return KVCache(
            k=tuple(jnp.zeros(k_shape, dtype) for _ in range(num_layers)),
            v=tuple(jnp.zeros(v_shape, dtype) for _ in range(num_layers)),
            mask=jnp.zeros((batch_size, max_len), bool),
            index=jnp.zeros((), jnp.int32),
            position=jnp.zeros((batch_size,), jnp.int32),
        )


class TransformerAux(NamedTuple):
    """Extra outputs of :class:`Transformer` (a field is ``None`` unless requested).

    Fields:
      attention: ``[L, B, H, T, S]`` attention probabilities (``S = T`` without a cache, the cache
        length with one; rows sum to 1 over the allowed keys).
      head_outputs: per-head outputs of every layer, as fed to the output projection (after
        ``head_override`` / ``head_mask``): ``[L, B, T, H, D_head]`` for ``head_space="output"``,
        ``[L, B, T, H, d_model]`` (each head's term of the residual update) for ``"residual"``.
      hidden: ``[B, T, d_model]`` final hidden states (after the final LayerNorm), e.g. for a
        value head.
      cache: the updated :class:`KVCache` when one was passed.
    """

    attention: jax.Array | None = None
    head_outputs: jax.Array | None = None
    hidden: jax.Array | None = None
    cache: KVCache | None = None


class HeadProjection(nn.Module):
    """The attention output projection ``sum_h o_h W_o[h] + b``, kernel ``[H, D_head, d_model]``.

    ``per_head=False``: ``o [B, T, H, D_head] -> [B, T, d_model]``. ``per_head=True``: the per-head
    terms ``(o_h W_o[h] [B, T, H, d_model], bias [d_model] | None)``, summed by the caller.
    """

    features: int
    use_bias: bool = True
    init_scheme: str = "lecun"

    @nn.compact
    def __call__(self, o: jax.Array, per_head: bool = False):
        h, dh = o.shape[-2:]
        inits = dense_init(self.init_scheme, h * dh)
        kernel = self.param(
            "kernel",
            lambda key, shape: inits["kernel_init"](key, (h * dh, self.features)).reshape(shape),
            (h, dh, self.features),
        )
        bias = self.param("bias", inits["bias_init"], (self.features,)) if self.use_bias else None
        if per_head:
            return jnp.einsum("bthd,hdm->bthm", o, kernel), bias
        out = jnp.einsum("bthd,hdm->btm", o, kernel)
        return out if bias is None else out + bias[None, None, :]


class LayerCache(NamedTuple):
    """What one attention layer needs from a :class:`KVCache`: its buffers and the fill index."""

    k: jax.Array  # [B, H, D, S]
    v: jax.Array  # [B, H, S, D]
    index: jax.Array  # [] int32


def _has_previous(n_slots: int, key_mask: jax.Array | None) -> jax.Array:
    """``[B or 1, S]`` bool: slot ``s`` has a real previous slot (``s > 0`` and ``s - 1`` not
    padding)."""
    has_prev = (jnp.arange(n_slots) > 0)[None, :]
    if key_mask is not None:
        has_prev = has_prev & jnp.pad(key_mask, ((0, 0), (1, 0)))[:, :-1]
    return has_prev


def _smear(x: jax.Array, key_mask, logits, slot_axis: int, head_axis: int) -> jax.Array:
    """``(1 - a_h) x_s + a_h x_{s-1}`` along ``slot_axis`` (a zero previous entry where slot
    ``s - 1`` is absent or padding); ``a_h = sigmoid(logits_h)`` broadcast along ``head_axis``.
    ``x`` has a batch axis 0 (``key_mask [B, S]``)."""
    shape = [1] * x.ndim
    shape[head_axis] = -1
    alpha = jax.nn.sigmoid(logits).astype(x.dtype).reshape(shape)
    pad = [(0, 0)] * x.ndim
    pad[slot_axis] = (1, 0)
    prev = jax.lax.slice_in_dim(jnp.pad(x, pad), 0, x.shape[slot_axis], axis=slot_axis)
    has_prev = _has_previous(x.shape[slot_axis], key_mask)  # [B or 1, S]
    mask_shape = [1] * x.ndim
    mask_shape[0], mask_shape[slot_axis] = has_prev.shape
    prev = jnp.where(has_prev.reshape(mask_shape), prev, 0.0)
    return (1.0 - alpha) * x + alpha * prev


def smeared_keys(keys: jax.Array, key_mask: jax.Array | None, logits: jax.Array) -> jax.Array:
    """Smeared keys (Olsson et al. 2022): ``k~_s = (1 - a_h) k_s + a_h k_{s-1}``, ``a_h =
    sigmoid(logits_h)``.

    ``keys [B, S, H, D]`` (after RoPE), ``key_mask [B, S]`` bool or None, ``logits [H]``. A slot
    whose previous slot is absent (``s = 0``) or padding contributes a zero previous key. Each key
    then carries its previous token, so one head can attend to "the token after a match" (an
    induction / associative-recall lookup) without a separate previous-token head.

    :class:`SelfAttention` smears the keys without a cache (training, full forwards) and the
    ``[B, H, T, S]`` scores with one (prefill and decode: smearing is linear in the keys, so the
    scores against smeared keys are the same shift of the scores against the raw keys, see
    :func:`_smear_scores`; the cache stores raw keys).
    """
    return _smear(keys, key_mask, logits, slot_axis=1, head_axis=2)


def _smear_scores(scores: jax.Array, key_mask: jax.Array | None, logits: jax.Array) -> jax.Array:
    """Attention scores against :func:`smeared_keys`, from the scores against the raw keys:
    ``q . k~_s = (1 - a_h) q . k_s + a_h q . k_{s-1}``, a shift of the ``[B, H, T, S]`` scores
    along ``S``. Used with a cache: a decode step then never passes over the whole cache (a step
    of 16 sequences x 268 slots 2.05 -> 1.90 ms; the cache layout, see :class:`KVCache`, was the
    larger cost), and a prefill of 252 tokens was a few % faster than smearing the cache's keys.
    Without a cache the keys are smeared (``T S`` against ``D S`` entries per head: a
    retrieval-heads fine-tuning step of 16 x 256 tokens 294 -> 280 ms)."""
    return _smear(scores, key_mask, logits, slot_axis=3, head_axis=1)


class SelfAttention(nn.Module):
    """Multi-head self-attention with per-head access (the attention of :class:`Transformer`).

    Parameters ``query``/``key``/``value`` (kernels ``[d_in, H, D_head]``) and ``out``
    (:class:`HeadProjection`). The head arguments are those of :meth:`Transformer.__call__` for one
    layer: ``head_mask [H]``, ``head_override [B, T, H, .]``, ``override_heads [H]`` bool,
    ``uniform_heads [H]`` bool.

    Args (call): ``x [B, T, d_in]``; ``positions [B, T]``; ``key_mask [B, S]`` bool or None
    (``S = T`` without a cache); ``cache`` a :class:`LayerCache` or None.

    Returns:
      ``(out [B, T, d_model], probs [B, H, T, S] | None, heads | None, (k, v) | None)`` where
      ``(k, v)`` are this layer's cache buffers (keys ``[B, H, D_head, S]``, values
      ``[B, H, S, D_head]``) with the new keys/values written.
    """

    num_heads: int
    d_model: int
    causal: bool = True
    use_rope: bool = True
    rope_base: float = 10000.0
    rope_scale: float = 1.0
    use_bias: bool = True
    init_scheme: str = "lecun"
    smear_keys: bool = False

    @nn.compact
    def __call__(
        self,
        x: jax.Array,
        positions: jax.Array,
        key_mask: jax.Array | None,
        cache: LayerCache | None = None,
        head_mask: jax.Array | None = None,
        head_override: jax.Array | None = None,
        override_heads: jax.Array | None = None,
        uniform_heads: jax.Array | None = None,
        *,
        head_space: str = "output",
        return_attention: bool = False,
        return_heads: bool = False,
    ):
        h, dh = self.num_heads, self.d_model // self.num_heads
        t = x.shape[1]
        inits = dense_init(self.init_scheme, x.shape[-1])
        q, k, v = (
            nn.DenseGeneral((h, dh), use_bias=self.use_bias, name=name, **inits)(x)
            for name in ("query", "key", "value")
        )  # [B, T, H, D]
        if self.use_rope:
            q = rope(q, positions, base=self.rope_base, scale=self.rope_scale)
            k = rope(k, positions, base=self.rope_base, scale=self.rope_scale)

        if cache is None:
            keys, values, new_kv = k, v, None
            q_idx = jnp.arange(t)
            score_eq, out_eq = "bthd,bshd->bhts", "bhts,bshd->bthd"
        else:  # cache layouts: keys [B, H, D, S], values [B, H, S, D] (see KVCache)
            k_new = jnp.transpose(k, (0, 2, 3, 1)).astype(cache.k.dtype)
            v_new = jnp.transpose(v, (0, 2, 1, 3)).astype(cache.v.dtype)
            keys = jax.lax.dynamic_update_slice(cache.k, k_new, (0, 0, 0, cache.index))
            values = jax.lax.dynamic_update_slice(cache.v, v_new, (0, 0, cache.index, 0))
            new_kv = (keys, values)
            q_idx = cache.index + jnp.arange(t)
            score_eq, out_eq = "bthd,bhds->bhts", "bhts,bhsd->bthd"
        smear = self.param("smear", nn.initializers.zeros, (h,)) if self.smear_keys else None
        s = values.shape[-2 if cache is not None else 1]  # number of key slots
        smear_scores = smear is not None and cache is not None  # the cheaper side, measured
        if smear is not None and cache is None:
            keys = smeared_keys(keys, key_mask, smear)
        k_idx = jnp.arange(s)
        if self.causal:
            allowed = k_idx[None, :] <= q_idx[:, None]  # [T, S]
        else:  # every filled slot
            allowed = jnp.broadcast_to(k_idx[None, :] <= q_idx[-1], (t, s))
        allowed = allowed[None, None, :, :]  # [1, 1, T, S]
        if key_mask is not None:
            allowed = allowed & key_mask[:, None, None, :]

        scores = jnp.einsum(score_eq, q * (dh**-0.5), keys)
        if smear_scores:  # = the scores against smeared_keys(keys, key_mask, smear)
            scores = _smear_scores(scores, key_mask, smear)
        if uniform_heads is not None:  # Wu et al. knockout: uniform attention over allowed keys
            scores = jnp.where(uniform_heads[None, :, None, None], 0.0, scores)
        scores = jnp.where(allowed, scores, jnp.finfo(scores.dtype).min)
        probs = jax.nn.softmax(scores, axis=-1)
        o = jnp.einsum(out_eq, probs, values)  # [B, T, H, D]

        out_proj = HeadProjection(
            self.d_model, use_bias=self.use_bias, init_scheme=self.init_scheme, name="out"
        )
        per_head = head_space == "residual" and (return_heads or head_override is not None)
        if per_head:
            o, bias = out_proj(o, per_head=True)  # [B, T, H, d_model]
        if head_override is not None:
            o = jnp.where(override_heads[None, None, :, None], head_override.astype(o.dtype), o)
        if head_mask is not None:
            o = o * head_mask.astype(o.dtype)[None, None, :, None]
        if per_head:
            out = o.sum(axis=2)
            out = out if bias is None else out + bias[None, None, :]
        else:
            out = out_proj(o)
        return out, (probs if return_attention else None), (o if return_heads else None), new_kv


def _modulation(n: int, d_model: int, name: str) -> nn.Dense:
    """A zero-initialised ``Dense(n * d_model)`` (adaLN-Zero)."""
    zeros = nn.initializers.zeros
    return nn.Dense(n * d_model, kernel_init=zeros, bias_init=zeros, name=name)


class TransformerBlock(nn.Module):
    """One pre-LN block of :class:`Transformer` (``ln_attn``, ``attn``, ``ln_mlp``, ``mlp``,
    and ``adaln`` when conditioned). ``silu_cond [B, T, d_cond]`` or None; the remaining arguments
    go to :class:`SelfAttention`. Returns ``(x, probs, heads, new_kv)``."""

    num_heads: int
    d_model: int
    d_mlp: int
    causal: bool = True
    use_rope: bool = True
    rope_base: float = 10000.0
    rope_scale: float = 1.0
    activation: Activation = "gelu"
    dropout: float = 0.0
    use_bias: bool = True
    layer_norm_eps: float = 1e-5
    init_scheme: str = "lecun"
    smear_keys: bool = False

    @nn.compact
    def __call__(
        self,
        x,
        positions,
        key_mask,
        silu_cond,
        cache,
        head_args,
        *,
        head_space,
        return_attention,
        return_heads,
        deterministic,
    ):
        drop = nn.Dropout(self.dropout)
        h = nn.LayerNorm(epsilon=self.layer_norm_eps, name="ln_attn")(x)
        if silu_cond is not None:
            mod = _modulation(6, self.d_model, "adaln")(silu_cond)
            shift_a, scale_a, gate_a, shift_m, scale_m, gate_m = jnp.split(mod, 6, axis=-1)
            h = h * (1.0 + scale_a) + shift_a
        attn = SelfAttention(
            self.num_heads,
            self.d_model,
            causal=self.causal,
            use_rope=self.use_rope,
            rope_base=self.rope_base,
            rope_scale=self.rope_scale,
            use_bias=self.use_bias,
            init_scheme=self.init_scheme,
            smear_keys=self.smear_keys,
            name="attn",
        )
        a, probs, heads, new_kv = attn(
            h,
            positions,
            key_mask,
            cache,
            *head_args,
            head_space=head_space,
            return_attention=return_attention,
            return_heads=return_heads,
        )
        if silu_cond is not None:
            a = gate_a * a
        x = x + drop(a, deterministic=deterministic)
        h = nn.LayerNorm(epsilon=self.layer_norm_eps, name="ln_mlp")(x)
        if silu_cond is not None:
            h = h * (1.0 + scale_m) + shift_m
        mlp = MLP(
            (self.d_mlp, self.d_model), self.activation, init_scheme=self.init_scheme, name="mlp"
        )
        m = mlp(h, deterministic=deterministic)
        if silu_cond is not None:
            m = gate_m * m
        x = x + drop(m, deterministic=deterministic)
        return x, probs, heads, new_kv


class Transformer(nn.Module):
    """A small pre-LN transformer (decoder or encoder) with per-head access, for research code.

    Block ``l`` (``x`` the residual stream ``[B, T, d_model]``)::

        x = x + Attention(LN(x))        # multi-head self-attention, causal or bidirectional
        x = x + MLP(LN(x))              # Dense(d_mlp) -> activation -> Dense(d_model)
        out = Head(LN_final(x))

    **Inputs.** Token ids ``[B, T]`` (``vocab_size`` set; an ``nn.Embed``) or continuous vectors
    ``[B, T, d_in]`` (``vocab_size=None``; a ``Dense`` to ``d_model``).

    **Outputs.** ``output_dim`` set: ``Dense(output_dim)``, ``[B, T, output_dim]``; otherwise, with
    ``vocab_size``, logits ``[B, T, vocab_size]`` from an untied ``Dense`` head or, with
    ``tie_embeddings``, ``h @ E^T`` (no bias); with neither, the final hidden states
    ``[B, T, d_model]``.

    **Positions.** ``position_encoding="rope"``: RoPE on queries and keys (:func:`rope`) at
    ``positions * rope_scale`` (position interpolation: ``rope_scale = L_base / L_long`` extends a
    model trained at length ``L_base``; 1 is plain RoPE); ``"learned"``: a learned absolute table of
    ``max_len`` rows added to the input embedding (integer positions); ``"none"``: no positions.

    **Conditioning** (``d_cond`` set; ``cond [B, T, d_cond]``, one vector per token, e.g. a
    per-token diffusion time embedding, see :func:`sinusoidal_embedding`): adaLN-Zero as in DiT
    (Peebles & Xie 2023), applied per token. Each block maps ``silu(cond)`` by a zero-initialised
    ``Dense(6 d_model)`` to ``(shift, scale, gate)`` for the attention and for the MLP branch:
    ``x = x + gate_a * Attn(LN(x) * (1 + scale_a) + shift_a)`` (likewise the MLP); the final
    LayerNorm is modulated by ``(shift, scale)`` from a zero-initialised ``Dense(2 d_model)``. At
    initialisation every block is the identity and ``cond`` has no effect; the gates learn to open.
    Since the modulation is per token, tokens at different noise levels are treated differently (a
    pooled, per-sequence time could not do that).

    **Heads** (mechanistic analysis; ``L = num_layers``, ``H = num_heads``): ``head_mask [L, H]``
    multiplies each head's output (0 = zero-ablation); ``uniform_heads [L, H]`` bool sets those
    heads' pre-softmax scores to 0, so they attend uniformly over the allowed keys and output the
    mean value vector (the knockout of Wu et al., retrieval heads); ``head_override`` with
    ``override_heads [L, H]`` bool replaces the selected heads' values (activation patching). The
    per-head quantity is set by ``head_space``: ``"output"``: ``o_h`` ``[.., D_head]``, the
    head's output before the output projection; ``"residual"``: ``o_h W_o[h]`` ``[.., d_model]``,
    the head's term of the residual update (patching every head's residual terms of model A into
    a model B that differs from A only in attention parameters reproduces A, provided their
    output-projection biases agree, e.g. ``use_bias=False`` as in LLaMA-style models). Order
    within a layer: uniform knockout, override, mask; the output-projection bias belongs to no
    head and is always added.

    **Decoding.** :meth:`init_cache` makes a :class:`KVCache`; a call with ``cache=`` writes the new
    tokens' keys/values at ``cache.index`` and attends over the filled slots (prefill with the whole
    prompt, then one token per call); :func:`generate` runs that loop as one ``lax.scan``.

    Attributes:
      d_model: residual width (a multiple of ``num_heads``).
      num_layers: number of blocks ``L``.
      num_heads: heads per block ``H`` (``D_head = d_model / H``, even for RoPE).
      d_mlp: MLP hidden width (``None``: ``4 d_model``).
      vocab_size: token vocabulary (``None``: continuous inputs).
      output_dim: width of a ``Dense`` output head (``None``: logits / hidden states, see above).
      tie_embeddings: logits through the transposed input embedding (needs ``vocab_size``).
      position_encoding: one of :data:`POSITION_ENCODINGS` (``"rope"``, ``"learned"``, ``"none"``).
      max_len: rows of the learned position table (``"learned"`` only).
      rope_base: RoPE frequency base.
      rope_scale: RoPE position-interpolation factor (> 0).
      causal: causal (decoder) or bidirectional (encoder) attention.
      d_cond: width of the per-token conditioning input (``None``: unconditioned).
      activation: MLP activation (see :func:`activation_fn`).
      dropout: dropout rate on the input embedding and each residual branch.
      use_bias: biases in the attention projections (the MLP always has them).
      layer_norm_eps: LayerNorm epsilon.
      init_scheme: initialisation scheme of the Dense layers (see :data:`INIT_SCHEMES`; not
        ``init``, which would shadow ``Module.init``); embeddings are ``N(0, 0.02^2)``.
      smear_keys: smeared keys (:func:`smeared_keys`; Olsson et al. 2022): each head's key at a
        position mixes in the previous position's key with a learned per-head weight
        ``sigmoid(smear)`` (a parameter ``attn/smear [H]``, 0.5 at init). A one-layer lookup
        ("attend to the token after the match") then forms in a few hundred steps where plain
        attention needs a previous-token head and an induction head to co-form (measured on
        8-pair associative recall, d_model 64: 1.00 after 300 steps against 0.12 after 12000
        steps). The cache stores unsmeared keys; smearing is applied over its slots.

    Parameter tree: ``embed`` or ``input_proj``; ``pos_embed`` (learned); ``block_{l}`` with
    ``ln_attn``, ``attn`` (``query``, ``key``, ``value``, ``out``), ``ln_mlp``, ``mlp`` (an
    :class:`MLP`: ``Dense_0``, ``Dense_1``) and ``adaln`` (conditioned); ``ln_final``,
    ``final_adaln`` (conditioned) and ``head``. Attention-only fine-tuning selects the leaves under
    ``attn``.

    Example::

        model = Transformer(d_model=64, num_layers=4, num_heads=4, vocab_size=400)
        params = model.init(key, tokens)                        # tokens: [B, T] int32
        logits = model.apply(params, tokens)                    # [B, T, 400]
        logits, aux = model.apply(params, tokens, return_attention=True)
        aux.attention.shape                                     # [4, B, 4, T, T]
    """

    d_model: int = 64
    num_layers: int = 2
    num_heads: int = 4
    d_mlp: int | None = None
    vocab_size: int | None = None
    output_dim: int | None = None
    tie_embeddings: bool = False
    position_encoding: str = "rope"
    max_len: int = 512
    rope_base: float = 10000.0
    rope_scale: float = 1.0
    causal: bool = True
    d_cond: int | None = None
    activation: Activation = "gelu"
    dropout: float = 0.0
    use_bias: bool = True
    layer_norm_eps: float = 1e-5
    init_scheme: str = "lecun"
    smear_keys: bool = False

    @property
    def d_head(self) -> int:
        """Per-head width ``d_model // num_heads``."""
        return self.d_model // self.num_heads

    def init_cache(self, batch_size: int, max_len: int, dtype: Any = jnp.float32) -> KVCache:
        """An empty :class:`KVCache` with ``max_len`` slots for ``batch_size`` sequences."""
        self._check_config()
        if batch_size < 1 or max_len < 1:
            raise ValueError(
                f"init_cache: `batch_size` and `max_len` must be >= 1, got {batch_size}, {max_len}."
            )
        return KVCache.create(
            self.num_layers, batch_size, max_len, self.num_heads, self.d_head, dtype
        )

    def _check_config(self) -> None:
        for name in ("d_model", "num_layers", "num_heads"):
            check_int(getattr(self, name), f"Transformer.{name}", minimum=1)
        for name in ("d_mlp", "vocab_size", "output_dim", "max_len", "d_cond"):
            if getattr(self, name, None) is not None:
                check_int(getattr(self, name), f"Transformer.{name}", minimum=1)
        check_scalar(self.layer_norm_eps, "Transformer.layer_norm_eps", 0.0, low_open=True)
        if self.d_model % self.num_heads:
            raise ValueError(
                f"Transformer: `d_model` ({self.d_model}) must be divisible by `num_heads` "
                f"({self.num_heads})."
            )
        if self.position_encoding not in POSITION_ENCODINGS:
            raise ValueError(
                f"Transformer: `position_encoding` must be one of {POSITION_ENCODINGS}, "
                f"got {self.position_encoding!r}."
            )
        if self.position_encoding == "rope" and self.d_head % 2:
            raise ValueError(
                "Transformer: `position_encoding='rope'` needs an even head dimension, but "
                f"`d_model / num_heads` = {self.d_model}/{self.num_heads} = {self.d_head} is odd."
            )
        if not self.rope_scale > 0:
            raise ValueError(f"Transformer: `rope_scale` must be > 0, got {self.rope_scale}.")
        if self.tie_embeddings and (self.vocab_size is None or self.output_dim is not None):
            raise ValueError(
                "Transformer: `tie_embeddings=True` needs `vocab_size` set and `output_dim=None`."
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"Transformer: `dropout` must be in [0, 1), got {self.dropout}.")

    def _check_call(self, inputs, mask, positions, cond, cache, head_args, head_space) -> None:
        if self.vocab_size is not None:
            if inputs.ndim != 2 or not jnp.issubdtype(inputs.dtype, jnp.integer):
                raise ValueError(
                    "Transformer: with `vocab_size` set, `inputs` must be integer token ids "
                    f"[B, T], got shape {inputs.shape} and dtype {inputs.dtype}."
                )
            check_in_range(inputs, "inputs", 0, self.vocab_size - 1)  # token ids, where concrete
        elif inputs.ndim != 3 or not jnp.issubdtype(inputs.dtype, jnp.floating):
            raise ValueError(
                "Transformer: with `vocab_size=None`, `inputs` must be float vectors [B, T, d_in], "
                f"got shape {inputs.shape} and dtype {inputs.dtype}."
            )
        b, t = inputs.shape[:2]
        if mask is not None and (mask.shape != (b, t) or mask.dtype != jnp.bool_):
            raise ValueError(
                f"Transformer: `mask` must be a bool [B, T] = {(b, t)} array, got shape "
                f"{mask.shape} and dtype {mask.dtype}."
            )
        if positions is not None and positions.shape not in ((b, t), (t,)):
            raise ValueError(
                f"Transformer: `positions` must be [B, T] = {(b, t)} or [T], got {positions.shape}."
            )
        if self.position_encoding == "learned":
            if positions is not None and not jnp.issubdtype(positions.dtype, jnp.integer):
                raise ValueError("Transformer: learned positions need integer `positions`.")
            if cache is None and positions is None and t > self.max_len:
                raise ValueError(
                    f"Transformer: sequence length {t} of `inputs` exceeds `max_len` = "
                    f"{self.max_len}."
                )
        if self.d_cond is None:
            if cond is not None:
                raise ValueError("Transformer: `cond` was given but the model has `d_cond=None`.")
        elif cond is None or cond.shape != (b, t, self.d_cond):
            got = None if cond is None else cond.shape
            raise ValueError(
                f"Transformer: `cond` must be [B, T, d_cond] = {(b, t, self.d_cond)}, got {got}."
            )
        if cache is not None:
            ks, vs = tuple(cache.k), tuple(cache.v)
            got = [tuple(a.shape) for a in ks + vs]
            s = got[0][-1] if got and len(got[0]) == 4 else -1
            want_k = (b, self.num_heads, self.d_head, s)
            want_v = (b, self.num_heads, s, self.d_head)
            shapes_ok = (
                len(ks) == len(vs) == self.num_layers
                and all(tuple(a.shape) == want_k for a in ks)
                and all(tuple(a.shape) == want_v for a in vs)
            )
            if not shapes_ok or cache.mask.shape != (b, s):
                raise ValueError(
                    f"Transformer: `cache` must hold {self.num_layers} key arrays [B, H, D_head, "
                    f"S] = {(b, self.num_heads, self.d_head, 'S')} and as many value arrays "
                    f"[B, H, S, D_head], got {got}; build it with "
                    "`model.init_cache(batch_size, max_len)`."
                )
            if t > s:
                raise ValueError(f"Transformer: {t} tokens do not fit a `cache` of {s} slots.")
            if self.position_encoding == "learned" and s > self.max_len:
                raise ValueError(
                    f"Transformer: `cache` length {s} exceeds `max_len` = {self.max_len}."
                )
        if head_space not in HEAD_SPACES:
            raise ValueError(
                f"Transformer: `head_space` must be one of {HEAD_SPACES}, got {head_space!r}."
            )
        lh = (self.num_layers, self.num_heads)
        head_mask, head_override, override_heads, uniform_heads = head_args
        if head_mask is not None and head_mask.shape != lh:
            raise ValueError(
                f"Transformer: `head_mask` must be [L, H] = {lh}, got {head_mask.shape}."
            )
        for name, arr in (("override_heads", override_heads), ("uniform_heads", uniform_heads)):
            if arr is not None and (arr.shape != lh or arr.dtype != jnp.bool_):
                raise ValueError(
                    f"Transformer: `{name}` must be a bool [L, H] = {lh} array, got shape "
                    f"{arr.shape} and dtype {arr.dtype}."
                )
        if (head_override is None) != (override_heads is None):
            raise ValueError(
                "Transformer: `head_override` and `override_heads` must be given together."
            )
        if head_override is not None:
            width = self.d_head if head_space == "output" else self.d_model
            want = (self.num_layers, b, t, self.num_heads, width)
            if head_override.shape != want:
                raise ValueError(
                    f"Transformer: `head_override` must be [L, B, T, H, {width}] = {want} for "
                    f"head_space={head_space!r}, got {head_override.shape}."
                )

    @nn.compact
    def __call__(
        self,
        inputs: jax.Array,
        *,
        mask: jax.Array | None = None,
        positions: jax.Array | None = None,
        cond: jax.Array | None = None,
        cache: KVCache | None = None,
        head_mask: jax.Array | None = None,
        head_override: jax.Array | None = None,
        override_heads: jax.Array | None = None,
        uniform_heads: jax.Array | None = None,
        head_space: str = "output",
        return_attention: bool = False,
        return_head_outputs: bool = False,
        return_hidden: bool = False,
        deterministic: bool = True,
    ) -> jax.Array | tuple[jax.Array, TransformerAux]:
        """Run the model on a batch of sequences (static flags, traced arrays: jit-able).

        Args:
          inputs: token ids ``[B, T]`` int (``vocab_size`` set) or vectors ``[B, T, d_in]`` float.
          mask: ``[B, T]`` bool, True = real token; padded keys are never attended to (outputs at
            padded positions are meaningless). With a cache it is stored for later steps.
          positions: ``[B, T]`` or ``[T]`` position ids (default ``arange(T)``, or
            ``cache.position[:, None] + arange(T)`` with a cache); float allowed for RoPE.
          cond: ``[B, T, d_cond]`` per-token conditioning (required iff ``d_cond`` is set).
          cache: a :class:`KVCache` (from :meth:`init_cache`); the updated one is ``aux.cache``.
            Writing past its last slot is not checked inside jit (size it as prompt + new tokens).
          head_mask: ``[L, H]`` multipliers of each head's output (0 = knockout).
          head_override: ``[L, B, T, H, D_head]`` (``head_space="output"``) or
            ``[L, B, T, H, d_model]`` (``"residual"``) replacement per-head values.
          override_heads: ``[L, H]`` bool: the heads whose values ``head_override`` replaces.
          uniform_heads: ``[L, H]`` bool: heads forced to uniform attention (mean ablation).
          head_space: ``"output"`` or ``"residual"`` (see the class docstring).
          return_attention: return ``aux.attention``, ``[L, B, H, T, S]`` (``S`` = cache length
            with a cache, else ``T``).
          return_head_outputs: return ``aux.head_outputs``, ``[L, B, T, H, D_head]`` (``"output"``)
            or ``[L, B, T, H, d_model]`` (``"residual"``), after override and mask.
          return_hidden: return ``aux.hidden``, ``[B, T, d_model]`` after the final LayerNorm.
          deterministic: disable dropout (``False`` needs a ``"dropout"`` rng).

        Returns:
          ``out`` (``[B, T, vocab_size | output_dim | d_model]``) when no ``return_*`` flag is set
          and ``cache`` is None; otherwise ``(out, aux)`` with ``aux`` a :class:`TransformerAux`.

        Raises:
          ValueError: on a bad config or input shape/dtype, naming the argument.
        """
        self._check_config()
        inputs = jnp.asarray(inputs)
        mask = None if mask is None else jnp.asarray(mask)
        positions = None if positions is None else jnp.asarray(positions)
        cond = None if cond is None else jnp.asarray(cond)
        head_args = (head_mask, head_override, override_heads, uniform_heads)
        head_args = tuple(None if a is None else jnp.asarray(a) for a in head_args)
        self._check_call(inputs, mask, positions, cond, cache, head_args, head_space)
        b, t = inputs.shape[:2]

        if positions is None:
            start = jnp.zeros((b,), jnp.int32) if cache is None else cache.position
            positions = start[:, None] + jnp.arange(t, dtype=jnp.int32)[None, :]
        elif positions.ndim == 1:
            positions = jnp.broadcast_to(positions[None, :], (b, t))

        if self.vocab_size is not None:
            embed = nn.Embed(
                self.vocab_size, self.d_model, embedding_init=_EMBED_INIT, name="embed"
            )
            x = embed(inputs)
        else:
            proj = nn.Dense(
                self.d_model, name="input_proj", **dense_init(self.init_scheme, inputs.shape[-1])
            )
            x = proj(inputs)
        if self.position_encoding == "learned":
            table = self.param("pos_embed", _EMBED_INIT, (self.max_len, self.d_model))
            x = x + jnp.take(table, positions, axis=0)
        x = nn.Dropout(self.dropout)(x, deterministic=deterministic)
        silu_cond = None if cond is None else nn.silu(cond)

        key_mask = mask
        if cache is not None:
            new_mask = jnp.ones((b, t), bool) if mask is None else mask
            key_mask = jax.lax.dynamic_update_slice(cache.mask, new_mask, (0, cache.index))
            cache_k, cache_v = list(cache.k), list(cache.v)

        probs_all, heads_all = [], []
        for layer in range(self.num_layers):
            block = TransformerBlock(
                self.num_heads,
                self.d_model,
                self.d_mlp or 4 * self.d_model,
                causal=self.causal,
                use_rope=self.position_encoding == "rope",
                rope_base=self.rope_base,
                rope_scale=self.rope_scale,
                activation=self.activation,
                dropout=self.dropout,
                use_bias=self.use_bias,
                layer_norm_eps=self.layer_norm_eps,
                init_scheme=self.init_scheme,
                smear_keys=self.smear_keys,
                name=f"block_{layer}",
            )
            layer_cache = None
            if cache is not None:
                layer_cache = LayerCache(cache_k[layer], cache_v[layer], cache.index)
            x, probs, heads, new_kv = block(
                x,
                positions,
                key_mask,
                silu_cond,
                layer_cache,
                tuple(None if a is None else a[layer] for a in head_args),
                head_space=head_space,
                return_attention=return_attention,
                return_heads=return_head_outputs,
                deterministic=deterministic,
            )
            if cache is not None:
                cache_k[layer], cache_v[layer] = new_kv
            probs_all.append(probs)
            heads_all.append(heads)

        x = nn.LayerNorm(epsilon=self.layer_norm_eps, name="ln_final")(x)
        if silu_cond is not None:
            mod = _modulation(2, self.d_model, "final_adaln")(silu_cond)
            shift, scale = jnp.split(mod, 2, axis=-1)
            x = x * (1.0 + scale) + shift
        hidden = x
        if self.output_dim is not None:
            out = nn.Dense(
                self.output_dim, name="head", **dense_init(self.init_scheme, self.d_model)
            )(x)
        elif self.vocab_size is None:
            out = x
        elif self.tie_embeddings:
            out = embed.attend(x)
        else:
            out = nn.Dense(
                self.vocab_size, name="head", **dense_init(self.init_scheme, self.d_model)
            )(x)

        if not (return_attention or return_head_outputs or return_hidden or cache is not None):
            return out
        new_cache = None
        if cache is not None:
            new_cache = KVCache(
                k=tuple(cache_k),
                v=tuple(cache_v),
                mask=key_mask,
                index=cache.index + t,
                position=jnp.floor(positions[:, -1]).astype(jnp.int32) + 1,
            )
        aux = TransformerAux(
            attention=jnp.stack(probs_all) if return_attention else None,
            head_outputs=jnp.stack(heads_all) if return_head_outputs else None,
            hidden=hidden if return_hidden else None,
            cache=new_cache,
        )
        return out, aux


class Generation(NamedTuple):
    """Output of :func:`generate`.

    Fields:
      tokens: ``[B, N]`` int32 generated tokens (``pad_id`` after an example's ``eos_id``).
      logprobs: ``[B, N]`` float32 log-probability of each token under the distribution it was
        drawn from (``softmax(logits / temperature)`` restricted to the top-k; raw logits when
        greedy); 0 where ``mask`` is False.
      mask: ``[B, N]`` bool, True for tokens generated up to and including the first ``eos_id``.
    """

    tokens: jax.Array
    logprobs: jax.Array
    mask: jax.Array


def _sample(logits, key, temperature, top_k):
    """One token per row of ``logits [B, V]``: greedy if ``temperature <= 0``, else sampled from
    ``softmax(logits / temperature)`` restricted to the ``top_k`` largest (``top_k`` traced)."""
    logits = logits.astype(jnp.float32)
    greedy = temperature <= 0
    scaled = logits / jnp.where(greedy, 1.0, temperature)
    if top_k is not None:
        ranked = jnp.sort(scaled, axis=-1)  # ascending; the k-th largest is at V - k
        kth = jax.lax.dynamic_index_in_dim(ranked, logits.shape[-1] - top_k, axis=-1)
        scaled = jnp.where(scaled < kth, -jnp.inf, scaled)
    sampled = jax.random.categorical(key, scaled, axis=-1)
    token = jnp.where(greedy, jnp.argmax(logits, axis=-1), sampled).astype(jnp.int32)
    logp = jax.nn.log_softmax(jnp.where(greedy, logits, scaled), axis=-1)
    return token, jnp.take_along_axis(logp, token[:, None], axis=-1)[:, 0]


@functools.partial(jax.jit, static_argnames=("model", "max_new_tokens"))
def _generate_scan(
    model, params, prompt, key, prompt_mask, temperature, top_k, eos_id, pad_id, max_new_tokens
):
    b, p = prompt.shape
    positions = jnp.maximum(jnp.cumsum(prompt_mask.astype(jnp.int32), axis=1) - 1, 0)
    dtype = jax.tree_util.tree_leaves(params)[0].dtype
    cache = model.init_cache(b, p + max_new_tokens, dtype)
    logits, aux = model.apply(params, prompt, mask=prompt_mask, positions=positions, cache=cache)
    keys = jax.random.split(key, max_new_tokens)
    first, first_logp = _sample(logits[:, -1], keys[0], temperature, top_k)
    done = jnp.zeros((b,), bool) if eos_id is None else first == eos_id

    def step(carry, step_key):
        cache, token, done = carry
        logits, aux = model.apply(params, token[:, None], cache=cache)
        new, logp = _sample(logits[:, 0], step_key, temperature, top_k)
        valid = ~done
        new = jnp.where(valid, new, pad_id)
        logp = jnp.where(valid, logp, 0.0)
        if eos_id is not None:
            done = done | (new == eos_id)
        return (aux.cache, new, done), (new, logp, valid)

    _, (tokens, logps, valid) = jax.lax.scan(step, (aux.cache, first, done), keys[1:])
    return Generation(
        tokens=jnp.concatenate([first[:, None], tokens.T], axis=1),
        logprobs=jnp.concatenate([first_logp[:, None], logps.T], axis=1),
        mask=jnp.concatenate([jnp.ones((b, 1), bool), valid.T], axis=1),
    )


def generate(
    model: Transformer,
    params: Any,
    prompt: jax.Array,
    key: jax.Array,
    *,
    max_new_tokens: int,
    temperature: float | jax.Array = 1.0,
    top_k: int | jax.Array | None = None,
    prompt_mask: jax.Array | None = None,
    eos_id: int | jax.Array | None = None,
    pad_id: int | jax.Array = 0,
) -> Generation:
    """Autoregressive decoding with a KV cache: one prefill, then one ``lax.scan`` over tokens.

    The cache has ``P + max_new_tokens`` slots. The first token comes from the prefill's last
    logits; each scan step feeds the previous token and samples the next, so all shapes are fixed.
    The jitted program is traced once per (model, shapes, ``max_new_tokens``, and whether
    ``top_k`` / ``eos_id`` are ``None``): new prompts, prompt masks, keys, temperatures, ``top_k``,
    ``eos_id`` or ``pad_id`` values reuse it.

    Args:
      model: a causal token :class:`Transformer` (``vocab_size`` set, no ``output_dim``/``d_cond``).
      params: the variables returned by ``model.init``.
      prompt: ``[B, P]`` int prompt tokens (left-padded when lengths differ).
      key: a PRNG key (unused when greedy).
      max_new_tokens: ``N``, the number of tokens to generate.
      temperature: ``<= 0`` for greedy (argmax), else the softmax temperature.
      top_k: sample among the ``top_k`` largest logits only (ties at the k-th kept; ``None``: all).
      prompt_mask: ``[B, P]`` bool, True for the real tokens of a *left-padded* prompt; positions
        then count real tokens only (each example's first real token has position 0).
      eos_id: stop token: after it an example emits ``pad_id`` with ``mask`` False (``None``: none).
      pad_id: the filler token after ``eos_id``.

    Returns:
      A :class:`Generation` with ``tokens``, ``logprobs`` and ``mask``, each ``[B, N]``.

    Raises:
      ValueError: for a non-decoder ``model``, a bad ``prompt``/``prompt_mask`` shape or dtype,
        ``max_new_tokens < 1`` or a (Python int) ``top_k`` outside ``[1, vocab_size]``.
    """
    if model.vocab_size is None or model.output_dim is not None or not model.causal:
        raise ValueError(
            "generate: `model` must be a causal token model (`vocab_size` set, `output_dim=None`, "
            "`causal=True`)."
        )
    if model.d_cond is not None:
        raise ValueError("generate: `model` has `d_cond` set; conditioned decoding is unsupported.")
    prompt = jnp.asarray(prompt)
    if prompt.ndim != 2 or not jnp.issubdtype(prompt.dtype, jnp.integer):
        raise ValueError(
            f"generate: `prompt` must be integer tokens [B, P], got {prompt.shape} {prompt.dtype}."
        )
    key = check_key(key, "key")
    check_int(max_new_tokens, "max_new_tokens", minimum=1)
    bad_k = isinstance(top_k, int) and not 1 <= top_k <= model.vocab_size
    if isinstance(top_k, bool | float) or bad_k:
        raise ValueError(f"generate: `top_k` must be an int in [1, vocab_size], got {top_k!r}.")
    if not isinstance(temperature, jax.core.Tracer):
        check_scalar(temperature, "temperature")
    if prompt_mask is None:
        prompt_mask = np.ones(prompt.shape, bool)  # host-side: no eager op to compile
    prompt_mask = jnp.asarray(prompt_mask)
    if prompt_mask.shape != prompt.shape or prompt_mask.dtype != jnp.bool_:
        raise ValueError(
            f"generate: `prompt_mask` must be bool [B, P] = {prompt.shape}, got "
            f"{prompt_mask.shape} {prompt_mask.dtype}."
        )
    as_int = lambda v: None if v is None else jnp.asarray(v, jnp.int32)
    return _generate_scan(
        model,
        params,
        prompt,
        key,
        prompt_mask,
        jnp.asarray(temperature, jnp.float32),
        as_int(top_k),
        as_int(eos_id),
        as_int(pad_id),
        max_new_tokens=int(max_new_tokens),
    )

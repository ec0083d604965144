"""Head sets, their overlap, and the causal tests: uniform-attention knockout and patching.

- :func:`threshold_heads` (``H_tau``: score > ``tau``, NaN never selected) and :func:`top_k_heads`
  (the ``k`` highest finite scores, ties to the lower flat index); :func:`head_recall` =
  ``|H ∩ H_ref| / |H_ref|`` and :func:`head_precision` = ``|H ∩ H_ref| / |H|`` (NaN for an empty
  denominator); :func:`correlations` (Spearman and Pearson, scipy).
- **Accuracy** is exact match of the greedy ``v1 v2 EOS``, which equals "the teacher-forced argmax
  is right at every answer position" (a greedy decode that is right so far sees exactly the
  teacher-forced prefix), so knockout and patching need one teacher-forced forward per example.
- **Knockout** (Wu et al.): the selected heads' pre-softmax scores are set to 0 over the causal,
  non-``PAD`` prefix, so each outputs the mean value vector (``uniform_heads`` of
  :class:`~jaxlab.core.nn.Transformer`); not a zeroed output. :func:`knockout_accuracy` takes a
  stack of boolean ``[M, L, H]`` masks and ``vmap``-s over them: one compiled function serves
  every head set (empty, retrieval heads, random draws).
- **Patching**: the source model's per-head residual terms ``o_h W_o[h]`` (plus ``b_o / H`` when
  the output projection has a bias, split evenly over heads) replace the target's for the
  selected heads (:func:`patched_accuracy`). Models fine-tuned from one base differ only in
  attention parameters, so patching every head reproduces the source's logits.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import scipy.stats

from jaxlab.core.checks import check_int, check_key, check_scalar
from jaxlab.core.nn import Transformer
from jaxlab.core.sharding import constrain_batch
from jaxlab.core.training import map_in_chunks
from jaxlab.language.retrieval_heads.data import ANSWER_LEN, PAD

__all__ = [
    "answer_correct",
    "correlations",
    "head_precision",
    "head_recall",
    "knockout_accuracy",
    "patched_accuracy",
    "patched_logits",
    "random_head_sets",
    "threshold_heads",
    "top_k_heads",
]


def _check_scores(scores) -> np.ndarray:
    s = np.asarray(scores, np.float64)
    if s.ndim != 2:
        raise ValueError(f"`scores` must be [L, H], got shape {s.shape}.")
    return s


def threshold_heads(scores, tau: float = 0.1) -> np.ndarray:
    """``H_tau``: ``[L, H]`` bool, heads whose score exceeds ``tau`` (NaN: never)."""
    s = _check_scores(scores)
    tau = check_scalar(tau, "tau", 0.0)
    return np.nan_to_num(s, nan=-np.inf) > tau


def top_k_heads(scores, k: int = 3) -> np.ndarray:
    """``[L, H]`` bool, the ``k`` highest finite scores (ties: lower flat index first)."""
    s = _check_scores(scores)
    check_int(k, "k", minimum=1, maximum=s.size)
    flat = np.nan_to_num(s, nan=-np.inf).ravel()
    order = np.argsort(-flat, kind="stable")[:k]
    order = order[np.isfinite(flat[order])]
    out = np.zeros(s.size, bool)
    out[order] = True
    return out.reshape(s.shape)


def _check_sets(h, ref):
    h, ref = np.asarray(h, bool), np.asarray(ref, bool)
    if h.shape != ref.shape:
        raise ValueError(f"`heads` {h.shape} and `reference` {ref.shape} must have one shape.")
    return h, ref


def head_recall(heads, reference) -> float:
    """``|H ∩ H_ref| / |H_ref|`` (NaN for an empty reference)."""
    h, ref = _check_sets(heads, reference)
    return float((h & ref).sum() / ref.sum()) if ref.any() else float("nan")


def head_precision(heads, reference) -> float:
    """``|H ∩ H_ref| / |H|`` (NaN for an empty ``heads``)."""
    h, ref = _check_sets(heads, reference)
    return float((h & ref).sum() / h.sum()) if h.any() else float("nan")


def correlations(x, y) -> dict:
    """``{"spearman", "pearson", "n"}`` over the pairs where both are finite (NaN under 3
    pairs or a constant side)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    out = {"spearman": float("nan"), "pearson": float("nan"), "n": int(ok.sum())}
    if len(x) >= 3 and np.ptp(x) > 0 and np.ptp(y) > 0:
        out["spearman"] = float(scipy.stats.spearmanr(x, y).statistic)
        out["pearson"] = float(scipy.stats.pearsonr(x, y).statistic)
    return out


def random_head_sets(key, exclude, size: int, n_draws: int = 5) -> np.ndarray:
    """``[n_draws, L, H]`` bool: ``size`` heads drawn uniformly without replacement from the
    heads not in ``exclude`` (the random control of a knockout / patching)."""
    key = check_key(key, "key")
    exclude = np.asarray(exclude, bool)
    if exclude.ndim != 2:
        raise ValueError(f"`exclude` must be [L, H] bool, got shape {exclude.shape}.")
    pool = np.flatnonzero(~exclude.ravel())
    check_int(size, "size", minimum=0, maximum=len(pool))
    check_int(n_draws, "n_draws", minimum=1)
    out = np.zeros((n_draws, exclude.size), bool)
    for d, k in enumerate(jax.random.split(key, n_draws)):
        pick = np.asarray(jax.random.choice(k, len(pool), (size,), replace=False))
        out[d, pool[pick]] = True
    return out.reshape((n_draws,) + exclude.shape)


def answer_correct(logits, tokens) -> jax.Array:
    """``[B]`` bool: the teacher-forced argmax is right at each of the last ``ANSWER_LEN``
    tokens (``v1 v2 EOS``)."""
    t = tokens.shape[1]
    pred = jnp.argmax(logits[:, t - ANSWER_LEN - 1 : t - 1], axis=-1)
    return jnp.all(pred == tokens[:, t - ANSWER_LEN :], axis=1)


def _check_masks(head_mask, model: Transformer):
    m = np.asarray(head_mask)
    want = (model.num_layers, model.num_heads)
    if m.ndim == 2:
        m = m[None]
    if m.ndim != 3 or m.shape[1:] != want or m.dtype != np.bool_:
        raise ValueError(
            f"`head_mask` must be bool [M, L, H] or [L, H] with [L, H] = {want}, got "
            f"{m.shape} {m.dtype}."
        )
    return jnp.asarray(m)


def _check_tokens(tokens):
    if np.ndim(tokens) != 2 or not np.issubdtype(np.asarray(tokens).dtype, np.integer):
        raise ValueError(f"`tokens` must be integer [N, T], got shape {np.shape(tokens)}.")
    if np.shape(tokens)[1] <= ANSWER_LEN + 1:
        raise ValueError(f"`tokens` must be longer than {ANSWER_LEN + 1}, got {np.shape(tokens)}.")
    return np.asarray(tokens, np.int32)


@functools.partial(jax.jit, static_argnames=("model", "mesh"))
def _knockout_chunk(model, params, tokens, masks, mesh=None):
    tokens = constrain_batch(tokens, mesh)

    def one(mask):
        logits = model.apply(params, tokens, mask=tokens != PAD, uniform_heads=mask)
        return answer_correct(logits, tokens)

    return jax.lax.map(one, masks)  # [M, B]: one head set after another (vmap: ~5x slower)


def _mean_over_examples(fn, tokens, chunk):
    """``fn(tokens_chunk) -> [M, chunk]`` bool, in padded chunks; ``[M]`` means over examples."""
    right = map_in_chunks(lambda t: jnp.transpose(fn(t)), (jnp.asarray(tokens),), chunk)
    return np.asarray(right).mean(0)


def knockout_accuracy(
    model: Transformer, params, tokens, head_mask, *, chunk: int | None = 128, mesh=None
) -> np.ndarray:
    """Teacher-forced exact-match accuracy with each head set forced to uniform attention.

    Args:
      model, params: the model (its interpolation is used) and its variables.
      tokens: ``[N, T]`` full sequences (prompt then ``v1 v2 EOS``).
      head_mask: ``[M, L, H]`` (or ``[L, H]``) bool, True = knocked out; an all-False mask is
        the intact model.
      chunk: examples per call; ``mesh`` shards them.

    Returns:
      ``[M]`` accuracies.
    """
    masks = _check_masks(head_mask, model)
    return _mean_over_examples(
        lambda t: _knockout_chunk(model, params, t, masks, mesh), _check_tokens(tokens), chunk
    )


def _source_terms(model: Transformer, source, target, tokens):
    """The source's per-head residual terms ``[L, B, T, H, d_model]``, each carrying ``b_o / H``
    of its own output bias minus the target's share (so the target's bias, always added, is
    exchanged for the source's on the patched heads)."""
    _, aux = model.apply(
        source, tokens, mask=tokens != PAD, head_space="residual", return_head_outputs=True
    )
    terms = aux.head_outputs
    if model.use_bias:

        def bias(p):
            return jnp.stack(
                [p["params"][f"block_{i}"]["attn"]["out"]["bias"] for i in range(model.num_layers)]
            )

        delta = (bias(source) - bias(target)) / model.num_heads  # [L, d_model]
        terms = terms + delta[:, None, None, None, :]
    return terms


def _patched(model: Transformer, target, tokens, terms, sel):
    return model.apply(
        target,
        tokens,
        mask=tokens != PAD,
        head_space="residual",
        head_override=terms,
        override_heads=sel,
    )


@functools.partial(jax.jit, static_argnames=("model",))
def _patch_logits(model, source, target, tokens, sel):
    return _patched(model, target, tokens, _source_terms(model, source, target, tokens), sel)


def patched_logits(model: Transformer, source, target, tokens, head_mask) -> jax.Array:
    """Logits ``[N, T, V]`` of ``target`` with the heads of ``head_mask [L, H]`` patched from
    ``source`` (one call; see :func:`patched_accuracy` for many head sets)."""
    masks = _check_masks(head_mask, model)
    if masks.shape[0] != 1:
        raise ValueError(f"`head_mask` must be one [L, H] set here, got {masks.shape}.")
    return _patch_logits(model, source, target, jnp.asarray(_check_tokens(tokens)), masks[0])


@functools.partial(jax.jit, static_argnames=("model", "mesh"))
def _patch_chunk(model, source, target, tokens, masks, mesh=None):
    tokens = constrain_batch(tokens, mesh)
    terms = _source_terms(model, source, target, tokens)
    one = lambda sel: answer_correct(_patched(model, target, tokens, terms, sel), tokens)  # noqa: E731
    return jax.lax.map(one, masks)


def patched_accuracy(
    model: Transformer, source, target, tokens, head_mask, *, chunk: int | None = 32, mesh=None
) -> np.ndarray:
    """Accuracy of ``target`` with the selected heads' residual terms taken from ``source``.

    Args:
      model: the model of both (same architecture and interpolation).
      source, target: variables of the model patched from and into.
      tokens: ``[N, T]`` full sequences.
      head_mask: ``[M, L, H]`` (or ``[L, H]``) bool, True = patched; all False = ``target``,
        all True = ``source`` (when only attention parameters differ).
      chunk: examples per call (the source's per-head terms are ``[L, chunk, T, H, d_model]``).

    Returns:
      ``[M]`` accuracies.
    """
    masks = _check_masks(head_mask, model)
    return _mean_over_examples(
        lambda t: _patch_chunk(model, source, target, t, masks, mesh), _check_tokens(tokens), chunk
    )

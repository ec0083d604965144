"""The retrieval score of Wu et al. (official ``Retrieval_Head`` rule), as one jitted decode scan.

For an instance whose prompt holds the answer span ``[s, e)``:

1. prefill every prompt token but the last into a KV cache;
2. decode greedily ``n_steps`` tokens in one ``lax.scan``, feeding the last prompt token first, so
   the query position that *emits* token ``w_i`` is the previous token's (the last prompt token
   emits the first answer token); the scan keeps, per step, each (layer, head)'s top-1 attention
   position (``argmax``: ties go to the first position) and the emitted token, ``[steps, L, H]``
   and ``[steps]``, never full attention rows;
3. per (layer, head) and step (up to and including the first ``eos_id``): if the argmax ``j``
   lies in ``[s, e)`` and ``prompt[j]`` equals the emitted token, add ``1 / (e - s)``. Not
   deduplicated: a head that copies one answer token twice scores above 1 (the official code);
   ``dedup=True`` counts each span position once, ``|g_h ∩ k| / |k|``;
4. ROUGE-1 recall (on token ids, with counts) of the response (tokens before ``eos_id``) against
   the answer tokens ``prompt[s:e]``; only instances with recall above 0.5 count.

The head score is the mean over counted instances (:func:`aggregate`: NaN and a warning when none
counts, never 0); the *activation frequency* is the fraction of counted instances in which the
head copied at least one answer token.
"""

from __future__ import annotations

import functools
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.checks import check_bool, check_int
from jaxlab.core.nn import Transformer
from jaxlab.core.sharding import constrain_batch
from jaxlab.core.training import map_in_chunks
from jaxlab.language.retrieval_heads.data import EOS, PAD

__all__ = [
    "Decoded",
    "Scores",
    "aggregate",
    "decode_argmax",
    "decode_scan",
    "prefill",
    "retrieval_scores",
    "rouge1_recall",
    "score_rule",
]

MAX_SPAN = 8  # static bound on the answer-span width (ROUGE counting)


class Decoded(NamedTuple):
    """What the decode scan keeps per instance.

    Fields:
      tokens: ``[B, n_steps]`` int32 greedily emitted tokens.
      argmax: ``[B, n_steps, L, H]`` int32, each head's top-1 attention position (cache slot =
        position in prompt + generated tokens) in the row of the emitting query.
    """

    tokens: jax.Array
    argmax: jax.Array


class Scores(NamedTuple):
    """Retrieval scores of a set of instances.

    Fields:
      scores: ``[L, H]`` mean over counted instances (NaN if none counted).
      frequency: ``[L, H]`` fraction of counted instances in which the head copied >= 1 token.
      per_instance: ``[N, L, H]`` each instance's score.
      success: ``[N]`` bool, instances that count (ROUGE-1 recall > 0.5).
      recall: ``[N]`` ROUGE-1 recall of each response.
      tokens: ``[N, n_steps]`` the responses.
    """

    scores: np.ndarray
    frequency: np.ndarray
    per_instance: np.ndarray
    success: np.ndarray
    recall: np.ndarray
    tokens: np.ndarray


def _check_model(model) -> None:
    if not isinstance(model, Transformer) or model.vocab_size is None or not model.causal:
        raise ValueError("`model` must be a causal token jaxlab.core.nn.Transformer.")


def _check_prompt_span(prompt, answer_span) -> None:
    if np.ndim(prompt) != 2 or not jnp.issubdtype(jnp.asarray(prompt).dtype, jnp.integer):
        raise ValueError(f"`prompt` must be integer tokens [B, P], got shape {np.shape(prompt)}.")
    b, p = np.shape(prompt)
    if np.shape(answer_span) != (b, 2):
        raise ValueError(
            f"`answer_span` must be [B, 2] = ({b}, 2) (start, end), got {np.shape(answer_span)}."
        )
    if not jnp.issubdtype(jnp.asarray(answer_span).dtype, jnp.integer):
        raise ValueError("`answer_span` must hold integer (start, end) positions.")
    if not isinstance(answer_span, jax.core.Tracer):
        s = np.asarray(answer_span)
        width = s[:, 1] - s[:, 0]
        if (s[:, 0] < 0).any() or (s[:, 1] > p - 1).any() or (width < 1).any():
            raise ValueError(
                "`answer_span` must satisfy 0 <= start < end <= P - 1 (inside the prompt, before "
                f"its last token); got start {s[:, 0].min()}..{s[:, 0].max()}, end "
                f"{s[:, 1].min()}..{s[:, 1].max()} with P = {p}."
            )
        if (width > MAX_SPAN).any():
            raise ValueError(f"`answer_span` widths must be <= {MAX_SPAN}, got {width.max()}.")


def prefill(model: Transformer, params, prompt: jax.Array, n_steps: int, mesh=None):
    """Step 1: every prompt token but the last written into a KV cache of ``P - 1 + n_steps``
    slots (``PAD`` keys masked). Traceable (jit it, or call it inside jit)."""
    prompt = constrain_batch(prompt, mesh)
    b, p = prompt.shape
    dtype = jax.tree_util.tree_leaves(params)[0].dtype
    cache = model.init_cache(b, p - 1 + n_steps, dtype)
    head = prompt[:, : p - 1]
    _, aux = model.apply(params, head, mask=head != PAD, cache=cache)
    return aux.cache


def decode_scan(model: Transformer, params, cache, first: jax.Array, n_steps: int) -> Decoded:
    """Step 2: greedy decode of ``n_steps`` tokens from a prefilled ``cache``, feeding ``first``
    ``[B]`` (the last prompt token) first; one ``lax.scan`` keeping each head's argmax per step.
    Traceable."""

    def step(carry, _):
        cache, token = carry
        logits, aux = model.apply(params, token[:, None], cache=cache, return_attention=True)
        rows = aux.attention[:, :, :, 0, :]  # [L, B, H, S]
        top = jnp.argmax(rows, axis=-1).astype(jnp.int32)  # first maximum: ties -> first
        new = jnp.argmax(logits[:, 0], axis=-1).astype(jnp.int32)
        return (aux.cache, new), (new, jnp.transpose(top, (1, 0, 2)))

    _, (tokens, top) = jax.lax.scan(step, (cache, first), None, length=n_steps)
    return Decoded(tokens.T, jnp.transpose(top, (1, 0, 2, 3)))


@functools.partial(jax.jit, static_argnames=("model", "n_steps", "mesh"))
def _decode(model: Transformer, params, prompt, n_steps: int, mesh=None) -> Decoded:
    cache = prefill(model, params, prompt, n_steps, mesh)
    return decode_scan(model, params, cache, constrain_batch(prompt, mesh)[:, -1], n_steps)


def decode_argmax(
    model: Transformer, params, prompt: jax.Array, n_steps: int, *, mesh=None
) -> Decoded:
    """Greedy KV-cache decode of ``n_steps`` tokens after ``prompt [B, P]`` (``PAD`` keys
    masked), keeping each head's top-1 attention position at every step (see the module
    docstring). One compiled program per (model, shapes, ``n_steps``); ``mesh`` shards the batch."""
    _check_model(model)
    if np.ndim(prompt) != 2:
        raise ValueError(f"`prompt` must be integer tokens [B, P], got shape {np.shape(prompt)}.")
    check_int(n_steps, "n_steps", minimum=1)
    return _decode(model, params, jnp.asarray(prompt, jnp.int32), int(n_steps), mesh)


def _valid_steps(tokens, eos_id):
    """Steps up to and including the first ``eos_id``."""
    is_eos = tokens == eos_id
    return (jnp.cumsum(is_eos) - is_eos) == 0


def rouge1_recall(response, response_mask, answer, answer_mask):
    """ROUGE-1 recall on token ids with counts: ``sum_t min(c_resp(t), c_ans(t)) / |answer|``.

    One instance: ``response [n]``, ``answer [K]`` with bool masks of the real entries.
    """
    same_ans = (answer[:, None] == answer[None, :]) & answer_mask[None, :]
    c_ans = jnp.sum(same_ans, axis=1)  # multiplicity of answer[i] in the answer
    c_resp = jnp.sum((answer[:, None] == response[None, :]) & response_mask[None, :], axis=1)
    per = jnp.minimum(c_resp, c_ans) / jnp.maximum(c_ans, 1)  # each distinct token once
    overlap = jnp.sum(jnp.where(answer_mask, per, 0.0))
    return overlap / jnp.maximum(jnp.sum(answer_mask), 1)


def score_rule(argmax, tokens, prompt, answer_span, *, eos_id=EOS, dedup=False):
    """One instance's scores from the decode record.

    Args:
      argmax: ``[n, L, H]`` top-1 positions per step.
      tokens: ``[n]`` emitted tokens.
      prompt: ``[P]`` prompt tokens.
      answer_span: ``[2]`` ``(start, end)``.
      eos_id: the stop token (steps after the first one do not count).
      dedup: count each span position at most once per head.

    Returns:
      ``(scores [L, H], copied [L, H] bool, recall [], success [] bool)``.
    """
    start, end = answer_span[0], answer_span[1]
    width = (end - start).astype(jnp.float32)
    valid = _valid_steps(tokens, eos_id)  # [n]
    p = prompt.shape[0]
    at = prompt[jnp.clip(argmax, 0, p - 1)]  # [n, L, H]
    hit = (argmax >= start) & (argmax < end) & (at == tokens[:, None, None]) & valid[:, None, None]
    if dedup:  # a hit counts only if no earlier step of the head hit the same position
        n = tokens.shape[0]
        same = argmax[:, None] == argmax[None, :]  # [n, n, L, H]: same position at s and s'
        earlier = (jnp.arange(n)[None, :] < jnp.arange(n)[:, None])[:, :, None, None]
        repeat = jnp.any(same & earlier & hit[None, :], axis=1)
        hit = hit & ~repeat
    scores = jnp.sum(hit, axis=0) / width
    idx = start + jnp.arange(MAX_SPAN)
    answer = prompt[jnp.clip(idx, 0, p - 1)]
    recall = rouge1_recall(tokens, valid & (tokens != eos_id), answer, idx < end)
    return scores, jnp.any(hit, axis=0), recall, recall > 0.5


@functools.partial(jax.jit, static_argnames=("eos_id", "dedup"))
def _rule_batch(argmax, tokens, prompt, span, eos_id, dedup):
    rule = functools.partial(score_rule, eos_id=eos_id, dedup=dedup)
    return jax.vmap(rule)(argmax, tokens, prompt, span)


def aggregate(per_instance, copied, success) -> tuple[np.ndarray, np.ndarray]:
    """``(scores, frequency)`` ``[L, H]``: means over the counted instances; NaN with a
    ``RuntimeWarning`` when no instance counts (a score is never reported for no evidence)."""
    per_instance, copied = np.asarray(per_instance), np.asarray(copied)
    success = np.asarray(success, bool)
    if not success.any():
        warnings.warn(
            "retrieval_scores: no instance was answered (ROUGE-1 recall > 0.5); scores are NaN.",
            RuntimeWarning,
            stacklevel=2,
        )
        nan = np.full(per_instance.shape[1:], np.nan)
        return nan, nan.copy()
    return per_instance[success].mean(0), copied[success].mean(0)


def retrieval_scores(
    model: Transformer,
    params,
    prompt: jax.Array,
    answer_span: jax.Array,
    *,
    n_steps: int = 3,
    eos_id: int = EOS,
    dedup: bool = False,
    chunk: int | None = 256,
    mesh=None,
) -> Scores:
    """Wu et al.'s retrieval score of every head of ``model`` over a set of instances.

    Args:
      model: a causal token :class:`~jaxlab.core.nn.Transformer` (its RoPE interpolation is the
        one scored).
      params: its variables.
      prompt: ``[N, P]`` prompts (context and question, ``PAD`` in front); the answer is decoded.
      answer_span: ``[N, 2]`` ``(start, end)`` of the gold answer inside ``prompt``.
      n_steps: decode steps (the answer and its stop token: 3 here; the official code decodes up
        to 50 tokens and stops at a newline).
      eos_id: the stop token.
      dedup: count each answer position once per head (``|g_h ∩ k| / |k| <= 1``).
      chunk: instances per decode call (bounds memory; one compiled shape).
      mesh: shard each chunk's instances over this mesh.

    Returns:
      :class:`Scores` (NumPy arrays).
    """
    _check_model(model)
    _check_prompt_span(prompt, answer_span)
    check_int(n_steps, "n_steps", minimum=1)
    check_bool(dedup, "dedup")
    prompt = np.asarray(prompt, np.int32)
    span = np.asarray(answer_span, np.int32)
    decode = lambda p: _decode(model, params, p, int(n_steps), mesh)  # noqa: E731
    d = map_in_chunks(decode, (jnp.asarray(prompt),), chunk)  # padded chunks, one shape
    tokens, top = np.asarray(d.tokens), np.asarray(d.argmax)
    per, copied, recall, success = jax.device_get(
        _rule_batch(top, tokens, prompt, span, int(eos_id), bool(dedup))
    )
    scores, freq = aggregate(per, copied, success)
    return Scores(scores, freq, per, np.asarray(success), recall, tokens)

"""Benchmark of the retrieval score (issue 27): the score matrix of ``N`` instances.

Equal work in every row: ``N`` prompts of ``context - 3`` tokens on one (untrained) model of the
retrieval-heads experiment (d_model 64, 4 layers x 4 heads), prefilled, then ``STEPS`` = 16
forced greedy decode steps (no stop token: every step is scored), each step's attention row of
every (layer, head) checked by Wu et al.'s rule and the ROUGE-1 filter applied:

(a) ``official loop``: the structure of the official ``Retrieval_Head`` code on our model: a
    Python loop over instances (batch 1), a jitted batch-1 prefill, then a Python loop over decode
    steps around a jitted cached decode step returning the attention rows, and after each step a
    Python loop over layers and heads (top-1 of the head's row, span test, token test);
(b) ``numpy check``: (a) with the per-step check vectorised in NumPy over layers and heads;
(c) ``jit scan``: the library's path, a batched jitted prefill
    (:func:`~jaxlab.language.retrieval_heads.scores.prefill`), then one jitted program running the
    whole decode as a ``lax.scan`` that keeps only argmax positions
    (:func:`~jaxlab.language.retrieval_heads.scores.decode_scan`) and the rule vmapped over
    instances (``score_rule``).

``prefill`` and ``decode+score`` are timed apart (``params.phase``); compile time is reported
apart; medians over warm calls, blocked until ready. (a) and (b) run their prefill per instance
(as the official code does). Rows ``jit scan sharded`` split the instances over 1 and 2 devices
(:func:`jaxlab.core.sharding.data_mesh`; on forced host devices they check the plumbing, not
speed). The goal of the issue: decode+score of (c) >= 10x (a) at N = 256, context 256.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core import sharding
from jaxlab.core.timing import result_row, time_call
from jaxlab.language import retrieval_heads as R
from jaxlab.language.retrieval_heads import scores as S
from jaxlab.language.retrieval_heads.data import N_SPECIAL

NAME = "retrieval_score"
DESCRIPTION = (
    "retrieval score of N instances: jitted prefill + decode scan vs the official per-instance "
    "Python loops (per-head check in Python, or vectorised in NumPy)"
)
SIZES = {
    "small": {"n": (64, 256), "context": (128, 256)},
    "large": {"n": (64, 256, 1024), "context": (128, 256, 512)},
}
STEPS = 16
NO_EOS = -1  # forced steps: no token stops the scoring
SPAN = 2  # answer-span width (the world's two value tokens)
CHUNK = 16  # instances per prefill / decode batch inside (c)'s program (cache-sized on CPU)


@functools.cache
def _model(context: int):
    world = R.World()
    mc = R.ModelConfig()
    model = R.make_model(mc, world, context)
    params = model.init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))
    return model, params, world


def instances(n: int, context: int, world=None, seed: int = 0):
    """``(prompt [n, P], span [n, 2])``: uniform non-special tokens, a span of ``SPAN`` at a
    uniform depth (the rule's cost does not depend on what the tokens mean)."""
    world = world or _model(context)[2]
    rng = np.random.default_rng(seed)
    p = R.prompt_length(context)
    prompt = rng.integers(N_SPECIAL, world.vocab_size, size=(n, p), dtype=np.int32)
    start = rng.integers(0, p - 1 - SPAN, size=n, dtype=np.int32)
    return prompt, np.stack([start, start + SPAN], axis=1).astype(np.int32)


# --- (c) the library's path --------------------------------------------------------------------


def _chunked(x, chunk: int):
    """``[N, ...] -> [N / chunk, chunk, ...]``."""
    return x.reshape((x.shape[0] // chunk, chunk) + x.shape[1:])


def jit_prefill(model, mesh=None, chunk: int = CHUNK):
    """(c) phase 1: ``(params, prompt [N, P]) -> caches`` (stacked ``[N / chunk]`` caches of
    ``chunk`` instances, one ``lax.map`` in one program)."""

    def run(params, prompt):
        one = lambda p: S.prefill(model, params, p, STEPS, mesh)  # noqa: E731
        return jax.lax.map(one, _chunked(prompt, chunk))

    return jax.jit(run)


def jit_decode_score(model, mesh=None, chunk: int = CHUNK):
    """(c) phase 2: ``(params, caches, prompt, span) -> (per-instance scores [N, L, H], success
    [N])``: per chunk the decode scan and the vmapped rule, one ``lax.map`` in one program."""
    rule = functools.partial(S.score_rule, eos_id=NO_EOS)

    def one(params, cache, prompt, span):
        d = S.decode_scan(model, params, cache, prompt[:, -1], STEPS)
        per, _, _, success = jax.vmap(rule)(d.argmax, d.tokens, prompt, span)
        return per, success

    def run(params, caches, prompt, span):
        per, success = jax.lax.map(
            lambda a: one(params, *a), (caches, _chunked(prompt, chunk), _chunked(span, chunk))
        )
        return per.reshape((-1,) + per.shape[2:]), success.reshape(-1)

    return jax.jit(run)


# --- (a), (b): the official structure ----------------------------------------------------------


@functools.cache
def _single_steps(model):
    """Jitted batch-1 prefill and cached decode step (logits' argmax and the attention rows
    ``[L, H, S]`` of the new token's query, as the official code reads them)."""

    @jax.jit
    def prefill1(params, prompt):
        return S.prefill(model, params, prompt, STEPS)

    @jax.jit
    def step1(params, cache, token):
        logits, aux = model.apply(params, token[None, None], cache=cache, return_attention=True)
        return jnp.argmax(logits[0, 0]), aux.attention[:, 0, :, 0, :], aux.cache

    return prefill1, step1


def check_python(rows, token: int, prompt, start: int, end: int, score) -> None:
    """(a)'s per-step check: a Python loop over layers and heads (``score`` updated in place)."""
    n_layers, n_heads = rows.shape[:2]
    for layer in range(n_layers):
        for head in range(n_heads):
            j = int(np.argmax(rows[layer, head]))
            if start <= j < end and token == int(prompt[j]):
                score[layer, head] += 1.0 / (end - start)


def check_numpy(rows, token: int, prompt, start: int, end: int, score) -> None:
    """(b)'s per-step check, vectorised over layers and heads."""
    j = np.argmax(rows, axis=-1)
    hit = (j >= start) & (j < end) & (prompt[np.clip(j, 0, len(prompt) - 1)] == token)
    score += hit / (end - start)


def rouge1_recall(response, answer) -> float:
    """ROUGE-1 recall on token ids with counts (the official filter)."""
    resp = list(response)
    hits = 0
    for t in answer:
        if t in resp:
            resp.remove(t)
            hits += 1
    return hits / len(answer)


def loop_prefill(model):
    """(a)/(b) phase 1: the per-instance batch-1 prefill; returns the caches."""
    prefill1, _ = _single_steps(model)

    def run(params, prompt):
        return [prefill1(params, prompt[i : i + 1]) for i in range(prompt.shape[0])]

    return run


def loop_decode_score(model, check):
    """(a)/(b) phase 2: per instance, a Python loop over decode steps around the jitted cached
    step, ``check`` after each step, then the ROUGE filter. Returns ``(scores [N, L, H], success
    [N], tokens [N, STEPS])``."""
    _, step1 = _single_steps(model)

    def run(params, caches, prompt, span):
        n = prompt.shape[0]
        scores = np.zeros((n, model.num_layers, model.num_heads))
        success = np.zeros(n, bool)
        tokens = np.zeros((n, STEPS), np.int32)
        for i in range(n):
            cache, token = caches[i], jnp.asarray(prompt[i, -1])
            start, end = int(span[i, 0]), int(span[i, 1])
            for t in range(STEPS):
                token, rows, cache = step1(params, cache, token)
                tokens[i, t] = int(token)
                check(np.asarray(rows), int(tokens[i, t]), prompt[i], start, end, scores[i])
            success[i] = rouge1_recall(tokens[i], prompt[i, start:end]) > 0.5
        return scores, success, tokens

    return run


# --- rows ---------------------------------------------------------------------------------------


def rows_for(size: str, ns, contexts, n_runs: int = 3) -> list[dict]:
    rows = []
    for context in contexts:
        model, params, world = _model(context)
        for n in ns:
            prompt, span = instances(n, context, world)
            common = {"n": n, "context": context, "steps": STEPS}
            # (c)
            pre = jit_prefill(model)
            t = time_call(pre, params, prompt, n_warmup=1, n_runs=n_runs)
            rows.append(result_row(NAME, "jit scan", size, t, work=n, unit="instances",
                                   phase="prefill", **common))  # fmt: skip
            cache = pre(params, prompt)
            t = time_call(jit_decode_score(model), params, cache, prompt, span, n_warmup=1,
                          n_runs=n_runs)  # fmt: skip
            rows.append(result_row(NAME, "jit scan", size, t, work=n, unit="instances",
                                   phase="decode+score", **common))  # fmt: skip
            # (a), (b): one warm-up on two instances compiles the batch-1 programs
            lp = loop_prefill(model)
            caches = lp(params, prompt)
            t = time_call(lp, params, prompt, n_warmup=0, n_runs=1)
            for impl, check in (("official loop", check_python), ("numpy check", check_numpy)):
                rows.append(result_row(NAME, impl, size, t, work=n, unit="instances",
                                       phase="prefill", **common))  # fmt: skip
                run = loop_decode_score(model, check)
                run(params, caches[:2], prompt[:2], span[:2])
                t_d = time_call(run, params, caches, prompt, span, n_warmup=0, n_runs=1)
                rows.append(result_row(NAME, impl, size, t_d, work=n, unit="instances",
                                       phase="decode+score", **common))  # fmt: skip
    return rows


def sharded_rows(size: str, n: int, context: int, n_runs: int = 3) -> list[dict]:
    rows = []
    model, params, world = _model(context)
    prompt, span = instances(n, context, world)
    for d in (1, 2):
        if d > jax.device_count() or n % d:
            continue
        mesh = sharding.data_mesh(jax.devices()[:d])
        pre = jit_prefill(model, mesh)
        common = {"n": n, "context": context, "steps": STEPS}
        t = time_call(pre, params, prompt, n_warmup=1, n_runs=n_runs)
        rows.append(result_row(NAME, "jit scan sharded", size, t, work=n, unit="instances",
                               devices=d, phase="prefill", **common))  # fmt: skip
        cache = pre(params, prompt)
        t = time_call(jit_decode_score(model, mesh), params, cache, prompt, span, n_warmup=1,
                      n_runs=n_runs)  # fmt: skip
        rows.append(result_row(NAME, "jit scan sharded", size, t, work=n, unit="instances",
                               devices=d, phase="decode+score", **common))  # fmt: skip
    return rows


def run(size: str) -> list[dict]:
    spec = SIZES[size]
    return rows_for(size, spec["n"], spec["context"]) + sharded_rows(size, 256, 256)

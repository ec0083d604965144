"""Loopy BP inference (LLM-BP, issue 26): jaxlab against what a user would otherwise run.

Graphs: Gaussian features (``llm_bp.gaussian_features``), h = 0.8, mean degree 10, so about
``5 n`` undirected edges; L = 5 iterations; priors ``log_softmax(h q^T / 0.1)``. Work is counted
as undirected edge-iterations (``E x L``) per second.

- ``jaxlab closed`` / ``jaxlab dense``: :func:`jaxlab.graphs.llm_bp.run_bp` with the O(C) closed
  form or the O(C^2) log-sum-exp path, both directions of each stored edge side by side;
- ``jaxlab vmapped x8``: 8 (seed, r) runs on one graph in one vmapped call (8x the work);
- ``jaxlab sharded``: edges over 2 / 4 devices (forced host devices share the same cores);
- ``numpy add.at``: the official structure (``model_bp.py``) in NumPy: a directed edge list with
  both directions, the reverse-edge index gather for the cavity, dense log-sum-exp messages (the
  closed form where the dense ``[2E, C, C]`` array would exceed 5e7 entries) and ``np.add.at``;
- ``scipy sparse``: the same messages (closed form), aggregated by a CSR incidence matrix product;
- ``python loop``: a per-directed-edge Python loop (n = 1e3 only).

Every baseline's beliefs are checked against jaxlab's before timing. Compile time is reported
apart; medians over warm calls, blocked until ready.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from scipy.special import logsumexp

from jaxlab.core.timing import Timing, result_row, time_call
from jaxlab.graphs import llm_bp as L
from jaxlab.graphs.llm_bp.bp import _run

NAME = "bp_inference"
DESCRIPTION = "loopy BP: closed form / dense / vmapped / sharded vs NumPy add.at, SciPy, a loop"
SIZES = {
    "small": {"n": (1_000, 10_000, 100_000), "classes": (5, 24)},
    "large": {"n": (1_000, 10_000, 100_000, 1_000_000), "classes": (5, 24)},
}
ITERS = 5
R = 0.8
DENSE_LIMIT = 5e7


def problem(n: int, c: int, seed: int = 0):
    rng = np.random.default_rng([seed, n, c])
    y = L.balanced_labels(n, c, rng)
    x, means = L.gaussian_features(y, 16, rng, sigma=3.0)
    edges = L.make_edges(y, 0.8, rng)
    lp = np.asarray(jax.nn.log_softmax(x @ means.T / 0.1, axis=1), np.float32)
    return edges, lp


def _normalize(a):
    return a - logsumexp(a, axis=-1, keepdims=True)


def numpy_official(edges, lp, log_h, dense: bool):
    """The official directed layout: both directions, reverse index, ``np.add.at``."""
    n, c = lp.shape
    src = np.concatenate([edges[:, 0], edges[:, 1]])
    dst = np.concatenate([edges[:, 1], edges[:, 0]])
    e = len(edges)
    rev = np.concatenate([np.arange(e, 2 * e), np.arange(e)])
    log_b, msg = lp, None
    kappa = np.expm1(log_h[0, 0] - log_h[0, 1])
    for _ in range(ITERS):
        cav = log_b[src] if msg is None else log_b[src] - msg[rev]
        if dense:
            raw = logsumexp(cav[:, :, None] + log_h[None], axis=1)
        else:
            raw = np.log1p(kappa * np.exp(_normalize(cav)))
        msg = _normalize(raw).astype(np.float32)
        agg = np.zeros((n, c), np.float32)
        np.add.at(agg, dst, msg)
        log_b = _normalize(lp + agg).astype(np.float32)
    return log_b


def scipy_sparse(edges, lp, log_h):
    n, c = lp.shape
    e = len(edges)
    src = np.concatenate([edges[:, 0], edges[:, 1]])
    dst = np.concatenate([edges[:, 1], edges[:, 0]])
    rev = np.concatenate([np.arange(e, 2 * e), np.arange(e)])
    inc = sp.csr_matrix((np.ones(2 * e, np.float32), (dst, np.arange(2 * e))), shape=(n, 2 * e))
    kappa = np.expm1(log_h[0, 0] - log_h[0, 1])
    log_b, msg = lp, None
    for _ in range(ITERS):
        cav = log_b[src] if msg is None else log_b[src] - msg[rev]
        msg = _normalize(np.log1p(kappa * np.exp(_normalize(cav)))).astype(np.float32)
        log_b = _normalize(lp + inc @ msg).astype(np.float32)
    return log_b


def python_loop(edges, lp, log_h):
    n, c = lp.shape
    nbrs = [[] for _ in range(n)]
    for u, v in edges.tolist():
        nbrs[u].append(v)
        nbrs[v].append(u)
    h = np.exp(log_h)
    msg = {}
    log_b = lp.copy()
    for _ in range(ITERS):
        new = {}
        for j in range(n):
            for i in nbrs[j]:
                cav = log_b[j] - msg[(i, j)] if msg else log_b[j]
                mu = np.exp(cav - cav.max())
                m = np.log(mu @ h)
                new[(j, i)] = m - np.log(np.exp(m).sum())
        msg = new
        agg = np.zeros_like(lp)
        for (_, i), m in msg.items():
            agg[i] += m
        log_b = _normalize(lp + agg)
    return log_b


def _row(impl, size, t: Timing, work, **params):
    return result_row(NAME, impl, size, t, work=work, unit="edge-iters", **params)


def rows_for(size: str, n: int, c: int) -> list[dict]:
    edges, lp = problem(n, c)
    e = len(edges)
    work = e * ITERS
    g = L.make_graph(edges, n)
    log_h = L.log_potential(np.float32(R), c)
    lh = np.asarray(log_h)
    runs = 3 if n >= 100_000 else 5
    rows, ref = [], None
    for message in ("closed", "dense"):
        if message == "dense" and 2 * e * c * c > 20 * DENSE_LIMIT:
            continue
        cfg = L.BPConfig(message=message)
        fn = jax.jit(functools.partial(_run, config=cfg))  # fresh: compile time is measured
        t = time_call(fn, g, jnp.asarray(lp), log_h, n_warmup=1, n_runs=runs)
        out = np.asarray(fn(g, lp, log_h))
        if ref is None:
            ref = out
        np.testing.assert_allclose(out, ref, atol=2e-3)
        rows.append(_row(f"jaxlab {message}", size, t, work, n=n, C=c, E=e))
    # 8 (seed, r) runs in one call
    rs = jnp.linspace(0.5, 0.9, 8)
    lps = jnp.stack([jnp.roll(jnp.asarray(lp), s, axis=0) for s in range(8)])
    many = jax.jit(jax.vmap(functools.partial(_run, config=L.BPConfig()), in_axes=(None, 0, 0)))
    t = time_call(many, g, lps, L.log_potential(rs, c), n_warmup=1, n_runs=runs)
    rows.append(_row("jaxlab vmapped x8", size, t, 8 * work, n=n, C=c, E=e))
    for devices in (2, 4):
        if devices > jax.device_count():
            continue
        mesh = jax.sharding.Mesh(np.array(jax.devices()[:devices]), ("data",))
        bp = L.make_bp(L.BPConfig(), g, mesh=mesh)
        state = bp.init(lp, R)
        out = np.asarray(bp.run(state)[0].log_belief)
        np.testing.assert_allclose(out, ref, atol=2e-3)
        t = time_call(lambda s, bp=bp: bp.run(s)[0].log_belief, state, n_warmup=1, n_runs=runs)
        rows.append(_row("jaxlab sharded", size, t, work, devices=devices, n=n, C=c, E=e))
    dense_np = 2 * e * c * c <= DENSE_LIMIT
    np.testing.assert_allclose(numpy_official(edges, lp, lh, dense_np), ref, atol=2e-3)
    t = time_call(lambda: numpy_official(edges, lp, lh, dense_np), n_warmup=0, n_runs=min(runs, 3))
    label = "numpy add.at (official, dense)" if dense_np else "numpy add.at (official, closed)"
    rows.append(_row(label, size, t, work, n=n, C=c, E=e))
    np.testing.assert_allclose(scipy_sparse(edges, lp, lh), ref, atol=2e-3)
    t = time_call(lambda: scipy_sparse(edges, lp, lh), n_warmup=0, n_runs=min(runs, 3))
    rows.append(_row("scipy sparse", size, t, work, n=n, C=c, E=e))
    if n <= 1_000:
        np.testing.assert_allclose(python_loop(edges, lp, lh), ref, atol=2e-3)
        t = time_call(lambda: python_loop(edges, lp, lh), n_warmup=0, n_runs=1)
        rows.append(_row("python loop", size, t, work, n=n, C=c, E=e))
    return rows


def run(size: str) -> list[dict]:
    spec = SIZES[size]
    rows = []
    for c in spec["classes"]:
        for n in spec["n"]:
            rows += rows_for(size, n, c)
    # slope of jaxlab's closed-form time in E (log-log over the sizes), per C
    for c in spec["classes"]:
        pts = [
            (r["params"]["E"], r["median_s"])
            for r in rows
            if r["impl"] == "jaxlab closed" and r["params"]["C"] == c
        ]
        if len(pts) >= 2:
            e, s = np.log(np.array(pts)).T
            slope = float(np.polyfit(e, s, 1)[0])
            for r in rows:
                if r["impl"] == "jaxlab closed" and r["params"]["C"] == c:
                    r["params"]["slope_in_E"] = round(slope, 3)
    return rows

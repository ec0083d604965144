"""Benchmark: one step's bid-gradient estimate of the auction learners (symmetric FP, aBR).

Equal work in every implementation: draw ``S_j`` value profiles for ``n`` bidders, push them
through the bid network and take the market price (highest opposing bid); draw ``S_i`` ante values
and bids; Gaussian-KDE ``G, g, g'`` at the bids against the ``S_j`` market prices
(``S_i * S_j`` kernel evaluations, the hot core); closed-form ``u', u''`` and the gated aBR bid
gradient. Implementations:

- ``jaxlab``: ``jit(make_learner(...).estimate)``, market samples chunked (``chunk_size``), bidder
  types vmapped, optionally the ante-sample axis sharded over 1, 2, 4, ... devices;
- ``numpy broadcast``: the same maths on a dense ``[S_i, S_j]`` array (float32);
- ``python loop``: one NumPy kernel sum per ante sample (small sizes only).

The official code's own protocol is heavier: **every** bidder draws ``S_i`` values and is scored
against its own market ``max_{j != i} b_j`` (``n S_i S_j`` kernel evaluations). Those rows
(``every bidder``) compare ``ante_bidders="all"`` exact, the same with the speed options of the
``paper`` preset (breakpoint evaluation of the market bids, KDE on a grid of spacing ``h / 16``),
and a NumPy broadcast of the official ``[n, S_i, S_j]`` computation. Their ``work`` is
``n S_i S_j``.

Throughput is kernel evaluations per second. ``temp_MB`` is XLA's temporary buffer size for the
compiled estimate, which stays bounded by the chunk size rather than ``S_i * S_j``.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import erf

from jaxlab.core import sharding
from jaxlab.core.timing import result_row, time_call
from jaxlab.games import auctions as A

NAME = "auction_gradients"
DESCRIPTION = "auction bid-gradient estimate (KDE, S_i x S_j kernels): jaxlab vs NumPy vs loop"
SIZES = {
    "small": [(2, 256, 10_000), (10, 256, 10_000)],
    "large": [(2, 256, 10_000), (10, 256, 10_000), (20, 1024, 100_000)],
}
LOOP_MAX_KERNELS = 256 * 10_000
BANDWIDTH, C1, C2 = 0.05, 0.01, 1e-8


def numpy_net(layers: list[tuple[np.ndarray, np.ndarray]], v: np.ndarray) -> np.ndarray:
    x = v[..., None]
    for i, (w, b) in enumerate(layers):
        x = x @ w + b
        x = np.maximum(x, 0.0) if i < len(layers) - 1 else np.abs(x)
    return x[..., 0]


def _numpy_layers(params) -> list[tuple[np.ndarray, np.ndarray]]:
    p = params["params"]
    names = sorted(p, key=lambda k: int(k.split("_")[1]))
    return [(np.asarray(p[k]["kernel"][0]), np.asarray(p[k]["bias"][0])) for k in names]


def _derivs(v, b, G, g, dg):
    u1, u2 = (v - b) * g - G, (v - b) * dg - 2.0 * g
    gate = (u2 < -C2) & (np.abs(u1) < C1)
    return np.where(gate, u1 / np.where(gate, u2, -1.0), -u1)


def numpy_estimate(layers, seed: int, n: int, s_i: int, s_j: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    market = numpy_net(layers, rng.random((s_j, n), dtype=np.float32))[:, 1:].max(axis=1)
    v = rng.random(s_i, dtype=np.float32)
    b = numpy_net(layers, v)
    z = (b[:, None] - market[None, :]) / np.float32(BANDWIDTH)
    phi = np.exp(-0.5 * z * z) / np.float32(np.sqrt(2 * np.pi) * BANDWIDTH)
    G = (0.5 * (1.0 + erf(z / np.float32(np.sqrt(2.0))))).mean(axis=1)
    g = phi.mean(axis=1)
    dg = (-z * phi).mean(axis=1) / np.float32(BANDWIDTH)
    return _derivs(v, b, G, g, dg)


def loop_estimate(layers, seed: int, n: int, s_i: int, s_j: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    market = numpy_net(layers, rng.random((s_j, n), dtype=np.float32))[:, 1:].max(axis=1)
    v = rng.random(s_i, dtype=np.float32)
    b = numpy_net(layers, v)
    out = np.empty(s_i, np.float32)
    for i in range(s_i):
        z = (b[i] - market) / BANDWIDTH
        phi = np.exp(-0.5 * z * z) / (np.sqrt(2 * np.pi) * BANDWIDTH)
        G, g = np.mean(0.5 * (1.0 + erf(z / np.sqrt(2.0)))), np.mean(phi)
        dg = np.mean(-z * phi) / BANDWIDTH
        out[i] = _derivs(v[i], b[i], G, g, dg)
    return out


def numpy_every_bidder(layers, seed: int, n: int, s_i: int, s_j: int) -> np.ndarray:
    """The official estimate: bidder i's ``S_i`` bids against ``max_{j != i}`` over ``S_j``
    profiles, for every bidder i."""
    rng = np.random.default_rng(seed)
    bids = numpy_net(layers, rng.random((s_j, n), dtype=np.float32))  # [S_j, n]
    others = np.where(np.eye(n, dtype=bool)[:, None, :], -np.inf, bids[None])  # [n, S_j, n]
    market = others.max(axis=2)  # [n, S_j]
    v = rng.random((n, s_i), dtype=np.float32)
    b = numpy_net(layers, v)
    z = (b[:, :, None] - market[:, None, :]) / np.float32(BANDWIDTH)  # [n, S_i, S_j]
    phi = np.exp(-0.5 * z * z) / np.float32(np.sqrt(2 * np.pi) * BANDWIDTH)
    G = (0.5 * (1.0 + erf(z / np.float32(np.sqrt(2.0))))).mean(axis=2)
    g = phi.mean(axis=2)
    dg = (-z * phi).mean(axis=2) / np.float32(BANDWIDTH)
    return _derivs(v, b, G, g, dg)


def temp_megabytes(fn, *args) -> float:
    analysis = fn.lower(*args).compile().memory_analysis()
    return float(getattr(analysis, "temp_size_in_bytes", float("nan"))) / 2**20


def run(size: str) -> list[dict]:
    rows = []
    for n, s_i, s_j in SIZES[size]:
        game = A.AuctionGame("fp", (n,))

        def config(chunk, s_i=s_i, s_j=s_j):
            return A.LearnerConfig(method="abr", ante_samples=s_i, market_samples=s_j,
                                   bandwidth=BANDWIDTH, chunk_size=chunk, init_steps=0)  # fmt: skip

        learner = A.make_learner(game, config(2048))
        params = learner.init(jax.random.key(0)).params
        key, step = jax.random.key(1), jnp.int32(1)
        kernels = s_i * s_j
        common = dict(work=kernels, unit="kernel evals", n=n, S_i=s_i, S_j=s_j)

        fn = jax.jit(learner.estimate)
        timing = time_call(fn, params, key, step)
        rows.append(result_row(NAME, "jaxlab jit (chunk 2048)", size, timing,
                               temp_MB=round(temp_megabytes(fn, params, key, step), 2),
                               **common))  # fmt: skip
        if s_j > 2048:  # same estimate without chunking: memory grows with S_i * S_j
            dense = jax.jit(A.make_learner(game, config(s_j)).estimate)
            rows.append(result_row(NAME, "jaxlab jit (unchunked)", size,
                                   time_call(dense, params, key, step),
                                   temp_MB=round(temp_megabytes(dense, params, key, step), 2),
                                   **common))  # fmt: skip
        devices = 2
        while devices <= jax.device_count() and s_i % devices == 0:
            mesh = sharding.data_mesh(jax.devices()[:devices])
            sharded = jax.jit(A.make_learner(game, config(2048), mesh=mesh).estimate)
            rows.append(result_row(NAME, "jaxlab jit, S_i sharded", size,
                                   time_call(sharded, params, key, step), devices=devices,
                                   **common))  # fmt: skip
            devices *= 2

        layers = _numpy_layers(params)
        rows.append(result_row(NAME, "numpy broadcast", size,
                               time_call(numpy_estimate, layers, 0, n, s_i, s_j, n_runs=3),
                               **common))  # fmt: skip
        if kernels <= LOOP_MAX_KERNELS:
            rows.append(result_row(NAME, "python loop", size,
                                   time_call(loop_estimate, layers, 0, n, s_i, s_j, n_warmup=1,
                                             n_runs=2), **common))  # fmt: skip
        if n * s_i * s_j <= EVERY_MAX_KERNELS:
            rows += _every_bidder_rows(game, config(256), params, layers, size, n, s_i, s_j)
    return rows


EVERY_MAX_KERNELS = 10 * 256 * 10_000  # the NumPy [n, S_i, S_j] arrays: ~100 MB each


def _every_bidder_rows(game, base, params, layers, size, n, s_i, s_j) -> list[dict]:
    key, step = jax.random.key(1), jnp.int32(1)
    common = dict(work=n * s_i * s_j, unit="kernel evals", n=n, S_i=s_i, S_j=s_j)
    variants = {
        "every bidder: jaxlab exact": dict(ante_bidders="all"),
        "every bidder: jaxlab paper preset (breakpoints + h/16 grid)": dict(
            ante_bidders="all", piecewise_market=True, kde_bins_per_bandwidth=16.0
        ),
    }
    rows = []
    for name, options in variants.items():
        fn = jax.jit(A.make_learner(game, dataclasses.replace(base, **options)).estimate)
        rows.append(result_row(NAME, name, size, time_call(fn, params, key, step), **common))
    rows.append(result_row(NAME, "every bidder: numpy broadcast (official)", size,
                           time_call(numpy_every_bidder, layers, 0, n, s_i, s_j, n_runs=2),
                           **common))  # fmt: skip
    return rows

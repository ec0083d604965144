"""Benchmark of the CMI test's nuisance hot core: GMMN generator fits at the official shapes.

Work unit: one :class:`jaxlab.stats.cmi_test.GMMNGenerator` fit on one fold of the full preset:
200 training rows, ``dz = dx = 25``, ``M_train = 10`` draws per row, the official loader's epochs
(batches of 128 and 72), clipping and coupled Adam. A fit is timed at ``STEPS`` optimiser steps
(``STEPS / 2`` epochs); the ``official_fits_per_s`` parameter scales that to the official 2000
steps (the cost per epoch is constant). Rows, for ``R`` fits:

- ``one at a time``: one jitted fit called ``R`` times (a Python loop over folds and replicates);
- ``vmap``: the ``R`` fits in one jitted ``vmap`` (what :func:`~jaxlab.stats.cmi_test.cross_fit`
  and ``replicate_tests`` do over folds and replicates).

Roofline (measured here, idle 2-core machine): a 128-row step evaluates the Laplace kernel on
``2 x M x b^2 = 3.3e5`` pairs of 25-dimensional rows (the ``A`` and ``C`` terms), ``8.2e6``
``|a - b|`` terms forward and about twice that backward, plus the Gaussian terms by matmul. That is
about 5e7 vector operations, ~5 ms at the cores' ~1e10 per second: a fit is compute-bound, so
``vmap`` over fits cannot give the issue's 5x on 2 cores (it removes only the per-call overhead).
The hand-written VJP of :func:`~jaxlab.stats.cmi_test.kernels.l1_distance` (signs recomputed
in the backward instead of ``[b, b, d]`` differences stored per draw) took a step from 26-29 ms
to 10-16 ms (A/B on the same machine state, 2026-12-02).
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp

from jaxlab.core.timing import Timing, result_row, time_call
from jaxlab.stats import cmi_test as C

NAME = "gmmn_fits"
DESCRIPTION = "GMMN fits (200 rows, d = 25 + 25, epochs of 128 + 72): vmap vs one at a time"
SIZES = {"small": (4,), "large": (4, 8)}
ROWS, D, STEPS, OFFICIAL_STEPS = 200, 25, 40, 2000


def _problem(r: int, seed: int = 0):
    design = C.gaussian_design("h0", D, D)
    keys = jax.random.split(jax.random.key(seed), r)
    x, _, z = jax.vmap(lambda k: design.sample(k, ROWS))(keys)
    return keys, x, z, jnp.ones((r, ROWS))


def run(size: str) -> list[dict]:
    gen = C.GMMNGenerator(steps=STEPS)
    one = jax.jit(gen.fit)
    many = jax.jit(jax.vmap(gen.fit))
    rows = []
    scale = STEPS / OFFICIAL_STEPS
    for r in SIZES[size]:
        keys, x, z, w = _problem(r)
        jax.block_until_ready(one(keys[0], x[0], z[0], w[0]))  # compile + warm-up
        runs = []
        for _ in range(3):
            start = time.perf_counter()
            for i in range(r):
                out = one(keys[i], x[i], z[i], w[i])
            jax.block_until_ready(out)
            runs.append(time.perf_counter() - start)
        runs.sort()
        t_loop = Timing(0.0, runs[-1], runs[1], runs[0], len(runs))
        rows.append(result_row("gmmn_fit", "one at a time", size, t_loop, work=r, unit="fits",
                               fits=r, steps=STEPS,
                               official_fits_per_s=r / t_loop.median_s * scale))  # fmt: skip
        t_vmap = time_call(many, keys, x, z, w, n_warmup=1, n_runs=3)
        rows.append(result_row("gmmn_fit", "vmap", size, t_vmap, work=r, unit="fits", fits=r,
                               steps=STEPS,
                               official_fits_per_s=r / t_vmap.median_s * scale))  # fmt: skip
    return rows

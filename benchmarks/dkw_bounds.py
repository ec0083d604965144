"""Benchmark of the robust (f-divergence) tail certificate: 50 thresholds x 1000 replicates.

Work unit: one certificate value ``G_hat(lam)`` for one replicate network of ``K`` clients
(chi-square, ``eps = 0.2``, ``delta = 0.05``, ``n = 1000``; risks ``Beta(2, 8)``, estimates
``Binomial(n, R) / n``). Rows, for ``K`` in ``SIZES[size]``:

- ``jit+vmap``: :func:`jaxlab.federated.robust_dkw.robust_tail_bound` jitted and ``vmap``ped over
  the replicates (sort once, counts by ``searchsorted``, the two-level bisection elementwise);
- ``numpy loop``: the same reduction in NumPy, one Python bisection per (threshold, replicate),
  as a per-instance solver would be called; timed on ``NUMPY_REPS`` replicates and extrapolated
  linearly to 1000 (the ``params`` say so);
- ``scipy slsqp``: a generic convex solver on the ``K``-variable program (the official code calls
  cvxpy once per threshold; cvxpy is not a dependency here), timed on ``SLSQP_SOLVES`` instances
  at the smallest ``K`` only and extrapolated to the full grid;
- device scaling: the replicate axis sharded over 1, 2, 4, ... devices.

The NumPy reduction and SLSQP are checked against the library on one instance first.
"""

from __future__ import annotations

import math
import time

import jax
import jax.numpy as jnp
import numpy as np
from scipy import optimize

from jaxlab.core import sharding
from jaxlab.core.timing import Timing, result_row, time_call
from jaxlab.federated import robust_dkw as R

NAME = "dkw_bounds"
DESCRIPTION = (
    "robust chi2 tail certificate, 50 lambdas x 1000 replicates: jit+vmap vs NumPy loop vs SLSQP"  # noqa: E501
)
SIZES = {"small": (500, 2000, 8000), "large": (500, 2000, 8000, 32000)}
REPS, POINTS, EPS, DELTA, N = 1000, 50, 0.2, 0.05, 1000
NUMPY_REPS, SLSQP_SOLVES = 10, 3


# ---- references ----------------------------------------------------------------------------------


def _f(t, divergence):
    if divergence == "kl":
        return np.where(t > 0, t * np.log(np.maximum(t, 1e-300)), 0.0)
    return (t - 1.0) ** 2


def numpy_two_level(p, budget, tau1, lam_max, divergence, iters=60, t_f=None) -> float:
    """The two-level reduction for one instance in scalar NumPy (the library's algorithm).

    ``t_f`` overrides the point ``b`` is clipped towards (default ``argmin f``).
    """
    if p <= 0.0:
        return 0.0
    if t_f is None:
        t_f = math.exp(-1.0) if divergence == "kl" else 1.0

    def g(a):
        if p >= 1.0:
            return _f(a, divergence)
        lo = max(0.0, (1.0 - tau1 - p * a) / (1.0 - p))
        hi = min(lam_max, (1.0 + tau1 - p * a) / (1.0 - p))
        b = min(max(t_f, lo), max(lo, hi))
        return p * _f(a, divergence) + (1.0 - p) * _f(b, divergence)

    a_hi = min(lam_max, 1.0 + tau1 if p >= 1.0 else (1.0 + tau1) / p)
    if g(a_hi) <= budget:
        return p * a_hi
    lo, hi = 1.0, a_hi
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if g(mid) <= budget else (lo, mid)
    return p * lo


def _constants(k, n, eps, delta, divergence):
    lam_max, c1, c2 = (float(v) for v in R.divergence_constants(eps, delta, divergence))
    s_k = math.sqrt(math.log(k / delta) / k)
    t = math.sqrt(math.log((k + 2.0) / delta) / (2.0 * n))
    return t, s_k, lam_max, c1, c2


def numpy_tail_bound(r_hat, lam, eps, n, delta=DELTA, divergence="chi2") -> np.ndarray:
    """``robust_tail_bound`` for one replicate: a Python loop over thresholds."""
    k = r_hat.shape[0]
    t, s_k, lam_max, c1, c2 = _constants(k, n, eps, delta, divergence)
    out = np.empty(len(lam))
    for i, x in enumerate(lam):
        p = np.count_nonzero(r_hat >= x - t) / k
        v = numpy_two_level(p, eps + c2 * s_k, c1 * s_k, lam_max, divergence)
        out[i] = min(1.0, v + s_k)
    return out


def slsqp_two_level(indicator, budget, tau1, lam_max, divergence, starts=2, seed=0) -> float:
    """The ``K``-variable program by SciPy SLSQP (multi-start; the best feasible value).

    ``max mean(alpha * indicator)`` s.t. ``0 <= alpha <= Lam``, ``|mean(alpha) - 1| <= tau1``,
    ``mean f(alpha) <= budget``.
    """
    k = indicator.shape[0]
    ind = indicator.astype(float)
    upper = min(lam_max, 1e6)

    def f_grad_neg(a):
        if divergence == "kl":
            return -(np.log(np.maximum(a, 1e-300)) + 1.0) / k
        return -2.0 * (a - 1.0) / k

    ones = np.ones(k) / k
    cons = [
        {"type": "ineq", "fun": lambda a: tau1 - (a.mean() - 1.0), "jac": lambda a: -ones},
        {"type": "ineq", "fun": lambda a: tau1 + (a.mean() - 1.0), "jac": lambda a: ones},
        {"type": "ineq", "fun": lambda a: budget - _f(a, divergence).mean(), "jac": f_grad_neg},
    ]
    rng = np.random.default_rng(seed)
    best = -np.inf
    for s in range(starts):
        x0 = np.ones(k) if s == 0 else np.clip(1.0 + 0.1 * rng.standard_normal(k), 1e-6, upper)
        res = optimize.minimize(lambda a: -(a * ind).mean(), x0, jac=lambda a: -ind / k,
                                bounds=[(1e-12, upper)] * k, constraints=cons, method="SLSQP",
                                options={"ftol": 1e-13, "maxiter": 500})  # fmt: skip
        a = res.x
        feasible = (abs(a.mean() - 1.0) <= tau1 + 1e-7) and _f(
            a, divergence
        ).mean() <= budget + 1e-7
        if feasible:
            best = max(best, -res.fun)
    return float(best)


# ---- benchmark -----------------------------------------------------------------------------------


def _problem(k: int, seed: int = 0):
    kr, kb = jax.random.split(jax.random.key(seed))
    r = jax.random.beta(kr, 2.0, 8.0, (REPS, k))
    r_hat = jax.random.binomial(kb, float(N), r) / N
    lam = jnp.linspace(0.0, 0.8, POINTS)
    return r_hat, lam


def _jitted(mesh=None):
    def bounds(r_hat, lam):
        r_hat = sharding.constrain_batch(r_hat, mesh)
        out = jax.vmap(lambda r: R.robust_tail_bound(r, lam, EPS, n=N, delta=DELTA))(r_hat)
        return sharding.constrain_batch(out, mesh)

    return jax.jit(bounds)


def _extrapolated(seconds: float, factor: float) -> Timing:
    s = seconds * factor
    return Timing(0.0, s, s, s, 1)


def run(size: str) -> list[dict]:
    rows = []
    work = REPS * POINTS
    for idx, k in enumerate(SIZES[size]):
        r_hat, lam = _problem(k)
        fn = _jitted()
        t_jit = time_call(fn, r_hat, lam, n_warmup=1, n_runs=5)
        rows.append(result_row("tail_bound", "jit+vmap", size, t_jit, work=work, unit="values",
                               K=k, reps=REPS, points=POINTS))  # fmt: skip
        r_np, lam_np = np.asarray(r_hat, np.float64), np.asarray(lam, np.float64)
        lib = np.asarray(fn(r_hat, lam))
        ref = numpy_tail_bound(r_np[0], lam_np, EPS, N)
        if not np.allclose(ref, lib[0], atol=1e-4):
            raise AssertionError(f"NumPy reduction disagrees with the library at K={k}")
        start = time.perf_counter()
        for j in range(NUMPY_REPS):
            numpy_tail_bound(r_np[j], lam_np, EPS, N)
        per_rep = (time.perf_counter() - start) / NUMPY_REPS
        rows.append(result_row("tail_bound", "numpy loop", size, _extrapolated(per_rep, REPS),
                               work=work, unit="values", K=k, reps=REPS, points=POINTS,
                               extrapolated_from_reps=NUMPY_REPS))  # fmt: skip
        if idx == 0:
            t, s_k, lam_max, c1, c2 = _constants(k, N, EPS, DELTA, "chi2")
            start = time.perf_counter()
            for j in range(SLSQP_SOLVES):
                x = lam_np[POINTS // 4 + j]
                v = slsqp_two_level(r_np[0] >= x - t, EPS + c2 * s_k, c1 * s_k, lam_max, "chi2",
                                    starts=1)  # fmt: skip
                p = np.count_nonzero(r_np[0] >= x - t) / k
                exact = numpy_two_level(p, EPS + c2 * s_k, c1 * s_k, lam_max, "chi2")
                if abs(v - exact) > 1e-4:
                    raise AssertionError(f"SLSQP {v} vs reduction {exact} at K={k}")
            per_solve = (time.perf_counter() - start) / SLSQP_SOLVES
            rows.append(result_row("tail_bound", "scipy slsqp", size,
                                   _extrapolated(per_solve, work), work=work, unit="values", K=k,
                                   reps=REPS, points=POINTS,
                                   extrapolated_from_solves=SLSQP_SOLVES))  # fmt: skip
    k = SIZES[size][-1]
    r_hat, lam = _problem(k)
    n_dev = len(jax.devices())
    d = 1
    while d <= n_dev:
        if REPS % d == 0:
            mesh = sharding.data_mesh(jax.devices()[:d])
            placed = sharding.shard_batch(r_hat, mesh)
            t_dev = time_call(_jitted(mesh), placed, lam, n_warmup=1, n_runs=5)
            rows.append(result_row("tail_bound (sharded reps)", "jit+vmap", size, t_dev,
                                   work=work, unit="values", devices=d, K=k))  # fmt: skip
        d *= 2
    return rows

"""Benchmark of the CMI test's hot core: the fold statistic and its multiplier bootstrap.

Work unit: one data set of ``n`` rows in ``K = 2`` folds with fitted nuisances (``M = 100`` draws
per row, ``dx = dz = 25``, ``dy = 1``, float32), i.e. the centred statistic ``T`` and ``B = 1000``
bootstrap draws, nuisance fitting excluded (it is not the statistic's cost). Rows:

- ``stat+boot: jit``: :func:`jaxlab.stats.cmi_test.kernel_test_from_folds` jitted (the m-sum a
  ``lax.scan``, the bootstrap one batched matmul ``((E F) * E).sum``);
- ``stat+boot: numpy``: the official structure in NumPy: the n x n kernel terms vectorised per draw
  m (the official code broadcasts all m at once, ``[n, n, M, d]``, which needs 6 GB at n_k = 800),
  then a Python loop over the B bootstrap draws, one quadratic form each;
- ``bootstrap only``: the B draws given ``F`` (jit matmul vs the NumPy loop): the official
  per-draw loop is what the spec expects to cost most;
- ``replicates: vmap`` vs ``replicates: jit loop``: 100 replicates at n = 200 through
  :func:`jaxlab.stats.cmi_test.replicate_tests`'s core (oracle nuisances, data simulated inside)
  against calling the jitted single-replicate test 100 times;
- device scaling: the bootstrap's draw axis sharded over 1, 2, 4, ... devices.

The NumPy statistic is checked against the JAX one on the smallest size first.
"""

from __future__ import annotations

import jax
import numpy as np

from jaxlab.core import sharding
from jaxlab.core.timing import result_row, time_call
from jaxlab.stats import cmi_test as C

NAME = "cmi_bootstrap"
DESCRIPTION = "CMI statistic + 1000 multiplier-bootstrap draws: jit vs NumPy (official loops)"
SIZES = {"small": (200, 400, 800), "large": (200, 400, 800, 1600)}
D, M, B, K = 25, 100, 1000, 2
REPLICATES = 100


def _folds(n: int, seed: int = 0) -> C.FoldData:
    """Fitted folds from the A2 sparse design with its oracle nuisances."""
    design = C.gaussian_design("a2_sparse", D, D)
    x, y, z = design.sample(jax.random.key(seed), n)
    cfg = C.CMIConfig(K, M, B)
    fit = jax.jit(C.cross_fit, static_argnames=("config",))
    return fit(x, y, z, jax.random.key(seed + 1), design.oracle_generator(),
               design.oracle_mean(), cfg)  # fmt: skip


# ---- NumPy reference -----------------------------------------------------------------------------


def _np_std(a):
    return (a - a.mean(0)) / np.sqrt(a.var(0, ddof=1) + 1e-12)


def _np_l1(a, b):
    return np.abs(a[:, None, :] - b[None, :, :]).sum(-1)


def _np_median_offdiag(d):
    n = d.shape[0]
    return np.median(d[~np.eye(n, dtype=bool)])


def numpy_fold_matrix(x, xt, y, m_hat, z):
    """``F`` of one (unpadded) fold, Laplace kernels, the spec's standardisation."""
    xs, zs = _np_std(x), _np_std(z)
    r = (y - m_hat) / np.sqrt(y.var(0, ddof=1) + 1e-12)
    dxx = _np_l1(xs, xs)
    sx = _np_median_offdiag(dxx)
    kxx = np.exp(-dxx / sx)
    a = np.zeros_like(kxx)
    c = np.zeros_like(kxx)
    for m in range(xt.shape[1]):
        xm = _np_std(xt[:, m])
        a += np.exp(-_np_l1(xs, xm) / sx)
        c += np.exp(-_np_l1(xm, xm) / sx)
    u = kxx - (a + a.T) / xt.shape[1] + c / xt.shape[1]
    dzz = _np_l1(zs, zs)
    f = u * (r @ r.T) * np.exp(-dzz / _np_median_offdiag(dzz))
    np.fill_diagonal(f, 0.0)
    return f


def numpy_bootstrap(fs, rng):
    """``(T, T_boot)``: the Python loop over draws of the official code, folds combined."""
    t = np.mean([f.sum() / (len(f) - 1) for f in fs])
    boot = np.zeros(B)
    for b in range(B):
        vals = []
        for f in fs:
            e = rng.choice([-1.0, 1.0], size=len(f))
            vals.append(float(e @ f @ e) / (len(f) - 1))
        boot[b] = np.mean(vals)
    return t, boot


def numpy_test(folds_np, rng):
    fs = [numpy_fold_matrix(*fold) for fold in folds_np]
    t, boot = numpy_bootstrap(fs, rng)
    return t, np.mean(boot > t)


def _to_numpy(folds: C.FoldData):
    out = []
    for k in range(folds.x.shape[0]):
        keep = np.asarray(folds.mask[k])
        out.append(tuple(np.asarray(a[k], np.float64)[keep] for a in
                         (folds.x, folds.x_tilde, folds.y, folds.m_hat, folds.z)))  # fmt: skip
    return out


# ---- JAX paths -----------------------------------------------------------------------------------


def _jax_test(config):
    return jax.jit(lambda folds, key: C.kernel_test_from_folds(folds, key, config))


def _jax_bootstrap(config, mesh=None):
    return jax.jit(lambda f, mask, key: C.bootstrap_draws(f, mask, key, config, mesh))


def _replicate_problem(n: int):
    design = C.gaussian_design("a2_sparse", D, D)
    keys = jax.random.split(jax.random.key(7), REPLICATES)
    xs, ys, zs = jax.vmap(lambda k: design.sample(k, n))(keys)
    return design, xs, ys, zs, jax.random.split(jax.random.key(8), REPLICATES)


def run(size: str) -> list[dict]:
    rows = []
    cfg = C.CMIConfig(K, M, B)
    key = jax.random.key(3)
    for n in SIZES[size]:
        folds = _folds(n)
        folds_np = _to_numpy(folds)
        f_jax = jax.jit(jax.vmap(C.fold_matrix))(*folds)
        if n == SIZES[size][0]:  # the reference computes the same statistic
            f_np = numpy_fold_matrix(*folds_np[0])
            np.testing.assert_allclose(f_np, np.asarray(f_jax[0]), rtol=2e-3, atol=1e-5)
        params = dict(n=n, M=M, B=B, d=D, folds=K)
        t = time_call(_jax_test(cfg), folds, key, n_runs=3)
        rows.append(result_row(NAME, "stat+boot: jit", size, t, work=1, unit="tests", **params))
        rng = np.random.default_rng(0)
        t = time_call(numpy_test, folds_np, rng, n_warmup=0, n_runs=1 if n >= 800 else 2)
        rows.append(result_row(NAME, "stat+boot: numpy", size, t, work=1, unit="tests", **params))
        t = time_call(_jax_bootstrap(cfg), f_jax, folds.mask, key, n_runs=5)
        rows.append(result_row(NAME, "bootstrap only: jit", size, t, work=B, unit="draws",
                               **params))  # fmt: skip
        fs_np = [np.asarray(f_jax[k])[np.ix_(*(np.asarray(folds.mask[k]),) * 2)]
                 for k in range(K)]  # fmt: skip
        t = time_call(numpy_bootstrap, fs_np, rng, n_warmup=0, n_runs=2)
        rows.append(result_row(NAME, "bootstrap only: numpy loop", size, t, work=B,
                               unit="draws", **params))  # fmt: skip

    # 100 replicates at n = 200 (nuisances included: oracle, so cheap)
    n = 200
    design, xs, ys, zs, keys = _replicate_problem(n)
    gen, reg = design.oracle_generator(), design.oracle_mean()
    kw = dict(generator=gen, regressor=reg, config=cfg, tests=("cmi",))
    batched = jax.jit(lambda xs, ys, zs, keys: C.replicate_tests(xs, ys, zs, keys, **kw))
    t = time_call(batched, xs, ys, zs, keys, n_runs=3)
    rows.append(result_row(NAME, "replicates: vmap", size, t, work=REPLICATES, unit="replicates",
                           n=n, M=M, B=B, d=D, replicates=REPLICATES))  # fmt: skip
    C.compare_tests(xs[0], ys[0], zs[0], keys[0], **kw)  # compile outside the timing

    def loop():
        return [C.compare_tests(xs[i], ys[i], zs[i], keys[i], **kw)["cmi"].p_value
                for i in range(REPLICATES)]  # fmt: skip

    t = time_call(loop, n_warmup=1, n_runs=3)
    rows.append(result_row(NAME, "replicates: jit loop", size, t, work=REPLICATES,
                           unit="replicates", n=n, M=M, B=B, d=D,
                           replicates=REPLICATES))  # fmt: skip

    # device scaling of the bootstrap at the largest n
    n = SIZES[size][-1]
    folds = _folds(n)
    f_jax = jax.jit(jax.vmap(C.fold_matrix))(*folds)
    n_dev = 1
    while n_dev <= jax.device_count() and B % n_dev == 0:
        mesh = sharding.data_mesh(jax.devices()[:n_dev])
        t = time_call(_jax_bootstrap(cfg, mesh), f_jax, folds.mask, key, n_runs=5)
        rows.append(result_row(NAME, "bootstrap only: jit, sharded", size, t, work=B,
                               unit="draws", devices=n_dev, n=n, B=B))  # fmt: skip
        n_dev *= 2
    return rows

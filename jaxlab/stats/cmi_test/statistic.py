"""The cross-fitted, conditionally centred kernel test of ``E[Y | X, Z] = E[Y | Z]``, baselines.

Zhang, Huang, Yang, Shao, "Testing Conditional Mean Independence Using Generative Neural Networks"
(ICML 2025). Spec: ``papers/cmi_test.md``.

Per fold ``k`` (``K`` contiguous folds; nuisances fitted on the other folds), on its ``n_k`` rows:

- ``x``, each draw ``x~[:, m]`` and ``z`` standardised per coordinate over the fold; the residual
  ``r = (y - m_hat(z)) / sd(y)``, i.e. ``y`` and ``m_hat`` both scaled by ``y``'s SDs (the spec's
  fix of the official code, which standardised them separately);
- ``U = k(x, x) - A - A^T + C`` (:func:`~jaxlab.stats.cmi_test.nuisance.centred_gram`),
  ``V = r r^T``, ``W = k_Z(z, z)``, ``F = U * V * W`` with zero diagonal;
- ``T_k = sum_{i != j} F_ij / (n_k - 1)`` (n times a U-statistic: O_p(1) under H0, ~n under H1);
- multiplier bootstrap ``T_k^(b) = e^(b)T F e^(b) / (n_k - 1)`` with Rademacher (or Gaussian)
  ``e^(b)``, the nuisances and ``F`` held fixed, one batched matmul for all ``b``.

Folds combine as ``T = mean_k T_k`` and ``T^(b) = mean_k T_k^(b)`` (independent multipliers per
fold), and ``p = mean_b 1[T^(b) > T]`` (upper tail). Kernel bandwidths are medians of the fold's
off-diagonal distances after standardisation.

Baselines on the same nuisances: ``"naive"`` (``U = k(x, x)``, no centring, no generator) and
``"gcm"`` (Shah and Peters' generalised covariance measure: ``R_i = (x_i - x_hat_i) (y_i -
m_hat_i)^T`` flattened, ``S = max |sqrt(n) mean(R) / sd(R)|`` calibrated by a Gaussian multiplier
bootstrap of the max; ``x_hat_i`` = the mean of the generator's ``M`` draws).

Static shapes: folds are index arrays padded to a common size with a 0/1 mask, so every fold (and
every replicate) has the same shapes and the whole test is one jitted, ``vmap``-able function. The
bootstrap's draw axis is sharded over a mesh's ``"data"`` axis when a mesh is given.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from jaxlab.core import sharding
from jaxlab.core.checks import (
    check_array,
    check_bool,
    check_choice,
    check_finite,
    check_int,
    check_key,
    check_real,
    is_concrete,
)
from jaxlab.core.training import map_in_chunks
from jaxlab.stats.cmi_test import kernels as K
from jaxlab.stats.cmi_test.designs import OracleMean
from jaxlab.stats.cmi_test.nuisance import (
    ColumnBlocks,
    GaussianGenerator,
    Generator,
    LinearMean,
    PerturbedGenerator,
    PerturbedRegressor,
    Regressor,
    SoftmaxMean,
    centred_gram,
)

__all__ = [
    "KERNELS",
    "MULTIPLIERS",
    "TESTS",
    "CMIConfig",
    "FoldData",
    "TestResult",
    "bootstrap_draws",
    "cmi_test",
    "compare_tests",
    "cross_fit",
    "fold_indices",
    "fold_matrix",
    "gcm_from_folds",
    "kernel_test_from_folds",
    "replicate_tests",
    "response_blocks",
    "tests_from_folds",
]

TESTS = ("cmi", "naive", "gcm")
KERNELS = ("laplace", "gaussian")
MULTIPLIERS = ("rademacher", "gaussian")


@dataclasses.dataclass(frozen=True)
class CMIConfig:
    """Settings of the test.

    Attributes:
      folds: number of cross-fitting folds ``K`` (contiguous blocks; official default 2).
      num_samples: generator draws ``M`` per evaluation row (official 100).
      num_boot: bootstrap draws ``B`` (official 1000).
      kernel: ``"laplace"`` (official) or ``"gaussian"``, for both ``k_X`` and ``k_Z``.
      multiplier: ``"rademacher"`` (official default) or ``"gaussian"`` bootstrap weights.
    """

    folds: int = 2
    num_samples: int = 100
    num_boot: int = 1000
    kernel: K.Kernel = "laplace"
    multiplier: Literal["rademacher", "gaussian"] = "rademacher"

    def __post_init__(self):
        check_int(self.folds, "folds", minimum=2)  # cross-fitting needs two folds
        check_int(self.num_samples, "num_samples", minimum=1)
        check_int(self.num_boot, "num_boot", minimum=1)
        check_choice(self.kernel, "kernel", KERNELS)
        check_choice(self.multiplier, "multiplier", MULTIPLIERS)


class TestResult(NamedTuple):
    """A test's statistic, its bootstrap p-value, the bootstrap draws ``[B]`` and ``finite``.

    ``finite`` is false when the statistic or a bootstrap draw is NaN / inf (e.g. a singular
    nuisance fit on a constant column); the p-value is then NaN, never a number read as a result.
    """

    statistic: jax.Array
    p_value: jax.Array
    bootstrap: jax.Array
    finite: jax.Array


def _result(stat: jax.Array, boot: jax.Array, tail: jax.Array) -> TestResult:
    """The result with ``p = mean(tail)``, or NaN (``finite`` false) if anything is non-finite."""
    finite = jnp.isfinite(stat) & jnp.all(jnp.isfinite(boot))
    return TestResult(stat, jnp.where(finite, jnp.mean(tail), jnp.nan), boot, finite)


# ---- argument checks (static shapes under jit; values where concrete) ----------------------------


def _check_config(config) -> None:
    if not isinstance(config, CMIConfig):
        raise TypeError(f"`config` must be a CMIConfig, got {type(config).__name__}.")


def _check_mesh(mesh, num_boot: int) -> None:
    if mesh is None:
        return
    if not isinstance(mesh, Mesh):
        raise TypeError(f"`mesh` must be a jax.sharding.Mesh or None, got {type(mesh).__name__}.")
    if sharding.DATA_AXIS not in mesh.axis_names:
        raise ValueError(
            f"`mesh` must have a {sharding.DATA_AXIS!r} axis, got axes {mesh.axis_names}."
        )
    sharding.check_divisible(num_boot, mesh, "config.num_boot")


def _check_mask_rows(mask, name: str) -> None:
    """Every fold of a concrete ``mask [..., n_e]`` marks at least two rows (a U-statistic over
    pairs; one row gives ``T = 0`` and a p-value of 0, read as a rejection)."""
    if is_concrete(mask):
        counts = np.asarray(jax.device_get(mask)).sum(-1).reshape(-1)
        if counts.size and counts.min() < 2:
            raise ValueError(
                f"`{name}` must mark at least 2 rows in every fold, got counts {counts.tolist()}."
            )


def _check_fitter(fitter, name: str, role: str, out_dim: int, dz: int) -> None:
    """``fitter`` is a generator (``fit`` + ``sample``) or a regressor (``fit`` + ``predict``), and
    the arrays of the library's fixed fitters (oracles, known means) fit ``out_dim`` outputs from
    ``dz`` inputs (finite where concrete); wrappers and blocks are checked recursively."""
    method = "sample" if role == "generator" else "predict"
    if not (callable(getattr(fitter, "fit", None)) and callable(getattr(fitter, method, None))):
        raise TypeError(
            f"`{name}` must be a {role} with `fit` and `{method}` methods (see "
            f"jaxlab.stats.cmi_test.nuisance), got {type(fitter).__name__}."
        )
    shapes = {}
    if isinstance(fitter, GaussianGenerator):
        shapes = {"intercept": (out_dim,), "coef": (out_dim, dz), "chol": (out_dim, out_dim)}
    elif isinstance(fitter, LinearMean):
        shapes = {"intercept": (out_dim,), "coef": (out_dim, dz)}
    elif isinstance(fitter, SoftmaxMean):
        shapes = {"weight": (dz, out_dim), "bias": (out_dim,)}
    elif isinstance(fitter, OracleMean):
        if out_dim != 1:
            raise ValueError(f"`{name}` (an OracleMean) predicts one column; `y` has {out_dim}.")
        dx = np.shape(fitter.beta_x)[0] if np.ndim(fitter.beta_x) == 1 else -1
        shapes = {"beta_z": (dz,), "beta_x": (dx,), "coef": (dx, dz), "cond_cov": (dx, dx)}
    elif isinstance(fitter, PerturbedGenerator | PerturbedRegressor):
        _check_fitter(fitter.base, f"{name}.base", role, out_dim, dz)
        direction = getattr(fitter, "direction", None)
        if direction is not None and len(direction) > dz:
            raise ValueError(
                f"`{name}.direction` has {len(direction)} weights but `z` has {dz} columns."
            )
    elif isinstance(fitter, ColumnBlocks):
        if sum(fitter.sizes) != out_dim:
            raise ValueError(
                f"`{name}.sizes` {fitter.sizes} must sum to y's {out_dim} columns, got "
                f"{sum(fitter.sizes)}."
            )
        for i, (reg, size) in enumerate(zip(fitter.regressors, fitter.sizes, strict=True)):
            _check_fitter(reg, f"{name}.regressors[{i}]", role, size, dz)
    for field, shape in shapes.items():
        check_array(getattr(fitter, field), f"{name}.{field}", shape=shape)


def _check_folds(folds, name: str = "folds", *, centred: bool = True) -> None:
    """A :class:`FoldData` with consistent shapes (``x_tilde`` only if ``centred``)."""
    if not isinstance(folds, FoldData):
        raise TypeError(f"`{name}` must be a FoldData (see cross_fit), got {type(folds).__name__}.")
    check_array(folds.x, f"{name}.x", ndim=3)
    k, n, dx = np.shape(folds.x)
    if k < 1 or n < 2 or dx < 1:
        raise ValueError(f"`{name}.x` must be [K, n_e, dx] with n_e >= 2, got {np.shape(folds.x)}.")
    check_array(folds.y, f"{name}.y", ndim=3)
    check_array(folds.y, f"{name}.y", shape=(k, n, None), dims="[K, n_e, dy]")
    check_array(folds.m_hat, f"{name}.m_hat", shape=np.shape(folds.y), dims="[K, n_e, dy]")
    check_array(folds.z, f"{name}.z", ndim=3)
    check_array(folds.z, f"{name}.z", shape=(k, n, None), dims="[K, n_e, dz]")
    if centred:
        check_array(folds.x_tilde, f"{name}.x_tilde", ndim=4)
        check_array(
            folds.x_tilde, f"{name}.x_tilde", shape=(k, n, None, dx), dims="[K, n_e, M, dx]"
        )
    check_array(folds.mask, f"{name}.mask", shape=(k, n), dims="[K, n_e]", kind="bool")
    _check_mask_rows(folds.mask, f"{name}.mask")


class FoldData(NamedTuple):
    """Evaluation rows of every fold with their fitted nuisances (leading axis ``K``).

    ``x [K, n_e, dx]``, ``x_tilde [K, n_e, M, dx]``, ``y [K, n_e, dy]``, ``m_hat [K, n_e, dy]``,
    ``z [K, n_e, dz]``, ``mask [K, n_e]`` (``n_e`` = the largest fold; padded rows masked out).
    """

    x: jax.Array
    x_tilde: jax.Array
    y: jax.Array
    m_hat: jax.Array
    z: jax.Array
    mask: jax.Array


def fold_indices(n: int, folds: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Contiguous folds as padded index arrays (NumPy, static).

    Fold sizes follow ``np.array_split`` (the first ``n % folds`` folds get one more row).

    Returns:
      ``(eval_idx [K, n_e], eval_mask [K, n_e], train_idx [K, n_t], train_mask [K, n_t])`` with
      ``n_e = ceil(n / K)`` and ``n_t = n - floor(n / K)``; padded slots hold index 0, mask False.
    """
    folds = check_int(folds, "folds", minimum=2)
    n = check_int(n, "n", minimum=1)
    if n < 2 * folds:
        raise ValueError(
            f"`n` must be >= 2 * `folds` = {2 * folds} (two rows per fold), got n = {n}."
        )
    blocks = np.array_split(np.arange(n), folds)
    n_e, n_t = -(-n // folds), n - n // folds
    eval_idx = np.zeros((folds, n_e), np.int32)
    eval_mask = np.zeros((folds, n_e), bool)
    train_idx = np.zeros((folds, n_t), np.int32)
    train_mask = np.zeros((folds, n_t), bool)
    for k, block in enumerate(blocks):
        rest = np.setdiff1d(np.arange(n), block)
        eval_idx[k, : len(block)], eval_mask[k, : len(block)] = block, True
        train_idx[k, : len(rest)], train_mask[k, : len(rest)] = rest, True
    return eval_idx, eval_mask, train_idx, train_mask


def cross_fit(
    x, y, z, key, generator: Generator, regressor: Regressor, config: CMIConfig
) -> FoldData:
    """Fit both nuisances on each fold's complement (``vmap`` over folds) and evaluate on the fold.

    The fitters see only the complement's rows (gathered, with 0/1 weights for padding), so fold
    ``k``'s nuisances never see fold ``k``. Arrays must already be 2-D (see :func:`cmi_test`).
    """
    _check_config(config)
    for a, name in ((x, "x"), (y, "y"), (z, "z")):
        check_array(a, name, ndim=2)
        if np.shape(a)[1] < 1:
            raise ValueError(f"`{name}` must have at least one column, got shape {np.shape(a)}.")
    if not np.shape(x)[0] == np.shape(y)[0] == np.shape(z)[0]:
        raise ValueError(
            f"`x`, `y` and `z` sample counts differ: {np.shape(x)}, {np.shape(y)}, {np.shape(z)}."
        )
    key = check_key(key, "key")
    _check_fitter(generator, "generator", "generator", np.shape(x)[1], np.shape(z)[1])
    _check_fitter(regressor, "regressor", "regressor", np.shape(y)[1], np.shape(z)[1])
    eval_idx, eval_mask, train_idx, train_mask = fold_indices(x.shape[0], config.folds)
    w = jnp.asarray(train_mask, x.dtype)
    k_gen, k_reg, k_smp = jax.random.split(key, 3)
    kf = config.folds
    g_params = jax.vmap(generator.fit)(jax.random.split(k_gen, kf), x[train_idx], z[train_idx], w)
    r_params = jax.vmap(regressor.fit)(jax.random.split(k_reg, kf), y[train_idx], z[train_idx], w)
    z_eval = z[eval_idx]
    sample = functools.partial(generator.sample, num_samples=config.num_samples)
    x_tilde = jax.vmap(sample)(g_params, jax.random.split(k_smp, kf), z_eval)
    m_hat = jax.vmap(regressor.predict)(r_params, z_eval)
    return FoldData(x[eval_idx], x_tilde, y[eval_idx], m_hat, z_eval, jnp.asarray(eval_mask))


def response_blocks(folds: FoldData, sizes: Sequence[int]) -> tuple[FoldData, ...]:
    """Split fitted folds by blocks of the response's columns (widths ``sizes``).

    Block ``i`` keeps ``x``, ``x_tilde``, ``z`` and ``mask`` and takes columns ``[e_i, e_{i+1})``
    of ``y`` and ``m_hat`` (``e = cumsum((0, *sizes))``): several responses tested on one
    generator fit, e.g. with a :class:`~jaxlab.stats.cmi_test.nuisance.ColumnBlocks` regressor.
    """
    if isinstance(sizes, str) or not isinstance(sizes, Sequence):
        raise TypeError(f"`sizes` must be a sequence of ints, got {sizes!r}.")
    for i, size in enumerate(sizes):
        check_int(size, f"sizes[{i}]", minimum=1)
    if not isinstance(folds, FoldData):
        raise TypeError(f"`folds` must be a FoldData (see cross_fit), got {type(folds).__name__}.")
    check_array(folds.y, "folds.y", ndim=3)
    check_array(folds.m_hat, "folds.m_hat", shape=np.shape(folds.y))
    edges = np.cumsum((0, *sizes))
    if len(sizes) == 0 or min(sizes) < 1 or edges[-1] != folds.y.shape[-1]:
        raise ValueError(
            f"`sizes` must be positive widths summing to y's {folds.y.shape[-1]} columns, "
            f"got {tuple(sizes)}."
        )
    return tuple(
        folds._replace(y=folds.y[..., a:b], m_hat=folds.m_hat[..., a:b])
        for a, b in zip(edges[:-1], edges[1:], strict=True)
    )


def fold_matrix(
    x, x_tilde, y, m_hat, z, mask, kernel: K.Kernel = "laplace", centred: bool = True
) -> jax.Array:
    """``F = U * V * W`` of one fold, zero on the diagonal and on padded rows; ``[n_e, n_e]``.

    ``centred=False`` gives the naive statistic's ``U = k(x, x)`` (``x_tilde`` unused).
    """
    check_choice(kernel, "kernel", KERNELS)
    check_bool(centred, "centred")
    check_array(x, "x", ndim=2)
    n, dx = np.shape(x)
    if n < 2 or dx < 1:
        raise ValueError(f"`x` must be [n, dx] with n >= 2 and dx >= 1, got shape {np.shape(x)}.")
    if centred:
        check_array(x_tilde, "x_tilde", ndim=3)
        check_array(x_tilde, "x_tilde", shape=(n, None, dx), dims="[n, M, dx]")
    check_array(y, "y", ndim=2)
    check_array(y, "y", shape=(n, None), dims="[n, dy]")
    check_array(m_hat, "m_hat", shape=np.shape(y), dims="[n, dy]")
    check_array(z, "z", ndim=2)
    check_array(z, "z", shape=(n, None), dims="[n, dz]")
    check_array(mask, "mask", shape=(n,), dims="[n]", kind="bool")
    _check_mask_rows(mask, "mask")
    xs, zs = K.standardise(x, mask), K.standardise(z, mask)
    _, y_sd = K.masked_moments(y, mask)
    r = (y - m_hat) / y_sd[None, :]
    dx = K.pairwise_distance(xs, xs, kernel)
    bw_x = K.median_bandwidth(dx, mask, kernel)
    kxx = K.kernel_from_distance(dx, bw_x)
    if centred:
        u = centred_gram(xs, x_tilde, bw_x, kernel, kxx=kxx, standardise_mask=mask)
    else:
        u = kxx
    dz = K.pairwise_distance(zs, zs, kernel)
    wz = K.kernel_from_distance(dz, K.median_bandwidth(dz, mask, kernel))
    n = x.shape[0]
    pair = mask[:, None] & mask[None, :] & ~jnp.eye(n, dtype=bool)
    return jnp.where(pair, u * (r @ r.T) * wz, 0.0)


def bootstrap_draws(
    f: jax.Array, mask: jax.Array, key: jax.Array, config: CMIConfig, mesh: Mesh | None = None
) -> tuple[jax.Array, jax.Array]:
    """Fold statistics and multiplier-bootstrap draws, combined over folds.

    Args:
      f: ``[K, n_e, n_e]`` fold matrices; mask: ``[K, n_e]``.
      key: multiplier key; mesh: shards the ``B`` draws over its ``"data"`` axis (``None``: no
        constraint; ``B`` must be a multiple of the device count).

    Returns:
      ``(T, T_boot [B])`` with ``T = mean_k T_k`` and ``T_boot = mean_k e_k^T F_k e_k / (n_k - 1)``.
    """
    _check_config(config)
    check_array(f, "f", ndim=3)
    if np.shape(f)[1] != np.shape(f)[2]:
        raise ValueError(f"`f` must be [K, n_e, n_e] fold matrices, got shape {np.shape(f)}.")
    check_array(mask, "mask", shape=np.shape(f)[:2], dims="[K, n_e]", kind="bool")
    _check_mask_rows(mask, "mask")
    key = check_key(key, "key")
    _check_mesh(mesh, config.num_boot)
    kf, n_e, _ = f.shape
    shape = (kf, config.num_boot, n_e)
    if config.multiplier == "rademacher":
        e = jax.random.rademacher(key, shape, f.dtype)
    else:
        e = jax.random.normal(key, shape, f.dtype)
    e = sharding.constrain_batch(e, mesh, axis=1)
    denom = jnp.maximum(mask.sum(-1).astype(f.dtype) - 1.0, 1.0)  # [K]
    t_k = f.sum((1, 2)) / denom
    quad = jnp.sum(jnp.einsum("kbi,kij->kbj", e, f) * e, -1) / denom[:, None]  # [K, B]
    return t_k.mean(), quad.mean(0)


def kernel_test_from_folds(
    folds: FoldData, key, config: CMIConfig, centred: bool = True, mesh: Mesh | None = None
) -> TestResult:
    """The centred (``"cmi"``) or naive kernel test from fitted folds (``p_value`` NaN and
    ``finite`` false if the statistic or a draw is not finite)."""
    _check_config(config)
    check_bool(centred, "centred")
    _check_folds(folds, centred=centred)
    key = check_key(key, "key")
    f = jax.vmap(functools.partial(fold_matrix, kernel=config.kernel, centred=centred))(*folds)
    t, boot = bootstrap_draws(f, folds.mask, key, config, mesh)
    return _result(t, boot, boot > t)


def gcm_from_folds(folds: FoldData, key, num_boot: int) -> TestResult:
    """Shah and Peters' GCM with max-|t| statistic and Gaussian-multiplier calibration.

    ``R_i = vec((x_i - x_hat_i)(y_i - m_hat_i)^T)`` pooled over every fold's rows;
    ``S = max_j |sqrt(n) mean_i R_ij / sd_j|``; draws ``max_j |n^{-1/2} sum_i e_i (R_ij - mean_j) /
    sd_j|`` with ``e ~ N(0, 1)``; ``p = mean(draws >= S)`` (NaN if anything is not finite).
    """
    _check_folds(folds)
    key = check_key(key, "key")
    num_boot = check_int(num_boot, "num_boot", minimum=1)
    x_hat = folds.x_tilde.mean(-2)
    rx = folds.x - x_hat  # [K, n_e, dx]
    ry = folds.y - folds.m_hat  # [K, n_e, dy]
    r = (rx[..., :, None] * ry[..., None, :]).reshape(-1, rx.shape[-1] * ry.shape[-1])
    w = folds.mask.reshape(-1).astype(r.dtype)[:, None]
    n = jnp.maximum(w.sum(), 2.0)
    mean = (w * r).sum(0) / n
    sd = jnp.sqrt((w * (r - mean[None, :]) ** 2).sum(0) / (n - 1.0) + 1e-30)
    stat = jnp.max(jnp.abs(jnp.sqrt(n) * mean / sd))
    rn = w * (r - mean[None, :]) / sd[None, :]
    e = jax.random.normal(key, (num_boot, r.shape[0]), r.dtype)
    boot = jnp.max(jnp.abs(e @ rn), -1) / jnp.sqrt(n)
    return _result(stat, boot, boot >= stat)


def tests_from_folds(
    folds: FoldData,
    k_boot: jax.Array,
    k_gcm: jax.Array,
    config: CMIConfig,
    tests: Sequence[str] = TESTS,
    mesh: Mesh | None = None,
) -> dict[str, TestResult]:
    """The ``tests`` on fitted folds: ``"cmi"`` and ``"naive"`` share the multipliers drawn from
    ``k_boot`` (a paired comparison); ``"gcm"`` draws its own from ``k_gcm``."""
    _check_config(config)
    tests = _check_tests(tests)
    k_boot, k_gcm = check_key(k_boot, "k_boot"), check_key(k_gcm, "k_gcm")
    out = {}
    for name in tests:
        if name == "gcm":
            out[name] = gcm_from_folds(folds, k_gcm, config.num_boot)
        else:
            out[name] = kernel_test_from_folds(folds, k_boot, config, name == "cmi", mesh)
    return out


def _tests_core(x, y, z, key, generator, regressor, config, tests, mesh):
    k_fit, k_boot, k_gcm = jax.random.split(key, 3)
    folds = cross_fit(x, y, z, k_fit, generator, regressor, config)
    return tests_from_folds(folds, k_boot, k_gcm, config, tests, mesh)


_jit_core = jax.jit(_tests_core, static_argnames=("config", "tests", "mesh"))


def _check_tests(tests: Sequence[str]) -> tuple[str, ...]:
    if isinstance(tests, str) or not isinstance(tests, Sequence):
        raise ValueError(f"`tests` must be a non-empty subset of {TESTS}, got {tests!r}.")
    tests = tuple(tests)
    bad = [t for t in tests if t not in TESTS]
    if bad or not tests:
        raise ValueError(f"`tests` must be a non-empty subset of {TESTS}, got {tests}.")
    return tests


def _check_data(x, y, z, config: CMIConfig, *, batched: bool):
    """Float arrays ``[n, d]`` (``[R, n, d]`` if ``batched``; a missing ``d`` axis is added)."""
    _check_config(config)
    names = ("xs", "ys", "zs") if batched else ("x", "y", "z")
    lead = 2 if batched else 1
    shape_text = "[R, n] or [R, n, d]" if batched else "[n] or [n, d]"
    arrays = []
    for a, name in zip((x, y, z), names, strict=True):
        if isinstance(a, bool | np.bool_):
            raise TypeError(f"`{name}` must be a float array {shape_text}, got the bool {a!r}.")
        check_real(a, name)
        a = jnp.asarray(a)
        if a.ndim == lead:
            a = a[..., None]
        if a.ndim != lead + 1:
            raise ValueError(f"`{name}` must be {shape_text}, got shape {a.shape}.")
        if a.shape[-1] < 1:
            raise ValueError(f"`{name}` must have at least one column, got shape {a.shape}.")
        if not jnp.issubdtype(a.dtype, jnp.floating):
            a = a.astype(jnp.result_type(float))
        check_finite(a, name)
        arrays.append(a)
    shapes = {name: a.shape[:lead] for a, name in zip(arrays, names, strict=True)}
    if len(set(shapes.values())) != 1:
        raise ValueError(
            f"sample counts differ: {shapes}; `{names[0]}`, `{names[1]}` and `{names[2]}` need "
            f"the same rows."
        )
    n = arrays[0].shape[lead - 1]
    if n < 2 * config.folds:
        raise ValueError(
            f"`{names[0]}`, `{names[1]}` and `{names[2]}` need at least 2 rows per fold: n = {n} "
            f"< 2 * folds = {2 * config.folds}."
        )
    if batched and arrays[0].shape[0] < 1:
        raise ValueError(f"`xs` must hold at least one replicate, got shape {arrays[0].shape}.")
    return arrays


def _check_nuisances(generator, regressor, x, y, z) -> None:
    """The fitters against the data's widths (``x``, ``y``, ``z`` already checked, ``[..., d]``)."""
    _check_fitter(generator, "generator", "generator", x.shape[-1], z.shape[-1])
    _check_fitter(regressor, "regressor", "regressor", y.shape[-1], z.shape[-1])


def compare_tests(
    x,
    y,
    z,
    key: jax.Array,
    *,
    generator: Generator,
    regressor: Regressor,
    config: CMIConfig = CMIConfig(),
    tests: Sequence[str] = TESTS,
    mesh: Mesh | None = None,
) -> dict[str, TestResult]:
    """Run ``tests`` (``"cmi"``, ``"naive"``, ``"gcm"``) on the same cross-fitted nuisances.

    Args:
      x: ``[n, dx]`` (or ``[n]``) the tested block; y: ``[n, dy]`` the response; z: ``[n, dz]``.
      key: PRNG key (nuisance fits, generator draws, bootstrap multipliers).
      generator, regressor: nuisance fitters (:mod:`jaxlab.stats.cmi_test.nuisance`).
      config: :class:`CMIConfig`.
      mesh: shard the bootstrap draws over this mesh's ``"data"`` axis.

    Returns:
      ``{test: TestResult}``; ``p_value`` is the bootstrap p-value (reject when ``p < alpha``),
      NaN with ``finite = False`` if the statistic or a draw is not finite.

    Raises:
      ValueError / TypeError: mismatched row counts, non-finite inputs, too few rows, unknown
        tests, a bad key, fitters or fixed nuisances of the wrong widths, a bad config or mesh.
    """
    tests = _check_tests(tests)
    x, y, z = _check_data(x, y, z, config, batched=False)
    key = check_key(key, "key")
    _check_nuisances(generator, regressor, x, y, z)
    _check_mesh(mesh, config.num_boot)
    return _jit_core(x, y, z, key, generator, regressor, config, tests, mesh)


def cmi_test(
    x,
    y,
    z,
    key: jax.Array,
    *,
    generator: Generator,
    regressor: Regressor,
    config: CMIConfig = CMIConfig(),
    mesh: Mesh | None = None,
) -> TestResult:
    """The conditional mean independence test of ``H0: E[Y | X, Z] = E[Y | Z]``.

    See the module docstring for the statistic; arguments as in :func:`compare_tests`.

    Returns:
      ``TestResult(statistic T, p_value, bootstrap [B], finite)``.

    Example::

        gen, reg = LinearGaussianGenerator(), RidgeRegressor()
        res = cmi_test(x, y, z, jax.random.key(0), generator=gen, regressor=reg)
        reject = res.p_value < 0.05
    """
    out = compare_tests(
        x, y, z, key, generator=generator, regressor=regressor, config=config, tests=("cmi",),
        mesh=mesh,
    )  # fmt: skip
    return out["cmi"]


@functools.partial(jax.jit, static_argnames=("config", "tests"))
def _replicates(xs, ys, zs, keys, generator, regressor, config, tests):
    def one(x, y, z, k):
        return _tests_core(x, y, z, k, generator, regressor, config, tests, None)

    return jax.vmap(one)(xs, ys, zs, keys)


def replicate_tests(
    xs,
    ys,
    zs,
    keys: jax.Array,
    *,
    generator: Generator,
    regressor: Regressor,
    config: CMIConfig = CMIConfig(),
    tests: Sequence[str] = TESTS,
    batch_size: int | None = None,
) -> dict[str, TestResult]:
    """:func:`compare_tests` over ``R`` independent data sets in one jitted call.

    Replicates are ``vmap``ped in groups of ``batch_size``
    (:func:`jaxlab.core.training.map_in_chunks`, called from the host: a ``lax.map`` over chunks
    with LAPACK solves in the nuisance fits deadlocked on XLA:CPU, jaxlib 0.10, at n = 400,
    d = 25 + 25, M = 100; ``None`` = all at once), which bounds memory when the nuisances are
    networks trained per replicate and fold.

    Args:
      xs, ys, zs: ``[R, n, d]`` (or ``[R, n]``); keys: ``[R]`` keys.

    Returns:
      ``{test: TestResult}`` with a leading replicate axis on every field.
    """
    tests = _check_tests(tests)
    xs, ys, zs = _check_data(xs, ys, zs, config, batched=True)
    keys = check_key(keys, "keys", batched=True)
    if keys.shape != (xs.shape[0],):
        raise ValueError(f"`keys` must be [R] = ({xs.shape[0]},) keys, got shape {keys.shape}.")
    _check_nuisances(generator, regressor, xs, ys, zs)
    if batch_size is not None:
        check_int(batch_size, "batch_size", minimum=1)
    fn = functools.partial(
        _replicates, generator=generator, regressor=regressor, config=config, tests=tests
    )
    return map_in_chunks(fn, (xs, ys, zs, keys), batch_size)

"""cmi_test: bad input at every public entry point gives a clear error naming the argument, and a
non-finite statistic gives a NaN p-value flagged ``finite = False``, never a number.

One table: (entry point, argument, bad value, exception type, message fragment). Each case starts
from a tiny valid call of its entry point (``VALID``) and replaces one argument, so the error must
come from that argument; every error is raised before anything compiles.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.stats import cmi_test as C

NAN, INF = float("nan"), float("inf")
V, T = ValueError, TypeError
RNG = np.random.default_rng(0)
N, DX, DY, DZ = 8, 2, 1, 2
X = RNG.normal(size=(N, DX)).astype(np.float32)
Y = RNG.normal(size=(N, DY)).astype(np.float32)
Z = RNG.normal(size=(N, DZ)).astype(np.float32)
KEY = np.zeros(2, np.uint32)  # a legacy key: no program runs to make it
KEYS = np.zeros((3, 2), np.uint32)
TINY = C.CMIConfig(num_samples=2, num_boot=8)
GEN, REG = C.LinearGaussianGenerator(), C.RidgeRegressor()
NUIS = dict(generator=GEN, regressor=REG, config=TINY)
K_E, M = 2, 2  # folds and draws of the hand-built fold data
FOLDS = C.FoldData(
    x=RNG.normal(size=(K_E, 4, DX)).astype(np.float32),
    x_tilde=RNG.normal(size=(K_E, 4, M, DX)).astype(np.float32),
    y=RNG.normal(size=(K_E, 4, DY)).astype(np.float32),
    m_hat=np.zeros((K_E, 4, DY), np.float32),
    z=RNG.normal(size=(K_E, 4, DZ)).astype(np.float32),
    mask=np.ones((K_E, 4), bool),
)
FOLD = {name: np.asarray(v[0]) for name, v in FOLDS._asdict().items()}  # one fold
ORACLE = C.GaussianGenerator(np.zeros(DX), np.zeros((DX, DZ)), np.eye(DX))
SOFTMAX_DZ3 = C.SoftmaxMean(np.zeros((3, 1)), np.zeros(1))  # a known mean for dz = 3, not DZ
LONG_DIRECTION = C.PerturbedRegressor(REG, 1.0, (1.0,) * 3)  # 3 weights, DZ = 2 columns
DESIGN = C.gaussian_design("h0", dz=3, dx=5)  # an oracle for dz = 3, not DZ


def design_sample(key, n):
    return DESIGN.sample(key, n)


# the fitters' methods (what a cross-fit calls per fold), on tiny data
def ridge_fit(key, y, z, w):
    return REG.fit(key, y, z, w)


def ridge_predict(params, z):
    return REG.predict(params, z)


def linear_gaussian_fit(key, x, z, w):
    return GEN.fit(key, x, z, w)


def linear_gaussian_sample(params, key, z, num_samples):
    return GEN.sample(params, key, z, num_samples)


def gmmn_fit(key, x, z, w):
    return C.GMMNGenerator(hidden=2, noise_dim=1, steps=1, train_samples=1).fit(key, x, z, w)


METHODS = {design_sample, ridge_fit, ridge_predict, linear_gaussian_fit, linear_gaussian_sample,
           gmmn_fit}  # fmt: skip
FIT = dict(key=KEY, z=Z, w=np.ones(N, np.float32))
GAUSS = C.GaussianConditional(np.zeros(DX), np.zeros((DX, DZ)), np.eye(DX))


VALID = {
    C.CMIConfig: {},
    C.GMMNGenerator: {},
    C.MLPRegressor: {},
    C.SoftmaxRegressor: {},
    C.RidgeRegressor: {},
    C.LinearGaussianGenerator: {},
    C.PerturbedRegressor: dict(base=REG, amplitude=0.5),
    C.PerturbedGenerator: dict(base=GEN, amplitude=0.5),
    C.ColumnBlocks: dict(regressors=(REG, REG), sizes=(1, 1)),
    C.gaussian_design: dict(setting="h0", dz=2, dx=5),
    design_sample: dict(key=KEY, n=4),
    ridge_fit: dict(y=Y, **FIT),
    ridge_predict: dict(params=(np.zeros(DY), np.zeros((DY, DZ))), z=Z),
    linear_gaussian_fit: dict(x=X, **FIT),
    linear_gaussian_sample: dict(params=GAUSS, key=KEY, z=Z, num_samples=2),
    gmmn_fit: dict(x=X, **FIT),
    C.fold_indices: dict(n=8, folds=2),
    C.cmi_test: dict(x=X, y=Y, z=Z, key=KEY, **NUIS),
    C.compare_tests: dict(x=X, y=Y, z=Z, key=KEY, **NUIS),
    C.replicate_tests: dict(
        xs=np.stack([X] * 3), ys=np.stack([Y] * 3), zs=np.stack([Z] * 3), keys=KEYS, **NUIS
    ),
    C.cross_fit: dict(x=X, y=Y, z=Z, key=KEY, **NUIS),
    C.fold_matrix: dict(FOLD),
    C.bootstrap_draws: dict(
        f=np.zeros((K_E, 4, 4), np.float32), mask=FOLDS.mask, key=KEY, config=TINY
    ),
    C.kernel_test_from_folds: dict(folds=FOLDS, key=KEY, config=TINY),
    C.gcm_from_folds: dict(folds=FOLDS, key=KEY, num_boot=8),
    C.tests_from_folds: dict(folds=FOLDS, k_boot=KEY, k_gcm=KEY, config=TINY),
    C.response_blocks: dict(folds=FOLDS, sizes=(1,)),
    C.centred_gram: dict(x=FOLD["x"], xt=FOLD["x_tilde"], bandwidth=1.0, kernel="laplace"),
    C.conditional_mmd: dict(
        x=FOLD["x"],
        xt=FOLD["x_tilde"],
        z=FOLD["z"],
        w=np.ones(4),
        bandwidth_x=1.0,
        bandwidth_z=1.0,
        kernel="gaussian",
    ),  # fmt: skip
}

CASES = [
    # ---- configs and fitters: every field checked on construction, named
    (C.CMIConfig, "folds", 1, V, "`folds` must be >= 2"),
    (C.CMIConfig, "folds", 2.5, V, "`folds` must be an int"),
    (C.CMIConfig, "folds", True, V, "`folds` must be an int"),
    (C.CMIConfig, "num_samples", 0, V, "`num_samples`"),
    (C.CMIConfig, "num_boot", -1, V, "`num_boot`"),
    (C.CMIConfig, "num_boot", 2.5, V, "`num_boot`"),
    (C.CMIConfig, "kernel", "rbf", V, "`kernel`"),
    (C.CMIConfig, "multiplier", "normal", V, "`multiplier`"),
    (C.GMMNGenerator, "hidden", 0, V, "`hidden`"),
    (C.GMMNGenerator, "noise_dim", 0, V, "`noise_dim`"),
    (C.GMMNGenerator, "noise_std", 0.0, V, "`noise_std`"),
    (C.GMMNGenerator, "slope", NAN, V, "`slope`"),
    (C.GMMNGenerator, "slope", "a", T, "`slope`"),
    (C.GMMNGenerator, "dropout", 1.5, V, "`dropout`"),
    (C.GMMNGenerator, "steps", -1, V, "`steps`"),
    (C.GMMNGenerator, "train_samples", 0, V, "`train_samples`"),
    (C.GMMNGenerator, "batch_size", 0, V, "`batch_size`"),
    (C.GMMNGenerator, "batching", "x", V, "`batching`"),
    (C.GMMNGenerator, "lr", -1.0, V, "`lr`"),
    (C.GMMNGenerator, "lr", [0.1], V, "`lr` must be a scalar"),
    (C.GMMNGenerator, "b1", 1.0, V, "`b1`"),
    (C.GMMNGenerator, "b2", -0.1, V, "`b2`"),
    (C.GMMNGenerator, "weight_decay", -1.0, V, "`weight_decay`"),
    (C.GMMNGenerator, "decay", "adamw", V, "`decay`"),
    (C.GMMNGenerator, "clip", 0.0, V, "`clip`"),
    (C.GMMNGenerator, "lambda_l1", -1.0, V, "`lambda_l1`"),
    (C.GMMNGenerator, "standardise", "yes", V, "`standardise`"),
    (C.MLPRegressor, "hidden", 2.5, V, "`hidden`"),
    (C.MLPRegressor, "l1", -1.0, V, "`l1`"),
    (C.MLPRegressor, "lr", 0.0, V, "`lr`"),
    (C.MLPRegressor, "dropout", -0.1, V, "`dropout`"),
    (C.SoftmaxRegressor, "l2", -1.0, V, "`l2`"),
    (C.SoftmaxRegressor, "steps", -1, V, "`steps`"),
    (C.SoftmaxRegressor, "lr", "a", T, "`lr`"),
    (C.SoftmaxRegressor, "standardise", 1, V, "`standardise`"),
    (C.RidgeRegressor, "alpha", -1.0, V, "`alpha`"),
    (C.RidgeRegressor, "alpha", NAN, V, "`alpha`"),
    (C.RidgeRegressor, "alpha", None, T, "`alpha`"),
    (C.LinearGaussianGenerator, "ridge", -1.0, V, "`ridge`"),
    (C.LinearGaussianGenerator, "jitter", -1e-3, V, "`jitter`"),
    (C.LinearGaussianGenerator, "jitter", INF, V, "`jitter`"),
    (C.PerturbedRegressor, "amplitude", NAN, V, "`amplitude`"),
    (C.PerturbedRegressor, "amplitude", "a", T, "`amplitude`"),
    (C.PerturbedRegressor, "direction", (), V, "`direction`"),
    (C.PerturbedRegressor, "direction", (1.0, NAN), V, "`direction[1]`"),
    (C.PerturbedRegressor, "direction", [1.0], V, "`direction`"),
    (C.PerturbedGenerator, "amplitude", INF, V, "`amplitude`"),
    (C.ColumnBlocks, "sizes", (), V, "`sizes`"),
    (C.ColumnBlocks, "sizes", (1, 0), V, "`sizes[1]`"),
    (C.ColumnBlocks, "sizes", (1, 2.5), V, "`sizes[1]`"),
    (C.ColumnBlocks, "sizes", [1, 1], V, "`sizes`"),
    (C.ColumnBlocks, "regressors", (REG,), V, "`regressors` and `sizes`"),
    # ---- designs
    (C.gaussian_design, "setting", "a3", V, "`setting`"),
    (C.gaussian_design, "dz", 1, V, "`dz`"),
    (C.gaussian_design, "dz", 2.5, V, "`dz`"),
    (C.gaussian_design, "dx", 4, V, "`dx`"),
    (C.gaussian_design, "rho", 1.0, V, "`rho`"),
    (C.gaussian_design, "rho", NAN, V, "`rho`"),
    (C.gaussian_design, "dtype", jnp.int32, T, "`dtype`"),
    (C.gaussian_design, "dtype", "abc", T, "`dtype`"),
    (design_sample, "key", 0, V, "`key` must be a PRNG key"),
    (design_sample, "key", np.zeros(2, np.float32), V, "`key` must be a PRNG key"),
    (design_sample, "key", np.zeros(3, np.uint32), V, "`key` must be a PRNG key"),
    (design_sample, "n", 0, V, "`n`"),
    (design_sample, "n", 2.5, V, "`n`"),
    (ridge_fit, "y", Y[:, 0], V, "`y` must have rank 2"),
    (ridge_fit, "y", np.where(Y > 0, NAN, Y), V, "`y` must be finite"),
    (ridge_fit, "z", Z[:-1], V, "`z` must have shape"),
    (ridge_fit, "w", np.ones(3), V, "`w` must have shape"),
    (ridge_predict, "z", np.zeros((4, 3)), V, "`z` must have shape"),  # params for dz = 2
    (linear_gaussian_fit, "x", "abc", T, "`x`"),
    (linear_gaussian_fit, "z", Z[:, :, None], V, "`z` must have rank 2"),
    (linear_gaussian_sample, "num_samples", 0, V, "`num_samples`"),
    (linear_gaussian_sample, "num_samples", 2.5, V, "`num_samples`"),
    (linear_gaussian_sample, "key", 3, V, "`key` must be a PRNG key"),
    (linear_gaussian_sample, "z", np.zeros((4, 5)), V, "`z` must have shape"),
    (gmmn_fit, "key", np.zeros(3, np.uint32), V, "`key` must be a PRNG key"),
    (gmmn_fit, "x", X[:3], V, "`z` must have shape"),
    # ---- the test: data, key, nuisances, config, mesh
    (C.fold_indices, "n", 3, V, "`n` must be >= 2 * `folds`"),
    (C.fold_indices, "n", 2.5, V, "`n` must be an int"),
    (C.fold_indices, "folds", 1, V, "`folds`"),
    (C.fold_indices, "folds", "2", V, "`folds`"),
    (C.cmi_test, "x", "abc", T, "`x`"),
    (C.cmi_test, "x", None, T, "`x`"),
    (C.cmi_test, "x", True, T, "`x`"),
    (C.cmi_test, "x", X > 0, T, "`x`"),
    (C.cmi_test, "x", X[:, :, None], V, "`x` must be [n] or [n, d]"),
    (C.cmi_test, "x", np.where(X > 1, NAN, X), V, "`x` must be finite"),
    (C.cmi_test, "x", np.zeros((N, 0), np.float32), V, "`x` must have at least one column"),
    (C.cmi_test, "y", Y[:-1], V, "sample counts differ"),
    (C.cmi_test, "z", np.where(Z > 1, INF, Z), V, "`z` must be finite"),
    (C.cmi_test, "key", 0, V, "`key` must be a PRNG key"),
    (C.cmi_test, "key", np.zeros(2, np.float32), V, "`key` must be a PRNG key"),
    (C.cmi_test, "key", np.zeros(3, np.uint32), V, "`key` must be a PRNG key"),
    (C.cmi_test, "generator", REG, T, "`generator` must be a generator"),
    (C.cmi_test, "regressor", GEN, T, "`regressor` must be a regressor"),
    (C.cmi_test, "generator", ORACLE.replace(coef=np.zeros((3, DZ))), V, "`generator.coef`"),
    (C.cmi_test, "generator", ORACLE.replace(chol=np.full((2, 2), NAN)), V, "`generator.chol`"),
    (C.cmi_test, "regressor", C.LinearMean(np.zeros(2), np.zeros((2, DZ))), V, "`regressor."),
    (C.cmi_test, "regressor", SOFTMAX_DZ3, V, "`regressor.weight`"),
    (C.cmi_test, "regressor", C.ColumnBlocks((REG, REG), (1, 1)), V, "`regressor.sizes`"),
    (C.cmi_test, "regressor", LONG_DIRECTION, V, "`regressor.direction`"),
    (C.cmi_test, "regressor", DESIGN.oracle_mean(), V, "`regressor.beta_z`"),
    (C.cmi_test, "config", {"folds": 2}, T, "`config` must be a CMIConfig"),
    (C.cmi_test, "mesh", "data", T, "`mesh`"),
    (C.compare_tests, ("x", "y", "z"), (X[:3], Y[:3], Z[:3]), V, "at least 2 rows per fold"),
    (C.compare_tests, "tests", ("kci",), V, "`tests`"),
    (C.compare_tests, "tests", "cmi", V, "`tests`"),
    (C.compare_tests, "tests", (), V, "`tests`"),
    (C.replicate_tests, "keys", KEY, V, "`keys` must be [R]"),
    (C.replicate_tests, "keys", KEYS[:2], V, "`keys` must be [R]"),  # keys for another R
    (C.replicate_tests, "keys", 3, V, "`keys` must be a PRNG key"),
    (C.replicate_tests, "xs", np.zeros((3, N, DX, 1)), V, "`xs` must be [R, n] or [R, n, d]"),
    (C.replicate_tests, "xs", np.full((3, N, DX), NAN), V, "`xs` must be finite"),
    (C.replicate_tests, "batch_size", 0, V, "`batch_size`"),
    (C.cross_fit, "x", X[:, 0], V, "`x` must have rank 2"),
    (C.cross_fit, "y", Y[:-1], V, "sample counts differ"),
    (C.cross_fit, "key", 1.5, V, "`key` must be a PRNG key"),
    (C.cross_fit, "config", "tiny", T, "`config`"),
    (C.cross_fit, "generator", object(), T, "`generator`"),
    # ---- the pieces: fold matrices, bootstrap, tests from fitted folds, kernels
    (C.fold_matrix, "kernel", "rbf", V, "`kernel`"),
    (C.fold_matrix, "centred", "yes", T, "`centred`"),
    (C.fold_matrix, "x", FOLD["x"][:, 0], V, "`x` must have rank 2"),
    (C.fold_matrix, "x_tilde", FOLD["x_tilde"][..., :1], V, "`x_tilde` must have shape"),
    (C.fold_matrix, "m_hat", np.zeros((4, 2)), V, "`m_hat` must have shape"),
    (C.fold_matrix, "z", np.zeros((3, DZ)), V, "`z` must have shape"),
    (C.fold_matrix, "mask", np.ones(4), T, "`mask` must be an array of bool"),
    (C.fold_matrix, "mask", np.ones(3, bool), V, "`mask` must have shape"),
    (C.fold_matrix, "y", np.full((4, 1), NAN), V, "`y` must be finite"),
    (C.fold_matrix, "mask", np.arange(4) < 1, V, "`mask` must mark at least 2 rows"),
    (C.bootstrap_draws, "f", np.zeros((K_E, 4, 3)), V, "`f` must be [K, n_e, n_e]"),
    (C.bootstrap_draws, "mask", np.ones((K_E, 3), bool), V, "`mask` must have shape"),
    (C.bootstrap_draws, "key", 7, V, "`key`"),
    (C.bootstrap_draws, "config", None, T, "`config`"),
    (C.bootstrap_draws, "mask", np.zeros((K_E, 4), bool), V, "`mask` must mark at least 2"),
    (C.kernel_test_from_folds, "folds", tuple(FOLDS), T, "`folds` must be a FoldData"),
    (C.kernel_test_from_folds, "folds", FOLDS._replace(x_tilde=FOLDS.x), V, "`folds.x_tilde`"),
    (C.kernel_test_from_folds, "folds", FOLDS._replace(mask=np.ones((2, 4))), T, "`folds.mask`"),
    (C.kernel_test_from_folds, "key", np.zeros(3, np.uint32), V, "`key`"),
    (C.kernel_test_from_folds, "folds", FOLDS._replace(mask=np.eye(2, 4) > 0), V, "`folds.mask`"),
    (C.kernel_test_from_folds, "centred", 1, T, "`centred`"),
    (C.gcm_from_folds, "num_boot", 0, V, "`num_boot`"),
    (C.gcm_from_folds, "key", "k", V, "`key`"),
    (C.gcm_from_folds, "folds", FOLDS._replace(y=FOLDS.y[:, :3]), V, "`folds.y`"),
    (C.tests_from_folds, "tests", ("kci",), V, "`tests`"),
    (C.tests_from_folds, "k_boot", 1, V, "`k_boot`"),
    (C.tests_from_folds, "k_gcm", np.zeros(2, np.float32), V, "`k_gcm`"),
    (C.response_blocks, "sizes", (2,), V, "`sizes`"),
    (C.response_blocks, "sizes", (0,), V, "`sizes[0]`"),
    (C.response_blocks, "sizes", "ab", T, "`sizes`"),
    (C.response_blocks, "folds", None, T, "`folds`"),
    (C.centred_gram, "kernel", "rbf", V, "`kernel`"),
    (C.centred_gram, "bandwidth", -1.0, V, "`bandwidth`"),
    (C.centred_gram, "bandwidth", NAN, V, "`bandwidth`"),
    (C.centred_gram, "xt", FOLD["x_tilde"][:3], V, "`xt` must have shape"),
    (C.centred_gram, "kxx", np.zeros((3, 3)), V, "`kxx` must have shape"),
    (C.centred_gram, "x", FOLD["x"][:, 0], V, "`x` must have rank 2"),
    (C.conditional_mmd, "bandwidth_z", 0.0, V, "`bandwidth_z`"),
    (C.conditional_mmd, "w", np.ones(3), V, "`w` must have shape"),
    (C.conditional_mmd, "z", np.zeros((3, DZ)), V, "`z` must have shape"),
    (C.conditional_mmd, "kernel", "x", V, "`kernel`"),
]


def _case_id(case) -> str:
    fn, arg = case[0], case[1]
    return f"{fn.__name__}-{'+'.join(arg) if isinstance(arg, tuple) else arg}"


def test_every_public_entry_point_is_covered():
    containers = {C.FoldData, C.TestResult, C.GaussianConditional, C.Generator, C.Regressor}
    fixed = {C.GaussianGenerator, C.LinearMean, C.SoftmaxMean, C.OracleMean, C.GaussianDesign}
    public = {getattr(C, name) for name in C.__all__ if callable(getattr(C, name))}
    # fixed fitters hold arrays (pytree children): they are checked where they are used
    assert public - containers - fixed == set(VALID) - METHODS
    assert {case[0] for case in CASES} == set(VALID)


@pytest.mark.parametrize("case", CASES, ids=[f"{_case_id(c)}-{i}" for i, c in enumerate(CASES)])
def test_bad_input_gives_a_clear_error(case):
    fn, arg, bad, exc, fragment = case
    names, values = (arg, bad) if isinstance(arg, tuple) else ((arg,), (bad,))
    with pytest.raises(exc, match=re.escape(fragment)):
        fn(**{**VALID[fn], **dict(zip(names, values, strict=True))})


def test_mesh_must_divide_the_bootstrap_draws(mesh):
    with pytest.raises(ValueError, match=re.escape("`config.num_boot`")):
        C.cmi_test(X, Y, Z, KEY, mesh=mesh, **{**NUIS, "config": C.CMIConfig(num_boot=6)})


@jax.jit
def _tests_on_folds(folds, key):
    return (
        C.kernel_test_from_folds(folds, key, TINY),
        C.gcm_from_folds(folds, key, TINY.num_boot),
    )


def test_a_non_finite_statistic_gives_a_nan_p_value_flagged_not_finite():
    """Non-finite values inside the jitted test (e.g. a singular nuisance fit) are not checkable
    at the boundary: the result says ``finite = False`` and its p-value is NaN, never 0."""
    key = jax.random.wrap_key_data(KEY)
    bad = FOLDS._replace(y=FOLDS.y.copy())
    bad.y[0, 1, 0] = NAN
    for folds, finite in ((FOLDS, True), (bad, False)):
        for res in _tests_on_folds(folds, key):  # one compiled program for both
            assert bool(res.finite) is finite
            p = float(res.p_value)
            assert (0.0 <= p <= 1.0) if finite else np.isnan(p)

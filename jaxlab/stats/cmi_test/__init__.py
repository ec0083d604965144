"""Testing conditional mean independence with generative nuisance models (ICML 2025).

Zhang, Huang, Yang, Shao, "Testing Conditional Mean Independence Using Generative Neural
Networks". Tests ``H0: E[Y | X, Z] = E[Y | Z]`` with a cross-fitted, conditionally centred kernel
statistic and a multiplier bootstrap; the centring of ``X`` uses draws from a conditional generator
of ``X | Z`` and the residual uses a regression of ``Y`` on ``Z`` (spec ``papers/cmi_test.md``).

- :mod:`.statistic`: :func:`cmi_test`, :func:`compare_tests` (with the GCM and naive-kernel
  baselines on the same nuisances), :func:`replicate_tests` (replicates ``vmap``ped in one call),
  and the pieces they are built from (:func:`cross_fit`, :func:`fold_matrix`,
  :func:`bootstrap_draws`, :func:`response_blocks`, ...);
- :mod:`.nuisance`: the fitter protocols and fitters (Gaussian oracle, linear-Gaussian, GMMN; known
  linear and softmax means, ridge, MLP, softmax regression; :class:`ColumnBlocks`; error-injection
  wrappers);
- :mod:`.designs`: the paper's Gaussian designs with their oracle nuisances;
- :mod:`.kernels`: standardisation, distances, median bandwidths.

The method is a statistic: module-level pure functions that take the data, a key, the nuisance
fitters and a frozen, validated :class:`CMIConfig` (hashable: a static argument of ``jit``).
Fitters are frozen ``flax.struct`` pytrees that validate their hyperparameters.

Example::

    import jax
    from jaxlab.stats.cmi_test import (CMIConfig, LinearGaussianGenerator, RidgeRegressor,
                                       cmi_test, gaussian_design)

    design = gaussian_design("a1_sparse", dz=3, dx=5)
    x, y, z = design.sample(jax.random.key(0), 40)
    res = cmi_test(x, y, z, jax.random.key(1), generator=LinearGaussianGenerator(),
                   regressor=RidgeRegressor(), config=CMIConfig(num_samples=8, num_boot=100))
    assert res.bootstrap.shape == (100,)
    assert float(res.p_value) == float((res.bootstrap > res.statistic).mean())  # upper tail
"""

from jaxlab.stats.cmi_test.designs import SETTINGS, GaussianDesign, OracleMean, gaussian_design
from jaxlab.stats.cmi_test.nuisance import (
    ColumnBlocks,
    GaussianConditional,
    GaussianGenerator,
    Generator,
    GMMNGenerator,
    LinearGaussianGenerator,
    LinearMean,
    MLPRegressor,
    PerturbedGenerator,
    PerturbedRegressor,
    Regressor,
    RidgeRegressor,
    SoftmaxMean,
    SoftmaxRegressor,
    centred_gram,
    conditional_mmd,
)
from jaxlab.stats.cmi_test.statistic import (
    KERNELS,
    MULTIPLIERS,
    TESTS,
    CMIConfig,
    FoldData,
    TestResult,
    bootstrap_draws,
    cmi_test,
    compare_tests,
    cross_fit,
    fold_indices,
    fold_matrix,
    gcm_from_folds,
    kernel_test_from_folds,
    replicate_tests,
    response_blocks,
    tests_from_folds,
)

__all__ = [
    "KERNELS",
    "MULTIPLIERS",
    "SETTINGS",
    "TESTS",
    "CMIConfig",
    "ColumnBlocks",
    "FoldData",
    "GMMNGenerator",
    "GaussianConditional",
    "GaussianDesign",
    "GaussianGenerator",
    "Generator",
    "LinearGaussianGenerator",
    "LinearMean",
    "MLPRegressor",
    "OracleMean",
    "PerturbedGenerator",
    "PerturbedRegressor",
    "Regressor",
    "RidgeRegressor",
    "SoftmaxMean",
    "SoftmaxRegressor",
    "TestResult",
    "bootstrap_draws",
    "centred_gram",
    "cmi_test",
    "compare_tests",
    "conditional_mmd",
    "cross_fit",
    "fold_indices",
    "fold_matrix",
    "gaussian_design",
    "gcm_from_folds",
    "kernel_test_from_folds",
    "replicate_tests",
    "response_blocks",
    "tests_from_folds",
]

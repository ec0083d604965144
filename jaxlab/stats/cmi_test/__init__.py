"""Testing conditional mean independence with generative nuisance models (ICML 2025).

Zhang, Huang, Yang, Shao, "Testing Conditional Mean Independence Using Generative Neural
Networks". Tests ``H0: E[Y | X, Z] = E[Y | Z]`` with a cross-fitted, conditionally centred kernel
statistic and a multiplier bootstrap; the centring of ``X`` uses draws from a conditional generator
of ``X | Z`` and the residual uses a regression of ``Y`` on ``Z`` (spec ``papers/cmi_test.md``).

- :mod:`.statistic`: :func:`cmi_test`, :func:`compare_tests` (with the GCM and naive-kernel
  baselines on the same nuisances), :func:`replicate_tests` (replicates ``vmap``ped in one call);
- :mod:`.nuisance`: the fitter protocols and fitters (Gaussian oracle, linear-Gaussian, GMMN; known
  linear mean, ridge, MLP; error-injection wrappers);
- :mod:`.designs`: the paper's Gaussian designs with their oracle nuisances;
- :mod:`.kernels`: standardisation, distances, median bandwidths.

Example::

    design = gaussian_design("a1_sparse", dz=10, dx=10)
    x, y, z = design.sample(jax.random.key(0), 200)
    res = cmi_test(x, y, z, jax.random.key(1), generator=LinearGaussianGenerator(),
                   regressor=RidgeRegressor(), config=CMIConfig(num_samples=50, num_boot=500))
"""

from jaxlab.stats.cmi_test.designs import SETTINGS, GaussianDesign, OracleMean, gaussian_design
from jaxlab.stats.cmi_test.nuisance import (
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
    SoftmaxRegressor,
    centred_gram,
    conditional_mmd,
)
from jaxlab.stats.cmi_test.statistic import (
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
    map_in_chunks,
    replicate_tests,
)

__all__ = [
    "SETTINGS",
    "TESTS",
    "CMIConfig",
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
    "map_in_chunks",
    "replicate_tests",
]

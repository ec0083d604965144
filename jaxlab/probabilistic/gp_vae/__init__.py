"""DGBFGP: Bayesian basis-function GP priors for deep generative models (ICML 2025).

Balik et al., "Bayesian Basis Function Approximation for Scalable Gaussian Process Priors in Deep
Generative Models". The official PyTorch code (github.com/YigitBalik/DGBFGP) could not be
obtained; the model follows the spec built from a downstream copy of its model file and its
run configurations.

Contents: basis functions (:mod:`.bases`), the NumPyro model and mean-field guide with the fused
gather/GEMM latent (:mod:`.model`), SVI training and conditional generation (:mod:`.train`), the
Health-Digits data (:mod:`.data`) and the CVAE / exact GP-prior VAE / MLP baselines
(:mod:`.baselines`).
"""

from jaxlab.probabilistic.gp_vae.bases import (
    binary_features,
    default_boundary,
    hs_basis,
    hs_kernel,
    hs_sqrt_eigenvalues,
    se_spectral_density,
)
from jaxlab.probabilistic.gp_vae.model import (
    Component,
    Covariates,
    GPVAEConfig,
    GPVAEModel,
    MLPDecoder,
    binary,
    categorical,
    check_covariates,
    component_latents,
    latent,
    latent_dense,
    make_model,
    prior_scales,
    se,
    se_x_categorical,
)
from jaxlab.probabilistic.gp_vae.train import (
    GPVAETrainer,
    TrainState,
    make_trainer,
    posterior_mean_weights,
    predict,
)

__all__ = [
    "Component",
    "Covariates",
    "GPVAEConfig",
    "GPVAEModel",
    "GPVAETrainer",
    "MLPDecoder",
    "TrainState",
    "binary",
    "binary_features",
    "categorical",
    "check_covariates",
    "component_latents",
    "default_boundary",
    "hs_basis",
    "hs_kernel",
    "hs_sqrt_eigenvalues",
    "latent",
    "latent_dense",
    "make_model",
    "make_trainer",
    "posterior_mean_weights",
    "predict",
    "prior_scales",
    "se",
    "se_spectral_density",
    "se_x_categorical",
]

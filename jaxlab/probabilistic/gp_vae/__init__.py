"""DGBFGP: Bayesian basis-function GP priors for deep generative models (ICML 2025).

Balik et al., "Bayesian Basis Function Approximation for Scalable Gaussian Process Priors in Deep
Generative Models". The official PyTorch code (github.com/YigitBalik/DGBFGP) could not be
obtained; the model follows the spec built from a downstream copy of its model file and its
run configurations.

Contents: basis functions (:mod:`.bases`), the NumPyro model and mean-field guide with the fused
gather/GEMM latent (:mod:`.model`; config :class:`GPVAEConfig`, factory :func:`make_model`), SVI
training and conditional generation (:mod:`.train`; :func:`make_trainer` with
``init(key, cov, y) -> GPVAEState`` and ``step(state) -> (state, {"loss"})``, one epoch per step),
the Health-Digits data and its component set (:mod:`.data`) and the CVAE / exact GP-prior VAE /
MLP baselines (:mod:`.baselines`).

Example::

    import jax
    import jax.numpy as jnp
    from jaxlab.core.training import scan_steps
    from jaxlab.probabilistic import gp_vae as G

    data = G.health_digits(jax.random.key(0), n_subjects=4, n_times=5)  # N = 20 images
    cov, y = data.covariates(), jnp.asarray(data.images)                 # y: [20, 64]
    config = G.health_digits_config(4, num_basis=6, exclude=("age", "disease", "t_x_disease",
                                    "t_x_id"), latent_dim=2, decoder_hidden=(16,),
                                    num_particles=1)  # id, SE(t) and sex components
    model = G.make_model(config)
    trainer = G.make_trainer(model, n_total=cov.num_rows, batch_size=10)
    state = trainer.init(jax.random.key(1), cov, y)
    state, metrics = jax.jit(lambda s: scan_steps(trainer.step, s, 3))(state)  # 3 epochs
    pred = G.predict(model, trainer.params(state), cov)                  # [20, 64]
    assert pred.shape == (20, 64) and metrics["loss"].shape == (3,)
"""

from jaxlab.probabilistic.gp_vae.bases import (
    binary_features,
    default_boundary,
    hs_basis,
    hs_kernel,
    hs_sqrt_eigenvalues,
    se_spectral_density,
)
from jaxlab.probabilistic.gp_vae.data import (
    HEALTH_DIGITS_COMPONENTS,
    HealthDigits,
    health_digits,
    health_digits_components,
    health_digits_config,
    splits,
)
from jaxlab.probabilistic.gp_vae.model import (
    Component,
    Covariates,
    GPVAEConfig,
    GPVAEModel,
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
    GPVAEState,
    GPVAETrainer,
    make_trainer,
    posterior_mean_weights,
    predict,
)

__all__ = [
    "HEALTH_DIGITS_COMPONENTS",
    "Component",
    "Covariates",
    "GPVAEConfig",
    "GPVAEModel",
    "GPVAEState",
    "GPVAETrainer",
    "HealthDigits",
    "binary",
    "binary_features",
    "categorical",
    "check_covariates",
    "component_latents",
    "default_boundary",
    "health_digits",
    "health_digits_components",
    "health_digits_config",
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
    "splits",
]

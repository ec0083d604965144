"""D2O: GAN fine-tuning turns a pre-trained diffusion model into a one-step generator (ICML 2025).

Zheng and Yang, "Revisiting Diffusion Models: From Generative Pre-training to One-Step Generation"
(official PyTorch code: github.com/Zyriix/D2O). The pieces:

- :mod:`.edm`: EDM preconditioning (plain and D2O's ``eps``-shifted), the EDM loss, the Karras grid
  and the Heun sampler (diffrax's ``Heun`` stepping to the grid with ``StepTo``);
- :mod:`.unet`: a small SongUNet-style denoiser network with noise modulation and attention;
- :mod:`.nets`: digit classifiers (the discriminator's frozen feature network and the separate
  metric network) and the projected discriminator's heads;
- :mod:`.train`: EDM pre-training, and the one fine-tuning loop whose configurations are D2O, D2O-F
  (3x3 convolutions and attention projections frozen), instance distillation (KD), KD+GAN and GAN
  from scratch; GAN losses, lazy R1, EMA, the freeze rule;
- :mod:`.metrics`: digits-FD, coverage, power spectra, sliced Wasserstein, MMD.

Training follows the jaxlab contract: :func:`make_pretrainer` and :func:`make_finetuner` return
NamedTuples of pure functions, ``init(key, ...) -> state`` and ``step(state, x=None) -> (state,
metrics)``; the states (:class:`PretrainState`, :class:`FinetuneState`) are
``flax.struct.dataclass`` pytrees that carry the run's key, and step ``t`` draws from
``fold_in(state.key, t)``. :func:`run_loop` runs ``n`` steps (host loop or ``lax.scan``).

Example::

    import jax
    import jax.numpy as jnp
    from jaxlab.generative import gan_onestep as G

    data = jax.random.uniform(jax.random.key(0), (64, 8, 8, 1), minval=-1.0, maxval=1.0)
    # any inner network F(params, c_in x, c_noise [B]), e.g. a G.UNet's apply; a tiny one here
    inner = lambda p, x, c: p["w"] * x + p["b"] * c[:, None, None, None]
    params = {"w": jnp.zeros(()), "b": jnp.zeros(())}
    edm_cfg = G.EDMConfig(sigma_data=0.5)
    pre = G.make_pretrainer(inner, data, edm_cfg, G.PretrainConfig(batch=16))
    pre_state, pre_metrics = G.run_loop(jax.jit(pre.step), pre.init(jax.random.key(1), params), 5)
    z = jax.random.normal(jax.random.key(2), (16, 8, 8, 1))
    teacher = G.teacher_sample(inner, pre_state.ema, z, 4, edm_cfg)  # Heun, 7 NFE
    # D2O: GAN fine-tuning of the one-step generator, here against a linear discriminator
    disc = lambda w, x: [jnp.einsum("bhwc,hwc->b", x, w)[:, None, None, None]]
    ft = G.make_finetuner(inner, pre_state.ema, disc, data, 0.5, G.FinetuneConfig(batch=16))
    state = ft.init(jax.random.key(3), pre_state.ema, jnp.zeros((8, 8, 1)))
    state, metrics = jax.jit(ft.step)(state)  # loss_g, gan_g, kd, loss_d, r1
    images = ft.generate(state.ema, z)  # [16, 8, 8, 1] from one network evaluation
"""

from jaxlab.generative.gan_onestep.edm import (
    D2O_EPS,
    EDMConfig,
    check_images,
    check_sigma,
    denoise,
    edm_loss,
    gaussian_denoiser,
    heun_sample,
    karras_sigma,
    karras_steps,
    precond,
)
from jaxlab.generative.gan_onestep.metrics import (
    class_coverage,
    classifier_score,
    fd_bootstrap,
    fd_contrast_bootstrap,
    frechet_distance,
    frechet_distance_stats,
    gaussian_stats,
    high_band_power_ratio,
    mmd_rbf,
    radial_power_spectrum,
    sliced_wasserstein,
    sqrtm_psd,
)
from jaxlab.generative.gan_onestep.nets import (
    BatchStatNorm,
    Classifier,
    ClassifierConfig,
    ProjectedHeads,
    SNConv,
    accuracy,
    projected_discriminator,
    spectral_normalise,
    train_classifier,
)
from jaxlab.generative.gan_onestep.train import (
    FinetuneConfig,
    Finetuner,
    FinetuneState,
    PretrainConfig,
    Pretrainer,
    PretrainState,
    d2o_freeze_rule,
    discriminator_loss,
    ema_beta,
    ema_update,
    freeze_mask,
    frozen_fraction,
    generator_loss,
    images_seen,
    l2_distance,
    make_finetuner,
    make_pretrainer,
    masked_adam,
    one_step_generate,
    r1_penalty,
    run_loop,
    teacher_sample,
)
from jaxlab.generative.gan_onestep.unet import UNet, UNetConfig

__all__ = [
    "D2O_EPS",
    "BatchStatNorm",
    "Classifier",
    "ClassifierConfig",
    "EDMConfig",
    "FinetuneConfig",
    "FinetuneState",
    "Finetuner",
    "PretrainConfig",
    "PretrainState",
    "Pretrainer",
    "ProjectedHeads",
    "SNConv",
    "UNet",
    "UNetConfig",
    "accuracy",
    "check_images",
    "check_sigma",
    "class_coverage",
    "classifier_score",
    "d2o_freeze_rule",
    "denoise",
    "discriminator_loss",
    "edm_loss",
    "ema_beta",
    "ema_update",
    "freeze_mask",
    "frechet_distance",
    "fd_bootstrap",
    "fd_contrast_bootstrap",
    "frechet_distance_stats",
    "frozen_fraction",
    "gaussian_denoiser",
    "gaussian_stats",
    "generator_loss",
    "heun_sample",
    "high_band_power_ratio",
    "images_seen",
    "karras_sigma",
    "karras_steps",
    "l2_distance",
    "make_finetuner",
    "make_pretrainer",
    "masked_adam",
    "mmd_rbf",
    "one_step_generate",
    "precond",
    "projected_discriminator",
    "r1_penalty",
    "radial_power_spectrum",
    "run_loop",
    "sliced_wasserstein",
    "spectral_normalise",
    "sqrtm_psd",
    "teacher_sample",
    "train_classifier",
]

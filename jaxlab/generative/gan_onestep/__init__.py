"""D2O: GAN fine-tuning turns a pre-trained diffusion model into a one-step generator (ICML 2025).

Zheng and Yang, "Revisiting Diffusion Models: From Generative Pre-training to One-Step Generation"
(official PyTorch code: github.com/Zyriix/D2O). The pieces:

- :mod:`.edm`: EDM preconditioning (plain and D2O's ``eps``-shifted), the EDM loss, the Karras grid
  and the Heun sampler;
- :mod:`.unet`: a small SongUNet-style denoiser network with noise modulation and attention;
- :mod:`.nets`: digit classifiers (the discriminator's frozen feature network and the separate
  metric network) and the projected discriminator's heads;
- :mod:`.train`: EDM pre-training, and the one fine-tuning loop whose configurations are D2O, D2O-F
  (3x3 convolutions and attention projections frozen), instance distillation (KD), KD+GAN and GAN
  from scratch; GAN losses, lazy R1, EMA, the freeze rule;
- :mod:`.metrics`: digits-FD, coverage, power spectra, sliced Wasserstein, MMD.
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
    Classifier,
    ClassifierConfig,
    ProjectedHeads,
    accuracy,
    projected_discriminator,
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
    r1_penalty,
    run_loop,
    teacher_sample,
)
from jaxlab.generative.gan_onestep.unet import UNet, UNetConfig

__all__ = [
    "D2O_EPS",
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
    "precond",
    "projected_discriminator",
    "r1_penalty",
    "radial_power_spectrum",
    "run_loop",
    "sliced_wasserstein",
    "sqrtm_psd",
    "teacher_sample",
    "train_classifier",
]

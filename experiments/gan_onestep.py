"""D2O on sklearn digits: a pre-trained EDM denoiser becomes a one-step generator by GAN
fine-tuning alone, against instance distillation, distillation + GAN and GAN from scratch.

Run: ``python -m experiments run gan_onestep --preset quick`` (101-124 s on 2 CPU cores, seeds
7 and 12: D2O and KD only, 15k images, 1 block per level) or ``--preset full`` (722 s, seeds
8-10: official 2 blocks per level, D2O / D2O-F / KD / scratch at 58k images).
``--preset accelerator`` is the paper-scale budget for one GPU (not run: no accelerator was
available); ``--preset landed`` reproduces the first landed experiment (compact net, simple
heads + pixel head).

Nets (issue 22): by default the official structure: SongUNet layout, shift-only modulation, 4x
embedding; multi-scale spectrally normalised discriminator heads without a pixel head. The one
deviation is the learning rates of the CPU presets, lr_g 2e-4 / lr_d 2e-3 (official 1e-4 / 1e-4,
kept by ``accelerator``): measured on seed 5 with the official nets, 200 D2O updates at 1e-4 /
1e-4 leave the discriminator at chance (loss 4.4 for 3 heads, chance 4.16) and FD at 1071 (with
a pixel head) or diverging (4704 without); at 2e-4 / 2e-3 FD is 10.9 without a pixel head (3.9
with) and the high-band power ratio 1.16. The "high-frequency blindness" of the first look was
this learning rate, not the missing pixel head.

Every ordering claim (``CLAIMS``) is reported as an FD contrast with a 95% interval of the paired
seed-and-sample bootstrap (:func:`jaxlab.generative.gan_onestep.fd_bootstrap`); "met" only if
the interval excludes 0. The jitted programs are shared by all seeds (:class:`_Programs`).

Stages (spec section 5, sized for 2 CPU cores):

1. Data: ``load_digits`` scaled to [-1, 1], ``[N, 8, 8, 1]``; ``n_holdout`` images held out, the
   rest is the training set. Two classifiers: the discriminator's frozen feature network (trained
   on half A of the training set) and the metric network (a different architecture and seed,
   trained on half B; its 64-d penultimate features define digits-FD). The FD reference is every
   real image the metric network never saw (held-out + half A, ~1050 images): with only the 300
   held-out images the FD of real data to real data was 3.4-8.8 across seeds, as large as the
   differences being measured. ``fd_train_floor`` = FD(half B, reference).
2. EDM pre-training of the U-Net (EMA weights are the teacher); ``sigma_d`` is measured on the data.
3. References: the teacher (Heun, 18 steps = 35 NFE) and the pre-trained network used one-step
   (D2O's wrapper at ``sigma_max = 80``, no fine-tuning).
4. Fine-tuning, same data, seed, budget (``finetune_steps`` generator updates of ``batch``):
   ``d2o`` (GAN only), ``d2o_f`` (3x3 convs and attention projection frozen), ``kd`` (L2 to the
   teacher's output for the same noise, ``kd_pairs`` precomputed pairs), ``kd_gan`` (both),
   ``scratch_gan`` (D2O from a random init; full preset). Each variant's EMA generator is scored.
5. Local minima: for ``k`` teacher steps, FD(T_k, data), FD(T_k, G_d2o) (independent noise sets)
   and the paired ``mean ||T_k(z) - G(z)||^2`` (shared noise). ``T_k`` uses the few-step Karras
   grid (``final_sigma_min=False``: k - 1 Heun steps and a final Euler jump to 0); EDM's own grid
   spends one of k steps on reaching ``sigma_min`` and diverges at k = 2 (measured FD 3e6).
6. FD of the EMA generator vs images seen (``fd_curve``) for every variant.

Metrics are averaged over ``n_seeds`` seeds (``seed, seed + 1, ...``); per-seed values are kept.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from scipy.stats import spearmanr
from tqdm.auto import tqdm

from experiments import _common
from experiments._config import COUNT, NONNEG, POSITIVE, Choice, Range
from jaxlab.core.data import load_digits
from jaxlab.core.training import map_in_chunks
from jaxlab.generative import gan_onestep as G

NAME = "gan_onestep"
PAPER = "Zheng & Yang, Revisiting Diffusion Models: From Generative Pre-training to One-Step Generation (ICML 2025)"  # noqa: E501
CLAIM = (
    "GAN fine-tuning of a pre-trained diffusion model gives a one-step generator better than "
    "instance distillation, also with ~85% of the weights frozen"
)
VARIANTS = ("d2o", "d2o_f", "kd", "kd_gan", "scratch_gan")
# ordering claims as FD contrasts sum_m w_m FD(m) (> 0 when the claim holds), spec section 5
CLAIMS = {
    "d2o_beats_onestep": ("D2O better than the pre-trained net used one-step",
                          {"onestep_pretrained": 1.0, "d2o": -1.0}),
    "d2o_beats_kd": ("D2O better than KD (instance distillation)", {"kd": 1.0, "d2o": -1.0}),
    "d2o_f_beats_kd": ("D2O-F better than KD", {"kd": 1.0, "d2o_f": -1.0}),
    "d2o_f_within_1.25x_d2o": ("D2O-F within 1.25x D2O", {"d2o": 1.25, "d2o_f": -1.0}),
    "d2o_beats_scratch": ("D2O better than GAN from scratch", {"scratch_gan": 1.0, "d2o": -1.0}),
    "d2o_within_1.3x_teacher": ("D2O within 1.3x the 35-NFE teacher",
                                {"teacher": 1.3, "d2o": -1.0}),
    "kd_gan_beats_d2o": ("KD+GAN better than D2O", {"d2o": 1.0, "kd_gan": -1.0}),
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Config:
    """Experiment settings.

    Attributes:
      seed, n_seeds: first seed and number of seeds (metrics are seed means).
      channels, n_blocks: the U-Net (``UNetConfig``).
      unet_layout, unet_affine, emb_dim: ``UNetConfig.layout`` / ``affine`` / ``emb_dim``
        (default the official SongUNet structure; ``landed`` keeps the compact net).
      d_layout, d_spectral_norm, d_pixels: the discriminator heads (``ProjectedHeads.layout``,
        ``spectral_norm``) and the raw-pixel head of :func:`projected_discriminator` (default the
        official multi-scale spectrally normalised heads, no pixel head).
      pretrain_steps, pretrain_batch, pretrain_lr: EDM pre-training.
      teacher_steps: Heun steps of the reference teacher (18 = 35 NFE).
      finetune_steps, batch, lr_g, lr_d, r1_gamma: every fine-tuning variant's budget and optimiser
        (the official 1e-4 / 1e-4 leaves the discriminator at chance at these budgets, see the
        module docstring; ``accelerator`` keeps it).
      d_hidden: width of the discriminator heads.
      kd_pairs: precomputed (z, T(z)) pairs for the distillation variants.
      kd_weight: weight of the L2 term in ``kd_gan`` (``kd`` uses 1 and no GAN term).
      variants: which fine-tuning variants to run (a subset of ``VARIANTS``).
      curve_points: evaluations of every variant's FD curve, evenly spaced over the budget.
      local_minima_k: teacher step counts of the local-minima study.
      n_eval, n_holdout: generated samples per FD; held-out real images.
      classifier_epochs: epochs of each classifier.
      n_boot: bootstrap replicates of the claims' intervals.
    """

    seed: int = 0
    n_seeds: int = 1
    channels: tuple[int, ...] = (8, 16)
    n_blocks: int = 1
    unet_layout: str = "song"
    unet_affine: str = "shift"
    emb_dim: int | None = None
    d_layout: str = "multiscale"
    d_spectral_norm: bool = True
    d_pixels: bool = False
    pretrain_steps: int = 250
    pretrain_batch: int = 128
    pretrain_lr: float = 2e-3
    teacher_steps: int = 18
    finetune_steps: int = 120
    batch: int = 128
    lr_g: float = 2e-4
    lr_d: float = 2e-3
    d_hidden: int = 64
    r1_gamma: float = 1e-4
    kd_pairs: int = 500
    kd_weight: float = 1.0
    variants: tuple[str, ...] = ("d2o", "kd")
    curve_points: int = 3
    local_minima_k: tuple[int, ...] = ()
    n_eval: int = 500
    n_holdout: int = 300
    classifier_epochs: int = 12
    n_boot: int = 500


# the range of every field (checked before a run starts); cross-field rules (``"d2o"`` in
# ``variants``) stay in :func:`run`. U-Net channels are multiples of its 4 GroupNorm groups; the
# FD needs >= 2 samples; the held-out split leaves >= 2 x 64 training images for the classifiers.
LIMITS = {
    "n_seeds": COUNT,
    "channels": Choice(*range(4, 1025, 4), min_items=1, repeats=True),
    "n_blocks": COUNT,
    "unet_layout": Choice("song", "compact"),
    "unet_affine": Choice("shift", "scale_shift"),
    "emb_dim": COUNT,
    "d_layout": Choice("multiscale", "simple"),
    "pretrain_steps": COUNT,
    "pretrain_batch": COUNT,
    "pretrain_lr": POSITIVE,
    "teacher_steps": COUNT,
    "finetune_steps": COUNT,
    "batch": COUNT,
    "lr_g": POSITIVE,
    "lr_d": POSITIVE,
    "d_hidden": COUNT,
    "r1_gamma": NONNEG,
    "kd_pairs": COUNT,
    "kd_weight": NONNEG,
    "variants": Choice(*VARIANTS, min_items=1),
    "curve_points": COUNT,
    "local_minima_k": Range(1),
    "n_eval": Range(2),
    "n_holdout": Range(1, 1600),
    "classifier_epochs": COUNT,
    "n_boot": COUNT,
}


# the evaluation of the full-size presets: 2000 samples per FD, FD curve, local-minima study
_FULL_EVAL = dict(classifier_epochs=20, curve_points=4, local_minima_k=(2, 4, 6, 8, 10),
                  n_eval=2000)  # fmt: skip
PRESETS = {
    "quick": Config(),
    "full": Config(
        n_seeds=3,
        n_blocks=2,
        pretrain_steps=800,
        finetune_steps=450,
        kd_pairs=2048,
        variants=("d2o", "d2o_f", "kd", "scratch_gan"),
        **_FULL_EVAL,
    ),
    # the paper-scale budget, for one GPU (not run here: no accelerator in these sessions)
    "accelerator": Config(
        n_seeds=3,
        channels=(32, 64),
        n_blocks=2,
        pretrain_steps=20_000,
        pretrain_batch=256,
        pretrain_lr=2e-4,
        finetune_steps=4000,
        lr_g=1e-4,
        lr_d=1e-4,
        kd_pairs=20_000,
        variants=VARIANTS,
        **{**_FULL_EVAL, "curve_points": 10, "classifier_epochs": 30},
    ),
    # the first landed experiment (compact net, simple heads + pixel head): its figures
    "landed": Config(
        channels=(16, 32),
        n_blocks=1,
        unet_layout="compact",
        unet_affine="scale_shift",
        emb_dim=16,
        d_layout="simple",
        d_spectral_norm=False,
        d_pixels=True,
        pretrain_steps=1200,
        finetune_steps=500,
        kd_pairs=4096,
        variants=("d2o", "d2o_f", "kd", "kd_gan"),
        **_FULL_EVAL,
    ),
}


CHUNK = 500  # images per jitted call of a sampler or the metric network
IMAGE = (8, 8, 1)  # digits, NHWC without the batch axis


def load_data(key, n_holdout: int):
    """Digits as ``[N, 8, 8, 1]`` in [-1, 1] and labels, split into (train, holdout)."""
    x, y = load_digits(scale="signed", layout="nhwc")  # images / 8 - 1
    y = y.astype(np.int32)
    perm = np.asarray(jax.random.permutation(key, len(x)))
    hold, train = perm[:n_holdout], perm[n_holdout:]
    return (jnp.asarray(x[train]), jnp.asarray(y[train])), (jnp.asarray(x[hold]), y[hold])


class Evaluator:
    """digits-FD, coverage, classifier score and spectrum ratio against ``reference`` images
    (real images the metric network never saw); ``floor`` = FD of ``other_real`` (real images it
    did see) to the reference, the value a perfect generator would get up to sampling noise."""

    def __init__(self, metric_net, metric_params, reference, other_real):
        def feats(x):
            _, pen = metric_net.apply(metric_params, x, method=G.Classifier.features)
            return pen, jax.nn.softmax(metric_net.apply(metric_params, x), -1)

        self._feats = jax.jit(feats)
        self.holdout = reference
        self.ref_feats = self.features(reference)[0]
        self.train_floor = float(self.fd_features(self.features(other_real)[0]))

    def features(self, x):
        return map_in_chunks(self._feats, (x,), CHUNK)

    def fd_features(self, feats):
        return G.frechet_distance(feats, self.ref_feats)

    def fd(self, images):
        return float(self.fd_features(self.features(images)[0]))

    def score(self, images) -> tuple[dict, np.ndarray]:
        """The scores of ``images`` and their metric features (kept for the bootstrap)."""
        f, probs = self.features(images)
        labels = jnp.argmax(probs, -1)
        return {
            "fd": float(self.fd_features(f)),
            "coverage": float(G.class_coverage(labels, 10)),
            "classifier_score": float(G.classifier_score(probs)),
            "hf_power_ratio": float(G.high_band_power_ratio(images, self.holdout)),
        }, np.asarray(f)


class _Programs:
    """The jitted programs of one configuration, shared by all its seeds: every per-seed array
    (training images, sigma_d, frozen classifier, KD pairs) is an argument, not a closed-over
    constant, so the U-Net's training steps compile once per run rather than once per seed
    (about 25 s per fine-tuning variant and 14 s for pre-training here)."""

    def __init__(self, config: Config):
        self.config = config
        unet = G.UNetConfig(channels=config.channels, n_blocks=config.n_blocks, groups=4,
                            layout=config.unet_layout, affine=config.unet_affine,
                            emb_dim=config.emb_dim)  # fmt: skip
        self.net = G.UNet(unet)
        self.inner = lambda p, x, c: self.net.apply(p, x, c)  # noqa: E731
        self.d_net = G.Classifier(G.ClassifierConfig(stages=(16, 32), width=32,
                                                     epochs=config.classifier_epochs))  # fmt: skip
        self.heads = G.ProjectedHeads(hidden=config.d_hidden, layout=config.d_layout,
                                      spectral_norm=config.d_spectral_norm)  # fmt: skip
        self.template = jax.eval_shape(self.net.init, jax.random.key(0), jnp.zeros((1, *IMAGE)),
                                       jnp.zeros(1))  # fmt: skip
        self.pretrain_config = G.PretrainConfig(batch=config.pretrain_batch, lr=config.pretrain_lr)
        self.pretrain_step = jax.jit(
            lambda state, data, sigma_data: self.pretrainer(data, sigma_data).step(state)
        )
        self.finetune_step = jax.jit(
            lambda variant, state, data, d_cls, sigma_data, kd_pairs: self.finetuner(
                variant, data, d_cls, sigma_data, kd_pairs).step(state),
            static_argnums=0,
        )  # fmt: skip
        self.generate = jax.jit(lambda g, z, sigma_data: G.one_step_generate(
            self.inner, g, z, sigma_data, G.EDMConfig().sigma_max))  # fmt: skip
        self.teacher = jax.jit(
            lambda params, z, sigma_data, k, final_sigma_min=True: G.teacher_sample(
                self.inner, params, z, k, G.EDMConfig(sigma_data=sigma_data), final_sigma_min
            ),
            static_argnums=(3, 4),
        )

    def pretrainer(self, data, sigma_data):
        return G.make_pretrainer(self.inner, data, G.EDMConfig(sigma_data=sigma_data),
                                 self.pretrain_config)  # fmt: skip

    def discriminator(self, d_cls):
        return G.projected_discriminator(self.d_net, d_cls, self.heads, pixels=self.config.d_pixels)

    def finetuner(self, variant, data, d_cls, sigma_data, kd_pairs):
        c = self.config
        gan_w = 0.0 if variant == "kd" else 1.0
        kd_w = {"kd": 1.0, "kd_gan": c.kd_weight}.get(variant, 0.0)
        ft_cfg = G.FinetuneConfig(
            batch=c.batch, lr_g=c.lr_g, lr_d=c.lr_d, gan_weight=gan_w, kd_weight=kd_w,
            r1_gamma=c.r1_gamma, freeze=variant == "d2o_f", sigma_max=G.EDMConfig().sigma_max,
        )  # fmt: skip
        return G.make_finetuner(
            self.inner, self.template, self.discriminator(d_cls)[0], data, sigma_data, ft_cfg,
            kd_pairs=kd_pairs if kd_w > 0 else None,
        )  # fmt: skip


@functools.lru_cache(maxsize=2)
def programs(config: Config) -> _Programs:
    """The shared jitted programs of ``config`` (seed ignored by the caller), cached."""
    return _Programs(config)


def _run_seed(config: Config, seed: int, pbar) -> dict:
    progs = programs(dataclasses.replace(config, seed=0))
    key = jax.random.key(seed)
    keys = jax.random.split(key, 9)
    k_split, k_cls_d, k_cls_m, k_pre, k_pre_init, k_kd, k_eval, k_ft, k_lm = keys
    (x_train, y_train), (x_hold, y_hold) = load_data(k_split, config.n_holdout)
    half = x_train.shape[0] // 2
    timings = {}

    # 1. classifiers: D's frozen features (half A) and the metric network (half B, other arch)
    t0 = time.perf_counter()
    epochs = config.classifier_epochs
    d_net = progs.d_net
    m_net = G.Classifier(G.ClassifierConfig(stages=(32, 64), width=64, epochs=epochs))
    d_cls, _ = G.train_classifier(k_cls_d, d_net, x_train[:half], y_train[:half])
    m_cls, _ = G.train_classifier(k_cls_m, m_net, x_train[half:], y_train[half:])
    cls_acc = {
        "d_features": float(G.accuracy(d_net, d_cls, x_hold, jnp.asarray(y_hold))),
        "metric": float(G.accuracy(m_net, m_cls, x_hold, jnp.asarray(y_hold))),
    }
    # FD reference: every real image the metric network never saw (held-out + D's half)
    evaluator = Evaluator(m_net, m_cls, jnp.concatenate([x_hold, x_train[:half]]), x_train[half:])
    timings["classifiers"] = time.perf_counter() - t0
    pbar.update(1)

    # 2. EDM pre-training
    t0 = time.perf_counter()
    sigma_data = jnp.std(x_train)
    net = progs.net
    params0 = jax.jit(net.init)(k_pre_init, x_train[:1], jnp.zeros((1,)))
    # step t draws from fold_in(k_pre, t) = split(k_pre, pretrain_steps)[t]
    pre_state, pre_metrics = G.run_loop(
        functools.partial(progs.pretrain_step, data=x_train, sigma_data=sigma_data),
        progs.pretrainer(x_train, sigma_data).init(k_pre, params0),
        config.pretrain_steps,
    )
    teacher_params = pre_state.ema
    timings["pretrain"] = time.perf_counter() - t0
    pbar.update(1)

    # 3. references: teacher at 35 NFE, the pre-trained net used one-step
    t0 = time.perf_counter()
    shape = x_train.shape[1:]

    def teacher(z, k=config.teacher_steps, final_sigma_min=True):
        return progs.teacher(teacher_params, z, sigma_data, k, final_sigma_min)

    def gen(g_params, z):
        return progs.generate(g_params, z, sigma_data)

    z_eval = jax.random.normal(k_eval, (config.n_eval, *shape))
    teacher_imgs = map_in_chunks(teacher, (z_eval,), CHUNK)
    scores, feats = {}, {}
    scores["teacher"], feats["teacher"] = evaluator.score(teacher_imgs)
    samples = {"teacher": teacher_imgs[:64]}
    d_init = progs.discriminator(d_cls)[1]
    onestep = map_in_chunks(functools.partial(gen, teacher_params), (z_eval,), CHUNK)
    scores["onestep_pretrained"], feats["onestep_pretrained"] = evaluator.score(onestep)
    samples["onestep_pretrained"] = onestep[:64]
    timings["references"] = time.perf_counter() - t0

    # KD pairs (z, T(z)) with the 35-NFE teacher
    t0 = time.perf_counter()
    kd_pairs = None
    if {"kd", "kd_gan"} & set(config.variants):
        z_kd = jax.random.normal(k_kd, (config.kd_pairs, *shape))
        kd_pairs = (z_kd, map_in_chunks(teacher, (z_kd,), CHUNK))
    timings["kd_pairs"] = time.perf_counter() - t0
    pbar.update(1)

    # 4. fine-tuning variants, equal budget; FD curve of each
    curve_at = np.unique(
        np.linspace(0, config.finetune_steps, config.curve_points + 1).round().astype(int)[1:]
    )
    fd_curve, frozen, finals = {}, None, {}
    # every model's evaluation images come from the same noises z_eval: paired for the bootstrap
    for variant in config.variants:
        t0 = time.perf_counter()
        ft = progs.finetuner(variant, x_train, d_cls, sigma_data, kd_pairs)
        g0 = jax.jit(net.init)(jax.random.fold_in(k_pre_init, 1), x_train[:1], jnp.zeros((1,))) if (
            variant == "scratch_gan") else teacher_params  # fmt: skip
        d0 = jax.jit(d_init)(jax.random.fold_in(k_ft, 7), x_train[:2])
        # step t draws from fold_in(fold_in(k_ft, 0), t)
        state = jax.jit(ft.init)(jax.random.fold_in(k_ft, 0), g0, d0)
        if ft.mask is not None:
            frozen = G.frozen_fraction(teacher_params, ft.mask)
        program = "d2o" if variant == "scratch_gan" else variant  # same loop, other init
        step = functools.partial(progs.finetune_step, program, data=x_train, d_cls=d_cls,
                                 sigma_data=sigma_data, kd_pairs=kd_pairs)  # fmt: skip
        done, curve = 0, []
        for stop in curve_at:
            state, _ = G.run_loop(step, state, int(stop) - done)
            done = int(stop)
            imgs = map_in_chunks(functools.partial(gen, state.ema), (z_eval,), CHUNK)
            if done < config.finetune_steps:
                curve.append(evaluator.fd(imgs))
        # the last point is the end of the budget: the variant's scores
        scores[variant], feats[variant] = evaluator.score(imgs)
        curve.append(scores[variant]["fd"])
        fd_curve[variant] = {"images": (curve_at * config.batch).tolist(), "fd": curve}
        samples[variant] = imgs[:64]
        finals[variant] = state.ema
        timings[variant] = time.perf_counter() - t0
        pbar.update(1)

    # 5. local minima: teacher k steps vs the D2O student
    t0 = time.perf_counter()
    local = None
    if "d2o" in finals and config.local_minima_k:
        z_a = jax.random.normal(k_lm, (config.n_eval, *shape))
        student = map_in_chunks(functools.partial(gen, finals["d2o"]), (z_a,), CHUNK)
        f_student_indep = feats["d2o"]  # images from the independent noise z_eval
        local = {"k": list(config.local_minima_k), "fd_teacher_data": [],
                 "fd_teacher_student": [], "paired_sq_dist": []}  # fmt: skip
        for k in config.local_minima_k:
            t_k = map_in_chunks(lambda z, k=k: teacher(z, k, False), (z_a,), CHUNK)
            f_t = evaluator.features(t_k)[0]
            local["fd_teacher_data"].append(float(evaluator.fd_features(f_t)))
            local["fd_teacher_student"].append(float(G.frechet_distance(f_t, f_student_indep)))
            local["paired_sq_dist"].append(float(jnp.mean(G.l2_distance(t_k, student)) * 64))
        local["fd_student_data"] = scores["d2o"]["fd"]
    timings["local_minima"] = time.perf_counter() - t0
    pbar.update(1)

    return {
        "feats": feats,
        "ref_feats": np.asarray(evaluator.ref_feats),
        "scores": scores,
        "fd_curve": fd_curve,
        "frozen_fraction": frozen,
        "local_minima": local,
        "classifier_accuracy": cls_acc,
        "fd_train_floor": evaluator.train_floor,
        "sigma_data": float(sigma_data),
        "pretrain_loss_last": float(jnp.mean(pre_metrics["loss"][-100:])),
        "n_params": int(sum(p.size for p in jax.tree_util.tree_leaves(teacher_params))),
        "timings": timings,
        "samples": {k: np.asarray(v) for k, v in samples.items()},
    }


def _mean(values):
    values = [v for v in values if v is not None]
    return float(np.mean(values)) if values else None


def run(config: Config, out_dir: Path) -> dict:
    unknown = set(config.variants) - set(VARIANTS)
    if unknown:
        raise ValueError(f"gan_onestep: unknown `variants` {sorted(unknown)}; known: {VARIANTS}.")
    if "d2o" not in config.variants:
        raise ValueError("gan_onestep: `variants` must include 'd2o' (the reference student).")
    seeds = [config.seed + i for i in range(config.n_seeds)]
    per_seed = []
    stages = 4 + len(config.variants)
    with tqdm(total=stages * len(seeds), desc="gan_onestep", disable=None) as pbar:
        for seed in seeds:
            per_seed.append(_run_seed(config, seed, pbar))

    models = ["teacher", "onestep_pretrained", *config.variants]
    fd = {m: _mean([r["scores"][m]["fd"] for r in per_seed]) for m in models}
    fd_per_seed = {m: [r["scores"][m]["fd"] for r in per_seed] for m in models}
    scores = {
        key: {m: _mean([r["scores"][m][key] for r in per_seed]) for m in models}
        for key in ("coverage", "classifier_score", "hf_power_ratio")
    }
    fd_curve = {
        v: {
            "images": per_seed[0]["fd_curve"][v]["images"],
            "fd": np.mean([r["fd_curve"][v]["fd"] for r in per_seed], axis=0).tolist(),
        }
        for v in per_seed[0]["fd_curve"]
    }
    claims = _claims(config, per_seed, models, fd)
    local = None
    if per_seed[0]["local_minima"] is not None:
        keys = ("fd_teacher_data", "fd_teacher_student", "paired_sq_dist")
        local = {"k": per_seed[0]["local_minima"]["k"]}
        local.update({k: np.mean([r["local_minima"][k] for r in per_seed], axis=0).tolist()
                      for k in keys})  # fmt: skip
        local["spearman_fd_teacher_student"] = float(
            spearmanr(local["k"], local["fd_teacher_student"]).statistic
        )
        local["spearman_paired"] = float(spearmanr(local["k"], local["paired_sq_dist"]).statistic)
        fdd = np.asarray(local["fd_teacher_data"])[np.asarray(local["k"]) >= 4]
        local["fd_teacher_data_rel_range"] = (
            float((fdd.max() - fdd.min()) / fdd.mean()) if fdd.size else None
        )

    metrics = {
        "fd": fd,
        "fd_per_seed": fd_per_seed,
        "claims": claims,
        "frozen_fraction": per_seed[0]["frozen_fraction"],
        "images_seen": config.finetune_steps * config.batch,
        "fd_curve": fd_curve,
        "local_minima": local,
        "hf_power_ratio": scores["hf_power_ratio"],
        "coverage": scores["coverage"],
        "classifier_score": scores["classifier_score"],
        "fd_train_floor": _mean([r["fd_train_floor"] for r in per_seed]),
        "classifier_accuracy": {
            k: _mean([r["classifier_accuracy"][k] for r in per_seed])
            for k in ("d_features", "metric")
        },
        "sigma_data": per_seed[0]["sigma_data"],
        "n_params": per_seed[0]["n_params"],
        "pretrain_loss_last": _mean([r["pretrain_loss_last"] for r in per_seed]),
        "ratios": {
            "onestep_over_kd": fd["onestep_pretrained"] / fd["kd"] if "kd" in fd else None,
            "kd_over_d2o": fd["kd"] / fd["d2o"] if "kd" in fd else None,
            "d2o_f_over_d2o": fd["d2o_f"] / fd["d2o"] if "d2o_f" in fd else None,
            "d2o_over_teacher": fd["d2o"] / fd["teacher"],
            "d2o_over_onestep": fd["d2o"] / fd["onestep_pretrained"],
            "scratch_over_d2o": fd["scratch_gan"] / fd["d2o"] if "scratch_gan" in fd else None,
        },
        "timings": {k: _mean([r["timings"][k] for r in per_seed]) for k in per_seed[0]["timings"]},
    }
    _figures(per_seed[0]["samples"], metrics, out_dir)
    _report(metrics, config, out_dir)
    return metrics


def _claims(config: Config, per_seed: list, models: list, fd: dict) -> dict:
    """Every ordering claim whose models ran: its FD contrast (seed mean), the 95% interval of the
    paired seed-and-sample bootstrap (:func:`G.fd_bootstrap`, ``n_boot`` replicates) and
    ``met`` = the interval's lower end is above 0."""
    feats = jnp.asarray(np.stack([[r["feats"][m] for m in models] for r in per_seed]))
    ref = jnp.asarray(np.stack([r["ref_feats"] for r in per_seed]))
    key = jax.random.fold_in(jax.random.key(config.seed), 10_000)
    reps = np.asarray(jax.jit(G.fd_bootstrap, static_argnums=3)(key, feats, ref, config.n_boot))
    out = {}
    for name, (text, w) in CLAIMS.items():
        if not set(w) <= set(models):
            continue
        weights = np.array([w.get(m, 0.0) for m in models])
        lo, hi = np.quantile(reps @ weights, [0.025, 0.975])
        point = float(sum(c * fd[m] for m, c in w.items()))
        out[name] = {"claim": text, "weights": w, "contrast": point,
                     "ci95": [float(lo), float(hi)], "met": bool(lo > 0)}  # fmt: skip
    return out


def _figures(samples: dict, metrics: dict, out_dir: Path) -> None:
    names = list(samples)
    fig, axes = plt.subplots(1, len(names), figsize=(2.2 * len(names), 2.6))
    for ax, name in zip(np.atleast_1d(axes), names, strict=True):
        imgs = np.asarray(samples[name])[:36, :, :, 0]
        grid = imgs.reshape(6, 6, 8, 8).transpose(0, 2, 1, 3).reshape(48, 48)
        ax.imshow(grid, cmap="gray_r", vmin=-1, vmax=1)
        ax.set_title(f"{name}\nFD {metrics['fd'][name]:.2f}", fontsize=8)
        ax.axis("off")
    _common.save_figure(fig, out_dir, "samples")

    if metrics["fd_curve"]:
        fig, ax = plt.subplots(figsize=(4.5, 3.2))
        for v, c in metrics["fd_curve"].items():
            ax.plot(c["images"], c["fd"], marker="o", label=v)
        ax.axhline(metrics["fd"]["teacher"], color="gray", ls="--", label="teacher (35 NFE)")
        ax.set_xlabel("images seen")
        ax.set_ylabel("digits-FD (EMA generator)")
        ax.set_yscale("log")
        ax.legend(fontsize=8)
        _common.save_figure(fig, out_dir, "fd_curve")

    local = metrics["local_minima"]
    if local is not None:
        fig, ax = plt.subplots(figsize=(4.5, 3.2))
        ax.plot(local["k"], local["fd_teacher_student"], marker="o", label="FD(T_k, G)")
        ax.plot(local["k"], local["fd_teacher_data"], marker="s", label="FD(T_k, data)")
        ax.axhline(metrics["fd"]["d2o"], color="gray", ls="--", label="FD(G, data)")
        ax.set_xlabel("teacher steps k")
        ax.set_ylabel("digits-FD")
        ax.legend(fontsize=8)
        _common.save_figure(fig, out_dir, "local_minima")


def _report(metrics: dict, config: Config, out_dir: Path) -> None:
    fd = metrics["fd"]
    rows = [
        [m, fd[m], metrics["coverage"][m], metrics["classifier_score"][m],
         metrics["hf_power_ratio"][m]]
        for m in fd
    ]  # fmt: skip
    table = _common.markdown_table(
        ["model", "digits-FD", "class coverage", "classifier score", "high-band power ratio"], rows
    )
    r = metrics["ratios"]
    lines = [
        f"Seeds {config.seed}..{config.seed + config.n_seeds - 1}; {metrics['images_seen']} images "
        "per fine-tuning variant; FD floor (real images the metric network trained on vs the "
        f"reference) "
        f"{metrics['fd_train_floor']:.3g}; D2O-F frozen fraction {metrics['frozen_fraction']}.",
        f"FD ratios: one-step pre-trained / KD {r['onestep_over_kd']}, KD / D2O "
        f"{r['kd_over_d2o']}, D2O-F / D2O {r['d2o_f_over_d2o']}, D2O / teacher "
        f"{r['d2o_over_teacher']:.3g}, scratch / D2O {r['scratch_over_d2o']}.",
    ]
    claims = _common.markdown_table(
        ["claim", "FD contrast (> 0 if it holds)", "95% bootstrap interval", "status"],
        [[c["claim"], c["contrast"], f"[{c['ci95'][0]:.3g}, {c['ci95'][1]:.3g}]",
          "met" if c["met"] else "not met (interval reaches 0)"]
         for c in metrics["claims"].values()],
    )  # fmt: skip
    lines.append(
        "Ordering claims (paired bootstrap over seeds and samples, "
        f"{config.n_boot} replicates; met only if the interval excludes 0):\n\n" + claims
    )
    if metrics["fd_curve"]:
        curve = metrics["fd_curve"]
        first = next(iter(curve.values()))
        lines.append(
            "FD of the EMA generator vs images seen (seed mean):\n\n"
            + _common.markdown_table(
                ["images", *curve],
                [[n, *(c["fd"][i] for c in curve.values())] for i, n in enumerate(first["images"])],
            )  # fmt: skip
        )
    local = metrics["local_minima"]
    if local is not None:
        lm = _common.markdown_table(
            ["k", "FD(T_k, data)", "FD(T_k, G_d2o)", "paired ||T_k(z) - G(z)||^2"],
            [list(t) for t in zip(local["k"], local["fd_teacher_data"],
                                  local["fd_teacher_student"], local["paired_sq_dist"],
                                  strict=True)],
        )  # fmt: skip
        lines.append("Local minima (teacher k steps vs the D2O student):\n\n" + lm)
    _common.write_report(out_dir, "D2O: one-step generation by GAN fine-tuning", table, *lines)

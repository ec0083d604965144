"""DGBFGP on Health-Digits: future and new-subject prediction, epoch time vs N, interpretability.

Run: ``python -m experiments run gp_vae --preset quick`` (about 2 minutes on 2 CPU cores) or
``--preset full``.

Data (:mod:`jaxlab.probabilistic.gp_vae.data`): ``P`` subjects x ``T = 20`` times of warped 8x8
digits. Splits: 20% of subjects held out entirely (new-subject task: covariates only, subject
effects at their prior mean 0); of the rest, the last 25% of each subject's times are the future
task; the remaining observations train every model.

Models, same decoder architecture and optimiser settings:

- ``dgbfgp``: the basis-function GP prior VAE (components: subject id, SE(t), SE(age), sex,
  disease, SE(t) x disease, SE(t) x id; ``M = 24``, ``J = 4``), exact ELBO, NumPyro SVI;
- ``exact_gpvae``: amortised encoder + the exact additive GP prior over all training points
  (Cholesky, ``O(N^3)`` per epoch);
- ``cvae``: amortised conditional VAE with a learned prior ``p(z | x)``;
- ``mlp``: covariates -> image regression.

Metrics: ``mse_future`` and ``mse_new_subject`` (per pixel, against the observed images),
``epoch_seconds`` = {model: {N: s}} for ``dgbfgp`` and ``exact_gpvae`` over ``scaling_sizes``
(compile excluded, median of ``timing_repeats``; subjects are added with ``N``, 20 times each),
their ``loglog_slope``, and ``component_corr``:
the correlation between the principal-axis angle of images decoded from the SE(t) component alone
and the true shared rotation ``25 sin(2 pi t)``. The full preset averages 3 seeds and adds the
ablation without the SE(t) x disease component (future MSE of diseased subjects).

Subject components use ``local_subject_samples`` by default: with the official estimator every
SVI step samples, scores and differentiates all ``P x M x L`` weights of the SE(t) x subject
component, so with subjects growing with ``N`` the step cost grows with ``N`` and the epoch time
was superlinear (log-log slope 1.5-2.0 over N = 1k-4k, quick seeds 0-2); ``--set
local_subject_samples=false`` reproduces that. The timing sweep also reports
``dgbfgp_without_t_x_id`` (the model without that component) as a reference.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from experiments import _common
from experiments._config import COUNT, NONNEG, POSITIVE, Range
from jaxlab.core.timing import time_call
from jaxlab.core.training import scan_steps
from jaxlab.probabilistic import gp_vae as G
from jaxlab.probabilistic.gp_vae import baselines as B
from jaxlab.probabilistic.gp_vae.data import TIME_MEAN, TIME_STD, health_digits, splits

NAME = "gp_vae"
PAPER = (
    "Balik et al., Bayesian Basis Function Approximation for Scalable GP Priors in DGMs (ICML 2025)"
)
CLAIM = "A basis-function GP prior VAE predicts future and new-subject images better, linear in N"
MODELS = ("dgbfgp", "exact_gpvae", "cvae", "mlp")


@dataclasses.dataclass(frozen=True)
class Config:
    """Health-Digits sizes, model and training settings.

    Attributes:
      seed: first seed; ``n_seeds`` consecutive seeds are averaged.
      n_subjects, n_times: data size (``N = P T``).
      latent_dim, num_basis, boundary, hidden, dropout: model sizes (shared where they apply).
      epochs, batch_size, learning_rate, num_particles: DGBFGP / CVAE / MLP training.
      exact_epochs: full-batch steps of the exact GP-prior VAE.
      scaling_sizes: ``N`` values of the epoch-time sweep; timing_repeats: timed epochs per size.
      exact_max_n: largest ``N`` at which the exact GP-prior VAE's epoch is timed (its epoch at
        ``N = 16000`` would take several minutes and gigabytes of memory; the spec's scaling check
        stops at "more than 60 s per epoch").
      ablation: also train DGBFGP without the SE(t) x disease component.
      control_epochs: if set, ``(dgbfgp_epochs, exact_epochs)`` of a convergence control with
        ``control_subjects`` subjects (first seed): both models trained far longer than in the
        main comparison, where the exact model's cubic epoch limits its step budget.
      local_subject_samples: estimate the subject components' ELBO terms from the minibatch
        (see :class:`~jaxlab.probabilistic.gp_vae.GPVAEConfig`); False reproduces the official
        estimator, which samples and scores every subject's weights at every step.
    """

    seed: int = 0
    n_seeds: int = 1
    n_subjects: int = 40
    n_times: int = 20
    latent_dim: int = 8
    num_basis: int = 24
    boundary: float = 4.0
    hidden: tuple[int, ...] = (64, 64)
    dropout: float = 0.1
    epochs: int = 60
    batch_size: int = 128
    learning_rate: float = 5e-3
    num_particles: int = 3
    exact_epochs: int = 300
    local_subject_samples: bool = True
    scaling_sizes: tuple[int, ...] = (1000, 2000, 4000)
    timing_repeats: int = 5
    exact_max_n: int = 8000
    ablation: bool = False
    control_epochs: tuple[int, int] | None = None
    control_subjects: int = 40


# The standardised time reaches sqrt(3) in magnitude, so the SE basis domain must be wider; the
# splits need 2 subjects (one held out) and 3 times (one future point) to leave every set
# non-empty.
LIMITS = {
    "n_seeds": COUNT,
    "n_subjects": Range(2),
    "n_times": Range(3),
    "latent_dim": COUNT,
    "num_basis": COUNT,
    "boundary": Range(math.sqrt(3.0), low_open=True),
    "hidden": COUNT,
    "dropout": Range(0, 1, high_open=True),
    "epochs": COUNT,
    "batch_size": COUNT,
    "learning_rate": POSITIVE,
    "num_particles": COUNT,
    "exact_epochs": COUNT,
    "scaling_sizes": COUNT,
    "timing_repeats": COUNT,
    "exact_max_n": NONNEG,
    "control_epochs": COUNT,
    "control_subjects": Range(2),
}


PRESETS = {
    "quick": Config(),
    "full": Config(
        n_seeds=3,
        n_subjects=200,
        epochs=300,
        exact_epochs=200,
        scaling_sizes=(1000, 2000, 4000, 8000, 16000),
        ablation=True,
        control_epochs=(960, 4800),
    ),  # fmt: skip
}


def model_config(cfg: Config, n_subjects: int, exclude: tuple[str, ...] = ()) -> G.GPVAEConfig:
    """The DGBFGP configuration of this experiment for ``n_subjects`` subjects
    (:func:`jaxlab.probabilistic.gp_vae.health_digits_config`, minus the ``exclude`` components)."""
    return G.health_digits_config(
        n_subjects, cfg.num_basis, cfg.boundary, exclude, latent_dim=cfg.latent_dim,
        decoder_hidden=cfg.hidden, dropout=cfg.dropout, num_particles=cfg.num_particles,
        local_subject_samples=cfg.local_subject_samples,
    )  # fmt: skip


def _dgbfgp(cfg: Config, model_cfg: G.GPVAEConfig, n_train: int):
    return _model_and_trainer(model_cfg, n_train, min(cfg.batch_size, n_train), cfg.learning_rate)


# One model, trainer and compiled program per distinct setting: a fit repeated with the same
# setting (the convergence control at the main settings, repeated seeds) compiles nothing new.
@functools.lru_cache(maxsize=32)
def _model_and_trainer(model_cfg: G.GPVAEConfig, n_train: int, batch: int, learning_rate: float):
    model = G.make_model(model_cfg)
    return model, G.make_trainer(model, n_train, batch, learning_rate)


@functools.lru_cache(maxsize=32)
def _training_run(trainer: G.GPVAETrainer, epochs: int):
    return jax.jit(lambda s: scan_steps(trainer.step, s, epochs))


@functools.lru_cache(maxsize=32)
def _one_epoch(trainer: G.GPVAETrainer):
    return jax.jit(lambda s: trainer.step(s)[0])


def _fit_dgbfgp(cfg, model_cfg, cov, y, key):
    model, trainer = _dgbfgp(cfg, model_cfg, cov.num_rows)
    state = trainer.init(key, cov, y)
    state, metrics = _training_run(trainer, cfg.epochs)(state)
    return model, trainer.params(state), np.asarray(metrics["loss"])


def _mse(pred, y) -> float:
    return float(jnp.mean((jnp.asarray(pred) - jnp.asarray(y)) ** 2))


def principal_angle(images: np.ndarray) -> np.ndarray:
    """Orientation (degrees) of each ``[64]`` image's intensity mass (second moments)."""
    yy, xx = np.mgrid[0:8, 0:8].astype(np.float64)
    w = np.clip(images.reshape(-1, 8, 8), 0.0, None) + 1e-9
    m = w.sum(axis=(1, 2))
    cx, cy = (w * xx).sum((1, 2)) / m, (w * yy).sum((1, 2)) / m
    mu20 = (w * (xx - cx[:, None, None]) ** 2).sum((1, 2)) / m
    mu02 = (w * (yy - cy[:, None, None]) ** 2).sum((1, 2)) / m
    mu11 = (w * (xx - cx[:, None, None]) * (yy - cy[:, None, None])).sum((1, 2)) / m
    return np.degrees(0.5 * np.arctan2(2 * mu11, mu20 - mu02))


def _one_seed(cfg: Config, seed: int, models: tuple[str, ...] = MODELS) -> dict:
    key = jax.random.key(seed)
    k_data, k_split, k_dgb, k_exact, k_cvae, k_mlp, k_abl = jax.random.split(key, 7)
    data = health_digits(k_data, cfg.n_subjects, cfg.n_times)
    train, future, new = splits(data, k_split)
    cov = data.covariates()
    y = jnp.asarray(data.images)
    model_cfg = model_config(cfg, cfg.n_subjects)
    comps = model_cfg.components
    c_tr, c_fu, c_new = cov.take(train), cov.take(future), cov.take(new)
    res, secs = {}, {}

    start = time.perf_counter()
    model, params, dgb_losses = _fit_dgbfgp(cfg, model_cfg, c_tr, y[train], k_dgb)
    secs["dgbfgp"] = time.perf_counter() - start
    res["dgbfgp"] = (G.predict(model, params, c_fu), G.predict(model, params, c_new, True))

    if "exact_gpvae" in models:
        start = time.perf_counter()
        exact, losses, _ = B.fit_exact_gpvae(
            k_exact, comps, c_tr, y[train], cfg.latent_dim, cfg.hidden, cfg.exact_epochs,
            cfg.learning_rate,
        )  # fmt: skip
        jax.block_until_ready(losses)  # the losses come out of the same jitted training run
        secs["exact_gpvae"] = time.perf_counter() - start
        res["exact_gpvae"] = (exact.predict(c_fu), exact.predict(c_new))

    feats = lambda c, new_subjects=False: B.covariate_features(c, cfg.n_subjects, 2, new_subjects)  # noqa: E731
    if "cvae" in models:
        start = time.perf_counter()
        cvae, losses = B.fit_cvae(
            k_cvae, feats(c_tr), y[train], cfg.latent_dim, cfg.hidden, cfg.dropout, cfg.epochs,
            cfg.batch_size, cfg.learning_rate,
        )  # fmt: skip
        jax.block_until_ready(losses)
        secs["cvae"] = time.perf_counter() - start
        res["cvae"] = (cvae(feats(c_fu)), cvae(feats(c_new, True)))

    if "mlp" in models:
        start = time.perf_counter()
        mlp, losses = B.fit_regression(k_mlp, feats(c_tr), y[train], cfg.hidden, cfg.epochs,
                                       cfg.batch_size, cfg.learning_rate)  # fmt: skip
        jax.block_until_ready(losses)
        secs["mlp"] = time.perf_counter() - start
        res["mlp"] = (mlp.predict(feats(c_fu)), mlp.predict(feats(c_new, True)))

    out = {
        "mse_future": {m: _mse(p[0], y[future]) for m, p in res.items()},
        "mse_new_subject": {m: _mse(p[1], y[new]) for m, p in res.items()},
        "train_seconds": secs,
    }
    # interpretability: decode the SE(t) component alone over a time sweep
    t = np.linspace(0.0, 1.0, 41)
    sweep = G.Covariates(
        jnp.asarray(np.stack([(t - TIME_MEAN) / TIME_STD, np.zeros_like(t)], 1), jnp.float32),
        jnp.zeros((t.size, 3), jnp.int32),
    )
    z_t = G.component_latents(G.posterior_mean_weights(model, params), sweep, comps)["t"]
    imgs = np.asarray(model.decoder.apply({"params": params["decoder$params"]}, z_t))
    angle = principal_angle(imgs)
    out["component_corr"] = float(np.corrcoef(angle, 25.0 * np.sin(2 * np.pi * t))[0, 1])
    diseased = np.asarray(data.disease[future] == 1)
    out["mse_future_diseased"] = _mse(np.asarray(res["dgbfgp"][0])[diseased], y[future][diseased])
    if cfg.ablation:
        no_int = model_config(cfg, cfg.n_subjects, exclude=("t_x_disease",))
        m2, p2, _ = _fit_dgbfgp(cfg, no_int, c_tr, y[train], k_abl)
        pred = np.asarray(G.predict(m2, p2, c_fu))
        out["ablation_no_t_x_disease"] = {
            "mse_future": _mse(pred, y[future]),
            "mse_future_diseased": _mse(pred[diseased], y[future][diseased]),
        }
    out["_plots"] = {
        "future_truth": np.asarray(y[future][:8]),
        "future_pred": {m: np.asarray(p[0][:8]) for m, p in res.items()},
        "sweep_images": imgs,
        "sweep_t": t,
        "sweep_angle": angle,
        "dgbfgp_loss": dgb_losses,
    }
    return out


def _convergence_control(cfg: Config, seed: int) -> dict:
    """Future / new-subject MSE of DGBFGP and the exact GP-prior VAE trained to convergence at the
    ``cfg.control_subjects`` subjects, with ``cfg.control_epochs``."""
    small = dataclasses.replace(cfg, n_subjects=cfg.control_subjects, epochs=cfg.control_epochs[0],
                                exact_epochs=cfg.control_epochs[1], ablation=False)  # fmt: skip
    r = _one_seed(small, seed, models=("dgbfgp", "exact_gpvae"))
    return {
        "n_subjects": small.n_subjects,
        "epochs": {"dgbfgp": small.epochs, "exact_gpvae": small.exact_epochs},
        "mse_future": r["mse_future"],
        "mse_new_subject": r["mse_new_subject"],
        "train_seconds": r["train_seconds"],
    }


def _time_epochs(cfg: Config, seed: int) -> dict:
    """Seconds per epoch of DGBFGP and the exact GP-prior VAE vs N: the median of
    ``timing_repeats`` blocked calls after compilation and two warm-up calls
    (:func:`jaxlab.core.timing.time_call`, the benchmarks' timer)."""
    times = {"dgbfgp": {}, "dgbfgp_without_t_x_id": {}, "exact_gpvae": {}}
    for n in cfg.scaling_sizes:
        p = max(2, n // cfg.n_times)
        data = health_digits(jax.random.key(seed + n), p, cfg.n_times)
        cov, y = data.covariates(), jnp.asarray(data.images)
        full = model_config(cfg, p)
        no_subject_time = model_config(cfg, p, exclude=("t_x_id",))
        for name, mc in (("dgbfgp", full), ("dgbfgp_without_t_x_id", no_subject_time)):
            _, trainer = _dgbfgp(cfg, mc, cov.num_rows)
            state = trainer.init(jax.random.key(1), cov, y)
            timing = time_call(_one_epoch(trainer), state, n_warmup=2, n_runs=cfg.timing_repeats)
            times[name][str(n)] = timing.median_s

        if n > cfg.exact_max_n:
            continue
        exact, _, epoch = B.fit_exact_gpvae(jax.random.key(2), full.components, cov, y,
                                            cfg.latent_dim, cfg.hidden, epochs=0)  # fmt: skip
        timing = time_call(epoch, exact.params, jax.random.key(3), n_warmup=2,
                           n_runs=cfg.timing_repeats)  # fmt: skip
        times["exact_gpvae"][str(n)] = timing.median_s
    return times


def loglog_slope(times: dict) -> float | None:
    """The log-log least-squares slope of seconds per epoch against N (None below two sizes)."""
    if len(times) < 2:
        return None
    n = np.array([float(k) for k in times])
    t = np.array(list(times.values()))
    return float(np.polyfit(np.log(n), np.log(t), 1)[0])


def run(config: Config, out_dir: Path) -> dict:
    seeds = [config.seed + i for i in range(config.n_seeds)]
    per_seed = [_one_seed(config, s) for s in seeds]
    plots = per_seed[0].pop("_plots")
    for r in per_seed[1:]:
        r.pop("_plots")

    def mean_of(key):
        return {m: float(np.mean([r[key][m] for r in per_seed])) for m in per_seed[0][key]}

    times = _time_epochs(config, config.seed)
    metrics = {
        "mse_future": mean_of("mse_future"),
        "mse_new_subject": mean_of("mse_new_subject"),
        "train_seconds": mean_of("train_seconds"),
        "epoch_seconds": times,
        "loglog_slope": {m: loglog_slope(t) for m, t in times.items()},
        "component_corr": float(np.mean([r["component_corr"] for r in per_seed])),
        "mse_future_diseased": float(np.mean([r["mse_future_diseased"] for r in per_seed])),
        "seeds": seeds,
        "per_seed": per_seed,
    }
    if config.control_epochs is not None:
        metrics["convergence_control"] = _convergence_control(config, config.seed)
    if config.ablation:
        metrics["ablation_no_t_x_disease"] = {
            k: float(np.mean([r["ablation_no_t_x_disease"][k] for r in per_seed]))
            for k in ("mse_future", "mse_future_diseased")
        }
    _figures(plots, times, out_dir)
    _report(metrics, config, out_dir)
    return metrics


def _figures(plots: dict, times: dict, out_dir: Path) -> None:
    models = list(plots["future_pred"])
    k = len(plots["future_truth"])
    fig, axes = plt.subplots(len(models) + 1, k, figsize=(k, 1.1 * (len(models) + 1)),
                             squeeze=False)  # fmt: skip
    for j in range(k):
        axes[0, j].imshow(plots["future_truth"][j].reshape(8, 8), cmap="gray_r")
        for i, m in enumerate(models, 1):
            axes[i, j].imshow(plots["future_pred"][m][j].reshape(8, 8), cmap="gray_r")
    for i, label in enumerate(["truth", *models]):
        axes[i, 0].set_ylabel(label, fontsize=7)
    for ax in axes.ravel():
        ax.set_xticks([])
        ax.set_yticks([])
    _common.save_figure(fig, out_dir, "future_predictions")

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    idx = np.linspace(0, len(plots["sweep_t"]) - 1, 9).astype(int)
    strip = np.concatenate([plots["sweep_images"][i].reshape(8, 8) for i in idx], axis=1)
    axes[0].imshow(strip, cmap="gray_r")
    axes[0].set_title("decoded SE(t) component, t = 0..1", fontsize=8)
    axes[0].axis("off")
    axes[1].plot(plots["sweep_t"], plots["sweep_angle"], label="principal-axis angle")
    axes[1].plot(plots["sweep_t"], 25 * np.sin(2 * np.pi * plots["sweep_t"]), "--",
                 label="true shared rotation")  # fmt: skip
    axes[1].set_xlabel("t")
    axes[1].legend(fontsize=7)
    _common.save_figure(fig, out_dir, "time_component")

    fig, ax = plt.subplots(figsize=(4.5, 3.5))
    for m, t in times.items():
        n = [int(k) for k in t]
        slope = loglog_slope(t)
        label = m if slope is None else f"{m} (slope {slope:.2f})"
        ax.loglog(n, list(t.values()), "o-", label=label)
    ax.set_xlabel("N")
    ax.set_ylabel("seconds per epoch")
    ax.legend(fontsize=7)
    _common.save_figure(fig, out_dir, "epoch_time")


def _report(metrics: dict, config: Config, out_dir: Path) -> None:
    rows = [
        [m, metrics["mse_future"][m], metrics["mse_new_subject"][m], metrics["train_seconds"][m]]
        for m in MODELS
    ]
    table = _common.markdown_table(["model", "MSE future", "MSE new subject", "train s"], rows)
    scaling = _common.markdown_table(
        ["model", *[f"N={n}" for n in config.scaling_sizes], "log-log slope"],
        [
            [m, *[t.get(str(n), "-") for n in config.scaling_sizes], metrics["loglog_slope"][m]]
            for m, t in metrics["epoch_seconds"].items()
        ],  # fmt: skip
    )
    text = (
        f"Health-Digits, {config.n_subjects} subjects x {config.n_times} times, seeds "
        f"{metrics['seeds']}, {config.epochs} epochs (exact GP-prior VAE: {config.exact_epochs} "
        f"full-batch steps). SE(t)-component angle correlation with the "
        f"true rotation: {metrics['component_corr']:.3f}."
    )
    sections = [table, text, "Seconds per epoch:", scaling,
                "![future](future_predictions.png)", "![time component](time_component.png)",
                "![epoch time](epoch_time.png)"]  # fmt: skip
    if "ablation_no_t_x_disease" in metrics:
        a = metrics["ablation_no_t_x_disease"]
        sections.append(
            f"Ablation without SE(t) x disease: future MSE of diseased subjects "
            f"{a['mse_future_diseased']:.4f} vs {metrics['mse_future_diseased']:.4f} with it."
        )
    if "convergence_control" in metrics:
        c = metrics["convergence_control"]
        sections.append(
            f"Convergence control ({c['n_subjects']} subjects, seed {metrics['seeds'][0]}; epochs "
            f"{c['epochs']}): future MSE dgbfgp {c['mse_future']['dgbfgp']:.4f} vs exact "
            f"{c['mse_future']['exact_gpvae']:.4f}; new-subject MSE "
            f"{c['mse_new_subject']['dgbfgp']:.4f} vs {c['mse_new_subject']['exact_gpvae']:.4f}."
        )
    _common.write_report(out_dir, "DGBFGP on Health-Digits", *sections)

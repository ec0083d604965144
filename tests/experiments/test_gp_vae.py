"""Tiny end-to-end run of the gp_vae experiment: every model's metrics exist and are sane."""

import dataclasses
import json

import numpy as np

from experiments import gp_vae
from experiments._runner import Experiment, run_experiment

TINY = dataclasses.replace(
    gp_vae.PRESETS["quick"],
    n_subjects=6,
    n_times=5,
    latent_dim=2,
    num_basis=4,
    hidden=(8,),
    epochs=2,
    batch_size=8,
    num_particles=1,
    exact_epochs=2,
    scaling_sizes=(40, 80, 120),
    exact_max_n=80,
    timing_repeats=1,
    ablation=True,
    control_epochs=(1, 1),
    control_subjects=6,
)


def test_tiny_gp_vae_run(tmp_path):
    exp = dataclasses.replace(Experiment.from_module(gp_vae), presets={"quick": TINY})
    run_experiment(exp, seed=2, out_dir=tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    for key in ("mse_future", "mse_new_subject"):
        assert set(metrics[key]) == set(gp_vae.MODELS), key
        assert all(np.isfinite(v) and v >= 0 for v in metrics[key].values()), key
    assert set(metrics["epoch_seconds"]) == {"dgbfgp", "dgbfgp_without_t_x_id", "exact_gpvae"}
    assert set(metrics["epoch_seconds"]["dgbfgp"]) == {"40", "80", "120"}
    assert set(metrics["epoch_seconds"]["exact_gpvae"]) == {"40", "80"}  # exact_max_n
    control = metrics["convergence_control"]
    assert set(control["mse_future"]) == {"dgbfgp", "exact_gpvae"}
    assert np.isfinite(metrics["loglog_slope"]["exact_gpvae"])
    assert -1.0 <= metrics["component_corr"] <= 1.0
    assert metrics["ablation_no_t_x_disease"]["mse_future"] > 0
    for name in ("report.md", "future_predictions.png", "time_component.png", "epoch_time.png"):
        assert (tmp_path / name).exists(), name

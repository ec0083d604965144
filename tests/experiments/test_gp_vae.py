"""Tiny end-to-end run of the gp_vae experiment: every model, output and code path, and the
metrics tied to each other and to their definitions.

The convergence control runs with the main comparison's settings (same subjects, epochs and seed),
so it must reproduce the main run's DGBFGP and exact GP-prior VAE errors exactly.
"""

import dataclasses
import json

import numpy as np
import pytest

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
    scaling_sizes=(20,),  # one size: two DGBFGP trainers to compile, not four (slopes: below)
    exact_max_n=20,
    timing_repeats=1,
    ablation=True,
    control_epochs=(2, 2),  # = (epochs, exact_epochs): the control repeats the main fits
    control_subjects=6,
)


def test_principal_angle_known_answers():
    diagonal, horizontal = np.eye(8), np.zeros((8, 8))
    horizontal[3] = 1.0
    images = np.stack([diagonal, horizontal, diagonal[:, ::-1], horizontal.T]).reshape(4, 64)
    # image axes: x = column, y = row (downwards), so the main diagonal is at +45 degrees
    angle = gp_vae.principal_angle(images)
    np.testing.assert_allclose(angle[:3], [45.0, 0.0, -45.0], atol=1e-6)
    assert abs(angle[3]) == pytest.approx(90.0)  # vertical: +-90 (the same axis)


def test_loglog_slope_known_answers():
    # seconds per epoch = c N^p: the slope is p; one size has no slope
    sizes = [1000, 2000, 4000, 8000]
    for p in (1.0, 2.0, 3.0):
        times = {str(n): 1e-3 * (n / 1000) ** p for n in sizes}
        assert gp_vae.loglog_slope(times) == pytest.approx(p, rel=1e-9)
    assert gp_vae.loglog_slope({"1000": 0.1}) is None
    assert gp_vae.loglog_slope({}) is None


def test_tiny_gp_vae_run(tmp_path):
    exp = dataclasses.replace(Experiment.from_module(gp_vae), presets={"quick": TINY})
    run_experiment(exp, seed=2, out_dir=tmp_path)
    m = json.loads((tmp_path / "metrics.json").read_text())
    (seed_row,) = m["per_seed"]
    assert m["seeds"] == [2]
    for key in ("mse_future", "mse_new_subject"):
        assert set(m[key]) == set(gp_vae.MODELS), key
        assert m[key] == pytest.approx(seed_row[key]), key  # the mean over one seed is that seed
    # the control repeats the main DGBFGP and exact fits (same config, data and keys): the same
    # errors (NaN would fail too)
    control = m["convergence_control"]
    assert control["n_subjects"] == 6
    assert control["epochs"] == {"dgbfgp": 2, "exact_gpvae": 2}
    for key in ("mse_future", "mse_new_subject"):
        assert set(control[key]) == {"dgbfgp", "exact_gpvae"}
        for model in ("dgbfgp", "exact_gpvae"):
            assert control[key][model] == pytest.approx(m[key][model], rel=1e-6), (key, model)
    # epoch times: every model at the size, the exact model too (N = 20 <= exact_max_n); one size,
    # so no slope (the slope itself: test_loglog_slope_known_answers)
    assert set(m["epoch_seconds"]) == {"dgbfgp", "dgbfgp_without_t_x_id", "exact_gpvae"}
    for model, times in m["epoch_seconds"].items():
        assert set(times) == {"20"} and times["20"] > 0, model
        assert m["loglog_slope"][model] is None, model
    assert m["component_corr"] == pytest.approx(seed_row["component_corr"])
    assert m["mse_future_diseased"] == pytest.approx(seed_row["mse_future_diseased"])
    # the ablation is a different model (without SE(t) x disease), fitted separately
    ablation = m["ablation_no_t_x_disease"]
    assert ablation == pytest.approx(seed_row["ablation_no_t_x_disease"])
    assert ablation["mse_future"] != pytest.approx(m["mse_future"]["dgbfgp"], rel=1e-6)
    report = (tmp_path / "report.md").read_text()
    assert f"true rotation: {m['component_corr']:.3f}." in report
    for name in ("report.md", "future_predictions.png", "time_component.png", "epoch_time.png"):
        assert (tmp_path / name).exists(), name

"""Tiny end-to-end run of the neural_etc experiment: every method's metrics exist and are sane."""

import dataclasses
import json

import numpy as np

from experiments import neural_etc
from experiments._runner import Experiment, run_experiment

TINY = dataclasses.replace(
    neural_etc.PRESETS["quick"],
    n_test_states=1,
    horizon=0.5,
    max_triggers=50,
    n_grid=50,
    mse_from=0.4,
    mc_steps=4,
    mc_samples=64,
    pi_warmup=4,
    pi_event_steps=1,
    pi_samples=32,
    pi_batch=2,
    nlc_steps=4,
    nlc_samples=64,
    n_violation_points=500,
)


def test_tiny_neural_etc_run(tmp_path):
    exp = dataclasses.replace(Experiment.from_module(neural_etc), presets={"quick": TINY})
    run_experiment(exp, seed=3, out_dir=tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    for key in ("triggers", "min_inter_event", "temporal_mse", "train_seconds", "violation_rate"):
        assert set(metrics[key]) == set(neural_etc.METHODS), key
    for name, res in metrics["methods"].items():
        assert 0 <= res["triggers"] <= 50, name
        assert 0 <= res["violation_rate"] <= 1, name
        assert res["min_inter_event"] is None or res["min_inter_event"] >= 0, name
        assert isinstance(res["solver_ok"], bool), name
    assert metrics["violation_rate"]["etc_pi_projected"] == 0.0  # the projection's guarantee
    assert np.isfinite(metrics["temporal_mse"]["lqr"]) and metrics["methods"]["lqr"]["solver_ok"]
    for name in ("report.md", "trajectories.png", "inter_event_times.png"):
        assert (tmp_path / name).exists(), name

"""Tiny end-to-end run of the convex_markov_games experiment: every study's metrics exist."""

import dataclasses
import json

import numpy as np

from experiments import convex_markov_games as E
from experiments._runner import Experiment, run_experiment

TINY = dataclasses.replace(
    E.PRESETS["full"],
    n_games=4,
    n_states=2,
    n_actions=2,
    kappas=(0.0, 0.1),
    steps=20,
    nested_steps=4,
    inner_steps=2,
    n_checkpoints=2,
    ratio_grid=(5.0, 10.0),
    long_steps=40,
    n_rollouts=4,
    horizon=5,
)


def test_tiny_convex_markov_games_run(tmp_path):
    exp = dataclasses.replace(Experiment.from_module(E), presets={"quick": TINY})
    run_experiment(exp, seed=3, out_dir=tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    for key in ("gap_median", "gap_p90", "frac_gap_below_0.02", "gap_curve"):
        assert set(metrics[key]) == set(E.METHODS), key
    assert all(np.isfinite(v) and v >= -1e-9 for v in metrics["gap_median"].values())
    assert len(metrics["gap_curve"]["alt_pgda"]) == 3
    assert metrics["ratio"] in (5.0, 10.0)
    assert set(metrics["kappa_0.1"]) == set(E.METHODS)
    assert len(metrics["mu_sweep"]) == 4
    assert np.isfinite(metrics["stochastic"]["gap_median"])
    for name in ("report.md", "nash_gap.png", "policy_trajectory.png"):
        assert (tmp_path / name).exists(), name

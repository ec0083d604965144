"""Tiny end-to-end run of the auctions experiment: outputs exist, are finite, and are consistent."""

import dataclasses
import json

import numpy as np

from experiments import auctions
from experiments._runner import Experiment, run_experiment

TINY = dataclasses.replace(
    auctions.PRESETS["quick"],
    n_bidders=(2, 3),
    steps=40,
    log_every=10,
    ante_samples=32,
    market_samples=256,
    chunk_size=128,
    init_steps=10,
    eval_grid=200,
    bandwidths=(0.05, 0.1),
    secondary=("asymmetric_fp",),
)


def test_tiny_auctions_run(tmp_path):
    exp = Experiment.from_module(auctions)
    exp = dataclasses.replace(exp, presets={"quick": TINY})
    run_experiment(exp, seed=5, out_dir=tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["seed"] == 5 and metrics["tol"] == 0.02
    for key in ("steps_to_tol", "final_l2", "seconds_per_step", "utility_loss"):
        assert set(metrics[key]) == {"ug", "abr"}
        assert set(metrics[key]["abr"]) == {"2", "3"}
    for method in ("ug", "abr"):
        for n in ("2", "3"):
            detail = metrics["details"][method][n]
            assert np.isfinite(detail["final_l2"]) and 0 < detail["final_l2"] < 1
            assert detail["bandwidth"] in (0.05, 0.1)
            assert len(detail["l2_curve"]) == 4
            assert detail["final_l2"] == detail["l2_curve"][-1]
            steps = detail["steps_to_tol"]
            assert steps is None or (
                steps % 10 == 0 and detail["l2_curve"][steps // 10 - 1] <= 0.02
            )
    secondary = metrics["secondary"]
    assert set(secondary) == {"asymmetric_fp"}
    assert len(secondary["asymmetric_fp"]["abr"]["2"]["final_l2_per_type"]) == 2
    for name in ("report.md", "l2_curves.png", "bid_functions.png", "asymmetric_bids.png"):
        assert (tmp_path / name).exists(), name
    assert "aBR" in (tmp_path / "report.md").read_text()


def test_steps_helpers():
    curve = np.array([0.5, 0.1, 0.01, 0.03])
    assert auctions.first_step_below(curve, 0.02, 10) == 30
    assert auctions.first_step_below(curve, 0.001, 10) is None
    assert auctions.median_steps([10, None, 30]) == 30
    assert auctions.median_steps([None, None, 30]) is None

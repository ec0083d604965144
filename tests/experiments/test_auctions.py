"""Tiny end-to-end run of the auctions experiment: outputs exist and are tied to each other."""

import dataclasses
import json

import numpy as np
import pytest

from experiments import auctions
from experiments._runner import Experiment, run_experiment

# Six trainings (UG and aBR at n = 2, 3 and on the asymmetric game), one bandwidth: every code
# path of the experiment (bandwidth selection, the n sweep, a secondary game, every figure), with
# the paper preset's learner (every bidder's values, breakpoint market, binned KDE) and its
# checkpoint table.
TINY = dataclasses.replace(
    auctions.PRESETS["paper"],
    n_seeds=1,
    n_bidders=(2, 3),
    steps=40,
    log_every=10,
    ante_samples=32,
    market_samples=256,
    chunk_size=128,
    init_steps=10,
    eval_grid=200,
    bandwidths=(0.05,),
    record_at=(20, 40),
    tol_supported=0.1,
    secondary=("asymmetric_fp",),
)


def test_tiny_auctions_run(tmp_path):
    exp = Experiment.from_module(auctions)
    exp = dataclasses.replace(exp, presets={"quick": TINY})
    run_experiment(exp, seed=5, out_dir=tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["seed"] == 5 and metrics["tol"] == 0.02 and metrics["seeds"] == [5]
    for key in ("steps_to_tol", "final_l2", "seconds_per_step", "utility_loss"):
        assert set(metrics[key]) == {"ug", "abr"}
        assert set(metrics[key]["abr"]) == {"2", "3"}
    details = metrics["details"]
    for method in ("ug", "abr"):
        for n in ("2", "3"):
            detail = details[method][n]
            curve = np.asarray(detail["l2_curve"])
            assert curve.shape == (4,) and detail["final_l2"] == curve[-1]
            assert metrics["final_l2"][method][n] == detail["final_l2"]
            # one seed: steps_to_tol is the first logged step at or below tol, recomputed
            assert detail["steps_to_tol"] == auctions.first_step_below(curve, 0.02, 10)
            assert metrics["steps_to_tol"][method][n] == detail["steps_to_tol"]
            # the selected bandwidth's summary is the one kept per bandwidth
            assert detail["bandwidth"] == 0.05
            kept = metrics["by_bandwidth"][method][n]["0.05"]
            keys = ("steps_to_tol", "final_l2", "mean_final_l2", "utility_loss", "supported_l2",
                    "steps_after_warmup")  # fmt: skip
            assert kept == {k: detail[k] for k in keys}
            assert metrics["bandwidth"][method][n] == 0.05
            # one seed: means are the values; the checkpoint table reads the logged curve
            assert detail["mean_final_l2"] == detail["final_l2"]
            assert detail["mean_l2_at"] == {"20": curve[1], "40": curve[3]}
            assert metrics["mean_l2_at"][method][n] == detail["mean_l2_at"]
            # the supported region v^(n-1) >= 1e-3 and its L2, steps recomputed from its curve
            assert detail["supported_lower"] == pytest.approx(1e-3 ** (1 / (int(n) - 1)))
            sup = np.asarray(detail["supported_l2_curve"])
            assert metrics["supported_l2"][method][n] == detail["supported_l2"] == sup[-1]
            after = auctions.steps_after_warmup(sup, 0.1, 10, TINY.init_steps)
            assert detail["steps_after_warmup"] == after
            assert metrics["steps_after_warmup"][method][n] == after
            # for n = 3 the supported region leaves out v < 0.032: its L2 differs from the grid's
            assert (sup[-1] != curve[-1]) if n == "3" else sup[-1] == pytest.approx(curve[-1], 0.05)
            # the whole-range RMS error is the RMS of the four value quarters' RMS errors (up to
            # the grids' shared end points)
            quarters = np.asarray(detail["final_l2_by_value_quarter"])
            assert quarters.shape == (4,)
            assert np.sqrt(np.mean(quarters**2)) == pytest.approx(detail["final_l2"], rel=0.01)
            # 40 steps from a random network move it towards the BNE (seed 5: by 30-65%)
            assert curve[-1] < 0.8 * curve[0]
        # UG never takes the Newton step; aBR's gate opens after the warm-up (seed 5: 4-8%)
        assert details["ug"][n]["abr_fraction_final"] == 0.0
        assert details["abr"][n]["abr_fraction_final"] > 0.0
        # aBR's first init_steps = log_every steps are UG steps from the same initial network
        # (same key): the first logged L2 is UG's
        assert details["abr"][n]["l2_curve"][0] == pytest.approx(
            details["ug"][n]["l2_curve"][0], rel=1e-5
        )
    for method in ("ug", "abr"):
        s2, s3 = details[method]["2"]["steps_to_tol"], details[method]["3"]["steps_to_tol"]
        expected = None if s2 is None or s3 is None else s3 / s2
        assert metrics["steps_ratio"][method] == expected
    assert metrics["steps_ratio_n"] == [3, 2]
    assert metrics["tol_supported"] == 0.1
    for method in ("ug", "abr"):
        s2, s3 = (metrics["steps_after_warmup"][method][n] for n in ("2", "3"))
        expected = None if s2 in (None, 0) or s3 is None else s3 / s2
        assert metrics["steps_after_warmup_ratio"][method]["3"] == expected
    secondary = metrics["secondary"]
    assert set(secondary) == {"asymmetric_fp"}
    for method in ("ug", "abr"):
        asym = secondary["asymmetric_fp"][method]["2"]
        assert len(asym["final_l2_per_type"]) == 2 and len(asym["utility_loss_per_type"]) == 2
    for name in ("report.md", "l2_curves.png", "bid_functions.png", "asymmetric_bids.png"):
        assert (tmp_path / name).exists(), name
    report = (tmp_path / "report.md").read_text()
    assert "aBR" in report and "asymmetric_fp" in report and "Official table protocol" in report


def test_steps_helpers():
    curve = np.array([0.5, 0.1, 0.01, 0.03])
    assert auctions.first_step_below(curve, 0.02, 10) == 30
    assert auctions.first_step_below(curve, 0.001, 10) is None
    assert auctions.median_steps([10, None, 30]) == 30
    assert auctions.median_steps([None, None, 30]) is None


def test_supported_region_and_post_warmup_steps():
    assert auctions.supported_lower(2, 1e-3) == pytest.approx(1e-3)
    assert auctions.supported_lower(10, 1e-3) ** 9 == pytest.approx(1e-3)  # v^(n-1) = 1e-3
    curve = np.array([0.2, 0.04, 0.2, 0.06, 0.03])  # logged at steps 10, 20, ..., 50
    assert auctions.steps_after_warmup(curve, 0.05, 10, 0) == 20 - 0
    assert auctions.steps_after_warmup(curve, 0.05, 10, 30) == 50 - 30  # the step-20 dip is early
    assert auctions.steps_after_warmup(curve, 0.1, 10, 40) == 0  # below when the warm-up ends
    assert auctions.steps_after_warmup(curve, 0.01, 10, 0) is None

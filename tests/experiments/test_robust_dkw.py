"""Tiny end-to-end run of the robust_dkw experiment: every metric exists and is in range."""

import dataclasses
import json

import jax

from experiments import robust_dkw as E
from experiments._runner import Experiment, run_experiment

TINY = dataclasses.replace(
    E.PRESETS["quick"],
    e1_cells=((50, 20),),  # the control's shape: one compiled E1 function
    e1_replicates=4,
    e1_points=64,
    e1_control=(50, 20),
    e2_ladder=((40, 50),),
    e2_replicates=4,
    e2_points=8,
    e3_dims=(2,),
    e3_eps=(0.1,),
    e3_clients=20,
    e3_samples=10,
    e3_replicates=2,
    e3_reference=200,
    e4_clients=20,
    e4_draws=30,
    e4_replicates=2,
    e4_reference=100,
    e4_steps=5,
    chunk=2,
)


def test_tiny_robust_dkw_run(tmp_path):
    exp = dataclasses.replace(Experiment.from_module(E), presets={"quick": TINY})
    run_experiment(exp, seed=2, out_dir=tmp_path)
    m = json.loads((tmp_path / "metrics.json").read_text())
    cov = m["coverage"]
    assert set(cov) == {"dkw", "kl", "chi2", "wasserstein_avg", "wasserstein_tail"}
    assert set(cov["dkw"]) == {"K=50,n=20"} and set(cov["chi2"]) == {"K=40,n=50"}
    rates = [*cov["dkw"].values(), *cov["kl"].values(), *cov["chi2"].values()]
    rates += [cov["wasserstein_avg"], cov["wasserstein_tail"], m["negative_control_coverage"]]
    rates += [m["digits"]["unseen_coverage"], m["digits"]["shift_coverage"]]
    assert all(0.0 <= r <= 1.0 for r in rates)
    assert len(m["tightness_sup_gap"]) == 1
    assert abs(m["digits"]["certified_eps"]["0.35"] - 0.0673) < 1e-3
    for name in (
        "report.md",
        "cdf_band_digits.png",
        "robust_tail_bounds.png",
        "tightness_ladder.png",
    ):
        assert (tmp_path / name).exists(), name


def test_e1_property_coverage():
    keys = jax.random.split(jax.random.key(11), 100)
    inside, _, _, _ = E.e1_covered(keys, 200, 200, 256)
    assert float(inside.mean()) >= 0.9

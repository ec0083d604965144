"""Tiny end-to-end run of the robust_dkw experiment: every metric exists, coverages are counts of
replicates, the controls are ordered and the band terms are the library's closed forms."""

import dataclasses
import json

import jax
import numpy as np
import pytest

from experiments import robust_dkw as E
from experiments._runner import Experiment, run_experiment
from jaxlab.federated import robust_dkw as R

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
    # each coverage is a fraction of R replicates (a min over cells of such fractions): R times
    # it is an integer, and in [0, 1]
    replicates = [
        (cov["dkw"]["K=50,n=20"], TINY.e1_replicates),
        (cov["kl"]["K=40,n=50"], TINY.e2_replicates),
        (cov["chi2"]["K=40,n=50"], TINY.e2_replicates),
        (cov["wasserstein_avg"], TINY.e3_replicates),
        (cov["wasserstein_tail"], TINY.e3_replicates),
        (m["negative_control_coverage"], TINY.e1_replicates),
        (m["control_with_client_term"], TINY.e1_replicates),
        (m["digits"]["unseen_coverage"], TINY.e4_replicates),
        (m["digits"]["shift_coverage"], TINY.e4_replicates),
    ]
    for rate, r in replicates:
        assert 0.0 <= rate <= 1.0 and rate * r == pytest.approx(round(rate * r), abs=1e-9)
    # the band with the per-client term contains the band without it, replicate by replicate
    assert m["control_with_client_term"] >= m["negative_control_coverage"]
    # the E1 half-widths are the library's closed forms at (K, n) = (50, 20), delta / 2 each
    widths = m["half_widths"]["K=50,n=20"]
    assert widths["eps_K"] == pytest.approx(float(R.dkw_epsilon(50, 0.025)), rel=1e-6)
    assert widths["t"] == pytest.approx(float(R.hoeffding_shift(20, 50, 0.025)), rel=1e-6)
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
    # 100 replicates through TINY's compiled E1 program (K = 50, n = 20, 64 points, chunks of 2)
    keys = jax.random.split(jax.random.key(11), 100)
    inside, control, _, _ = E.chunked_replicates(
        E.e1_covered, keys, TINY.chunk, 50, 20, TINY.e1_points
    )
    assert float(inside.mean()) >= 0.9
    assert np.all(inside >= control)  # the client term only widens the band

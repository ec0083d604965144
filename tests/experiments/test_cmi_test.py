"""Tiny end-to-end run of the cmi_test experiment: every study's metrics exist and are in range."""

import dataclasses
import json

import numpy as np

from experiments import cmi_test as E
from experiments._runner import Experiment, run_experiment

TINY = dataclasses.replace(
    E.PRESETS["quick"],
    n=24,
    dz=2,
    dx=5,
    replicates=2,
    num_samples=4,
    num_boot=20,
    power_ns=(24,),  # with chunk=1, the same compiled test as the designs' A2 runs
    power_replicates=2,
    robust_n=32,
    robust_replicates=2,
    robust_num_samples=4,
    gmmn_replicates=2,
    gmmn_steps=3,
    gmmn_batch=8,
    imaging_subsets=2,
    imaging_n=40,
    imaging_steps=3,
    chunk=1,
)


def test_tiny_cmi_test_run(tmp_path):
    exp = dataclasses.replace(Experiment.from_module(E), presets={"quick": TINY})
    run_experiment(exp, seed=3, out_dir=tmp_path)
    m = json.loads((tmp_path / "metrics.json").read_text())
    for test in ("cmi", "naive", "gcm"):
        for nu in E.NUISANCES:
            assert set(m["size"][test][nu]) == {"0.05", "0.10"}
        assert set(m["power"][test]) == {"a1_sparse", "a1_dense", "a2_sparse", "a2_dense"}
        assert len(m["power_vs_n"][test]) == 1
    assert set(m["robust_size"]) == {"cmi", "naive"}
    rates = [m["robust_size"]["cmi"], m["gmmn"]["size"]["cmi"]["0.05"]]
    rates += [m["imaging"]["h0_reject_rate"], m["imaging"]["h1_reject_rate"]]
    assert all(0.0 <= r <= 1.0 for r in rates)
    assert 0.0 <= m["imaging"]["h0_ks_pvalue"] <= 1.0
    assert np.all(np.isfinite(m["imaging"]["h1_pvalues"]))
    for name in ("report.md", "pvalues_h0.png", "power_vs_n.png"):
        assert (tmp_path / name).exists(), name

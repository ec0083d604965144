"""Tiny end-to-end run of the ssar experiment: every metric key of issue 24 that the quick preset
writes, scores on the normalised scale of the recomputed references, the curve lengths."""

import dataclasses
import json

from experiments import ssar as E
from experiments._runner import Experiment, run_experiment

TINY = dataclasses.replace(
    E.PRESETS["quick"], seeds=2, steps=40, batch=32, eval_every=20, eval_episodes=2,
    hidden=(8, 8), beta_hidden=(8, 8, 8), reference_episodes=20,
)  # fmt: skip


def test_tiny_ssar_run(tmp_path):
    exp = dataclasses.replace(Experiment.from_module(E), presets={"quick": TINY})
    run_experiment(exp, seed=3, out_dir=tmp_path)
    m = json.loads((tmp_path / "metrics.json").read_text())
    methods = ["td3bc_a2.5", "td3bc_ssar"]
    assert set(m["score"]["D-re"]) == set(methods)
    assert m["eval_steps"] == [0, 20, 40]
    for method in methods:
        assert len(m["curves"]["D-re"][method]) == 3
        assert len(m["score"]["D-re"][method]["seeds"]) == 2
        assert len(m["beta_trusted"]["D-re"][method]) == 3  # step 0 and each evaluation
    assert 0.14 <= m["trusted_frac"]["D-re"] <= 0.15
    assert m["final_n"]["D-re"]["td3bc_a2.5"] == [1.0, 1.0]  # the baseline's n never moves
    assert set(m["reference_return"]) == {"random", "expert"}
    assert m["reference_return"]["random"] < m["reference_return"]["expert"]
    assert (tmp_path / "report.md").exists() and (tmp_path / "curves.png").exists()

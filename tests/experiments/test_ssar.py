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


def test_variants_are_the_documented_flag_settings():
    from jaxlab.rl import ssar

    cfg = ssar.TD3BCConfig()
    assert E.variant_run(cfg, "ssar") == ssar.ssar_run(cfg)
    flags = {v: tuple(float(x) for x in E.variant_run(cfg, v))[1:] for v in E.VARIANTS}
    assert flags["ssar_no_select"] == (1.0, 0.0, 0.0)  # state-adaptive only
    assert flags["select_only"] == (0.0, 1.0, 1.0)  # beta fixed at beta0, BC on trusted rows
    assert flags["ssar_no_loosen"] == (1.0, 1.0, 0.0)
    names = E.method_names(E.PRESETS["ablation"])
    assert names[:3] == ["td3bc_a1", "td3bc_a2.5", "td3bc_a10"] and "td3bc_ssar" in names

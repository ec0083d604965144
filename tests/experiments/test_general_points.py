"""Tiny end-to-end run of the general_points experiment: every stage runs (both branches and PPO
without SFT-init; one seed, so both RL branches share one compiled update), writes its files,
and its figures are finite."""

import dataclasses
import json
import math

import numpy as np

from experiments import general_points as E
from experiments._runner import Experiment, run_experiment

TINY = dataclasses.replace(
    E.PRESETS["quick"],
    d_model=16,
    num_heads=2,
    d_mlp=32,
    pre_steps=3,
    pre_batch=8,
    sft_init_steps=2,
    sft_batch=8,
    rl_updates=4,
    rl_episodes=8,
    viter=1,
    post_seeds=1,
    no_sft_branch=True,
    n_eval=8,
    cache_pretrain=False,
)


def _finite(x):
    if isinstance(x, dict):
        return all(_finite(v) for v in x.values())
    if isinstance(x, list):
        return all(_finite(v) for v in x)
    return isinstance(x, bool) or x is None or math.isfinite(x)


def test_tiny_general_points_run(tmp_path):
    exp = dataclasses.replace(Experiment.from_module(E), presets={"quick": TINY})
    run_experiment(exp, seed=3, out_dir=tmp_path)
    m = json.loads((tmp_path / "metrics.json").read_text())
    for f in ("report.md", "success_vs_flops.png", "reward_kinds.png"):
        assert (tmp_path / f).exists()
    assert set(m["success"]) == {"sft", "rl", "rl_no_sft"}
    for b in ("sft", "rl"):
        for split in E.SPLITS:
            assert len(m["success"][b][split]) == 1  # seeds
            assert len(m["success"][b][split][0]) == E.N_POINTS
            assert all(0 <= v <= 1 for v in m["success"][b][split][0])
    assert len(m["flops"]["rl"]) == E.N_POINTS and m["flops"]["rl"][0] == 0
    assert (np.diff(m["flops"]["rl"]) > 0).all()
    assert set(m["reward_kinds"]["rl"]) == {"+5", "+1", "-1", "-2", "-3"}
    assert len(m["reward_kinds"]["rl"]["-3"][0]) == TINY.rl_updates
    assert set(m["pretrain"]) == {"translate_accuracy", "arith_success"}
    assert _finite(m["success"]) and _finite(m["rule_probe"]) and _finite(m["face_number_prob"])
    assert "full_checks" not in m["claims"] and len(m["claims"]["quick_checks"]) == 5

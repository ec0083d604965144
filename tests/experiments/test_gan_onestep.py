"""Tiny end-to-end run of the gan_onestep experiment: every figure the issue names exists."""

import dataclasses
import json
import math

from experiments import gan_onestep
from experiments._runner import Experiment, run_experiment

TINY = dataclasses.replace(
    gan_onestep.PRESETS["quick"],
    channels=(8,),
    pretrain_steps=4,
    pretrain_batch=16,
    teacher_steps=3,
    finetune_steps=4,
    batch=8,
    kd_pairs=16,
    variants=("d2o", "d2o_f", "kd"),  # kd_gan and scratch_gan reuse these code paths
    curve_points=2,
    local_minima_k=(2,),
    n_eval=64,
    n_holdout=100,
    classifier_epochs=1,
    d_hidden=8,
)


def test_tiny_gan_onestep_run(tmp_path):
    exp = dataclasses.replace(Experiment.from_module(gan_onestep), presets={"quick": TINY})
    run_experiment(exp, seed=3, out_dir=tmp_path)
    m = json.loads((tmp_path / "metrics.json").read_text())
    names = {"teacher", "onestep_pretrained", "d2o", "d2o_f", "kd"}
    assert set(m["fd"]) == names and all(math.isfinite(v) for v in m["fd"].values())
    assert set(m["hf_power_ratio"]) == names
    assert 0.5 < m["frozen_fraction"] < 1.0  # the default nets' 0.8-0.9 is a unit test
    assert m["images_seen"] == 4 * 8
    assert set(m["fd_curve"]) == {"d2o", "d2o_f"} and len(m["fd_curve"]["d2o"]["fd"]) == 2
    lm = m["local_minima"]
    assert lm["k"] == [2] and len(lm["fd_teacher_student"]) == 1
    assert m["ratios"]["kd_over_d2o"] > 0 and m["ratios"]["scratch_over_d2o"] is None
    for name in ("report.md", "samples.png", "fd_curve.png", "local_minima.png"):
        assert (tmp_path / name).exists(), name

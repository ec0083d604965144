"""Tiny end-to-end run of the gan_onestep experiment: every figure the issue names exists."""

import dataclasses
import json
import math

import jax
import jax.numpy as jnp
import pytest

from experiments import gan_onestep
from experiments._runner import Experiment, run_experiment
from jaxlab.generative import gan_onestep as G

TINY = dataclasses.replace(
    gan_onestep.PRESETS["quick"],
    n_seeds=2,  # the second seed reuses the first one's compiled programs (asserted)
    channels=(8,),
    n_blocks=1,
    pretrain_steps=4,
    pretrain_batch=16,
    teacher_steps=1,  # one Euler step; the Heun (diffrax) teacher runs in the local-minima study
    finetune_steps=4,
    batch=8,
    r1_gamma=0.0,  # lazy R1 is the unit tests' (it only changes the value passed to the library)
    kd_pairs=64,  # = n_eval: the KD pairs reuse the teacher compiled for the evaluation noise
    variants=("d2o", "d2o_f", "kd"),  # kd_gan and scratch_gan reuse these code paths
    curve_points=2,
    local_minima_k=(2,),
    n_eval=64,
    n_holdout=100,
    classifier_epochs=1,
    d_hidden=8,
    n_boot=50,
)


def test_tiny_gan_onestep_run(tmp_path):
    exp = dataclasses.replace(Experiment.from_module(gan_onestep), presets={"quick": TINY})
    run_experiment(exp, seed=3, out_dir=tmp_path)
    m = json.loads((tmp_path / "metrics.json").read_text())
    names = {"teacher", "onestep_pretrained", "d2o", "d2o_f", "kd"}
    assert set(m["fd"]) == names and all(math.isfinite(v) for v in m["fd"].values())
    assert set(m["hf_power_ratio"]) == names
    # D2O-F's frozen fraction is the library's on the experiment's U-Net (shapes suffice)
    net = G.UNet(G.UNetConfig(channels=TINY.channels, n_blocks=TINY.n_blocks, groups=4,
                              layout=TINY.unet_layout, affine=TINY.unet_affine,
                              emb_dim=TINY.emb_dim))  # fmt: skip
    shapes = jax.eval_shape(net.init, jax.random.key(0), jnp.zeros((1, 8, 8, 1)), jnp.zeros(1))
    assert m["frozen_fraction"] == pytest.approx(G.frozen_fraction(shapes, G.freeze_mask(shapes)))
    assert 0.5 < m["frozen_fraction"] < 1.0  # the default nets' 0.8-0.9 is a unit test
    assert m["images_seen"] == 4 * 8
    # one compile per program for both seeds (per-seed arrays are arguments, not constants)
    progs = gan_onestep.programs(dataclasses.replace(TINY, seed=0))
    assert progs.pretrain_step._cache_size() == 1
    assert progs.finetune_step._cache_size() == 3  # one per variant
    assert len(m["fd_per_seed"]["d2o"]) == 2
    # the FD curve of every variant: 2 points at 2 and 4 steps of 8 images; the last is the score
    assert set(m["fd_curve"]) == {"d2o", "d2o_f", "kd"}
    for v in ("d2o", "d2o_f", "kd"):
        assert m["fd_curve"][v]["images"] == [16, 32]
        assert m["fd_curve"][v]["fd"][-1] == pytest.approx(m["fd"][v], rel=1e-6)
    lm = m["local_minima"]
    assert lm["k"] == [2] and len(lm["fd_teacher_student"]) == 1
    fd, r = m["fd"], m["ratios"]
    assert r["kd_over_d2o"] == pytest.approx(fd["kd"] / fd["d2o"], rel=1e-12)
    assert r["d2o_f_over_d2o"] == pytest.approx(fd["d2o_f"] / fd["d2o"], rel=1e-12)
    assert r["d2o_over_teacher"] == pytest.approx(fd["d2o"] / fd["teacher"], rel=1e-12)
    assert r["scratch_over_d2o"] is None
    # ordering claims: only those whose models ran; contrast = weights . FD; met iff lo > 0
    assert set(m["claims"]) == {"d2o_beats_onestep", "d2o_beats_kd", "d2o_f_beats_kd",
                                "d2o_f_within_1.25x_d2o", "d2o_within_1.3x_teacher"}  # fmt: skip
    for c in m["claims"].values():
        assert c["contrast"] == pytest.approx(sum(w * fd[k] for k, w in c["weights"].items()))
        lo, hi = c["ci95"]
        assert lo <= hi and c["met"] == (lo > 0)
    for name in ("report.md", "samples.png", "fd_curve.png", "local_minima.png"):
        assert (tmp_path / name).exists(), name

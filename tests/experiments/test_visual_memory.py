"""Tiny end-to-end run of the visual_memory experiment: every study (both encoders, an
augmented memory, two noise levels, calibration) runs, and its numbers agree with themselves and
with the library."""

import dataclasses
import json

import numpy as np
import pytest

from experiments import visual_memory as E
from experiments._runner import Experiment, run_experiment
from jaxlab.core.data import load_digits

TINY = dataclasses.replace(
    E.PRESETS["full"],
    n_seeds=1,
    k_max=20,
    n_per_class=(1, 5, 0, -2),
    noise_levels=(0.0, 0.2),
    thresholds=(4, 16),
    alphas=(1.0, 2.0),
    temperatures=(0.07,),
    n_removed=5,
    cnn_epochs=1,
)


def test_split_is_stratified_disjoint_and_seeded():
    _, y = load_digits()
    a, b = E.split(3), E.split(4)
    allidx = np.concatenate([a["mem"], a["val"], a["test"]])
    assert len(np.unique(allidx)) == len(y) == len(allidx)
    for c in range(10):
        n = (y == c).sum()
        assert abs((y[a["mem"]] == c).sum() - 0.5 * n) <= 1
    assert not np.array_equal(a["mem"], b["mem"])


def test_augment_keeps_the_original_first_and_stays_in_range():
    x, _ = load_digits(layout="image")
    aug = E.augment(x[:3], 4, np.random.default_rng(0))
    assert aug.shape == (12, 8, 8)
    np.testing.assert_array_equal(aug[::4], x[:3])
    assert aug.min() >= 0 and aug.max() <= 1


def test_tiny_visual_memory_run(tmp_path):
    exp = dataclasses.replace(Experiment.from_module(E), presets={"quick": TINY})
    run_experiment(exp, seed=5, out_dir=tmp_path)
    m = json.loads((tmp_path / "metrics.json").read_text())
    for e in ("weak", "cnn"):
        for r in E.RULES:
            curve = m["accuracy_at_k"][e][r]
            assert len(curve) == TINY.k_max
            assert m["best_k_accuracy"][e][r] == pytest.approx(max(curve))
            assert min(curve) <= m["val_k_accuracy"][e][r] <= max(curve)
        # every rule agrees with the nearest neighbour at k = 1
        assert len({m["accuracy_at_k"][e][r][0] for r in E.RULES}) == 1
        s = m["scaling"][e]
        assert s["n"] == [10, 50, 898, 1796] and np.isfinite(s["slope"])
        assert 0 <= m["ood_auroc"][e] <= 1
        nc = m["new_classes"][e]
        assert nc["finetune_delta_old"] < 0  # fine-tuning on 8-9 only forgets 0-7
    assert m["best_k_accuracy"]["weak"]["rank"] == m["best_k_accuracy"]["weak"]["soft_rank"]
    u = m["unlearning"]
    assert u["identical"] and u["identical_after_restore"] and u["identical_after_compact"]
    assert u["deleted_returned"] == 0 and u["remove_seconds"] < u["retrain_seconds"]
    p = m["pruning"]
    assert p["0.0"]["oracle"] == p["0.0"]["none"]
    assert set(p["0.2"]) == {"none", "hard", "soft", "oracle", "t", "top", "n_excluded"}
    assert set(m["alpha_sweep"]) == {"1.0", "2.0"}
    for name in ("report.md", "accuracy_vs_k.png", "scaling.png", "pruning.png", "calibration.png"):
        assert (tmp_path / name).exists(), name

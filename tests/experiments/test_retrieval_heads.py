"""Tiny end-to-end run of the retrieval_heads experiment: every study runs, writes its files, and
its figures are finite or explicitly null (NaN scores of models that answer nothing)."""

import dataclasses
import json
import math

from experiments import retrieval_heads as E
from experiments._runner import Experiment, run_experiment

TINY = dataclasses.replace(
    E.PRESETS["quick"],
    base_steps=3,
    base_batch=4,
    variants=("real", "symbolic_kv"),
    ft_steps=2,
    ft_batch=4,
    length=80,
    n_detection=8,
    n_eval=8,
    n_random=2,
    d_model=16,
    num_layers=2,
    num_heads=2,
    d_mlp=32,
    cache_base=False,
)


def test_tiny_retrieval_heads_run(tmp_path):
    exp = dataclasses.replace(Experiment.from_module(E), presets={"quick": TINY})
    run_experiment(exp, seed=2, out_dir=tmp_path)
    m = json.loads((tmp_path / "metrics.json").read_text())
    for f in ("report.md", "score_heatmaps.png", "recall_vs_accuracy.png", "knockout_patching.png"):
        assert (tmp_path / f).exists()
    assert set(m["accuracy"]) == {"no_ft", "real", "symbolic_kv"}
    for v, accs in m["accuracy"].items():
        assert all(0 <= a <= 1 for a in accs)
        assert len(m["scores"][v][0]) == 2 and len(m["scores"][v][0][0]) == 2
    assert len(m["knockout"]["random"][0]) == 2
    assert set(m["patching"]) == {"no_ft", "symbolic_kv"}
    for p in m["patching"].values():
        assert all(0 <= a <= 1 for a in p["all"] + p["retrieval"])
    assert math.isfinite(m["base_accuracy"]) and math.isfinite(m["accuracy_no_interp"])
    assert m["timing"]["base_cached"] is False
    # patching every head of the real model reproduces it (one base, attention-only fine-tuning)
    assert abs(m["claims"]["patching_all_minus_real"]["symbolic_kv"]) <= 1 / 8

"""Tiny end-to-end run of the llm_bp experiment: every study (zero- and few-shot, the estimator
grid, the encoder comparison) runs, writes its files, and its numbers agree with the library."""

import dataclasses
import json

import numpy as np

from experiments import llm_bp as E
from experiments._runner import Experiment, run_experiment
from jaxlab.graphs import llm_bp as L

TINY = dataclasses.replace(
    E.PRESETS["full"],
    n_seeds=1,
    n_nodes=90,
    n_classes=(3,),
    hs=(0.1, 0.9),
    few_shot_k=2,
    estimator_a=(1.0,),
    estimator_m=(20,),
    encoders=("minilm", "tfidf"),
    encoder_classes=3,
    encoder_seeds=1,
)


def test_tiny_llm_bp_run(tmp_path):
    exp = dataclasses.replace(Experiment.from_module(E), presets={"quick": TINY})
    run_experiment(exp, seed=4, out_dir=tmp_path)
    m = json.loads((tmp_path / "metrics.json").read_text())
    for f in ("report.md", "accuracy_vs_h.png", "r_hat.png"):
        assert (tmp_path / f).exists()
    acc = m["accuracy"]["3"]
    assert set(acc) == {"0.1", "0.9"} and set(acc["0.1"]) == set(E.METHODS)
    assert set(m["few_shot_accuracy"]["3"]["0.9"]) == set(E.METHODS)
    for h in acc:
        for v in acc[h].values():
            assert 0 <= v["mean"] <= 1 and len(v["seeds"]) == 1
        # one seed, one graph: Raw is the same on both graphs
    assert acc["0.1"]["raw"]["mean"] == acc["0.9"]["raw"]["mean"]
    # a perfect judge (a_edge = 1) estimates the sampled fraction: error only from sampling
    assert 0 <= m["estimator"]["1.0"]["20"] <= 0.25
    tg = L.make_text_graph(4, 90, 3, 0.9)
    he = L.edge_homophily(L.seeded_edges(4, tg.labels, 0.9), tg.labels)
    assert np.isclose(m["h_edge"]["3"]["0.9"][0], he)
    assert set(m["encoder"]) == {"minilm", "tfidf"}
    assert np.isclose(m["encoder"]["minilm"]["0.9"]["raw"], acc["0.9"]["raw"]["mean"])
    assert "h0.8_bp_minus_raw" not in m["claims"] and "C3_sweep_average" in m["claims"]

"""Tiny end-to-end run of the fedgwc experiment: every metric for every scenario and method."""

import dataclasses
import json

from experiments import fedgwc as E
from experiments._runner import Experiment, run_experiment

TINY = dataclasses.replace(
    E.PRESETS["quick"],
    scenarios=("s1", "s4"),
    methods=E.METHODS,
    clients=20,
    samples=8,
    test_samples=4,
    rounds=30,
    chunk=5,
    participation=0.2,
    steps=2,
    batch_size=4,
    hidden=(8,),
)


def test_tiny_fedgwc_run(tmp_path):
    exp = dataclasses.replace(Experiment.from_module(E), presets={"quick": TINY})
    run_experiment(exp, seed=1, out_dir=tmp_path)
    m = json.loads((tmp_path / "metrics.json").read_text())
    for key in ("ari", "n_clusters", "first_split_round", "accuracy", "group_accuracy"):
        assert set(m[key]) == {"s1", "s4"}, key
        assert all(set(v) == set(E.METHODS) for v in m[key].values()), key
    assert m["client_updates"]["s1"]["fedavg"] == 30 * 4  # m = 4 clients per round
    assert m["client_updates"]["s1"]["oracle"] == 30 * 4 * 2  # m per true group
    assert m["ari"]["s4"]["oracle"] == 1.0 and m["ari"]["s1"]["local"] is None
    assert m["cfl_calibration"]["eps2"] > 0 and m["clustering_bytes"]["s1"]["fedavg"] == 0
    assert all(0.0 <= a <= 1.0 for s in m["accuracy"].values() for a in s.values())
    assert set(m["group_accuracy"]["s4"]["fedgwc"]) == {"0", "1", "2", "3"}
    for name in ("report.md", "group_accuracy.png", "interaction_s1.png"):
        assert (tmp_path / name).exists(), name

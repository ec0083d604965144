"""Tiny end-to-end run of the fedgwc experiment (every method and metric on S1), and every
scenario's ground truth and data on synthetic pools."""

import dataclasses
import json

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

from experiments import fedgwc as E
from experiments._runner import Experiment, run_experiment

# One scenario runs every method's code path (the scenarios differ only in their data, checked
# on their own below). chunk = 1 = CFL's check interval (max(1, rounds // 30)): every chunk of
# rounds has one length, so FedAvg shares its program with the CFL calibration and FedGWC with
# CFL; max_clusters = 2 = S1's true groups, so CFL's split clusters share Oracle's program (and
# CFL also meets "no free slot"). rounds < 52: FedGWC's running mse (~0.8^t) never reaches eps.
TINY = dataclasses.replace(
    E.PRESETS["quick"],
    scenarios=("s1",),
    methods=E.METHODS,
    clients=20,
    samples=8,
    test_samples=4,
    rounds=12,
    chunk=1,
    participation=0.2,
    steps=2,
    batch_size=4,
    hidden=(8,),
    max_clusters=2,
)
K, T, M, R = TINY.clients, TINY.test_samples, 4, TINY.rounds  # M = 0.2 K clients per round
N_PARAMS = 64 * 8 + 8 + 8 * 10 + 10  # the 64 -> 8 -> 10 MLP


def _pairs(composition):
    """(true group, cluster) of every client from ``composition[g] = clients per cluster``."""
    truth, found = [], []
    for g, counts in composition.items():
        for c, n in enumerate(counts):
            truth += [int(g)] * n
            found += [c] * n
    return np.array(truth), np.array(found)


def test_tiny_fedgwc_run(tmp_path):
    exp = dataclasses.replace(Experiment.from_module(E), presets={"quick": TINY})
    run_experiment(exp, seed=1, out_dir=tmp_path)
    m = json.loads((tmp_path / "metrics.json").read_text())
    for key in ("ari", "n_clusters", "first_split_round", "accuracy", "group_accuracy"):
        assert set(m[key]) == {"s1"}, key
        assert all(set(v) == set(E.METHODS) for v in m[key].values()), key
    for s in TINY.scenarios:
        groups = E.scenario(s, TINY, np.random.default_rng(0))[0]  # by index: no draw involved
        sizes = np.bincount(groups)
        for method in E.METHODS:
            # a mean over K clients of T test samples each, and the group means it is made of
            acc, by_group = m["accuracy"][s][method], m["group_accuracy"][s][method]
            assert abs(acc * K * T - round(acc * K * T)) < 1e-4, (s, method, acc)
            assert set(by_group) == {str(g) for g in range(len(sizes))}
            hits = [by_group[str(g)] * n * T for g, n in enumerate(sizes)]
            assert all(abs(h - round(h)) < 1e-4 for h in hits), (s, method, by_group)
            np.testing.assert_allclose(sum(hits) / (K * T), acc, rtol=1e-6)
            if method == "local":  # one model per client, no clustering
                assert m["ari"][s][method] is None and m["composition"][s][method] is None
                assert m["n_clusters"][s][method] == K
                continue
            # the clustering metrics are sklearn's on the stored composition
            truth, found = _pairs(m["composition"][s][method])
            np.testing.assert_array_equal(np.bincount(truth), sizes)
            assert m["n_clusters"][s][method] == len(np.unique(found))
            assert m["ari"][s][method] == pytest.approx(adjusted_rand_score(truth, found))
            assert m["nmi"][s][method] == pytest.approx(normalized_mutual_info_score(truth, found))
        assert m["ari"][s]["oracle"] == 1.0 and m["n_clusters"][s]["oracle"] == len(sizes)
        assert m["ari"][s]["fedavg"] == 0.0 and m["n_clusters"][s]["fedavg"] == 1
        # m sampled clients per cluster per round (every true group here has >= m clients)
        assert m["client_updates"][s]["oracle"] == R * M * len(sizes)
        for method in ("fedavg", "ifca", "ifca_plus", "local"):
            assert m["client_updates"][s][method] == R * M, method
        assert m["attempts"][s]["fedgwc"] == [] and m["first_split_round"][s]["fedgwc"] is None
        for method in E.METHODS:  # splits after the first one, from the attempt records
            done = sum(bool(a["split_sizes"]) for a in m["attempts"][s][method])
            expected = None if method == "local" else max(done - 1, 0)
            assert m["later_splits"][s][method] == expected, method
            assert (m["ari_first_split"][s][method] is None) == (done == 0), method
        assert m["client_updates"][s]["fedgwc"] == R * M  # one cluster throughout
        assert m["clustering_bytes"][s]["fedgwc"] == R * M * TINY.steps * 4  # float32 losses
        assert m["clustering_bytes"][s]["fedavg"] == 0
        # CFL: one full-participation update check per round after the warm-up
        checks = m["cfl_norms"][s]
        assert [c["round"] for c in checks] == list(range(R // 6, R + 1))
        assert m["clustering_bytes"][s]["cfl"] == len(checks) * K * N_PARAMS * 4
    cal = m["cfl_calibration"]
    assert (cal["check_every"], cal["warmup"]) == (1, R // 6)
    assert len(cal["control_max_norms"]) == R - R // 6 + 1
    assert cal["eps2"] == pytest.approx(1.05 * max(cal["control_max_norms"]))
    assert cal["eps1"] == pytest.approx(cal["eps2"] / 4)
    for name in ("report.md", "group_accuracy.png", "interaction_s1.png"):
        assert (tmp_path / name).exists(), name


def test_scenarios_groups_noise_and_label_maps():
    """Each scenario's groups, noise, classes and label permutations, read back from the client
    data drawn from synthetic pools in which every pixel of an image of class c equals c."""
    y_pool = np.repeat(np.arange(10), 3)
    x_pool = np.repeat(y_pool[:, None], 64, axis=1).astype(np.float32)
    sizes = {"s0": [20], "s1": [15, 5], "s2": [12, 5, 3], "s3": [5] * 4, "s4": [5] * 4}
    for s in E.SCENARIOS:
        data, (xe, ye), groups = E.client_data(s, TINY, np.random.default_rng(3),
                                               (x_pool, y_pool, x_pool, y_pool))  # fmt: skip
        _, noise, allowed, perms = E.scenario(s, TINY, np.random.default_rng(3))  # same draws
        np.testing.assert_array_equal(np.bincount(groups), sizes[s])
        assert np.all(np.diff(groups) >= 0)  # contiguous groups in client order
        sd = {"s1": [0.0, TINY.noise_sigma], "s2": [0.0, 1.0, 2.5]}.get(s, [0.0] * len(sizes[s]))
        np.testing.assert_array_equal(noise, np.asarray(sd, np.float32)[groups])
        np.testing.assert_array_equal(data.noise, noise)
        assert data.x.shape == (K, TINY.samples, 64) and xe.shape == (K, T, 64)
        for x, y in ((np.asarray(data.x), np.asarray(data.y)), (xe, ye)):
            cls = x[..., 0].astype(int)  # the true class of every drawn image
            np.testing.assert_array_equal(x, np.repeat(cls[..., None], 64, axis=2))
            np.testing.assert_array_equal(y, np.take_along_axis(perms, cls, axis=1))
            assert all(np.isin(c, a).all() for c, a in zip(cls, allowed, strict=True))
        # S3: each group owns its classes; S4: group 0 keeps the labels, every map a permutation
        assert (s == "s3") == any(len(a) < 10 for a in allowed)
        np.testing.assert_array_equal(np.sort(perms, axis=1), np.tile(np.arange(10), (K, 1)))
        assert (s == "s4") == bool((perms != np.arange(10)).any())
        np.testing.assert_array_equal(perms[groups == 0], np.tile(np.arange(10), (sizes[s][0], 1)))


def test_official_preset_reaches_the_local_config():
    """The official client setting is wired through to every method's local training."""
    official = E.PRESETS["official"]
    local = E.gwc_config(official, official.max_clusters).local
    assert (local.batching, local.lr, local.steps, local.batch_size) == ("epoch", 0.01, 7, 64)
    assert official.samples == 500 and official.max_clusters == 16
    assert E.gwc_config(E.PRESETS["quick"], 4).local.batching == "draw"  # landed figures

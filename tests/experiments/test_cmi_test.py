"""Tiny end-to-end run of the cmi_test experiment: every study's metrics exist and are tied to
their p-values (rates recomputed, orderings the definitions guarantee)."""

import dataclasses
import json

import jax
import numpy as np
import pytest
from scipy import stats

from experiments import cmi_test as E
from experiments._runner import Experiment, run_experiment
from jaxlab.stats import cmi_test as C

TINY = dataclasses.replace(
    E.PRESETS["quick"],
    n=24,
    dz=2,
    dx=5,
    replicates=2,
    num_samples=4,
    num_boot=20,
    power_ns=(24,),  # with chunk=1, the same compiled test as the designs' A2 runs
    power_replicates=2,
    robust_n=32,
    robust_replicates=2,
    robust_num_samples=4,
    robust_dims=(5,),
    robust_sin=True,
    studies=E.STUDIES,
    gmmn_replicates=2,
    gmmn_steps=4,  # 12 training rows in batches of 8 + 4: two steps per epoch
    gmmn_batch=8,
    mlp_steps=3,
    imaging_subsets=2,
    imaging_n=40,
    imaging_steps=3,
    chunk=1,
)


def _is_rate(r, replicates):
    """A rejection rate over ``replicates`` data sets: a count / replicates."""
    count = r * replicates
    return 0 <= count <= replicates and count == pytest.approx(round(count), abs=1e-9)


def test_tiny_cmi_test_run(tmp_path):
    seed = 3
    exp = dataclasses.replace(Experiment.from_module(E), presets={"quick": TINY})
    run_experiment(exp, seed=seed, out_dir=tmp_path)
    m = json.loads((tmp_path / "metrics.json").read_text())
    for test in C.TESTS:
        for nu in E.NUISANCES:
            size = m["size"][test][nu]
            assert set(size) == {"0.05", "0.10"}
            assert all(_is_rate(r, TINY.replicates) for r in size.values())
            assert size["0.05"] <= size["0.10"]  # p < 0.05 implies p < 0.10
        assert set(m["power"][test]) == {"a1_sparse", "a1_dense", "a2_sparse", "a2_dense"}
        assert all(_is_rate(r, TINY.replicates) for r in m["power"][test].values())
        assert len(m["power_vs_n"][test]) == 1
        assert _is_rate(m["power_vs_n"][test][0], TINY.power_replicates)
        for a in E.ALPHAS:
            assert _is_rate(m["robust_detail"][test][a], TINY.robust_replicates)
            for arm in E.GMMN_ARMS:
                assert _is_rate(m["gmmn"][arm][test][a], TINY.gmmn_replicates)
        # the practical arm's size is the GMMN + MLP arm on H0, from its stored p-values
        p = np.asarray(m["gmmn"]["pvalues"]["h0_mlp"][test])
        assert p.shape == (TINY.gmmn_replicates,)
        assert m["size"][test]["gmmn_mlp"] == {a: np.mean(p < float(a)) for a in E.ALPHAS}
        se = m["gmmn"]["se_at_0.05"]["h0_mlp"][test]
        r = m["gmmn"]["h0_mlp"][test]["0.05"]
        assert se == pytest.approx(np.sqrt(r * (1 - r) / TINY.gmmn_replicates))
    for s, diff in m["cmi_minus_gcm"].items():
        assert diff == m["power"]["cmi"][s] - m["power"]["gcm"][s]
    assert set(m["robust_size"]) == {"cmi", "naive"}
    assert set(m["robustness"]) == {"d5"} and set(m["robustness"]["d5"]) == {"cmi", "naive"}
    assert all(_is_rate(r, TINY.robust_replicates) for r in m["robustness"]["d5"].values())
    assert m["robust_size"]["cmi"] == m["robust_detail"]["cmi"]["0.05"]
    # the size metric is the rejection rate of the p-values the library gives on the same data:
    # study 1's first job (h0, oracle nuisances) rerun through the public run_setting
    h0 = E.run_setting(TINY, "h0", "oracle", jax.random.fold_in(jax.random.key(seed), 0))
    for test in C.TESTS:
        p = h0[test]["p"]
        assert p.shape == (TINY.replicates,)
        # p-values are bootstrap means: multiples of 1 / num_boot in [0, 1]
        assert np.allclose(p * TINY.num_boot, np.round(p * TINY.num_boot), atol=1e-6)
        for a in E.ALPHAS:
            assert m["size"][test]["oracle"][a] == np.mean(p < float(a))
    # imaging: the rates and KS p-values are those of the stored per-subset p-values
    im = m["imaging"]
    assert im["subsets"] == TINY.imaging_subsets and im["n"] == TINY.imaging_n
    for arm in E.IMAGING_ARMS:
        p = np.asarray(im[f"{arm}_pvalues"])
        assert p.shape == (TINY.imaging_subsets,)
        assert np.allclose(p * TINY.num_boot, np.round(p * TINY.num_boot), atol=1e-6)
        assert im[f"{arm}_reject_rate"] == np.mean(p < 0.05)
        assert im[f"{arm}_ks_pvalue"] == pytest.approx(stats.kstest(p, "uniform").pvalue)
    for name in ("report.md", "pvalues_h0.png", "power_vs_n.png"):
        assert (tmp_path / name).exists(), name

"""Tiny end-to-end run of the ssar experiment: every metric key of issue 24 that the quick preset
writes, scores on the normalised scale of the recomputed references, the curve lengths."""

import dataclasses
import json

import numpy as np
import pytest

from experiments import ssar as E
from experiments._runner import Experiment, run_experiment

TINY = dataclasses.replace(
    E.PRESETS["quick"], seeds=2, steps=40, batch=32, eval_every=20, eval_episodes=2,
    hidden=(8, 8), beta_hidden=(8, 8, 8), reference_episodes=20,
    iql_datasets=("D-re",), iql_steps=2000, n_end_values=(1.5,), cql_datasets=("D-re",),
    cql_steps=20, cql_hidden=(8, 8),
)  # fmt: skip


def test_tiny_ssar_run(tmp_path):
    # the quick preset's arm plus one IQL-trust, one n_end and the CQL arm, all on D-re
    exp = dataclasses.replace(Experiment.from_module(E), presets={"quick": TINY})
    run_experiment(exp, seed=3, out_dir=tmp_path)
    m = json.loads((tmp_path / "metrics.json").read_text())
    td3 = ["td3bc_a2.5", "td3bc_ssar", "td3bc_ssar_iql", "td3bc_ssar_n1.5"]
    methods = td3 + ["cql", "cql_ssar"]
    assert list(m["score"]["D-re"]) == methods
    assert m["eval_steps"] == [0, 20, 40] and m["cql_eval_steps"] == [0, 20]
    for method in methods:
        evals = 3 if method in td3 else 2
        assert len(m["curves"]["D-re"][method]) == evals
        assert len(m["score"]["D-re"][method]["seeds"]) == 2
        assert len(m["beta_trusted"]["D-re"][method]) == evals  # step 0 and each evaluation
        assert np.isfinite(m["q_overestimation"]["D-re"][method])
        assert m["seconds_per_step"][method] > 0
        fs = m["final_slack"]["D-re"][method]
        assert 0 <= fs["trusted_violating"] <= 1 and 0 <= fs["untrusted_violating"] <= 1
    assert 0.14 <= m["trusted_frac"]["D-re"] <= 0.15
    assert 0 < m["trusted_frac_iql"]["D-re"] < 1
    # the baselines' n never moves; the n_end = 1.5 study stays on its own grid, below 1.5
    assert m["final_n"]["D-re"]["td3bc_a2.5"] == [1.0, 1.0]
    assert m["final_n"]["D-re"]["cql"] == [1.0, 1.0]
    for n in m["final_n"]["D-re"]["td3bc_ssar_n1.5"]:
        k = (n - 1.0) / 0.05
        assert n <= 1.5 + 1e-6 and abs(k - round(k)) < 1e-3
    assert m["beta0"] == {"td3bc_a2.5": 0.4, "td3bc_ssar": 0.4, "td3bc_ssar_iql": 0.4,
                          "td3bc_ssar_n1.5": 0.4, "cql": 5.0, "cql_ssar": 5.0}  # fmt: skip
    # the CQL baseline's coefficient is frozen at cql_alpha, so its trusted beta is exactly 5
    assert all(b == [5.0, 5.0] for b in m["beta_trusted"]["D-re"]["cql"])
    c = m["claims"]["D-re"]
    assert set(c["minus_ssar"]) == {"td3bc_ssar_iql", "td3bc_ssar_n1.5"}
    assert "cql_ssar_minus_cql" in c
    assert set(m["reference_return"]) == {"random", "expert"}
    assert m["reference_return"]["random"] < m["reference_return"]["expert"]
    for f in ("report.md", "curves.png", "beta_n.png", "slack.png"):
        assert (tmp_path / f).exists()


def test_plan_groups_methods_into_arms():
    arms = E.plan(E.PRESETS["ablation"])
    keys = [(a.dataset, a.family, a.trust, a.n_end) for a in arms]
    assert keys == [("D-me", "td3bc", "traj", 3.0), ("D-graded", "td3bc", "traj", 3.0),
                    ("D-re", "td3bc", "traj", 3.0), ("D-graded", "td3bc", "iql", 3.0),
                    ("D-me", "td3bc", "iql", 3.0), ("D-re", "td3bc", "traj", 1.5),
                    ("D-re", "td3bc", "traj", 5.0)]  # fmt: skip
    # each study has an SSAR reference on its data; D-me's sweep already holds one
    assert [m for m, _ in arms[1].methods] == ["td3bc_ssar"]
    assert [m for m, _ in arms[0].methods].count("td3bc_ssar") == 1
    full = E.plan(E.PRESETS["full"])
    assert [m for m, _ in full[-1].methods] == ["cql", "cql_ssar"] and full[-1].family == "cql"
    assert E.PRESETS["full"].steps == 11_250 and E.PRESETS["full"].cql_steps == 6000


def test_nothing_to_run_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="nothing to run"):
        E.run(dataclasses.replace(TINY, datasets=(), iql_datasets=(), n_end_values=(),
                                  cql_datasets=()), tmp_path)  # fmt: skip


def test_variants_are_the_documented_flag_settings():
    from jaxlab.rl import ssar

    cfg = ssar.TD3BCConfig()
    assert E.variant_run(cfg, "ssar") == ssar.ssar_run(cfg)
    ccfg = ssar.CQLConfig()
    assert E.variant_run(ccfg, "ssar") == ssar.cql_ssar_run(ccfg)
    assert E.variant_run(ccfg, "select_only") == ssar.cql_run(ccfg.cql_alpha)._replace(
        select=1.0, loosen=1.0)  # fmt: skip
    flags = {v: tuple(float(x) for x in E.variant_run(cfg, v))[1:] for v in E.VARIANTS}
    assert flags["ssar_no_select"] == (1.0, 0.0, 0.0)  # state-adaptive only
    assert flags["select_only"] == (0.0, 1.0, 1.0)  # beta fixed at beta0, BC on trusted rows
    assert flags["ssar_no_loosen"] == (1.0, 1.0, 0.0)
    names = E.method_names(E.PRESETS["ablation"])
    assert names[:3] == ["td3bc_a1", "td3bc_a2.5", "td3bc_a10"] and "td3bc_ssar" in names

"""Tiny end-to-end run of the neural_etc experiment: every method's metrics exist and agree with
their per-state values, the counts and the library functions on the same inputs."""

import dataclasses
import json

import jax
import numpy as np

from experiments import neural_etc
from experiments._runner import Experiment, run_experiment
from jaxlab.control import neural_etc as E

TINY = dataclasses.replace(
    neural_etc.PRESETS["quick"],
    n_test_states=1,
    horizon=0.5,
    max_triggers=50,
    n_grid=50,
    mse_from=0.4,
    mc_steps=4,
    mc_samples=64,
    pi_warmup=4,
    pi_event_steps=0,  # warm-up only: the event phase is the unit tests (FD gradient, run_schedule)
    pi_samples=32,
    pi_batch=2,
    nlc_steps=4,
    nlc_samples=64,
    n_violation_points=500,
    # the PI study: one row (it trains "official"), 2 vmapped seeds, warm-up steps only
    pi_study_rows=("official_untrained_v",),
    pi_study_seeds=2,
    pi_study_test_states=2,
    pi_official_schedule=(2, 0),
)
SEED = 3


def test_tiny_neural_etc_run(tmp_path):
    exp = dataclasses.replace(Experiment.from_module(neural_etc), presets={"quick": TINY})
    run_experiment(exp, seed=SEED, out_dir=tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    for key in ("triggers", "min_inter_event", "temporal_mse", "train_seconds", "violation_rate"):
        assert set(metrics[key]) == set(neural_etc.METHODS), key
        for name in neural_etc.METHODS:
            assert metrics[key][name] == metrics["methods"][name][key], (key, name)
    for name, res in metrics["methods"].items():
        # the summaries are the per-state values reduced: mean count, smallest gap
        per_state = res["triggers_per_state"]
        assert len(per_state) == TINY.n_test_states, name
        assert all(isinstance(n, int) and 0 <= n <= TINY.max_triggers for n in per_state), name
        assert res["triggers"] == np.mean(per_state), name
        gaps = res["min_inter_event_per_state"]
        assert res["min_inter_event"] == min(gaps), name
        for n, gap in zip(per_state, gaps, strict=True):  # no trigger: the horizon itself
            assert 0 < gap < TINY.horizon if n > 0 else gap == TINY.horizon, name
        # a rate over 500 points is a count / 500
        count = res["violation_rate"] * TINY.n_violation_points
        assert abs(count - round(count)) < 1e-3, name
        assert res["solver_ok"] is True, name  # every tiny run's ODE solves and root finds succeed
        assert res["diverged"] == 0, name
    assert metrics["violation_rate"]["etc_pi_projected"] == 0.0  # the projection's guarantee
    # the LQR rows against the library on the same test state and violation points
    with jax.enable_x64(True):
        system = E.lorenz()
        gains = E.lqr(system, np.diag([5.0, 10.0, 5.0]), 0.1 * np.eye(3))
        points = jax.random.uniform(jax.random.key(SEED + 2000), (TINY.n_violation_points, 3),
                                    np.float64, -system.domain, system.domain)  # fmt: skip
        lie = E.lie_derivative(system, gains.controller, gains.lyapunov)
        official = E.lie_derivative(system, lambda p, x: gains.K @ x, gains.lyapunov)
        lie_values = jax.jit(jax.vmap(lambda x: (lie(None, x), official(None, x))))(points)
    for name, values in zip(("lqr", "lqr_official"), lie_values, strict=True):
        count = metrics["violation_rate"][name] * TINY.n_violation_points
        assert round(count) == int(np.sum(np.asarray(values) > 0)), name
    assert metrics["violation_rate"]["lqr_official"] > 0.5  # u = +K x: the official sign error
    x0 = np.asarray(metrics["test_states"][0])
    assert 0 <= metrics["temporal_mse"]["lqr"] < 0.1 * float(x0 @ x0)  # LQR-ETC decays
    # the PI study's summaries are its per-seed values reduced
    assert set(metrics["pi_configs"]) == {"official_untrained_v"}
    row = metrics["pi_configs"]["official_untrained_v"]
    assert metrics["pi_study"]["seeds"] == [SEED, SEED + 1] and row["seeds"] == 2
    assert row["triggers_mean"] == np.mean(row["triggers_per_seed"])
    assert 0 <= row["triggers_mean"] <= row["triggers_max"] <= TINY.max_triggers
    assert row["late_mse"] == np.mean(row["late_mse_per_seed"])
    stabilised = sum(m <= neural_etc.STABILISED_MSE for m in row["late_mse_per_seed"])
    assert row["stabilised_seeds"] == stabilised
    assert 0 < row["min_gap"] <= TINY.horizon and row["solver_ok"] is True
    for name in ("report.md", "trajectories.png", "inter_event_times.png"):
        assert (tmp_path / name).exists(), name

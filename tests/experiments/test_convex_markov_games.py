"""Tiny end-to-end run of the convex_markov_games experiment: every study runs, and its metrics are
the library's numbers on the same games.

``TINY`` keeps every code path of the full preset (ratio search, a second kappa, the mu sweep, the
stochastic variant, both figures) at the unit tests' shapes and configs
(``tests/games/convex_markov_shared.py``): its ``alt_pgda`` and ``nest_pg`` runs are the same
cached ``solve_games`` programs as the unit tests' and the package example's.
"""

import dataclasses
import json

import jax
import numpy as np
import pytest

from experiments import convex_markov_games as E
from experiments._runner import Experiment, run_experiment
from jaxlab.games import convex_markov as M
from tests.games import convex_markov_shared as S

TINY = dataclasses.replace(
    E.PRESETS["full"],
    n_games=S.N_GAMES,
    n_states=S.N_STATES,
    n_actions=S.N_ACTIONS,
    gamma=S.GAMMA,
    kappas=(0.0, 0.01),  # kappa > 0: Frank-Wolfe best responses (up to gap_iters steps)
    steps=S.STEPS,
    nested_steps=S.NESTED_STEPS,
    inner_steps=S.NEST.inner_steps,
    n_checkpoints=S.STEPS // S.EVERY,
    ratio_grid=(5.0, 10.0),
    long_steps=2 * S.STEPS,  # eval_every is an input: the same program as ``steps``
    n_rollouts=4,
    horizon=5,
    gap_iters=50,  # kappa = 0: one Frank-Wolfe step is exact; 0.01's runs stop at 50
)
SEED = 3


def test_tiny_config_shares_the_unit_tests_programs():
    # solve_games compiles one exact program per (inner_steps, epsilon, number of evaluations)
    sweep = E.method_configs(TINY, 5.0)
    assert sweep["alt_pgda"] == (S.ALT, S.STEPS)
    assert sweep["nest_pg"] == (S.NEST, S.NESTED_STEPS)
    assert TINY.nested_steps // TINY.n_checkpoints == S.NESTED_EVERY
    assert TINY.n_checkpoints == S.STEPS // S.EVERY


def _library_gaps(sc, steps, kappa):
    """The last Nash gaps of ``sc`` on the experiment's evaluation games, from the library."""
    with jax.enable_x64(True):
        games, keys = E.make_games(TINY, jax.random.key(SEED), kappa)
        _, gaps = M.solve_games(sc, games, keys, steps, steps // TINY.n_checkpoints,
                                gap_iters=TINY.gap_iters)  # fmt: skip
    return np.asarray(gaps.gap)


def test_tiny_convex_markov_games_run(tmp_path):
    exp = dataclasses.replace(Experiment.from_module(E), presets={"quick": TINY})
    run_experiment(exp, seed=SEED, out_dir=tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    for key in ("gap_median", "gap_p90", "frac_gap_below_0.02", "gap_curve"):
        assert set(metrics[key]) == set(E.METHODS), key
    frac = metrics["frac_gap_below_0.02"]
    for m in E.METHODS:
        assert metrics["gap_median"][m] <= metrics["gap_p90"][m]  # quantiles are ordered
        assert len(metrics["gap_curve"][m]) == TINY.n_checkpoints + 1
        assert frac[m] * TINY.n_games == pytest.approx(round(frac[m] * TINY.n_games))
        assert metrics["certificate_max"][m] <= 1e-9  # kappa = 0: both best responses exact
    # Nest-PG's x-axis: (inner + 1) updates per outer iteration, every nested_steps / 2 iterations
    every = TINY.nested_steps // TINY.n_checkpoints * (TINY.inner_steps + 1)
    assert metrics["updates"]["nest_pg"] == [0, every, 2 * every]
    assert metrics["updates"]["alt_pgda"] == [0, 2 * S.EVERY, 4 * S.EVERY]
    # the held-out search picks the ratio with the lowest mean of the two methods' medians
    search = metrics["ratio_search"]
    assert set(search) == {"alt_pgda", "nest_pg"}
    score = {r: np.mean([search[m][str(r)] for m in search]) for r in TINY.ratio_grid}
    assert metrics["ratio"] == min(score, key=score.get)
    # the metrics are the library's numbers on the same games (cached programs: no compile)
    cfgs = E.method_configs(TINY, metrics["ratio"])
    alt, steps = cfgs["alt_pgda"]
    last = _library_gaps(alt, steps, 0.0)[:, -1]
    assert metrics["gap_median"]["alt_pgda"] == pytest.approx(np.median(last), rel=1e-12)
    assert frac["alt_pgda"] == np.mean(last <= E.THRESHOLD)
    sim, sim_steps = cfgs["sim_pgda"]
    sim_last = _library_gaps(sim, sim_steps, 0.0)[:, -1]
    assert metrics["gap_p90"]["sim_pgda"] == pytest.approx(np.quantile(sim_last, 0.9), rel=1e-12)
    assert metrics["sim_over_alt_median"] == pytest.approx(
        metrics["gap_median"]["sim_pgda"] / metrics["gap_median"]["alt_pgda"], rel=1e-12
    )
    # the second kappa ran on its own games
    assert set(metrics["kappa_0.01"]) == set(E.METHODS)
    k_last = _library_gaps(alt, steps, 0.01)[:, -1]
    assert metrics["kappa_0.01"]["alt_pgda"]["gap_median"] == pytest.approx(np.median(k_last),
                                                                           rel=1e-12)  # fmt: skip
    assert metrics["kappa_0.01"]["alt_pgda"]["gap_median"] != metrics["gap_median"]["alt_pgda"]
    # mu sweep: four settings; mu = 0.05 at T = steps is the alt_pgda run itself
    sweep = metrics["mu_sweep"]
    assert list(sweep) == [f"mu={mu},T={t}" for mu, t in ((0.2, TINY.steps), (0.05, TINY.steps),
                           (0.01, TINY.steps), (0.01, TINY.long_steps))]  # fmt: skip
    assert sweep[f"mu=0.05,T={TINY.steps}"]["gap_median"] == metrics["gap_median"]["alt_pgda"]
    # stochastic Alt-PGDA: the library's REINFORCE run on the same games
    sc = dataclasses.replace(alt, stochastic=True, n_rollouts=TINY.n_rollouts,
                             horizon=TINY.horizon)  # fmt: skip
    s_last = _library_gaps(sc, TINY.steps, 0.0)[:, -1]
    assert metrics["stochastic"]["gap_median"] == pytest.approx(np.median(s_last), rel=1e-12)
    assert not np.allclose(s_last, last)  # the rollouts changed the run
    for name in ("report.md", "nash_gap.png", "policy_trajectory.png"):
        assert (tmp_path / name).exists(), name
    report = (tmp_path / "report.md").read_text()
    assert "kappa_0.01:" in report and "mu sweep" in report and "Stochastic Alt-PGDA" in report

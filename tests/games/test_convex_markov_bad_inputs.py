"""jaxlab.games.convex_markov: every public entry point rejects bad input with a clear error.

One table of ``(entry point, argument, bad value, exception, message fragment)``: each entry point
is called with valid tiny inputs (NumPy, built once below) except for the one argument. Every
error is raised at the boundary, before anything is traced or compiled, so the table runs in well
under a second. The last tests check that a NaN inside ``jit`` (where it cannot be rejected) is
flagged in the Nash gap's ``finite`` field, never reported as a finite gap alone.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.sharding import data_mesh
from jaxlab.games import convex_markov as M

S, A = 2, 2
P = np.full((S, A, S), 0.5, np.float32)
RHO = np.full(S, 0.5, np.float32)
PI = np.full((S, A), 0.5, np.float32)
R = np.arange(S * A, dtype=np.float32).reshape(S, A)
GAME = M.FactoredGame(
    p1=P, rho1=RHO, p2=P, rho2=RHO,
    payoff=np.linspace(-1, 1, S * A * S * A, dtype=np.float32).reshape(S, A, S, A),
    tau1=np.full((S, A), 0.25, np.float32), kappa=np.float32(0.0), gamma=np.float32(0.8),
)  # fmt: skip
GAMES = jax.tree.map(lambda a: np.stack([a, a]), GAME)  # a batch of 2 games
CFG = M.SolverConfig("alternating", mu=0.05, eta_x=0.1, eta_y=0.5)
KEY = jax.random.key(0)
KEYS = jax.random.split(KEY, 2)
STATE = M.SolverState(PI, PI, np.int32(0), KEY)
SOLVER = M.make_solver(CFG, GAME)
BAD_KEYS = [7, np.zeros(2, np.float32), np.zeros(3, np.uint32)]
OFF_SIMPLEX = np.ones((S, A), np.float32)  # rows sum to 2
NAN = np.full((S, A), np.nan, np.float32)


def game(**fields):
    return GAME._replace(**fields)


def call(fn, /, **defaults):
    """``entry(argument, value)``: ``fn(**defaults)`` with ``argument`` set to ``value``."""

    def entry(argument, value):
        return fn(**{**defaults, argument: value})

    entry.__name__ = fn.__name__
    return entry


def config(argument, value):
    return dataclasses.replace(CFG, **{argument: value})


def state(argument, value):
    return SOLVER.step(STATE.replace(**{argument: value}))


check_game = call(M.check_game, game=GAME)
random_game = call(M.random_factored_game, key=KEY, n_states=2, n_actions=2)
rps = call(M.rock_paper_scissors)
uniform = call(M.uniform_policies, game=GAME)
played = call(M.played, pi=PI, epsilon=0.1)
occupancies = call(M.occupancies, game=GAME, x=PI, y=PI)
occ_utility = call(M.occupancy_utility, game=GAME, lam1=PI / 2, lam2=PI / 2, mu=0.0)
utility = call(M.utility, game=GAME, x=PI, y=PI)
gradients = call(M.exact_gradients, game=GAME, x=PI, y=PI)
nash_gap = call(M.nash_gap, game=GAME, x=PI, y=PI)
best_response = call(M.best_response, p=P, rho=RHO, gamma=0.8, f=lambda lam: jnp.sum(lam),
                     lam0=PI / 2, minimize=True)  # fmt: skip
rollouts = call(M.rollout_gradients, game=GAME, x=PI, y=PI, key=KEY, epsilon=0.1, mu=0.0,
                n_rollouts=3, horizon=3)  # fmt: skip
check_mdp = call(M.check_mdp, p=P, rho=RHO, gamma=0.8)
occupancy = call(M.occupancy, p=P, rho=RHO, pi=PI, gamma=0.8)
state_occ = call(M.state_occupancy, p=P, rho=RHO, pi=PI, gamma=0.8)
transition = call(M.transition_matrix, p=P, pi=PI)
q_values = call(M.q_values, p=P, pi=PI, r=R, gamma=0.8)
policy_grad = call(M.policy_gradient, p=P, rho=RHO, pi=PI, r=R, gamma=0.8)
project = call(M.project_simplex, v=R)
value_iter = call(M.value_iteration, p=P, r=R, gamma=0.8)
greedy = call(M.greedy_policy, q=R)
make_solver = call(M.make_solver, config=CFG, game=GAME)
solver_init = call(SOLVER.init, key=KEY)
solver_gap = call(SOLVER.gap, state=STATE, max_iter=10)
solver_solve = call(SOLVER.solve, key=KEY, num_steps=4, eval_every=2, gap_iters=10)
init = call(M.init, game=GAME, key=KEY)
step = call(M.step, cfg=CFG, game=GAME, state=STATE)
solve = call(M.solve, cfg=CFG, game=GAME, key=KEY, num_steps=4, eval_every=2)
solve_games = call(M.solve_games, cfg=CFG, games=GAMES, keys=KEYS, num_steps=4, eval_every=2)

V, T = ValueError, TypeError
CASES = [
    # SolverConfig.__post_init__: every field
    (config, "method", "extragradient", V, "`method` must be one of"),
    (config, "method", None, V, "`method`"),
    (config, "mu", -0.1, V, "`mu` must lie in"),
    (config, "mu", "a", T, "`mu`"),
    (config, "mu", True, T, "`mu`"),
    (config, "mu", float("nan"), V, "`mu`"),
    (config, "mu", np.ones(2), V, "`mu` must be a scalar"),
    (config, "eta_x", 0.0, V, "`eta_x`"),
    (config, "eta_x", float("inf"), V, "`eta_x`"),
    (config, "eta_y", -1.0, V, "`eta_y`"),
    (config, "eta_y", "fast", T, "`eta_y`"),
    (config, "inner_steps", 0, V, "`inner_steps`"),
    (config, "inner_steps", 2.5, V, "`inner_steps` must be an int"),
    (config, "inner_steps", True, V, "`inner_steps`"),
    (config, "epsilon", 1.0, V, "`epsilon`"),
    (config, "epsilon", -0.1, V, "`epsilon`"),
    (config, "epsilon", float("nan"), V, "`epsilon`"),
    (config, "stochastic", "yes", T, "`stochastic` must be a bool"),
    (config, "stochastic", 1, T, "`stochastic`"),
    (config, "n_rollouts", 0, V, "`n_rollouts`"),
    (config, "n_rollouts", 2.5, V, "`n_rollouts`"),
    (config, "horizon", -1, V, "`horizon`"),
    (config, "horizon", None, V, "`horizon`"),
    # check_game (and through it every function that takes a game): each field
    (check_game, "game", tuple(GAME), T, "`game` must be a FactoredGame"),
    (check_game, "game", None, T, "`game`"),
    (check_game, "game", game(p1=2 * P), V, "`p1` is not a transition kernel"),
    (check_game, "game", game(p1=P * np.array([-1, 3], np.float32)), V, "`p1` is not a transition"),
    (check_game, "game", game(p1=np.full_like(P, np.nan)), V, "`p1` must be finite"),
    (check_game, "game", game(p1=P[0]), V, "`p1` must have shape"),
    (check_game, "game", game(p1=P[:, :, :1]), V, "`p1` must have shape"),
    (check_game, "game", game(p2=P.astype(bool)), T, "`p2`"),
    (check_game, "game", game(rho1=np.ones(3) / 3), V, "`rho1` must have shape"),
    (check_game, "game", game(rho2=2 * RHO), V, "`rho2`"),
    (check_game, "game", game(payoff=GAME.payoff[:, :, 0]), V, "`payoff` must have shape"),
    (check_game, "game", game(payoff=GAME.payoff * np.inf), V, "`payoff` must be finite"),
    (check_game, "game", game(payoff=np.full((S, A, S, A), "x")), T, "`payoff`"),
    (check_game, "game", game(tau1=np.zeros((3, 2))), V, "`tau1` must have shape"),
    (check_game, "game", game(kappa=np.float32(-1.0)), V, "`kappa`"),
    (check_game, "game", game(kappa=np.zeros(2)), V, "`kappa` must be a scalar"),
    (check_game, "game", game(gamma=np.float32(1.5)), V, "`gamma`"),
    (check_game, "game", game(gamma=np.float32(1.0)), V, "`gamma`"),
    (check_game, "game", game(gamma=np.float32(np.nan)), V, "`gamma`"),
    (check_game, "game", game(gamma=True), T, "`gamma`"),
    # random_factored_game / rock_paper_scissors
    *[(random_game, "key", k, V, "`key` must be a PRNG key") for k in BAD_KEYS],
    (random_game, "n_states", 0, V, "`n_states`"),
    (random_game, "n_states", 2.5, V, "`n_states` must be an int"),
    (random_game, "n_actions", "3", V, "`n_actions`"),
    (random_game, "gamma", 1.0, V, "`gamma`"),
    (random_game, "kappa", -1.0, V, "`kappa`"),
    (random_game, "concentration", 0.0, V, "`concentration`"),
    (random_game, "dtype", jnp.int32, T, "`dtype` must be a float dtype"),
    (rps, "gamma", 1.5, V, "`gamma`"),
    (rps, "dtype", "int32", T, "`dtype`"),
    # policies, occupancies, utilities, gradients, the Nash gap (issue: gamma 1.5, rows summing
    # to 2 and a payoff of the wrong rank gave finite gaps)
    (uniform, "game", None, T, "`game`"),
    (played, "pi", np.array([[0.5, 0.6]]), V, "`pi` must hold probability vectors"),
    (played, "pi", "abc", T, "`pi`"),
    (played, "pi", np.float32(1.0), V, "`pi` must have rank >= 1"),
    (played, "epsilon", 1.5, V, "`epsilon`"),
    (occupancies, "x", np.full((3, A), 0.5), V, "`x` must have shape"),
    (occupancies, "y", NAN, V, "`y`"),
    (occupancies, "x", PI.astype(bool), T, "`x`"),
    (occ_utility, "lam1", np.zeros((3, A)), V, "`lam1` must have shape"),
    (occ_utility, "lam2", NAN, V, "`lam2` must be finite"),
    (occ_utility, "mu", -1.0, V, "`mu`"),
    (utility, "epsilon", 2.0, V, "`epsilon`"),
    (utility, "mu", "a", T, "`mu`"),
    (utility, "x", OFF_SIMPLEX.tolist(), V, "`x` must hold probability vectors"),
    (gradients, "y", OFF_SIMPLEX, V, "`y` must hold probability vectors"),
    (gradients, "game", game(p2=2 * P), V, "`p2` is not a transition kernel"),
    (nash_gap, "game", game(gamma=np.float32(1.5)), V, "`gamma`"),
    (nash_gap, "game", game(p1=2 * P), V, "`p1` is not a transition kernel"),
    (nash_gap, "game", game(payoff=GAME.payoff[..., 0]), V, "`payoff` must have shape"),
    (nash_gap, "x", NAN, V, "`x`"),
    (nash_gap, "max_iter", 0, V, "`max_iter`"),
    (nash_gap, "max_iter", 2.5, V, "`max_iter` must be an int"),
    (nash_gap, "tol", -1.0, V, "`tol`"),
    (best_response, "f", None, T, "`f` must be callable"),
    (best_response, "lam0", np.zeros((3, A)), V, "`lam0` must have shape"),
    (best_response, "f", lambda lam: lam, V, "`f` must map an occupancy"),
    (best_response, "minimize", "yes", T, "`minimize` must be a bool"),
    (best_response, "p", 2 * P, V, "`p` is not a transition kernel"),
    (best_response, "rho", RHO[:1], V, "`rho` must have shape"),
    (best_response, "max_iter", -1, V, "`max_iter`"),
    (rollouts, "key", 1, V, "`key`"),
    (rollouts, "n_rollouts", 0, V, "`n_rollouts`"),
    (rollouts, "horizon", 2.5, V, "`horizon`"),
    (rollouts, "epsilon", -1.0, V, "`epsilon`"),
    (rollouts, "mesh", 3, T, "`mesh`"),
    (rollouts, "mesh", data_mesh(), V, "`n_rollouts` has batch size 3"),
    # MDP primitives
    (check_mdp, "rho", 2 * RHO, V, "`rho`"),
    (check_mdp, "gamma", np.ones(2) / 2, V, "`gamma` must be a scalar"),
    (occupancy, "p", 2 * P, V, "`p` is not a transition kernel"),
    (occupancy, "pi", OFF_SIMPLEX, V, "`pi` must hold probability vectors"),
    (occupancy, "gamma", 1.0, V, "`gamma`"),
    (occupancy, "p", "p", T, "`p`"),
    (state_occ, "rho", np.ones(3) / 3, V, "`rho` must have shape"),
    (transition, "pi", np.full((S, 3), 1 / 3), V, "`pi` must have shape"),
    (q_values, "r", R[:1], V, "`r` must have shape"),
    (q_values, "r", NAN, V, "`r` must be finite"),
    (policy_grad, "r", R.astype(str), T, "`r`"),
    (project, "v", "a", T, "`v`"),
    (project, "v", np.float32(1.0), V, "`v` must have rank >= 1"),
    (project, "v", NAN, V, "`v` must be finite"),
    (project, "v", np.zeros((3, 0)), V, "`v`"),
    (value_iter, "tol", -1.0, V, "`tol`"),
    (value_iter, "max_iter", 0, V, "`max_iter`"),
    (value_iter, "maximize", 1, T, "`maximize`"),
    (value_iter, "p", P[:, :, :1], V, "`p` must have shape"),
    (greedy, "q", NAN, V, "`q` must be finite"),
    (greedy, "maximize", "no", T, "`maximize`"),
    (greedy, "q", np.float32(1.0), V, "`q` must have rank >= 1"),
    # the solver factory and its functions: configs, games, keys, states of another size
    (make_solver, "config", "alternating", T, "`config` must be a SolverConfig"),
    (make_solver, "game", game(gamma=np.float32(1.5)), V, "`gamma`"),
    (make_solver, "mesh", "data", T, "`mesh`"),
    *[(solver_init, "key", k, V, "`key` must be a PRNG key") for k in BAD_KEYS],
    (state, "x", np.full((3, A), 0.5, np.float32), V, "`state.x` must have shape"),
    (state, "y", OFF_SIMPLEX, V, "`state.y` must hold probability vectors"),
    (state, "x", NAN, V, "`state.x`"),
    (state, "key", 3, V, "`state.key`"),
    (state, "count", 1.5, V, "`state.count`"),
    (solver_gap, "state", None, T, "`state` must be a SolverState"),
    (solver_gap, "max_iter", 0, V, "`max_iter`"),
    (solver_solve, "num_steps", 3, V, "multiple of `eval_every`"),
    (solver_solve, "num_steps", 0, V, "`num_steps`"),
    (solver_solve, "eval_every", 2.5, V, "`eval_every`"),
    (solver_solve, "gap_iters", 0, V, "`gap_iters`"),
    (solver_solve, "key", np.zeros(3, np.uint32), V, "`key`"),
    (init, "game", game(rho1=2 * RHO), V, "`rho1`"),
    (init, "key", 5, V, "`key`"),
    (step, "cfg", {"method": "alternating"}, T, "`cfg` must be a SolverConfig"),
    (step, "state", (PI, PI), T, "`state`"),
    (solve, "num_steps", -1, V, "`num_steps`"),
    (solve, "game", game(payoff=GAME.payoff[0]), V, "`payoff`"),
    (solve_games, "games", GAME, V, "`games` must be a FactoredGame with a leading game axis"),
    (solve_games, "games", GAMES._replace(gamma=np.array([0.8, 1.5])), V, "`gamma`"),
    (solve_games, "games", GAMES._replace(p2=GAMES.p2[:1]), V, "`p2` must have shape"),
    (solve_games, "keys", KEYS[:1], V, "`keys` must be 2 keys"),
    (solve_games, "keys", np.zeros((2, 3), np.uint32), V, "`keys`"),
    (solve_games, "cfg", None, T, "`cfg`"),
    (solve_games, "num_steps", 0, V, "`num_steps`"),
    (solve_games, "gap_iters", 0, V, "`gap_iters`"),
    (solve_games, "mesh", data_mesh(), V, "`games` has batch size 2"),
]


@pytest.mark.parametrize(
    ("entry", "argument", "value", "error", "fragment"),
    CASES,
    ids=[f"{c[0].__name__}-{c[1]}-{i}" for i, c in enumerate(CASES)],
)
def test_bad_input_is_a_clear_error(entry, argument, value, error, fragment):
    with pytest.raises(error, match=fragment.replace("(", r"\(").replace("[", r"\[")):
        entry(argument, value)


def test_valid_tiny_inputs_are_accepted():
    """The table's valid inputs pass the boundary checks (and ints where floats are fine)."""
    M.check_game(GAME)
    M.check_game(game(p1=np.ones((S, A, S), np.int32) // 2 + np.eye(S, dtype=np.int32)[:, None]))
    M.check_mdp(P, RHO, 0.8)
    assert len(CASES) >= 100


@jax.jit
def _gap_of(game, x, y):
    return M.nash_gap(game, x, y, max_iter=5)


def test_a_non_finite_gap_inside_jit_is_flagged():
    """Inside jit NaN inputs cannot be rejected: ``finite`` says so, on the same program."""
    rps = M.rock_paper_scissors()
    u = jnp.full((1, 3), 1 / 3)
    ok = _gap_of(rps, u, u)
    assert bool(ok.finite) and abs(float(ok.gap)) < 1e-6
    bad = _gap_of(rps._replace(payoff=rps.payoff.at[0, 0, 0, 1].set(jnp.nan)), u, u)
    assert not bool(bad.finite)
    nan_policy = _gap_of(rps, u.at[0, 0].set(jnp.nan), u)
    assert not bool(nan_policy.finite)

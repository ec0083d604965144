"""Zero-sum convex Markov games solved by independent policy gradient (ICML 2025).

Kalogiannis, Vlatakis-Gkaragkounis, Gemp, Piliouras, "Solving Zero-Sum Convex Markov Games". The
paper is theoretical (no official code); the game family, oracles and calibration follow the spec
``papers/convex_markov_games.md``.

- :mod:`.mdp`: occupancy measures by linear solves, action values, the policy-gradient formula,
  simplex projection, value iteration;
- :mod:`.game`: factored games ``U = lambda_1^T C lambda_2 + kappa/2 ||lambda_1 - tau_1||^2``
  with the regulariser ``-mu/2 ||lambda_2||^2``, exact pseudo-reward gradients, and the Nash gap
  with value-iteration / Frank-Wolfe best responses (certified);
- :mod:`.solvers`: Nest-PG, Alt-PGDA and Sim-PGDA, exact or REINFORCE gradients, through the
  factory :func:`make_solver` (``init(key)``, ``step(state, x=None) -> (state, metrics)``,
  ``gap(state)``, ``solve(key, num_steps, eval_every)``: ``lax.scan`` with gap checkpoints), and
  :func:`solve_games` (vmapped over games, game axis sharded). The module-level :func:`init`,
  :func:`step` (state only) and :func:`solve` are kept as wrappers of the solver's.

Oracles are meant to run in float64: build games inside ``with jax.enable_x64(True):``.

Example::

    import jax
    from jaxlab.games import convex_markov as M

    with jax.enable_x64(True):
        keys = jax.random.split(jax.random.key(0), 4)
        games = jax.jit(jax.vmap(lambda k: M.random_factored_game(k, 3, 2)))(keys)  # 4 games
        cfg = M.SolverConfig("alternating", mu=0.05, eta_x=0.1, eta_y=0.5)
        solver = M.make_solver(cfg, jax.tree.map(lambda a: a[0], games))  # the first game
        state, metrics = jax.jit(solver.step)(solver.init(keys[0]))  # x_move, grad_x_norm, ...
        # all 4 games, game axis sharded: gaps.gap [4, 3], the Nash gap at steps 0, 100 and 200
        states, gaps = M.solve_games(cfg, games, keys, num_steps=200, eval_every=100)
"""

from jaxlab.games.convex_markov.game import (
    FactoredGame,
    GapResult,
    best_response,
    check_game,
    exact_gradients,
    nash_gap,
    occupancies,
    occupancy_utility,
    played,
    random_factored_game,
    rock_paper_scissors,
    uniform_policies,
    utility,
)
from jaxlab.games.convex_markov.mdp import (
    check_mdp,
    greedy_policy,
    occupancy,
    policy_gradient,
    project_simplex,
    q_values,
    state_occupancy,
    transition_matrix,
    value_iteration,
)
from jaxlab.games.convex_markov.solvers import (
    METHODS,
    Solver,
    SolverConfig,
    SolverState,
    init,
    make_solver,
    rollout_gradients,
    solve,
    solve_games,
    step,
)

__all__ = [
    "METHODS",
    "FactoredGame",
    "GapResult",
    "Solver",
    "SolverConfig",
    "SolverState",
    "best_response",
    "check_game",
    "check_mdp",
    "exact_gradients",
    "greedy_policy",
    "init",
    "make_solver",
    "nash_gap",
    "occupancies",
    "occupancy",
    "occupancy_utility",
    "played",
    "policy_gradient",
    "project_simplex",
    "q_values",
    "random_factored_game",
    "rock_paper_scissors",
    "rollout_gradients",
    "solve",
    "solve_games",
    "state_occupancy",
    "step",
    "transition_matrix",
    "uniform_policies",
    "utility",
    "value_iteration",
]

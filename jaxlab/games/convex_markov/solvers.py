"""Independent policy gradient for zero-sum convex Markov games: Nest-PG, Alt-PGDA, Sim-PGDA.

Both players run projected gradient steps on their own policy (direct parameterisation, one simplex
projection per state) using only their own gradient of the regularised utility
``U^mu = U - (mu / 2) ||lambda_2||^2``; ``x`` descends, ``y`` ascends.

- ``"nested"`` (Nest-PG / GDmax): ``inner_steps`` ascent steps of ``y`` (warm-started), then one
  descent step of ``x``;
- ``"alternating"`` (Alt-PGDA): ``x <- Proj(x - eta_x g_x(x, y))``, then
  ``y <- Proj(y + eta_y g_y(x_new, y))``, with ``eta_x << eta_y`` (two timescales);
- ``"simultaneous"`` (Sim-PGDA, the baseline): both steps from the same ``(x, y)``.

Gradients are exact (pseudo-reward formula) or, with ``stochastic=True``, REINFORCE estimates with
plug-in pseudo-rewards: each step every player rolls out ``n_rollouts`` trajectories of ``horizon``
steps of its own MDP under its played policy, the empirical discounted occupancies
``lambda_hat_i`` give the pseudo-rewards ``c_hat = grad U^mu(lambda_hat_1, lambda_hat_2)``, and
each player weights its own score function ``(1 - eps) 1[a_t = a] / pi_played(a | s_t)`` by the
discounted reward-to-go of ``c_hat`` along its own trajectories (independence: a player never reads
the opponent's policy, only the realised pseudo-rewards).

The method's entry point is :func:`make_solver` (the jaxlab contract): ``solver =
make_solver(config, game)`` closes over one game and returns pure ``init(key)``,
``step(state, x=None) -> (state, metrics)``, ``gap(state)`` and ``solve(key, num_steps,
eval_every)``. Step ``t`` draws its random numbers from ``fold_in(state.key, t)`` (only the
stochastic gradients use them). :func:`solve` runs one game for ``num_steps`` iterations in a
``lax.scan`` and records the Nash gap of the *unregularised* game at the played policies every
``eval_every`` steps; ``jax.vmap`` it over a batch of games, or call :func:`solve_games`, which
shards the game axis across devices. The module-level :func:`init` and :func:`step` are the
earlier per-call interface, kept as thin wrappers of the solver's.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import Mesh

from jaxlab.core import checks, sharding
from jaxlab.core.checks import check_bool, check_choice, check_count, check_distribution
from jaxlab.games.convex_markov.game import (
    FactoredGame,
    GapResult,
    _as_game,
    _check_epsilon,
    _check_mu,
    _exact_gradients,
    _game_policies,
    _nash_gap,
    _occupancy_utility,
    _played,
    _uniform_policies,
)
from jaxlab.games.convex_markov.mdp import _project_simplex as project_simplex

__all__ = [
    "METHODS",
    "Solver",
    "SolverConfig",
    "SolverState",
    "init",
    "make_solver",
    "rollout_gradients",
    "solve",
    "solve_games",
    "step",
]

Method = Literal["nested", "alternating", "simultaneous"]
METHODS = ("nested", "alternating", "simultaneous")


@dataclasses.dataclass(frozen=True)
class SolverConfig:
    """Hyperparameters of one independent policy-gradient method (frozen, hashable).

    Attributes:
      method: ``"nested"``, ``"alternating"`` or ``"simultaneous"``.
      mu: regularisation ``mu >= 0`` of the maximiser's occupancy (``0`` = unregularised).
      eta_x, eta_y: step sizes ``> 0`` of the minimiser and the maximiser.
      inner_steps: ``y`` ascent steps per ``x`` step (``"nested"`` only), ``>= 1``.
      epsilon: epsilon-greedy exploration of the played policies, in ``[0, 1)``.
      stochastic: REINFORCE gradients with plug-in pseudo-rewards instead of exact ones.
      n_rollouts, horizon: trajectories per player per gradient and their length (stochastic),
        each ``>= 1``.

    Raises:
      ValueError: naming the first invalid field.
    """

    method: Method = "alternating"
    mu: float = 0.05
    eta_x: float = 0.05
    eta_y: float = 0.5
    inner_steps: int = 10
    epsilon: float = 0.01
    stochastic: bool = False
    n_rollouts: int = 64
    horizon: int = 40

    def __post_init__(self):
        check_choice(self.method, "method", METHODS)
        checks.check_scalar(self.mu, "mu", 0.0)
        checks.check_scalar(self.eta_x, "eta_x", 0.0, low_open=True)
        checks.check_scalar(self.eta_y, "eta_y", 0.0, low_open=True)
        checks.check_int(self.inner_steps, "inner_steps", minimum=1)
        checks.check_scalar(self.epsilon, "epsilon", 0.0, 1.0, high_open=True)
        check_bool(self.stochastic, "stochastic")
        checks.check_int(self.n_rollouts, "n_rollouts", minimum=1)
        checks.check_int(self.horizon, "horizon", minimum=1)


@struct.dataclass
class SolverState:
    """The solver's state on one game (a pytree; ``vmap`` adds a leading game axis ``[G, ...]``).

    Attributes:
      x: ``[S1, A]`` the minimiser's policy (rows on the simplex; the played policy is
        ``played(x, epsilon)``).
      y: ``[S2, B]`` the maximiser's policy.
      count: ``[]`` int32, iterations taken (``"nested"``: outer iterations).
      key: ``[]`` typed PRNG key of the run; iteration ``t`` draws from ``fold_in(key, t)``.
    """

    x: jax.Array
    y: jax.Array
    count: jax.Array
    key: jax.Array


class Solver(NamedTuple):
    """The pure functions of one method on one game (see :func:`make_solver`)."""

    init: Callable[[jax.Array], SolverState]
    step: Callable[[SolverState, Any], tuple[SolverState, dict]]
    gap: Callable[..., GapResult]
    solve: Callable[..., tuple[SolverState, GapResult]]


def _rollouts(p, rho, pi, key, n_rollouts: int, horizon: int, mesh: Mesh | None = None):
    """``(states, actions) [n_rollouts, horizon]`` of MDP ``(p, rho)`` under ``pi``; ``mesh``
    shards the rollout axis."""
    k0, k_run = jax.random.split(key)
    s0 = jax.random.categorical(k0, jnp.log(rho), shape=(n_rollouts,))

    def one_step(s, k):
        ka, ks = jax.random.split(k)
        a = jax.random.categorical(ka, jnp.log(pi[s]))
        s_next = jax.random.categorical(ks, jnp.log(p[s, a]))
        return s_next, (s, a)

    keys = jax.random.split(k_run, (horizon, n_rollouts))
    s0 = sharding.constrain_batch(s0, mesh)
    keys = sharding.constrain_batch(keys, mesh, axis=1)
    _, (states, actions) = jax.lax.scan(jax.vmap(one_step), s0, keys)
    return states.T, actions.T


def _empirical_occupancy(states, actions, shape, gamma):
    """``(1 - gamma) / (1 - gamma^H) mean_r sum_t gamma^t 1[s_t = s, a_t = a]``: sums to one."""
    horizon = states.shape[1]
    disc = gamma ** jnp.arange(horizon, dtype=gamma.dtype)
    w = jnp.broadcast_to(disc[None, :], states.shape) / states.shape[0]
    lam = jnp.zeros(shape, gamma.dtype).at[states, actions].add(w)
    return lam * (1.0 - gamma) / (1.0 - gamma**horizon)


def _reinforce(states, actions, pi, c, gamma, epsilon):
    """``(1 - eps)(1 - gamma)/(1 - gamma^H) mean_r sum_t gamma^t G_t 1[s_t, a_t] / pi(a_t | s_t)``
    with the reward-to-go ``G_t = sum_{k >= t} gamma^(k - t) c(s_k, a_k)``."""
    horizon = states.shape[1]
    r = c[states, actions]  # [R, H]

    def back(g, r_t):
        g = r_t + gamma * g
        return g, g

    _, togo = jax.lax.scan(back, jnp.zeros(r.shape[0], r.dtype), r.T, reverse=True)
    disc = gamma ** jnp.arange(horizon, dtype=gamma.dtype)
    w = disc[None, :] * togo.T / pi[states, actions] / states.shape[0]
    grad = jnp.zeros(pi.shape, pi.dtype).at[states, actions].add(w)
    return (1.0 - epsilon) * grad * (1.0 - gamma) / (1.0 - gamma**horizon)


def rollout_gradients(
    game: FactoredGame, x, y, key, epsilon, mu, n_rollouts: int, horizon: int,
    mesh: Mesh | None = None,
) -> tuple[jax.Array, jax.Array]:  # fmt: skip
    """Stochastic ``(g_x, g_y)``: REINFORCE with plug-in pseudo-rewards (module docstring).

    ``mesh`` shards the ``n_rollouts`` axis of both players' rollouts (a multiple of the device
    count); the random numbers do not depend on the layout.
    """
    game, x, y = _game_policies(game, x, y)
    key = checks.check_key(key, "key")
    _check_epsilon(epsilon)
    _check_mu(mu)
    checks.check_int(n_rollouts, "n_rollouts", minimum=1)
    checks.check_int(horizon, "horizon", minimum=1)
    _check_mesh(mesh, n_rollouts)
    return _rollout_gradients(game, x, y, key, epsilon, mu, n_rollouts, horizon, mesh)


def _check_mesh(mesh, n_rollouts: int | None = None) -> None:
    """``mesh`` is ``None`` or a Mesh over which ``n_rollouts`` (if given) can be sharded."""
    if mesh is not None and not isinstance(mesh, Mesh):
        raise TypeError(f"`mesh` must be a jax.sharding.Mesh or None, got {type(mesh).__name__}.")
    if mesh is not None and n_rollouts is not None:
        sharding.check_divisible(n_rollouts, mesh, "n_rollouts")


def _rollout_gradients(game, x, y, key, epsilon, mu, n_rollouts, horizon, mesh=None):
    k1, k2 = jax.random.split(key)
    xp, yp = _played(x, epsilon), _played(y, epsilon)
    s1, a1 = _rollouts(game.p1, game.rho1, xp, k1, n_rollouts, horizon, mesh)
    s2, a2 = _rollouts(game.p2, game.rho2, yp, k2, n_rollouts, horizon, mesh)
    lam1 = _empirical_occupancy(s1, a1, xp.shape, game.gamma)
    lam2 = _empirical_occupancy(s2, a2, yp.shape, game.gamma)
    c1, c2 = jax.grad(_occupancy_utility, argnums=(1, 2))(game, lam1, lam2, mu)
    return (_reinforce(s1, a1, xp, c1, game.gamma, epsilon),
            _reinforce(s2, a2, yp, c2, game.gamma, epsilon))  # fmt: skip


def _initial_state(game: FactoredGame, key: jax.Array) -> SolverState:
    key = checks.check_key(key)
    x, y = _uniform_policies(game)
    return SolverState(x, y, jnp.zeros((), jnp.int32), key)


def _check_schedule(num_steps: int, eval_every: int) -> None:
    checks.check_int(num_steps, "num_steps")
    checks.check_int(eval_every, "eval_every")
    if num_steps < 1 or eval_every < 1 or num_steps % eval_every:
        raise ValueError(
            f"`num_steps` ({num_steps}) must be a positive multiple of `eval_every` ({eval_every})."
        )


def _check_config(config, name: str = "config") -> SolverConfig:
    if not isinstance(config, SolverConfig):
        raise TypeError(f"`{name}` must be a SolverConfig, got {type(config).__name__}.")
    return config


def _check_state(state, game: FactoredGame) -> None:
    """Static checks of a :class:`SolverState` for ``game`` (values where concrete)."""
    if not isinstance(state, SolverState):
        raise TypeError(f"`state` must be a SolverState (from init), got {type(state).__name__}.")
    (s1, a, _), (s2, b, _) = game.p1.shape, game.p2.shape
    check_distribution(state.x, "state.x", (s1, a), "[S1, A] (a state built for another game?)")
    check_distribution(state.y, "state.y", (s2, b), "[S2, B] (a state built for another game?)")
    check_count(state.count, "state.count", 0)
    checks.check_key(state.key, "state.key")


def make_solver(config: SolverConfig, game: FactoredGame, mesh: Mesh | None = None) -> Solver:
    """The pure functions of ``config.method`` on one (unbatched) ``game``.

    Args:
      config: the method and its hyperparameters.
      game: one factored game (``vmap`` a function that calls ``make_solver`` to batch games, as
        :func:`solve_games` does).
      mesh: shards the REINFORCE rollout axis (``n_rollouts``) when ``config.stochastic``;
        ``None`` (and exact gradients, which have no batch axis) run on one device.

    Returns:
      A :class:`Solver`:

      - ``init(key) -> SolverState``: uniform policies (the spec's initialisation), count 0;
      - ``step(state, x=None) -> (state, metrics)``: one iteration (``"nested"``:
        ``inner_steps`` y-steps, then one x-step); ``x`` is ignored. ``metrics``: scalars
        ``x_move`` / ``y_move`` (Frobenius norm of the policy change this iteration) and
        ``grad_x_norm`` / ``grad_y_norm`` (norm of the last gradient each player used);
      - ``gap(state, max_iter=1000) -> GapResult``: the Nash gap of the unregularised game at
        the played policies (Frank-Wolfe certificate after at most ``max_iter`` steps);
      - ``solve(key, num_steps, eval_every, gap_iters=1000)``: see :func:`solve`.
    """
    _check_config(config)
    game = _as_game(game)
    _check_mesh(mesh, config.n_rollouts if config.stochastic else None)
    return _make_solver(config, game, mesh, config.mu, config.eta_x, config.eta_y)


def _make_solver(cfg: SolverConfig, game: FactoredGame, mesh, mu, eta_x, eta_y) -> Solver:
    """:func:`make_solver` with ``mu``, ``eta_x`` and ``eta_y`` given separately (Python floats,
    or traced scalars so that one compiled program serves every value: :func:`solve_games`)."""

    def gradients(x, y, key):
        if cfg.stochastic:
            return _rollout_gradients(game, x, y, key, cfg.epsilon, mu, cfg.n_rollouts,
                                      cfg.horizon, mesh)  # fmt: skip
        return _exact_gradients(game, x, y, cfg.epsilon, mu)

    def init_fn(key: jax.Array) -> SolverState:
        return _initial_state(game, key)

    def step_fn(state: SolverState, x_in=None) -> tuple[SolverState, dict]:
        del x_in  # the solver needs no per-step input
        _check_state(state, game)
        x0, y0 = state.x, state.y
        k_x, k_y = jax.random.split(jax.random.fold_in(state.key, state.count))
        if cfg.method == "simultaneous":
            gx, gy = gradients(x0, y0, k_x)
            x, y = project_simplex(x0 - eta_x * gx), project_simplex(y0 + eta_y * gy)
        elif cfg.method == "alternating":
            gx = gradients(x0, y0, k_x)[0]
            x = project_simplex(x0 - eta_x * gx)
            gy = gradients(x, y0, k_y)[1]
            y = project_simplex(y0 + eta_y * gy)
        else:

            def ascend(y, k):
                g = gradients(x0, y, k)[1]
                return project_simplex(y + eta_y * g), jnp.linalg.norm(g)

            y, gy_norms = jax.lax.scan(ascend, y0, jax.random.split(k_y, cfg.inner_steps))
            gx = gradients(x0, y, k_x)[0]
            x = project_simplex(x0 - eta_x * gx)
        metrics = {
            "x_move": jnp.linalg.norm(x - x0),
            "y_move": jnp.linalg.norm(y - y0),
            "grad_x_norm": jnp.linalg.norm(gx),
            "grad_y_norm": gy_norms[-1] if cfg.method == "nested" else jnp.linalg.norm(gy),
        }
        return state.replace(x=x, y=y, count=state.count + 1), metrics

    def gap_fn(state: SolverState, max_iter: int = 1000) -> GapResult:
        _check_state(state, game)
        check_count(max_iter, "max_iter", 1)
        return _nash_gap(game, state.x, state.y, cfg.epsilon, 0.0, max_iter=max_iter)

    def solve_fn(key, num_steps: int, eval_every: int, gap_iters: int = 1000):
        _check_schedule(num_steps, eval_every)
        check_count(gap_iters, "gap_iters", 1)

        def chunk(state, _):
            state = jax.lax.fori_loop(0, eval_every, lambda _, s: step_fn(s)[0], state)
            return state, gap_fn(state, gap_iters)

        state = init_fn(key)
        first = gap_fn(state, gap_iters)
        state, gaps = jax.lax.scan(chunk, state, None, length=num_steps // eval_every)
        return state, jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, gaps)

    return Solver(init_fn, step_fn, gap_fn, solve_fn)


def init(game: FactoredGame, key: jax.Array) -> SolverState:
    """Uniform policies (the spec's initialisation): ``make_solver(config, game).init(key)``."""
    return _initial_state(_as_game(game), key)


def step(cfg: SolverConfig, game: FactoredGame, state: SolverState) -> SolverState:
    """One iteration of ``cfg.method``, the state only: ``make_solver(cfg, game).step(state)[0]``
    (use the solver's ``step`` for the metrics)."""
    return make_solver(_check_config(cfg, "cfg"), game).step(state)[0]


def solve(
    cfg: SolverConfig, game: FactoredGame, key: jax.Array, num_steps: int, eval_every: int,
    gap_iters: int = 1000,
) -> tuple[SolverState, GapResult]:  # fmt: skip
    """Run ``num_steps`` iterations on one game from uniform policies.

    Returns ``(final state, gaps)``: ``gaps`` is a :class:`GapResult` whose fields are
    ``[num_steps // eval_every + 1]``, the Nash gap of the unregularised game at the played
    policies (and its Frank-Wolfe certificate, at most ``gap_iters`` steps) before the first step
    and after every ``eval_every`` steps. The per-step metrics are not kept (scan
    ``make_solver(cfg, game).step`` for them).
    """
    return make_solver(_check_config(cfg, "cfg"), game).solve(key, num_steps, eval_every, gap_iters)


def solve_games(
    cfg: SolverConfig, games: FactoredGame, keys: jax.Array, num_steps: int, eval_every: int,
    mesh=None, gap_iters: int = 1000,
) -> tuple[SolverState, GapResult]:  # fmt: skip
    """:func:`solve` over a batch of games (leading axis ``G`` on every leaf of ``games`` and on
    ``keys``), vmapped and jitted with the game axis sharded over ``mesh`` (default: all devices;
    ``G`` must be a multiple of the device count). Returns stacked states and gaps (fields
    ``[G, K + 1]``). The compiled function is cached per ``(cfg, num_steps // eval_every,
    mesh)`` with ``method``, ``mu``, ``eta_x``, ``eta_y``, ``eval_every`` and ``gap_iters``
    passed as (replicated) inputs (the step is a ``lax.switch`` over the three methods), so new
    games of the same shapes (another ``kappa``, seed), the other exact methods and other values
    of those hyperparameters reuse one program per number of evaluations (``epsilon`` and
    ``inner_steps`` select the program). With stochastic gradients the program is cached per
    ``(cfg, num_steps, eval_every, mesh, gap_iters)``, with ``mu``, ``eta_x``, ``eta_y`` inputs
    (its sampled trajectories are kept bit for bit as they were before the exact methods' program
    was shared)."""
    _check_config(cfg, "cfg")
    _check_schedule(num_steps, eval_every)
    checks.check_int(gap_iters, "gap_iters", minimum=1)
    _check_mesh(mesh)
    if not isinstance(games, FactoredGame) or np.ndim(games.p1) != 4:
        is_game = isinstance(games, FactoredGame)
        got = f"p1 {np.shape(games.p1)}" if is_game else type(games).__name__
        raise ValueError(
            "`games` must be a FactoredGame with a leading game axis on every field (p1 "
            f"[G, S1, A, S1]), got {got}."
        )
    n_games = np.shape(games.p1)[0]
    games = _as_game(games, (n_games,), "games")
    keys = checks.check_key(keys, "keys", batched=True)
    if keys.shape != (n_games,):
        raise ValueError(f"`keys` must be {n_games} keys (one per game), got shape {keys.shape}.")
    mesh = sharding.data_mesh() if mesh is None else mesh
    sharding.check_divisible(n_games, mesh, "games")
    dtype = games.payoff.dtype
    hyper = {name: jnp.asarray(getattr(cfg, name), dtype) for name in _TRACED}
    if cfg.stochastic:
        shape = dataclasses.replace(cfg, **dict.fromkeys(_TRACED, 1.0))
        program = _stochastic_solver(shape, num_steps, eval_every, mesh, gap_iters)
        return program(hyper, (games, keys))
    hyper["method"] = jnp.asarray(METHODS.index(cfg.method), jnp.int32)
    hyper["eval_every"] = jnp.asarray(eval_every, jnp.int32)
    hyper["gap_iters"] = jnp.asarray(gap_iters, jnp.int32)
    # the program's cache key: the fields that are not inputs
    shape = dataclasses.replace(cfg, method=METHODS[0], **dict.fromkeys(_TRACED, 1.0))
    return _batched_solver(shape, num_steps // eval_every, mesh)(hyper, (games, keys))


_TRACED = ("mu", "eta_x", "eta_y")  # SolverConfig floats that solve_games passes as inputs


@functools.lru_cache(maxsize=64)
def _batched_solver(cfg: SolverConfig, num_evals: int, mesh):
    def one(hyper, batch):
        game, key = batch
        mu, eta_x, eta_y = (hyper[name] for name in _TRACED)
        solvers = [_make_solver(dataclasses.replace(cfg, method=m), game, None, mu, eta_x, eta_y)
                   for m in METHODS]  # fmt: skip
        steps = [lambda s, solver=solver: solver.step(s)[0] for solver in solvers]

        def chunk(state, i):
            # chunk 0 takes no step: the gap at the start, then one every ``eval_every`` steps
            n = jnp.where(i == 0, 0, hyper["eval_every"])
            state = jax.lax.fori_loop(0, n, lambda _, s: jax.lax.switch(hyper["method"], steps, s),
                                      state)  # fmt: skip
            return state, solvers[0].gap(state, hyper["gap_iters"])

        return jax.lax.scan(chunk, solvers[0].init(key), jnp.arange(num_evals + 1))

    return sharding.sharded_map(one, mesh)


@functools.lru_cache(maxsize=16)
def _stochastic_solver(cfg: SolverConfig, num_steps: int, eval_every: int, mesh, gap_iters: int):
    def one(hyper, batch):
        game, key = batch
        solver = _make_solver(cfg, game, None, *(hyper[name] for name in _TRACED))
        return solver.solve(key, num_steps, eval_every, gap_iters)

    return sharding.sharded_map(one, mesh)

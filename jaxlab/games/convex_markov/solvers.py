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

:func:`solve` runs one game for ``num_steps`` iterations in a ``lax.scan`` and records the Nash gap
of the *unregularised* game at the played policies every ``eval_every`` steps; ``jax.vmap`` it
over a batch of games, or call :func:`solve_games`, which shards the game axis across devices.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp

from jaxlab.core import sharding
from jaxlab.games.convex_markov.game import (
    FactoredGame,
    GapResult,
    exact_gradients,
    nash_gap,
    occupancy_utility,
    played,
    uniform_policies,
)
from jaxlab.games.convex_markov.mdp import project_simplex

__all__ = [
    "SolverConfig",
    "SolverState",
    "init",
    "rollout_gradients",
    "solve",
    "solve_games",
    "step",
]

Method = Literal["nested", "alternating", "simultaneous"]


@dataclasses.dataclass(frozen=True)
class SolverConfig:
    """Hyperparameters of one independent policy-gradient method.

    Attributes:
      method: ``"nested"``, ``"alternating"`` or ``"simultaneous"``.
      mu: regularisation ``mu`` of the maximiser's occupancy (``0`` = unregularised).
      eta_x, eta_y: step sizes of the minimiser and the maximiser.
      inner_steps: ``y`` ascent steps per ``x`` step (``"nested"`` only).
      epsilon: epsilon-greedy exploration of the played policies.
      stochastic: REINFORCE gradients with plug-in pseudo-rewards instead of exact ones.
      n_rollouts, horizon: trajectories per player per gradient and their length (stochastic).
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
        if self.method not in ("nested", "alternating", "simultaneous"):
            raise ValueError(
                f"`method` must be 'nested', 'alternating' or 'simultaneous', got {self.method!r}."
            )
        if self.mu < 0:
            raise ValueError(f"`mu` must be >= 0, got {self.mu}.")
        if self.eta_x <= 0 or self.eta_y <= 0:
            raise ValueError(f"step sizes must be > 0, got eta_x={self.eta_x}, eta_y={self.eta_y}.")
        if self.inner_steps < 1:
            raise ValueError(f"`inner_steps` must be >= 1, got {self.inner_steps}.")
        if not 0.0 <= self.epsilon < 1.0:
            raise ValueError(f"`epsilon` must be in [0, 1), got {self.epsilon}.")
        if self.n_rollouts < 1 or self.horizon < 1:
            raise ValueError("`n_rollouts` and `horizon` must be >= 1.")


class SolverState(NamedTuple):
    """Policies ``x: [S1, A]``, ``y: [S2, B]``, the iteration count and a PRNG key."""

    x: jax.Array
    y: jax.Array
    count: jax.Array
    key: jax.Array


def init(game: FactoredGame, key: jax.Array) -> SolverState:
    """Uniform policies (the spec's initialisation)."""
    x, y = uniform_policies(game)
    return SolverState(x, y, jnp.zeros((), jnp.int32), key)


def _rollouts(p, rho, pi, key, n_rollouts: int, horizon: int):
    """``(states, actions) [n_rollouts, horizon]`` of MDP ``(p, rho)`` under ``pi``."""
    k0, k_run = jax.random.split(key)
    s0 = jax.random.categorical(k0, jnp.log(rho), shape=(n_rollouts,))

    def one_step(s, k):
        ka, ks = jax.random.split(k)
        a = jax.random.categorical(ka, jnp.log(pi[s]))
        s_next = jax.random.categorical(ks, jnp.log(p[s, a]))
        return s_next, (s, a)

    keys = jax.random.split(k_run, (horizon, n_rollouts))
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
    game: FactoredGame, x, y, key, epsilon, mu, n_rollouts: int, horizon: int
) -> tuple[jax.Array, jax.Array]:
    """Stochastic ``(g_x, g_y)``: REINFORCE with plug-in pseudo-rewards (module docstring)."""
    k1, k2 = jax.random.split(key)
    xp, yp = played(x, epsilon), played(y, epsilon)
    s1, a1 = _rollouts(game.p1, game.rho1, xp, k1, n_rollouts, horizon)
    s2, a2 = _rollouts(game.p2, game.rho2, yp, k2, n_rollouts, horizon)
    lam1 = _empirical_occupancy(s1, a1, xp.shape, game.gamma)
    lam2 = _empirical_occupancy(s2, a2, yp.shape, game.gamma)
    c1, c2 = jax.grad(occupancy_utility, argnums=(1, 2))(game, lam1, lam2, mu)
    return (_reinforce(s1, a1, xp, c1, game.gamma, epsilon),
            _reinforce(s2, a2, yp, c2, game.gamma, epsilon))  # fmt: skip


def _gradients(cfg: SolverConfig, game, x, y, key):
    if cfg.stochastic:
        return rollout_gradients(game, x, y, key, cfg.epsilon, cfg.mu, cfg.n_rollouts, cfg.horizon)
    return exact_gradients(game, x, y, cfg.epsilon, cfg.mu)


def step(cfg: SolverConfig, game: FactoredGame, state: SolverState) -> SolverState:
    """One iteration of ``cfg.method`` (``"nested"``: ``inner_steps`` y-steps, then one x-step)."""
    x, y = state.x, state.y
    key, k_x, k_y = jax.random.split(state.key, 3)
    if cfg.method == "simultaneous":
        gx, gy = _gradients(cfg, game, x, y, k_x)
        x, y = project_simplex(x - cfg.eta_x * gx), project_simplex(y + cfg.eta_y * gy)
    elif cfg.method == "alternating":
        x = project_simplex(x - cfg.eta_x * _gradients(cfg, game, x, y, k_x)[0])
        y = project_simplex(y + cfg.eta_y * _gradients(cfg, game, x, y, k_y)[1])
    else:

        def ascend(y, k):
            return project_simplex(y + cfg.eta_y * _gradients(cfg, game, x, y, k)[1]), None

        y, _ = jax.lax.scan(ascend, y, jax.random.split(k_y, cfg.inner_steps))
        x = project_simplex(x - cfg.eta_x * _gradients(cfg, game, x, y, k_x)[0])
    return SolverState(x, y, state.count + 1, key)


def solve(
    cfg: SolverConfig, game: FactoredGame, key: jax.Array, num_steps: int, eval_every: int,
    gap_iters: int = 1000,
) -> tuple[SolverState, GapResult]:  # fmt: skip
    """Run ``num_steps`` iterations on one game from uniform policies.

    Returns ``(final state, gaps)``: ``gaps`` is a :class:`GapResult` whose fields are
    ``[num_steps // eval_every + 1]``, the Nash gap of the unregularised game at the played
    policies (and its Frank-Wolfe certificate, at most ``gap_iters`` steps) before the first step
    and after every ``eval_every`` steps.
    """
    if num_steps < 1 or eval_every < 1 or num_steps % eval_every:
        raise ValueError(
            f"`num_steps` ({num_steps}) must be a positive multiple of `eval_every` ({eval_every})."
        )

    def gap(state):
        return nash_gap(game, state.x, state.y, cfg.epsilon, 0.0, max_iter=gap_iters)

    def chunk(state, _):
        state = jax.lax.fori_loop(0, eval_every, lambda _, s: step(cfg, game, s), state)
        return state, gap(state)

    state = init(game, key)
    first = gap(state)
    state, gaps = jax.lax.scan(chunk, state, None, length=num_steps // eval_every)
    return state, jax.tree.map(lambda a, b: jnp.concatenate([a[None], b]), first, gaps)


def solve_games(
    cfg: SolverConfig, games: FactoredGame, keys: jax.Array, num_steps: int, eval_every: int,
    mesh=None, gap_iters: int = 1000,
) -> tuple[SolverState, GapResult]:  # fmt: skip
    """:func:`solve` over a batch of games (leading axis ``G`` on every leaf of ``games`` and on
    ``keys``), vmapped and jitted with the game axis sharded over ``mesh`` (default: all devices;
    ``G`` must be a multiple of the device count). Returns stacked states and gaps (fields
    ``[G, K + 1]``). The compiled function is cached per ``(cfg, num_steps, eval_every,
    mesh, gap_iters)``, so new games of the same shapes (another ``kappa``, seed) reuse it."""
    mesh = sharding.data_mesh() if mesh is None else mesh
    return _batched_solver(cfg, num_steps, eval_every, mesh, gap_iters)(None, (games, keys))


@functools.lru_cache(maxsize=64)
def _batched_solver(cfg: SolverConfig, num_steps: int, eval_every: int, mesh, gap_iters: int):
    def one(_, batch):
        game, key = batch
        return solve(cfg, game, key, num_steps, eval_every, gap_iters)

    return sharding.sharded_map(one, mesh)

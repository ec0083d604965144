"""Benchmark of the convex-Markov-game hot cores: one Alt-PGDA step and one Nash-gap evaluation.

Work unit: one game (``|S1| = |S2| = S`` states, 3 actions each, ``kappa = 0``, float64). For
``S`` in {4, 16, 64} and a batch of ``G`` in {1, 64, 1024} games:

- ``jit+vmap``: the per-game function vmapped over the batch in one jitted call (the library path,
  game axis sharded through :func:`jaxlab.core.sharding.sharded_map`);
- ``jit per game``: the same per-game function jitted once and called in a Python loop;
- ``numpy loop``: a NumPy per-game loop of the same math (the structure of the spec's prototype).

The two loops are timed on at most ``LOOP_GAMES`` games and reported per game (games/s), so equal
work means equal per-game math; the NumPy step is checked against the JAX step on one game first.
Device scaling: the vmapped step at the largest batch over 1, 2, 4, ... (forced host) devices.

Known problem (open): on the 2-core reference machine, the vmapped step or gap at ``S = 16`` with
1024 games hung intermittently (the process asleep, no CPU use; the same call completed in 6 s in
another run), so the ``small`` size stops at ``S = 4``; ``large`` keeps ``S`` in {16, 64}.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core import sharding
from jaxlab.core.timing import result_row, time_call
from jaxlab.games import convex_markov as M

NAME = "cmg_solvers"
DESCRIPTION = "Alt-PGDA step and Nash gap per game: jit+vmap vs jit per game vs NumPy loop"
SIZES = {
    "small": {"S": (4,), "G": (1, 64, 1024)},
    "large": {"S": (4, 16, 64), "G": (1, 64, 1024)},
}
LOOP_GAMES = 64
CFG = M.SolverConfig("alternating", mu=0.05, eta_x=0.1, eta_y=0.5, epsilon=0.01)


# ---- NumPy reference (one game) ---------------------------------------------------------------


def _np_occupancy(p, rho, pi, gamma):
    p_pi = np.einsum("sa,sat->st", pi, p)
    d = (1 - gamma) * np.linalg.solve(np.eye(len(rho)) - gamma * p_pi.T, rho)
    return d, d[:, None] * pi


def _np_policy_gradient(p, rho, pi, r, gamma):
    p_pi = np.einsum("sa,sat->st", pi, p)
    d, _ = _np_occupancy(p, rho, pi, gamma)
    v = np.linalg.solve(np.eye(len(rho)) - gamma * p_pi, (pi * r).sum(-1))
    return d[:, None] * (r + gamma * p @ v)


def _np_project(v):
    u = -np.sort(-v, axis=-1)
    css = np.cumsum(u, axis=-1) - 1.0
    k = np.sum(u - css / np.arange(1, v.shape[-1] + 1) > 0, axis=-1, keepdims=True)
    return np.maximum(v - np.take_along_axis(css, k - 1, axis=-1) / k, 0.0)


def _np_grads(g, x, y, eps, mu, which):
    xp = (1 - eps) * x + eps / x.shape[-1]
    yp = (1 - eps) * y + eps / y.shape[-1]
    _, lam1 = _np_occupancy(g["p1"], g["rho1"], xp, g["gamma"])
    _, lam2 = _np_occupancy(g["p2"], g["rho2"], yp, g["gamma"])
    if which == "x":
        c1 = np.einsum("satb,tb->sa", g["payoff"], lam2) + g["kappa"] * (lam1 - g["tau1"])
        return (1 - eps) * _np_policy_gradient(g["p1"], g["rho1"], xp, c1, g["gamma"])
    c2 = np.einsum("sa,satb->tb", lam1, g["payoff"]) - mu * lam2
    return (1 - eps) * _np_policy_gradient(g["p2"], g["rho2"], yp, c2, g["gamma"])


def numpy_alt_step(g, x, y, cfg=CFG):
    x = _np_project(x - cfg.eta_x * _np_grads(g, x, y, cfg.epsilon, cfg.mu, "x"))
    y = _np_project(y + cfg.eta_y * _np_grads(g, x, y, cfg.epsilon, cfg.mu, "y"))
    return x, y


def _np_best_value(p, rho, r, gamma, maximize, tol=1e-12):
    v = np.zeros(len(rho))
    while True:
        q = r + gamma * p @ v
        v_new = q.max(-1) if maximize else q.min(-1)
        if np.max(np.abs(v_new - v)) <= tol:
            break
        v = v_new
    q = r + gamma * p @ v_new
    pi = np.eye(r.shape[1])[q.argmax(-1) if maximize else q.argmin(-1)]
    return float(np.sum(r * _np_occupancy(p, rho, pi, gamma)[1]))


def numpy_gap(g, x, y, eps=CFG.epsilon):
    """Nash gap of a ``kappa = 0`` game (both best responses linear: value iteration)."""
    xp = (1 - eps) * x + eps / x.shape[-1]
    yp = (1 - eps) * y + eps / y.shape[-1]
    _, lam1 = _np_occupancy(g["p1"], g["rho1"], xp, g["gamma"])
    _, lam2 = _np_occupancy(g["p2"], g["rho2"], yp, g["gamma"])
    hi = _np_best_value(g["p2"], g["rho2"], np.einsum("sa,satb->tb", lam1, g["payoff"]),
                        g["gamma"], True)  # fmt: skip
    lo = _np_best_value(g["p1"], g["rho1"], np.einsum("satb,tb->sa", g["payoff"], lam2),
                        g["gamma"], False)  # fmt: skip
    return hi - lo


# ---- timing -----------------------------------------------------------------------------------


def _problem(n_states: int, n_games: int):
    keys = jax.random.split(jax.random.key(n_states), n_games)
    games = jax.vmap(lambda k: M.random_factored_game(k, n_states, 3))(keys)
    x, y = jax.vmap(M.uniform_policies)(games)
    # move off the uniform start so the gap oracle does real work
    noise = jax.vmap(lambda k: jax.random.dirichlet(k, jnp.ones(3), (n_states,)))(keys)
    return games, 0.5 * (x + noise), y


def _one_step(game, x, y):
    state = M.SolverState(x, y, jnp.zeros((), jnp.int32), jax.random.key(0))
    s, _ = M.make_solver(CFG, game).step(state)
    return s.x, s.y


def _one_gap(game, x, y):
    return M.nash_gap(game, x, y, CFG.epsilon).gap


def _numpy_games(games, n):
    leaves = {k: np.asarray(v[:n]) for k, v in games._asdict().items()}
    return [{k: v[i] for k, v in leaves.items()} for i in range(n)]


def run(size: str) -> list[dict]:
    rows = []
    with jax.enable_x64(True):
        for s in SIZES[size]["S"]:
            for n_games in SIZES[size]["G"]:
                games, x, y = _problem(s, n_games)
                loop_n = min(n_games, LOOP_GAMES)
                np_games = _numpy_games(games, loop_n)
                xs, ys = np.asarray(x[:loop_n]), np.asarray(y[:loop_n])
                if n_games == SIZES[size]["G"][0]:  # the reference computes the same step
                    jx, _ = _one_step(jax.tree.map(lambda a: a[0], games), x[0], y[0])
                    np.testing.assert_allclose(numpy_alt_step(np_games[0], xs[0], ys[0])[0], jx,
                                               atol=1e-10)  # fmt: skip
                for core, fn, np_fn in (("alt_pgda_step", _one_step, numpy_alt_step),
                                        ("nash_gap", _one_gap, numpy_gap)):  # fmt: skip
                    params = dict(S=s, G=n_games, actions=3)
                    batched = sharding.sharded_map(lambda _, b, fn=fn: fn(*b))
                    t = time_call(batched, None, (games, x, y), n_runs=3)
                    rows.append(result_row(NAME, f"{core}: jit+vmap", size, t, work=n_games,
                                           unit="games", **params))  # fmt: skip
                    single = jax.jit(fn)
                    per_game = [(jax.tree.map(lambda a, i=i: a[i], games), x[i], y[i])
                                for i in range(loop_n)]  # fmt: skip
                    single(*per_game[0])  # compile outside the loop timing

                    def jit_loop(per_game=per_game, single=single):  # one game at a time
                        return [jax.block_until_ready(single(*args)) for args in per_game]

                    t = time_call(jit_loop, n_warmup=1, n_runs=3)
                    rows.append(result_row(NAME, f"{core}: jit per game", size, t, work=loop_n,
                                           unit="games", games_timed=loop_n, **params))  # fmt: skip

                    items = list(zip(np_games, xs, ys, strict=True))

                    def np_loop(np_fn=np_fn, items=items):
                        return [np_fn(*item) for item in items]

                    t = time_call(np_loop, n_warmup=1, n_runs=3)
                    rows.append(result_row(NAME, f"{core}: numpy loop", size, t, work=loop_n,
                                           unit="games", games_timed=loop_n, **params))  # fmt: skip

        # device scaling of the vmapped step at the largest batch, smallest S
        s, n_games = SIZES[size]["S"][0], SIZES[size]["G"][-1]
        games, x, y = _problem(s, n_games)
        n_dev = 1
        while n_dev <= jax.device_count() and n_games % n_dev == 0:
            mesh = sharding.data_mesh(jax.devices()[:n_dev])
            batched = sharding.sharded_map(lambda _, b: _one_step(*b), mesh)
            t = time_call(batched, None, sharding.shard_batch((games, x, y), mesh), n_runs=3)
            rows.append(result_row(NAME, "alt_pgda_step: jit+vmap, sharded", size, t,
                                   work=n_games, unit="games", devices=n_dev, S=s,
                                   G=n_games))  # fmt: skip
            n_dev *= 2
    return rows

"""jaxlab.games.convex_markov: occupancies, gradients, projection, oracles, solvers, sharding.

Compile budget: every oracle is called through one module-level ``jax.jit`` (shapes 3 x 2, the
hyperparameters traced), so each program compiles once per module; the batched solvers use the
configs of ``convex_markov_shared``, which the example and the experiment test reuse.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import linprog, minimize

from jaxlab.games import convex_markov as M
from jaxlab.games.convex_markov.solvers import _empirical_occupancy, _rollouts
from tests.games import convex_markov_shared as S
from tests.helpers import assert_compiles_once, assert_traces_once, count_compilations


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


@functools.partial(jax.jit, static_argnums=(1, 2))
def random_policy(key, n_states, n_actions):
    return jax.random.dirichlet(key, jnp.ones(n_actions), (n_states,))


_game = jax.jit(M.random_factored_game, static_argnums=(1, 2))
occupancy = jax.jit(M.occupancy)
exact_gradients = jax.jit(M.exact_gradients)
nash_gap = jax.jit(M.nash_gap, static_argnames=("max_iter", "tol"))  # epsilon, mu traced
project = jax.jit(M.project_simplex)


def small_game(key, kappa=0.0):
    return _game(key, S.N_STATES, S.N_ACTIONS, gamma=S.GAMMA, kappa=kappa)


def policies(key):
    return random_policy(jax.random.fold_in(key, 1), 3, 2), random_policy(
        jax.random.fold_in(key, 2), 3, 2
    )


def test_occupancy_is_a_distribution_satisfying_bellman_flow(key):
    game = small_game(key)
    pi = random_policy(jax.random.fold_in(key, 1), 3, 2)
    lam = np.asarray(occupancy(game.p1, game.rho1, pi, game.gamma))
    p, rho, gamma = map(np.asarray, (game.p1, game.rho1, game.gamma))
    assert lam.min() >= 0.0
    assert lam.sum() == pytest.approx(1.0, abs=1e-12)
    inflow = (1 - gamma) * rho + gamma * np.einsum("sa,sat->t", lam, p)
    np.testing.assert_allclose(lam.sum(-1), inflow, atol=1e-12)
    np.testing.assert_allclose(lam / lam.sum(-1, keepdims=True), pi, atol=1e-12)  # round trip


@functools.partial(jax.jit, static_argnums=(4, 5))
def _monte_carlo_occupancy(p, rho, pi, key, n_rollouts, horizon, gamma):
    s, a = _rollouts(p, rho, pi, key, n_rollouts, horizon)
    return _empirical_occupancy(s, a, pi.shape, gamma)


def test_occupancy_matches_monte_carlo_rollouts(key):
    game = small_game(key)
    pi = random_policy(jax.random.fold_in(key, 1), 3, 2)
    # 10000 rollouts of 40 steps: sampling error ~1e-3 per entry, truncation gamma^40 ~ 1e-4
    mc = _monte_carlo_occupancy(game.p1, game.rho1, pi, jax.random.fold_in(key, 2), 10000, 40,
                                game.gamma)  # fmt: skip
    np.testing.assert_allclose(mc, occupancy(game.p1, game.rho1, pi, game.gamma), atol=5e-3)


@jax.jit
def _gradient_check(game, x, y, epsilon, mu, dx, dy, h):
    """Pseudo-reward gradients, autodiff of U, and central differences of U along (dx, dy)."""
    gx, gy = M.exact_gradients(game, x, y, epsilon, mu)
    ax, ay = jax.grad(M.utility, argnums=(1, 2))(game, x, y, epsilon, mu)
    ts = jnp.stack([h, -h])
    ux = jax.vmap(lambda t: M.utility(game, x + t * dx, y, epsilon, mu))(ts)
    uy = jax.vmap(lambda t: M.utility(game, x, y + t * dy, epsilon, mu))(ts)
    fd = jnp.stack([ux[0] - ux[1], uy[0] - uy[1]]) / (2 * h)
    return gx, gy, ax, ay, jnp.stack([jnp.sum(gx * dx), jnp.sum(gy * dy)]), fd


@pytest.mark.parametrize("kappa,mu,epsilon", [(0.0, 0.0, 0.0), (0.1, 0.05, 0.01)])
def test_pseudo_reward_gradients_equal_autodiff_and_finite_differences(key, kappa, mu, epsilon):
    game = small_game(key, kappa)
    k1, k2, k3, k4 = jax.random.split(jax.random.fold_in(key, 1), 4)
    x, y = random_policy(k1, 3, 2), random_policy(k2, 3, 2)
    # central differences along simplex-tangent directions (rows summing to zero)
    d = [np.asarray(jax.random.normal(k, (3, 2))) for k in (k3, k4)]
    d = [v - v.mean(-1, keepdims=True) for v in d]
    gx, gy, ax, ay, directional, fd = _gradient_check(game, x, y, epsilon, mu, *d, 1e-5)
    np.testing.assert_allclose(gx, ax, atol=1e-12)
    np.testing.assert_allclose(gy, ay, atol=1e-12)
    np.testing.assert_allclose(directional, fd, rtol=1e-6, atol=1e-10)
    # the library's jitted pseudo-reward gradients are the same numbers
    np.testing.assert_allclose(exact_gradients(game, x, y, epsilon, mu)[0], gx, atol=1e-14)


@jax.jit
def _linear_value_check(game, pi, r):
    value = lambda pi: jnp.sum(r * M.occupancy(game.p1, game.rho1, pi, game.gamma))  # noqa: E731
    d = M.state_occupancy(game.p1, game.rho1, pi, game.gamma)
    q = M.q_values(game.p1, pi, r, game.gamma)
    return jax.grad(value)(pi), d, q, value(pi)


def test_linear_utility_gradient_is_the_classical_d_times_q(key):
    game = small_game(key)
    pi = random_policy(jax.random.fold_in(key, 1), 3, 2)
    r = jax.random.normal(jax.random.fold_in(key, 2), (3, 2))
    grad, d, q, value = _linear_value_check(game, pi, r)
    np.testing.assert_allclose(grad, d[:, None] * q, atol=1e-12)
    # and <r, lambda> = (1 - gamma) rho^T V
    v = np.sum(np.asarray(pi) * np.asarray(q), -1)
    assert float(value) == pytest.approx(float((1 - game.gamma) * np.asarray(game.rho1) @ v),
                                         abs=1e-12)  # fmt: skip


def _numpy_projection(v):
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    k = np.nonzero(u - css / np.arange(1, len(v) + 1) > 0)[0][-1]
    return np.maximum(v - css[k] / (k + 1), 0.0)


def test_simplex_projection(key):
    v = 2.0 * np.asarray(jax.random.normal(key, (50, 5)))
    p = np.asarray(project(v))
    assert p.min() >= 0.0
    np.testing.assert_allclose(p.sum(-1), 1.0, atol=1e-12)
    np.testing.assert_allclose(project(p), p, atol=1e-12)  # idempotent
    np.testing.assert_allclose(p, np.stack([_numpy_projection(r) for r in v]), atol=1e-12)
    # KKT: v - p = theta on the support and <= theta off it (the Euclidean nearest point)
    resid = v - p
    for r, q in zip(resid, p, strict=True):
        theta = r[q > 0]
        assert np.ptp(theta) < 1e-12 and np.all(r[q == 0] <= theta[0] + 1e-12)
    # invariant to a constant shift of a row
    np.testing.assert_allclose(project(v + 3.0), p, atol=1e-12)


def _lp_best_response(p, rho, gamma, r, maximize):
    s, a = r.shape
    a_eq = np.zeros((s, s * a))
    for t in range(s):
        a_eq[t] = (np.arange(s)[:, None] == t).repeat(a, 1).ravel() - gamma * p[:, :, t].ravel()
    sign = -1.0 if maximize else 1.0
    res = linprog(sign * r.ravel(), A_eq=a_eq, b_eq=(1 - gamma) * rho, bounds=(0, None))
    return sign * res.fun


def test_value_iteration_best_response_equals_the_lp(key):
    game = small_game(key)
    x, y = policies(key)
    lam1 = np.asarray(occupancy(game.p1, game.rho1, x, game.gamma))
    lam2 = np.asarray(occupancy(game.p2, game.rho2, y, game.gamma))
    result = nash_gap(game, x, y, 0.0, 0.0)
    payoff = np.asarray(game.payoff)
    mdp2 = tuple(map(np.asarray, (game.p2, game.rho2, game.gamma)))
    mdp1 = tuple(map(np.asarray, (game.p1, game.rho1, game.gamma)))
    # U is linear in each occupancy: both best responses are LPs over the occupancy polytopes
    hi = _lp_best_response(*mdp2, np.einsum("sa,satb->tb", lam1, payoff), True)
    lo = _lp_best_response(*mdp1, np.einsum("satb,tb->sa", payoff, lam2), False)
    assert float(result.max_value) == pytest.approx(hi, abs=1e-8)
    assert float(result.min_value) == pytest.approx(lo, abs=1e-8)
    assert float(result.gap) == pytest.approx(hi - lo, abs=1e-8)
    assert float(result.certificate) <= 1e-9  # linear on both sides: exact


@jax.jit
def _frank_wolfe(game, y):
    """30 Frank-Wolfe steps minimising U over lambda_1 (lambda_2 fixed), from the uniform x."""
    lam2 = M.occupancy(game.p2, game.rho2, y, game.gamma)
    f = lambda l1: M.occupancy_utility(game, l1, lam2)  # noqa: E731  convex quadratic in l1
    lam0 = M.occupancy(game.p1, game.rho1, M.uniform_policies(game)[0], game.gamma)
    value, cert = M.best_response(game.p1, game.rho1, game.gamma, f, lam0, minimize=True,
                                  max_iter=30, tol=0.0)  # fmt: skip
    return value, cert, lam2, lam0, f(lam0)


def test_frank_wolfe_best_response_is_certified_against_slsqp(key):
    game = small_game(key, kappa=0.5)
    y = random_policy(jax.random.fold_in(key, 1), 3, 2)
    value, cert, lam2, lam0, f_lam0 = _frank_wolfe(game, y)
    # reference: SLSQP over the occupancy polytope (flow equalities, lambda >= 0), in NumPy
    p, rho, gamma, c, tau = map(np.asarray, (game.p1, game.rho1, game.gamma, game.payoff,
                                             game.tau1))  # fmt: skip
    lin, kappa = np.einsum("satb,tb->sa", c, np.asarray(lam2)).ravel(), float(game.kappa)
    f_np = lambda v: lin @ v + 0.5 * kappa * np.sum((v - tau.ravel()) ** 2)  # noqa: E731
    np.testing.assert_allclose(f_np(np.asarray(lam0).ravel()), f_lam0, rtol=1e-12)
    a_eq = np.stack([(np.arange(3)[:, None] == t).repeat(2, 1).ravel() - gamma * p[:, :, t].ravel()
                     for t in range(3)])  # fmt: skip
    ref = minimize(f_np, np.asarray(lam0).ravel(), jac=lambda v: lin + kappa * (v - tau.ravel()),
                   constraints=[{"type": "eq", "fun": lambda v: a_eq @ v - (1 - gamma) * rho}],
                   bounds=[(0, None)] * 6, method="SLSQP", options={"ftol": 1e-14})  # fmt: skip
    assert ref.success
    assert float(value) >= ref.fun - 1e-9  # FW's value is attained by a feasible point
    assert float(value) - ref.fun <= float(cert) + 1e-9  # and the certificate bounds its error


def test_rock_paper_scissors_gap_formula_and_equilibrium():
    game = M.rock_paper_scissors()
    c = np.asarray(game.payoff).reshape(3, 3)
    for x, y in [([0.5, 0.3, 0.2], [0.2, 0.2, 0.6]), ([1.0, 0.0, 0.0], [0.0, 1.0, 0.0])]:
        x, y = np.asarray([x]), np.asarray([y])
        want = np.max(x[0] @ c) - np.min(c @ y[0])
        assert float(nash_gap(game, x, y, 0.0, 0.0).gap) == pytest.approx(want, abs=1e-12)
    u = np.full((1, 3), 1 / 3)
    assert abs(float(nash_gap(game, u, u, 0.0, 0.0).gap)) < 1e-8


@functools.partial(jax.jit, static_argnums=(0, 4))
def _run_from(cfg, game, x, y, steps):
    state = M.SolverState(x, y, jnp.zeros((), jnp.int32), jax.random.key(0))

    def body(s, _):
        s = M.step(cfg, game, s)
        return s, M.nash_gap(game, s.x, s.y).gap

    return jax.lax.scan(body, state, None, length=steps)


def test_rock_paper_scissors_gda_cycles_and_regularised_alternating_converges():
    game = M.rock_paper_scissors()
    x0, y0 = jnp.array([[0.6, 0.3, 0.1]]), jnp.array([[0.2, 0.5, 0.3]])
    uniform = np.full((1, 3), 1 / 3)
    start_gap = float(nash_gap(game, x0, y0, 0.0, 0.0).gap)
    sim = M.SolverConfig("simultaneous", mu=0.0, eta_x=0.1, eta_y=0.1, epsilon=0.0)
    state, gaps = _run_from(sim, game, x0, y0, 2000)
    assert float(gaps[-500:].min()) > 0.5 * start_gap  # orbits: the gap never settles
    dist = float(np.linalg.norm(state.x - uniform) + np.linalg.norm(state.y - uniform))
    assert dist >= float(np.linalg.norm(x0 - uniform) + np.linalg.norm(y0 - uniform)) - 1e-6
    alt = M.SolverConfig("alternating", mu=0.2, eta_x=0.05, eta_y=0.5, epsilon=0.0)
    state, gaps = _run_from(alt, game, x0, y0, 2000)
    assert float(gaps[-1]) < 0.01
    np.testing.assert_allclose(state.x, uniform, atol=0.01)
    np.testing.assert_allclose(state.y, uniform, atol=0.01)


def test_regularisation_shifts_the_gap_by_at_most_mu_over_two(key):
    mu = 0.3
    for i in range(4):
        k = jax.random.fold_in(key, i)
        game = small_game(k, kappa=0.1)
        x, y = policies(k)
        plain = nash_gap(game, x, y, 0.0, 0.0)
        reg = nash_gap(game, x, y, 0.0, mu)
        assert float(plain.gap) >= -1e-12
        assert float(plain.gap) <= float(reg.gap + reg.certificate) + mu / 2 + 1e-9


@pytest.mark.parametrize("method", ["alternating", "simultaneous", "nested"])
def test_solver_step_metrics_are_the_policy_moves_and_gradient_norms(key, method):
    game = small_game(key, kappa=0.1)
    cfg = M.SolverConfig(method, mu=0.05, eta_x=0.1, eta_y=0.5, inner_steps=2)
    solver = M.make_solver(cfg, game)
    state = solver.init(jax.random.fold_in(key, 1))
    state = state.replace(x=random_policy(jax.random.fold_in(key, 2), 3, 2))
    other = state.replace(
        x=random_policy(jax.random.fold_in(key, 3), 3, 2),
        y=random_policy(jax.random.fold_in(key, 4), 3, 2),
        count=jnp.asarray(5, jnp.int32),
        key=jax.random.fold_in(key, 5),
    )
    # the step traces once: new policies, count and key of the same shapes reuse the program
    (new, m), (new_other, _) = assert_traces_once(solver.step, [(state,), (other,)],
                                                  name=f"{method} step")  # fmt: skip
    assert set(m) == {"x_move", "y_move", "grad_x_norm", "grad_y_norm"}
    assert int(new.count) == 1 and int(new_other.count) == 6
    # the run's key stays: step t draws from fold_in(key, t)
    np.testing.assert_array_equal(jax.random.key_data(new.key), jax.random.key_data(state.key))
    assert not np.allclose(new_other.x, new.x)  # the second call used its own values
    np.testing.assert_allclose(m["x_move"], np.linalg.norm(new.x - state.x), atol=1e-12)
    np.testing.assert_allclose(m["y_move"], np.linalg.norm(new.y - state.y), atol=1e-12)
    # the gradients each player used: x at (x, y) except Nest-PG's (x, y_new); y at (x_new, y) for
    # Alt-PGDA, (x, y) for Sim-PGDA and (x, y_before_last_inner_step) for Nest-PG (checked: x)
    y_at_x = new.y if method == "nested" else state.y
    gx = exact_gradients(game, state.x, y_at_x, cfg.epsilon, cfg.mu)[0]
    np.testing.assert_allclose(m["grad_x_norm"], np.linalg.norm(gx), rtol=1e-10)
    if method != "nested":
        x_at_y = new.x if method == "alternating" else state.x
        gy = exact_gradients(game, x_at_y, state.y, cfg.epsilon, cfg.mu)[1]
        np.testing.assert_allclose(m["grad_y_norm"], np.linalg.norm(gy), rtol=1e-10)
    # the module-level wrapper is the same step
    legacy = jax.jit(lambda s: M.step(cfg, game, s))(state)
    np.testing.assert_array_equal(legacy.x, new.x)
    np.testing.assert_array_equal(legacy.y, new.y)


def test_stochastic_steps_draw_from_fold_in_and_shard_the_rollouts(key, mesh):
    game = small_game(key, kappa=0.1)
    cfg = M.SolverConfig("alternating", eta_x=0.1, stochastic=True, n_rollouts=8, horizon=6)
    solver = M.make_solver(cfg, game)
    state = solver.init(jax.random.fold_in(key, 1))
    step = jax.jit(solver.step)
    again_state = lambda one: state.replace(x=one.x, y=one.y, count=jnp.ones((), jnp.int32))  # noqa: E731
    one, _ = step(state)
    # three calls with new values of the same shapes: one compile (the step does not retrace)
    (two, _), (again, _) = assert_compiles_once(step, [(one,), (again_state(one),)],
                                                name="stochastic step")  # fmt: skip
    # step t uses fold_in(key, t): a state that only has count = 1 reproduces the second step
    np.testing.assert_array_equal(again.x, two.x)
    assert not np.array_equal(np.asarray(one.x), np.asarray(two.x))
    k_x, _ = jax.random.split(jax.random.fold_in(state.key, 0))
    gx, _ = jax.jit(M.rollout_gradients, static_argnums=(6, 7))(
        game, state.x, state.y, k_x, cfg.epsilon, cfg.mu, 8, 6
    )
    np.testing.assert_allclose(one.x, project(state.x - cfg.eta_x * gx), atol=1e-12)
    sharded, _ = jax.jit(M.make_solver(cfg, game, mesh=mesh).step)(state)
    np.testing.assert_allclose(sharded.x, one.x, atol=1e-12)
    np.testing.assert_allclose(sharded.y, one.y, atol=1e-12)


def _games(key, kappa=0.0):
    keys = jax.random.split(key, S.N_GAMES)
    return jax.vmap(lambda k: small_game(k, kappa))(keys), keys


@functools.partial(jax.jit, static_argnums=0)
def _step(cfg, game, state):
    """One step of ``cfg`` on one game (the game an input: one program for every game)."""
    return M.make_solver(cfg, game).step(state)[0]


def _looped(cfg, games, keys, steps, every):
    """Unbatched, unsharded reference of ``solve_games``: per game, the jitted step in a Python
    loop and the Nash gap every ``every`` steps. Returns ``(x, y, gaps)``, stacked over games."""
    xs, ys, gaps = [], [], []
    for i in range(keys.shape[0]):
        game = jax.tree.map(lambda a, i=i: a[i], games)
        state, row = M.init(game, keys[i]), []
        for t in range(steps + 1):
            if t % every == 0:
                row.append(float(nash_gap(game, state.x, state.y, cfg.epsilon, 0.0).gap))
            if t < steps:
                state = _step(cfg, game, state)
        xs.append(state.x), ys.append(state.y), gaps.append(row)
    return np.stack(xs), np.stack(ys), np.asarray(gaps)


@functools.cache
def _alt_run():
    """Alt-PGDA on four 3 x 2 games through ``solve_games`` (the example's and the experiment's
    program), and the same games solved one at a time, unsharded (:func:`_looped`)."""
    with jax.enable_x64(True):
        games, keys = _games(jax.random.key(20))
        states, gaps = M.solve_games(S.ALT, games, keys, S.STEPS, S.EVERY)
        return games, keys, states, gaps, _looped(S.ALT, games, keys, S.STEPS, S.EVERY)


def test_alternating_pgda_reduces_the_gap_on_random_games():
    *_, gaps, _ = _alt_run()
    assert gaps.gap.shape == (S.N_GAMES, S.STEPS // S.EVERY + 1)
    assert bool(jnp.all(gaps.gap[:, -1] < 0.5 * gaps.gap[:, 0]))
    np.testing.assert_array_less(gaps.certificate, 1e-9)  # kappa = 0: both best responses exact


def test_sharded_games_equal_unsharded(key):
    games, keys, states, gaps, (plain_x, plain_y, plain_gaps) = _alt_run()
    assert gaps.gap.sharding.spec[0] == "data" and states.x.sharding.spec[0] == "data"
    np.testing.assert_allclose(gaps.gap, plain_gaps, atol=1e-10)
    np.testing.assert_allclose(states.x, plain_x, atol=1e-12)
    np.testing.assert_allclose(states.y, plain_y, atol=1e-12)
    # the batched solver is cached and compiled once: new games (another kappa), keys and values
    # of mu, eta_x, eta_y (inputs of the program) neither trace nor compile again (kappa = 0.1
    # would cost Frank-Wolfe's 1000 iterations per gap at -O0; 0.01 keeps them few)
    other, other_keys = _games(key, kappa=0.01)
    other_cfg = dataclasses.replace(S.ALT, mu=0.01, eta_x=0.05, eta_y=0.4)
    with count_compilations() as counts:
        _, other_gaps = M.solve_games(S.ALT, other, other_keys, S.STEPS, S.EVERY)
        _, other_hyper = M.solve_games(other_cfg, games, keys, S.STEPS, S.EVERY)
        jax.block_until_ready((other_gaps, other_hyper))
    assert (counts.traces, counts.compiles) == ([], []), counts
    assert not np.allclose(other_gaps.gap, gaps.gap)
    # same games, other hyperparameters: another run (the inputs are used, not the first values;
    # that traced values equal constants is checked against the looped steps in the Nest-PG test)
    assert not np.allclose(other_hyper.gap, gaps.gap)
    with pytest.raises(ValueError, match="multiple"):
        M.solve_games(S.ALT, jax.tree.map(lambda a: a[:3], games), keys[:3], S.STEPS, S.EVERY)


def test_vmapped_equals_looped_and_jit_equals_eager(key):
    games, keys = _games(key, kappa=0.1)
    cfg, steps, every = S.NEST, S.NESTED_STEPS, S.NESTED_EVERY
    states, batched = M.solve_games(cfg, games, keys, steps, every)  # the experiment's nest_pg
    # looped: one game at a time, the jitted step (game as an argument: one trace) and the gap
    before = _step._cache_size()
    looped_x, looped_y, looped = _looped(cfg, games, keys, steps, every)
    np.testing.assert_allclose(batched.gap, looped, atol=1e-10)
    np.testing.assert_allclose(states.x, looped_x, atol=1e-12)
    np.testing.assert_allclose(states.y, looped_y, atol=1e-12)
    game0 = jax.tree.map(lambda a: a[0], games)
    state = M.init(game0, keys[0])
    eager = M.step(cfg, game0, state)
    jitted = _step(cfg, game0, state)
    np.testing.assert_allclose(eager.x, jitted.x, atol=1e-12)
    np.testing.assert_allclose(eager.y, jitted.y, atol=1e-12)
    assert _step._cache_size() - before <= 1  # every game and state above reused one program


def test_reinforce_gradients_are_close_to_exact_and_deterministic(key, mesh):
    game = small_game(key, kappa=0.1)
    x, y = policies(key)
    k = jax.random.fold_in(key, 3)
    rollout = jax.jit(M.rollout_gradients, static_argnums=(6, 7, 8))
    # 10000 rollouts of 40 steps (gamma^40 ~ 1e-4 truncation); measured errors <= 0.09 on 8 draws
    gx, gy = rollout(game, x, y, k, 0.05, 0.05, 10000, 40)
    ex, ey = exact_gradients(game, x, y, 0.05, 0.05)
    # compare projected directions (a constant per state does not change a simplex step)
    centre = lambda g: g - g.mean(-1, keepdims=True)  # noqa: E731
    for g, e in ((gx, ex), (gy, ey)):
        err = float(jnp.linalg.norm(centre(g) - centre(e)) / jnp.linalg.norm(centre(e)))
        assert err < 0.15
    # deterministic in the key alone: the rollouts sharded over 4 devices draw the same numbers
    sx, sy = rollout(game, x, y, k, 0.05, 0.05, 10000, 40, mesh)
    np.testing.assert_allclose(sx, gx, rtol=1e-10, atol=1e-12)  # scatter-add order
    np.testing.assert_allclose(sy, gy, rtol=1e-10, atol=1e-12)


def test_bad_games_and_configs_raise(key):
    game = small_game(key)
    M.check_game(game)
    bad_p = game.p1.at[0, 0, 0].add(0.2)
    with pytest.raises(ValueError, match="`p1` is not a transition kernel"):
        M.check_game(game._replace(p1=bad_p))
    with pytest.raises(ValueError, match="gamma"):
        M.check_game(game._replace(gamma=jnp.asarray(1.0)))
    with pytest.raises(ValueError, match="payoff"):
        M.check_game(game._replace(payoff=game.payoff[:, :, :2]))
    with pytest.raises(ValueError, match="method"):
        M.SolverConfig("extragradient")
    with pytest.raises(ValueError, match="epsilon"):
        dataclasses.replace(M.SolverConfig(), epsilon=1.0)
    for field, value in (("mu", -0.1), ("eta_x", 0.0), ("eta_y", -1.0), ("inner_steps", 0),
                         ("n_rollouts", 0), ("horizon", 2.5)):  # fmt: skip
        with pytest.raises(ValueError, match=f"`{field}`"):
            dataclasses.replace(M.SolverConfig(), **{field: value})
    with pytest.raises(ValueError, match="multiple of `eval_every`"):
        M.solve(M.SolverConfig(), game, key, 10, 3)
    with pytest.raises(ValueError, match="multiple of `eval_every`"):
        M.make_solver(M.SolverConfig(), game).solve(key, 0, 1)
    with pytest.raises(ValueError, match="`key`"):
        M.make_solver(M.SolverConfig(), game).init(7)

"""jaxlab.games.convex_markov: occupancies, gradients, projection, oracles, solvers, sharding."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import linprog, minimize

from jaxlab.games import convex_markov as M


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def random_policy(key, n_states, n_actions):
    return jax.random.dirichlet(key, jnp.ones(n_actions), (n_states,))


def small_game(key, kappa=0.0, n_states=3, n_actions=2):
    return M.random_factored_game(key, n_states, n_actions, gamma=0.8, kappa=kappa)


def test_occupancy_is_a_distribution_satisfying_bellman_flow(key):
    game = small_game(key)
    pi = random_policy(jax.random.fold_in(key, 1), 3, 2)
    lam = M.occupancy(game.p1, game.rho1, pi, game.gamma)
    assert float(lam.min()) >= 0.0
    assert float(lam.sum()) == pytest.approx(1.0, abs=1e-12)
    inflow = (1 - game.gamma) * game.rho1 + game.gamma * jnp.einsum("sa,sat->t", lam, game.p1)
    np.testing.assert_allclose(lam.sum(-1), inflow, atol=1e-12)
    np.testing.assert_allclose(lam / lam.sum(-1, keepdims=True), pi, atol=1e-12)  # round trip


def test_occupancy_matches_monte_carlo_rollouts(key):
    from jaxlab.games.convex_markov.solvers import _empirical_occupancy, _rollouts

    game = small_game(key)
    pi = random_policy(jax.random.fold_in(key, 1), 3, 2)
    s, a = _rollouts(game.p1, game.rho1, pi, jax.random.fold_in(key, 2), 20000, 80)
    mc = _empirical_occupancy(s, a, pi.shape, game.gamma)
    np.testing.assert_allclose(mc, M.occupancy(game.p1, game.rho1, pi, game.gamma), atol=5e-3)


@pytest.mark.parametrize("kappa,mu,epsilon", [(0.0, 0.0, 0.0), (0.1, 0.05, 0.01)])
def test_pseudo_reward_gradients_equal_autodiff_and_finite_differences(key, kappa, mu, epsilon):
    game = small_game(key, kappa)
    k1, k2, k3, k4 = jax.random.split(jax.random.fold_in(key, 1), 4)
    x, y = random_policy(k1, 3, 2), random_policy(k2, 3, 2)
    gx, gy = M.exact_gradients(game, x, y, epsilon, mu)
    ax, ay = jax.grad(M.utility, argnums=(1, 2))(game, x, y, epsilon, mu)
    np.testing.assert_allclose(gx, ax, atol=1e-12)
    np.testing.assert_allclose(gy, ay, atol=1e-12)
    # central differences along simplex-tangent directions (rows summing to zero)
    for g, k, which in ((gx, k3, 0), (gy, k4, 1)):
        d = jax.random.normal(k, (3, 2))
        d = d - d.mean(-1, keepdims=True)
        h = 1e-5

        def u(t, which=which, d=d):
            args = (x + t * d, y) if which == 0 else (x, y + t * d)
            return M.utility(game, *args, epsilon, mu)

        fd = (u(h) - u(-h)) / (2 * h)
        assert float(jnp.sum(g * d)) == pytest.approx(float(fd), rel=1e-6, abs=1e-10)


def test_linear_utility_gradient_is_the_classical_d_times_q(key):
    game = small_game(key)
    pi = random_policy(jax.random.fold_in(key, 1), 3, 2)
    r = jax.random.normal(jax.random.fold_in(key, 2), (3, 2))
    value = lambda pi: jnp.sum(r * M.occupancy(game.p1, game.rho1, pi, game.gamma))  # noqa: E731
    d = M.state_occupancy(game.p1, game.rho1, pi, game.gamma)
    q = M.q_values(game.p1, pi, r, game.gamma)
    np.testing.assert_allclose(jax.grad(value)(pi), d[:, None] * q, atol=1e-12)
    # and <r, lambda> = (1 - gamma) rho^T V
    v = jnp.sum(pi * q, -1)
    assert float(value(pi)) == pytest.approx(float((1 - game.gamma) * game.rho1 @ v), abs=1e-12)


def _numpy_projection(v):
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - 1.0
    k = np.nonzero(u - css / np.arange(1, len(v) + 1) > 0)[0][-1]
    return np.maximum(v - css[k] / (k + 1), 0.0)


def test_simplex_projection(key):
    v = 2.0 * jax.random.normal(key, (50, 5))
    p = M.project_simplex(v)
    assert float(p.min()) >= 0.0
    np.testing.assert_allclose(p.sum(-1), 1.0, atol=1e-12)
    np.testing.assert_allclose(M.project_simplex(p), p, atol=1e-12)  # idempotent
    np.testing.assert_allclose(p, np.stack([_numpy_projection(r) for r in np.asarray(v)]),
                               atol=1e-12)  # fmt: skip
    # KKT: v - p = theta on the support and <= theta off it (the Euclidean nearest point)
    resid = np.asarray(v - p)
    for r, q in zip(resid, np.asarray(p), strict=True):
        theta = r[q > 0]
        assert np.ptp(theta) < 1e-12 and np.all(r[q == 0] <= theta[0] + 1e-12)
    # invariant to a constant shift of a row
    np.testing.assert_allclose(M.project_simplex(v + 3.0), p, atol=1e-12)


def _lp_best_response(p, rho, gamma, r, maximize):
    s, a = r.shape
    a_eq = np.zeros((s, s * a))
    for t in range(s):
        a_eq[t] = (np.arange(s)[:, None] == t).repeat(a, 1).ravel() - gamma * p[:, :, t].ravel()
    sign = -1.0 if maximize else 1.0
    res = linprog(sign * r.ravel(), A_eq=a_eq, b_eq=(1 - gamma) * rho, bounds=(0, None))
    return sign * res.fun


def test_value_iteration_best_response_equals_the_lp(key):
    game = small_game(key, n_states=4, n_actions=3)
    x = random_policy(jax.random.fold_in(key, 1), 4, 3)
    lam1 = M.occupancy(game.p1, game.rho1, x, game.gamma)
    result = M.nash_gap(game, x, random_policy(jax.random.fold_in(key, 2), 4, 3))
    reward = jnp.einsum("sa,satb->tb", lam1, game.payoff)  # U is linear in lambda_2
    lp = _lp_best_response(*map(np.asarray, (game.p2, game.rho2, game.gamma, reward)), True)
    assert float(result.max_value) == pytest.approx(lp, abs=1e-8)
    assert float(result.certificate) <= 1e-9  # linear on both sides: exact


def test_frank_wolfe_best_response_is_certified_against_slsqp(key):
    game = small_game(key, kappa=0.5)
    y = random_policy(jax.random.fold_in(key, 1), 3, 2)
    lam2 = M.occupancy(game.p2, game.rho2, y, game.gamma)
    f = lambda l1: M.occupancy_utility(game, l1, lam2)  # noqa: E731  convex quadratic in l1
    x0 = M.uniform_policies(game)[0]
    lam0 = M.occupancy(game.p1, game.rho1, x0, game.gamma)
    value, cert = M.best_response(game.p1, game.rho1, game.gamma, f, lam0, minimize=True,
                                  max_iter=30, tol=0.0)  # fmt: skip
    # reference: SLSQP over the occupancy polytope (flow equalities, lambda >= 0)
    p, rho, gamma = map(np.asarray, (game.p1, game.rho1, game.gamma))
    a_eq = np.stack([(np.arange(3)[:, None] == t).repeat(2, 1).ravel() - gamma * p[:, :, t].ravel()
                     for t in range(3)])  # fmt: skip
    ref = minimize(lambda v: float(f(jnp.asarray(v.reshape(3, 2)))), np.asarray(lam0).ravel(),
                   jac=lambda v: np.asarray(jax.grad(f)(jnp.asarray(v.reshape(3, 2)))).ravel(),
                   constraints=[{"type": "eq", "fun": lambda v: a_eq @ v - (1 - gamma) * rho}],
                   bounds=[(0, None)] * 6, method="SLSQP", options={"ftol": 1e-14})  # fmt: skip
    assert ref.success
    assert float(value) >= ref.fun - 1e-9  # FW's value is attained by a feasible point
    assert float(value) - ref.fun <= float(cert) + 1e-9  # and the certificate bounds its error


def test_rock_paper_scissors_gap_formula_and_equilibrium():
    game = M.rock_paper_scissors()
    c = game.payoff.reshape(3, 3)
    for x, y in [([0.5, 0.3, 0.2], [0.2, 0.2, 0.6]), ([1.0, 0.0, 0.0], [0.0, 1.0, 0.0])]:
        x, y = jnp.asarray([x]), jnp.asarray([y])
        want = jnp.max(x[0] @ c) - jnp.min(c @ y[0])
        assert float(M.nash_gap(game, x, y).gap) == pytest.approx(float(want), abs=1e-12)
    u = jnp.full((1, 3), 1 / 3)
    assert abs(float(M.nash_gap(game, u, u).gap)) < 1e-8


def _run_from(cfg, game, x, y, steps):
    state = M.SolverState(x, y, jnp.zeros((), jnp.int32), jax.random.key(0))

    def body(s, _):
        s = M.step(cfg, game, s)
        return s, M.nash_gap(game, s.x, s.y).gap

    return jax.lax.scan(body, state, None, length=steps)


def test_rock_paper_scissors_gda_cycles_and_regularised_alternating_converges():
    game = M.rock_paper_scissors()
    x0, y0 = jnp.array([[0.6, 0.3, 0.1]]), jnp.array([[0.2, 0.5, 0.3]])
    uniform = jnp.full((1, 3), 1 / 3)
    start_gap = float(M.nash_gap(game, x0, y0).gap)
    sim = M.SolverConfig("simultaneous", mu=0.0, eta_x=0.1, eta_y=0.1, epsilon=0.0)
    state, gaps = _run_from(sim, game, x0, y0, 2000)
    assert float(gaps[-500:].min()) > 0.5 * start_gap  # orbits: the gap never settles
    dist = float(jnp.linalg.norm(state.x - uniform) + jnp.linalg.norm(state.y - uniform))
    assert dist >= float(jnp.linalg.norm(x0 - uniform) + jnp.linalg.norm(y0 - uniform)) - 1e-6
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
        x = random_policy(jax.random.fold_in(k, 1), 3, 2)
        y = random_policy(jax.random.fold_in(k, 2), 3, 2)
        plain = M.nash_gap(game, x, y)
        reg = M.nash_gap(game, x, y, mu=mu)
        assert float(plain.gap) >= -1e-12
        assert float(plain.gap) <= float(reg.gap + reg.certificate) + mu / 2 + 1e-9


@pytest.mark.parametrize("method", ["alternating", "simultaneous", "nested"])
def test_solver_step_metrics_are_the_policy_moves_and_gradient_norms(key, method):
    game = small_game(key, kappa=0.1)
    cfg = M.SolverConfig(method, mu=0.05, eta_x=0.1, eta_y=0.5, inner_steps=2)
    solver = M.make_solver(cfg, game)
    state = solver.init(jax.random.fold_in(key, 1))
    state = state.replace(x=random_policy(jax.random.fold_in(key, 2), 3, 2))
    new, m = jax.jit(solver.step)(state)
    assert set(m) == {"x_move", "y_move", "grad_x_norm", "grad_y_norm"}
    assert int(new.count) == 1  # and the run's key stays: step t draws from fold_in(key, t)
    np.testing.assert_array_equal(jax.random.key_data(new.key), jax.random.key_data(state.key))
    np.testing.assert_allclose(m["x_move"], jnp.linalg.norm(new.x - state.x), atol=1e-12)
    np.testing.assert_allclose(m["y_move"], jnp.linalg.norm(new.y - state.y), atol=1e-12)
    # the gradients each player used: x at (x, y) except Nest-PG's (x, y_new); y at (x_new, y) for
    # Alt-PGDA, (x, y) for Sim-PGDA and (x, y_before_last_inner_step) for Nest-PG (checked: x)
    y_at_x = new.y if method == "nested" else state.y
    gx = M.exact_gradients(game, state.x, y_at_x, cfg.epsilon, cfg.mu)[0]
    np.testing.assert_allclose(m["grad_x_norm"], jnp.linalg.norm(gx), rtol=1e-10)
    if method != "nested":
        x_at_y = new.x if method == "alternating" else state.x
        gy = M.exact_gradients(game, x_at_y, state.y, cfg.epsilon, cfg.mu)[1]
        np.testing.assert_allclose(m["grad_y_norm"], jnp.linalg.norm(gy), rtol=1e-10)
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
    one, _ = step(state)
    two, _ = step(one)
    # step t uses fold_in(key, t): a state that only has count = 1 reproduces the second step
    again, _ = step(state.replace(x=one.x, y=one.y, count=jnp.ones((), jnp.int32)))
    np.testing.assert_array_equal(again.x, two.x)
    assert not np.array_equal(np.asarray(one.x), np.asarray(two.x))
    k_x, _ = jax.random.split(jax.random.fold_in(state.key, 0))
    gx, _ = M.rollout_gradients(game, state.x, state.y, k_x, cfg.epsilon, cfg.mu, 8, 6)
    np.testing.assert_allclose(one.x, M.project_simplex(state.x - cfg.eta_x * gx), atol=1e-12)
    sharded, _ = jax.jit(M.make_solver(cfg, game, mesh=mesh).step)(state)
    np.testing.assert_allclose(sharded.x, one.x, atol=1e-12)
    np.testing.assert_allclose(sharded.y, one.y, atol=1e-12)


def test_alternating_pgda_reduces_the_gap_on_random_games(key):
    keys = jax.random.split(key, 4)
    games = jax.vmap(M.random_factored_game)(keys)
    cfg = M.SolverConfig("alternating", mu=0.05, eta_x=0.1, eta_y=0.5)
    _, result = jax.jit(jax.vmap(lambda g, k: M.solve(cfg, g, k, 400, 200)))(games, keys)
    gaps = result.gap
    assert gaps.shape == (4, 3)
    assert bool(jnp.all(gaps[:, -1] < 0.5 * gaps[:, 0]))


def test_vmapped_equals_looped_and_jit_equals_eager(key):
    keys = jax.random.split(key, 3)
    games = jax.vmap(lambda k: small_game(k, kappa=0.1))(keys)
    cfg = M.SolverConfig("nested", mu=0.05, eta_x=0.1, eta_y=0.5, inner_steps=3)
    batched = jax.vmap(lambda g, k: M.solve(cfg, g, k, 20, 10)[1].gap)(games, keys)
    for i in range(3):
        game = jax.tree.map(lambda a, i=i: a[i], games)
        looped = M.solve(cfg, game, keys[i], 20, 10)[1].gap
        np.testing.assert_allclose(batched[i], looped, atol=1e-10)
    state = M.init(jax.tree.map(lambda a: a[0], games), keys[0])
    game0 = jax.tree.map(lambda a: a[0], games)
    eager = M.step(cfg, game0, state)
    jitted = jax.jit(lambda s: M.step(cfg, game0, s))(state)
    np.testing.assert_allclose(eager.x, jitted.x, atol=1e-12)
    np.testing.assert_allclose(eager.y, jitted.y, atol=1e-12)


def test_sharded_games_equal_unsharded(key, mesh):
    keys = jax.random.split(key, 4)
    games = jax.vmap(lambda k: small_game(k))(keys)
    cfg = M.SolverConfig("alternating", mu=0.05, eta_x=0.1, eta_y=0.5)
    states, gaps = M.solve_games(cfg, games, keys, 20, 10, mesh=mesh)
    assert gaps.gap.sharding.spec[0] == "data" and states.x.sharding.spec[0] == "data"
    _, plain = jax.vmap(lambda g, k: M.solve(cfg, g, k, 20, 10))(games, keys)
    np.testing.assert_allclose(gaps.gap, plain.gap, atol=1e-10)
    np.testing.assert_allclose(
        states.x, jax.vmap(lambda g, k: M.solve(cfg, g, k, 20, 10)[0].x)(games, keys), atol=1e-12
    )
    with pytest.raises(ValueError, match="multiple"):
        M.solve_games(cfg, jax.tree.map(lambda a: a[:3], games), keys[:3], 20, 10, mesh=mesh)


def test_reinforce_gradients_are_close_to_exact_and_deterministic(key):
    game = small_game(key, kappa=0.1)
    x = random_policy(jax.random.fold_in(key, 1), 3, 2)
    y = random_policy(jax.random.fold_in(key, 2), 3, 2)
    k = jax.random.fold_in(key, 3)
    gx, gy = M.rollout_gradients(game, x, y, k, 0.05, 0.05, n_rollouts=40000, horizon=80)
    ex, ey = M.exact_gradients(game, x, y, 0.05, 0.05)
    # compare projected directions (a constant per state does not change a simplex step)
    centre = lambda g: g - g.mean(-1, keepdims=True)  # noqa: E731
    for g, e in ((gx, ex), (gy, ey)):
        err = float(jnp.linalg.norm(centre(g) - centre(e)) / jnp.linalg.norm(centre(e)))
        assert err < 0.15
    again = M.rollout_gradients(game, x, y, k, 0.05, 0.05, n_rollouts=40000, horizon=80)
    np.testing.assert_array_equal(gx, again[0])


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

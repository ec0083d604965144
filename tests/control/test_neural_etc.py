"""jaxlab.control.neural_etc building blocks, in float64: closed forms, invariants, gradients."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.control import neural_etc as E
from jaxlab.control.neural_etc import ETCConfig, make_trainer
from jaxlab.core import sharding


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def linear_system(a):
    return E.ControlSystem(
        "linear", 1, 1, lambda x: a * x, lambda x: jnp.ones((1, 1), x.dtype), 1.0
    )


def first_trigger_linear(a, k, c1, c2, cfg):
    """x' = a x + u, u = -k x(t_k); event c2 e^2 - c1 x^2 (fires when |e|/|x| = 1/P)."""
    system = linear_system(a)
    field = E.augmented_field(system, lambda p, x: -p["k"] * x)
    event = lambda y, p: c2 * y[1] ** 2 - c1 * y[0] ** 2
    return jax.jit(lambda p: E.first_trigger_time(field, event, jnp.array([1.0]), p, 5.0, cfg))


def test_first_trigger_time_matches_the_closed_form():
    a, k, c1, c2 = 1.0, 3.0, 1.0, 4.0
    P = np.sqrt(c2 / c1)
    cfg = E.ODESolverConfig(rtol=1e-11, atol=1e-11, root_tol=1e-13)
    t1, triggered = first_trigger_linear(a, k, c1, c2, cfg)({"k": jnp.float64(k)})
    exact = np.log((k - a * P / (P + 1)) / (k - a)) / a
    assert bool(triggered)
    assert abs(float(t1) - exact) < 1e-8


def test_event_time_gradient_matches_finite_differences():
    a, c1, c2 = 1.0, 1.0, 4.0
    cfg = E.ODESolverConfig(rtol=1e-11, atol=1e-11, root_tol=1e-13)
    fn = first_trigger_linear(a, 3.0, c1, c2, cfg)
    t_of_k = lambda k: fn({"k": k})[0]
    for k in (2.0, 3.0, 6.0):
        grad = float(jax.grad(t_of_k)(jnp.float64(k)))
        eps = 1e-5
        fd = (float(t_of_k(jnp.float64(k + eps))) - float(t_of_k(jnp.float64(k - eps)))) / (2 * eps)
        assert grad == pytest.approx(fd, rel=1e-4)


def test_no_trigger_returns_the_horizon_with_zero_gradient():
    system = linear_system(-1.0)
    field = E.augmented_field(system, lambda p, x: -p * x)
    never = lambda y, p: -1.0 - y[0] ** 2  # always negative
    fn = lambda p: E.first_trigger_time(field, never, jnp.array([1.0]), p, 2.0)
    t1, triggered = fn(jnp.float64(1.0))
    assert not bool(triggered) and float(t1) == 2.0
    assert float(jax.grad(lambda p: fn(p)[0])(jnp.float64(1.0))) == 0.0


def test_vmapped_trigger_times_mix_fired_and_unfired_states():
    # x' = x + u, u = -k x(t_k), P = 2: t1 = log((k - 2/3) / (k - 1)) = 0.288 (k=2), 0.065 (k=6)
    system = linear_system(1.0)
    field = E.augmented_field(system, lambda p, x: -p * x)
    event = lambda y, p: 4.0 * y[1] ** 2 - y[0] ** 2
    cfg = E.ODESolverConfig(rtol=1e-10, atol=1e-10, root_tol=1e-12)
    fn = lambda k: E.first_trigger_time(field, event, jnp.array([1.0]), k, 0.1, cfg)
    ks = jnp.array([2.0, 6.0, 2.5])
    t1, fired = jax.jit(jax.vmap(fn))(ks)
    np.testing.assert_array_equal(np.asarray(fired), [False, True, False])
    np.testing.assert_allclose(t1, [0.1, np.log((6 - 2 / 3) / 5), 0.1], atol=1e-8)
    for k, t in zip(ks, t1, strict=True):  # batched == one at a time
        np.testing.assert_allclose(fn(k)[0], t, atol=1e-12)
    grads = jax.grad(lambda ks: jnp.sum(jax.vmap(fn)(ks)[0]))(ks)
    assert np.all(np.isfinite(grads)) and float(grads[0]) == 0.0 and float(grads[1]) < 0


def test_augmented_state_invariant_and_pi_event_sign(key):
    system = E.lorenz()
    ctrl_net, v_net = E.Controller(3), E.ICNNLyapunov()
    k1, k2 = jax.random.split(key)
    params = {"c": ctrl_net.init(k1, jnp.zeros(3)), "v": v_net.init(k2, jnp.zeros(3))}
    controller = lambda p, x: ctrl_net.apply(p["c"], x)
    lyapunov = lambda p, x: v_net.apply(p["v"], x)
    field = E.augmented_field(system, controller)
    y = jnp.concatenate([jnp.array([1.0, -2.0, 3.0]), jnp.array([0.1, 0.2, -0.3])])
    dy = field(y, params)
    np.testing.assert_allclose(dy[:3] + dy[3:], 0.0, atol=1e-12)  # d(x + e)/dt = 0
    event = E.pi_event(system, controller, lyapunov, 0.5)
    x = jnp.array([1.0, -2.0, 3.0])
    h0 = event(jnp.concatenate([x, jnp.zeros(3)]), params)
    np.testing.assert_allclose(h0, -0.5 * lyapunov(params, x), rtol=1e-12)
    assert float(h0) < 0


def test_icnn_properties(key):
    net = E.ICNNLyapunov(hidden=(16, 1))
    params = net.init(key, jnp.zeros(3))
    V = lambda x: net.apply(params, x)
    assert float(V(jnp.zeros(3))) == 0.0
    xs = jax.random.normal(key, (50, 3)) * 5
    vals = jax.vmap(V)(xs)
    assert bool(jnp.all(vals >= 1e-3 * jnp.sum(xs**2, axis=1) - 1e-12))
    hessians = jax.jit(jax.vmap(jax.hessian(V)))(xs[:5])
    assert float(jnp.linalg.eigvalsh(hessians).min()) >= -1e-9  # convex


def test_smooth_relu_is_c1():
    d, eps = 0.1, 1e-7
    for z in (0.0, d):
        left, right = E.smooth_relu(jnp.float64(z - eps), d), E.smooth_relu(jnp.float64(z + eps), d)
        assert abs(float(right - left)) < 1e-6
        g = jax.grad(lambda t: E.smooth_relu(t, d))
        assert abs(float(g(jnp.float64(z - eps)) - g(jnp.float64(z + eps)))) < 1e-5


def test_controller_vanishes_at_zero_and_is_spectrally_normalised(key):
    for control_dim in (3, 1):
        net = E.Controller(control_dim, hidden=(16, 16))
        params = net.init(key, jnp.zeros(3))
        np.testing.assert_array_equal(net.apply(params, jnp.zeros(3)), 0.0)
        for layer in params["params"].values():
            w = layer["kernel"] / jnp.linalg.svd(layer["kernel"], compute_uv=False)[0]
            assert float(jnp.linalg.svd(w, compute_uv=False)[0]) <= 1 + 1e-6
        # the normalised network is 1-Lipschitz (ReLU layers of norm 1) before the x product
        x, y = jax.random.normal(key, (2, 3))
        mlp = lambda z: net.apply(params, z, method=E.Controller.mlp)
        assert float(jnp.linalg.norm(mlp(x) - mlp(y))) <= float(jnp.linalg.norm(x - y)) + 1e-9


def test_class_k_quadrature_and_slope(key):
    net = E.ClassK()
    params = net.init(key, jnp.float64(1.0))
    alpha = lambda r: net.apply(params, r)
    q = lambda r: net.apply(params, r, method=E.ClassK.slope)
    assert float(alpha(jnp.float64(0.0))) == 0.0
    grid = jnp.linspace(0.0, 10.0, 41)
    values = jax.vmap(alpha)(grid)
    assert bool(jnp.all(jnp.diff(values) > 0))
    fine = jnp.linspace(0.0, 3.0, 200_001)
    reference = jnp.trapezoid(jax.vmap(q)(fine), fine)
    assert float(alpha(jnp.float64(3.0))) == pytest.approx(float(reference), rel=1e-6)
    np.testing.assert_allclose(jax.grad(alpha)(jnp.float64(2.0)), q(jnp.float64(2.0)), rtol=1e-6)


def test_projection_enforces_the_decrease_condition(key):
    system = E.lorenz()
    ctrl_net, v_net = E.Controller(3), E.ICNNLyapunov()
    k1, k2, k3 = jax.random.split(key, 3)
    params = {"c": ctrl_net.init(k1, jnp.zeros(3)), "v": v_net.init(k2, jnp.zeros(3))}
    controller = lambda p, x: ctrl_net.apply(p["c"], x)
    lyapunov = lambda p, x: v_net.apply(p["v"], x)
    projected = E.project(controller, lyapunov, system)
    xs = jax.random.uniform(k3, (2000, 3), jnp.float64, -10, 10)
    before = jax.jit(
        jax.vmap(
            lambda x: (
                E.lie_derivative(system, controller, lyapunov)(params, x) + lyapunov(params, x)
            )
        )
    )(xs)
    after = jax.jit(
        jax.vmap(
            lambda x: E.lie_derivative(system, projected, lyapunov)(params, x) + lyapunov(params, x)
        )
    )(xs)
    assert float((before > 0).mean()) > 0.1  # the raw controller violates it somewhere
    vals = jax.jit(jax.vmap(lambda x: lyapunov(params, x)))(xs)
    assert bool(jnp.all(after <= 1e-9 * (1 + jnp.abs(vals))))
    # unchanged where the condition already holds; idempotent; finite at the origin
    u = jax.jit(jax.vmap(lambda x: controller(params, x)))(xs)
    pu = jax.jit(jax.vmap(lambda x: projected(params, x)))(xs)
    np.testing.assert_allclose(pu[before <= 0], u[before <= 0], atol=1e-12)
    twice = E.project(projected, lyapunov, system)
    np.testing.assert_allclose(
        jax.jit(jax.vmap(lambda x: twice(params, x)))(xs[:100]), pu[:100], rtol=1e-9, atol=1e-9
    )
    grads = jax.grad(lambda p: projected(p, jnp.zeros(3)).sum())(params)
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree_util.tree_leaves(grads))


def test_lqr_solves_the_riccati_equation():
    system = E.lorenz()
    Q, R = np.diag([5.0, 10.0, 5.0]), 0.1 * np.eye(3)
    gains = E.lqr(system, Q, R)
    A, B = (np.asarray(m) for m in system.linearization())
    np.testing.assert_allclose(A, [[-10, 10, 0], [28, -1, 0], [0, 0, -8 / 3]], atol=1e-12)
    S = gains.S
    residual = A.T @ S + S @ A - S @ B @ np.linalg.solve(R, B.T) @ S + Q
    np.testing.assert_allclose(residual, 0.0, atol=1e-8)
    assert np.all(np.linalg.eigvals(A - B @ gains.K).real < 0)
    with pytest.raises(ValueError, match="`Q` must be"):
        E.lqr(system, np.eye(2), R)


def test_lqr_etc_simulation_stabilises_with_positive_inter_event_times():
    system = E.lorenz()
    gains = E.lqr(system, np.diag([5.0, 10.0, 5.0]), 0.1 * np.eye(3))
    event = E.lqr_event(system, gains, 0.1)  # 90% slack: few triggers
    traj = E.simulate_etc(
        system,
        gains.controller,
        event,
        jnp.array([1.0, 2.0, 3.0]),
        None,
        2.0,
        max_triggers=500,
        n_grid=200,
    )
    n = int(traj.n_triggers)
    times = np.asarray(traj.trigger_times[:n])
    assert 0 < n < 500 and np.all(np.diff(np.concatenate([[0.0], times])) > 0)
    assert float(jnp.linalg.norm(traj.final_state)) < 1e-3
    assert not bool(jnp.isnan(traj.states).any())
    # between triggers x + e is held: the trajectory at trigger times matches the grid continuity
    assert float(jnp.linalg.norm(traj.states[0] - jnp.array([1.0, 2.0, 3.0]))) < 1e-12


def test_simulation_holds_the_control_after_the_trigger_cap():
    system = E.lorenz()
    gains = E.lqr(system, np.diag([5.0, 10.0, 5.0]), 0.1 * np.eye(3))
    event = E.lqr_event(system, gains, 0.1)
    x0 = jnp.array([1.0, 2.0, 3.0])
    run = lambda cap: E.simulate_etc(
        system, gains.controller, event, x0, None, 1.0, max_triggers=cap, n_grid=101
    )
    capped, free = run(3), run(500)
    assert int(capped.n_triggers) == 3 and int(free.n_triggers) > 3 and bool(capped.ok)
    assert not bool(jnp.isnan(capped.states).any())  # covers [0, horizon] despite the cap
    t3 = float(capped.trigger_times[2])
    before = np.asarray(capped.grid) <= t3
    np.testing.assert_allclose(capped.states[before], free.states[before], atol=1e-6)
    # after the cap the last sample is held: x + e stays at the third trigger state
    assert not np.allclose(capped.states[~before], free.states[~before], atol=1e-6)


def test_simulation_stops_when_the_state_escapes():
    system = linear_system(1.0)
    event = lambda y, p: 4.0 * y[1] ** 2 - y[0] ** 2  # fires when |e| = |x| / 2
    sim = lambda radius: E.simulate_etc(
        system, lambda p, x: p * x, event, jnp.array([1.0]), 1.0, 5.0, max_triggers=200,
        n_grid=101, escape_radius=radius,
    )  # fmt: skip
    traj = sim(10.0)  # positive feedback: x grows like e^{2t}
    assert bool(traj.diverged) and bool(traj.ok)
    n = int(traj.n_triggers)
    t_stop = float(traj.trigger_times[n - 1])
    assert float(jnp.abs(traj.trigger_states[n - 1, 0])) > 10.0
    assert float(jnp.abs(traj.trigger_states[n - 2, 0])) <= 10.0
    grid = np.asarray(traj.grid)
    assert not np.isnan(np.asarray(traj.states)[grid <= t_stop]).any()
    assert np.isnan(np.asarray(traj.states)[grid > t_stop]).all()
    assert not bool(sim(float("inf")).diverged)


def test_grn_target_is_an_equilibrium():
    system = E.grn()
    np.testing.assert_allclose(system.drift(jnp.zeros(2)), 0.0, atol=1e-12)
    assert system.actuator(jnp.zeros(2)).shape == (2, 1)


def test_bad_inputs_raise():
    system = E.lorenz()
    gains = E.lqr(system, np.eye(3), np.eye(3))
    event = E.lqr_event(system, gains, 0.5)
    with pytest.raises(ValueError, match="`x0` must be finite"):
        E.simulate_etc(system, gains.controller, event, jnp.array([jnp.nan, 0.0, 0.0]), None, 1.0)
    with pytest.raises(ValueError, match=r"`x0` must have shape \(3,\)"):
        E.simulate_etc(system, gains.controller, event, jnp.zeros(2), None, 1.0)
    with pytest.raises(ValueError, match="`sigma` must lie in"):
        E.pi_event(system, gains.controller, gains.lyapunov, 1.5)


# ----------------------------------------------------------------------------- training


def test_mc_training_reduces_its_loss_and_keeps_alpha_class_k():
    cfg = ETCConfig(
        method="mc",
        n_samples=256,
        lyapunov_hidden=(16, 1),
        controller_hidden=(16, 16),
        alpha_hidden=(8, 8),
    )
    trainer = make_trainer(E.lorenz(), cfg)
    state = trainer.init(jax.random.key(0))
    final, metrics = jax.jit(lambda s: jax.lax.scan(trainer.step, s, None, 60))(state)
    assert float(metrics["loss"][-1]) < 0.2 * float(metrics["loss"][0])
    alpha = lambda r: trainer.model.alpha(final.params, r)
    assert float(alpha(jnp.float64(0.0))) == 0.0
    assert bool(jnp.all(jnp.diff(jax.vmap(alpha)(jnp.linspace(0.0, 10.0, 21))) > 0))


def test_pi_event_step_has_finite_gradients_and_uses_trigger_times():
    cfg = ETCConfig(
        method="pi",
        n_samples=64,
        event_batch=2,
        lyapunov_hidden=(8, 1),
        controller_hidden=(8, 8),
        event_weight=0.05,
        t_max=2.0,
    )
    trainer = make_trainer(E.lorenz(), cfg, E.ODESolverConfig(rtol=1e-5, atol=1e-5))
    state = trainer.init(jax.random.key(1))
    state, _ = jax.jit(lambda s: jax.lax.scan(trainer.step, s, None, 30))(state)
    new, metrics = jax.jit(trainer.event_step)(state)
    assert np.isfinite(float(metrics["event"])) and float(metrics["event"]) > 0
    assert int(new.step) == int(state.step) + 1
    moved = jax.tree_util.tree_map(
        lambda a, b: float(jnp.abs(a - b).max()), new.params, state.params
    )
    assert all(np.isfinite(v) for v in jax.tree_util.tree_leaves(moved))
    assert max(jax.tree_util.tree_leaves(moved)) > 0


def test_trainer_rejects_bad_config():
    with pytest.raises(ValueError, match="`method` must be"):
        ETCConfig(method="rl")
    with pytest.raises(ValueError, match="`sigma` must lie in"):
        ETCConfig(sigma=1.0)
    bad = {
        "n_samples": 0,
        "learning_rate": 0.0,
        "event_weight": -0.1,
        "steps": -1,
        "warmup_steps": 2.5,
        "event_steps": -3,
        "t_max": 0.0,
        "alpha_grid_max": -1.0,
        "controller_hidden": (8, 0),
        "lyapunov_hidden": (),
    }
    for name, value in bad.items():
        with pytest.raises(ValueError, match=f"`{name}`"):
            ETCConfig(**{name: value})
    with pytest.raises(ValueError, match="`event_batch` must be <= 8"):
        ETCConfig(method="pi", n_samples=8, event_batch=9)
    ETCConfig(method="mc", n_samples=8, event_batch=10)  # only PI draws event starts
    with pytest.raises(ValueError, match="`rtol`"):
        E.ODESolverConfig(rtol=0.0)
    with pytest.raises(ValueError, match="`max_steps`"):
        E.ODESolverConfig(max_steps=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ETCConfig().steps = 3  # frozen
    assert hash(ETCConfig()) == hash(ETCConfig()) and hash(E.ODESolverConfig()) is not None


def test_schedules_honour_the_step_fields():
    cfg = ETCConfig(method="pi", n_samples=16, warmup_steps=7, event_steps=3, steps=99,
                    lyapunov_hidden=(4, 1), controller_hidden=(4, 4))  # fmt: skip
    pi = make_trainer(E.lorenz(), cfg)
    assert [(p.name, p.n_steps) for p in pi.phases] == [("warmup", 7), ("event", 3)]
    assert pi.phases[0].step is pi.step and pi.phases[1].step is pi.event_step
    assert pi.config is cfg
    mc = make_trainer(E.lorenz(), dataclasses.replace(cfg, method="mc", warmup_steps=0))
    assert [(p.name, p.n_steps) for p in mc.phases] == [("train", 99)] and mc.event_step is None


def test_run_schedule_runs_phases_in_order_and_skips_empty_ones():
    """A counting stand-in for the networks: the schedule logic alone (no compile of a loss)."""

    def tagged(tag):
        def step(state, x=None):
            return state.replace(step=state.step + 1, key=state.key * 10 + tag), {"tag": tag}

        return step

    state = E.ETCState(
        {}, (), jnp.zeros((4, 3)), jnp.zeros((), jnp.int64), jnp.zeros((), jnp.int32)
    )
    phases = (E.Phase("warmup", tagged(1), 5), E.Phase("skip", tagged(7), 0),
              E.Phase("event", tagged(2), 3))  # fmt: skip
    trainer = make_trainer(E.lorenz(), ETCConfig(n_samples=4))._replace(phases=phases)
    seen = []
    final, metrics = E.run_schedule(
        trainer, state, chunks=2, checkpointer=lambda name: seen.append(name)
    )
    assert seen == ["warmup", "event"] and set(metrics) == {"warmup", "event"}
    assert int(final.step) == 8 and int(final.key) == 11111222  # 5 warm-up, then 3 event steps
    np.testing.assert_array_equal(metrics["warmup"]["tag"], [1] * 5)
    np.testing.assert_array_equal(metrics["event"]["tag"], [2] * 3)
    with pytest.raises(ValueError, match="`chunks`"):
        E.run_schedule(trainer, state, chunks=0)


def test_run_schedule_equals_one_scan_and_nlc_uses_core_mlp():
    cfg = ETCConfig(method="nlc", n_samples=32, steps=6, controller_hidden=(8, 8), resample=True)
    trainer = make_trainer(E.lorenz(), cfg)
    state = trainer.init(jax.random.key(5))
    assert set(state.params["controller"]["params"]) == {"Dense_0", "Dense_1", "Dense_2"}
    final, metrics = E.run_schedule(trainer, state)  # chunks of 6 // 4 = 1 step
    want, want_metrics = jax.jit(lambda s: jax.lax.scan(trainer.step, s, None, 6))(state)
    np.testing.assert_allclose(metrics["train"]["loss"], want_metrics["loss"], rtol=1e-12)
    jax.tree_util.tree_map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12),
        final.params,
        want.params,
    )
    assert int(final.step) == 6


def test_neural_event_time_gradient_matches_finite_differences():
    cfg = ETCConfig(method="pi", n_samples=64, lyapunov_hidden=(8, 1), controller_hidden=(8, 8))
    trainer = make_trainer(E.lorenz(), cfg)
    state = trainer.init(jax.random.key(1))
    state, _ = jax.jit(lambda s: jax.lax.scan(trainer.step, s, None, 100))(state)
    field = E.augmented_field(E.lorenz(), trainer.model.controller)
    solver = E.ODESolverConfig(rtol=1e-10, atol=1e-10, root_tol=1e-12)
    x0 = jnp.array([1.0, -2.0, 3.0])
    t_of = jax.jit(
        lambda p: E.first_trigger_time(field, trainer.model.event, x0, p, 5.0, solver)[0]
    )
    grad = jax.grad(t_of)(state.params)
    leaves, treedef = jax.tree_util.tree_flatten(state.params)
    keys = jax.random.split(jax.random.key(2), len(leaves))
    direction = jax.tree_util.tree_unflatten(
        treedef, [jax.random.normal(k, leaf.shape) for k, leaf in zip(keys, leaves, strict=True)]
    )
    along = sum(
        float(jnp.vdot(g, d))
        for g, d in zip(
            jax.tree_util.tree_leaves(grad), jax.tree_util.tree_leaves(direction), strict=True
        )
    )
    eps = 1e-6
    shift = lambda s: jax.tree_util.tree_map(lambda p, d: p + s * d, state.params, direction)
    fd = (float(t_of(shift(eps))) - float(t_of(shift(-eps)))) / (2 * eps)
    assert along == pytest.approx(fd, rel=1e-4)


def test_sharded_mc_loss_equals_unsharded(mesh):
    cfg = ETCConfig(
        method="mc",
        n_samples=64,
        lyapunov_hidden=(8, 1),
        controller_hidden=(8, 8),
        alpha_hidden=(4, 4),
    )
    trainer = make_trainer(E.lorenz(), cfg)
    state = trainer.init(jax.random.key(4))
    step = jax.jit(trainer.step)
    _, plain = step(state)
    sharded_state = state.replace(data=sharding.shard_batch(state.data, mesh))
    new, sharded = step(sharded_state)
    np.testing.assert_allclose(sharded["loss"], plain["loss"], rtol=1e-12)
    assert new.data.sharding.spec[0] == "data" or not new.data.sharding.is_fully_replicated
    # the factory's mesh: the training states are sharded by init and constrained in the step
    on_mesh = make_trainer(E.lorenz(), cfg, mesh=mesh)
    state_m = jax.jit(on_mesh.init)(jax.random.key(4))
    np.testing.assert_array_equal(state_m.data, state.data)
    assert len(state_m.data.sharding.device_set) == 4
    _, meshed = jax.jit(on_mesh.step)(state_m)
    np.testing.assert_allclose(meshed["loss"], plain["loss"], rtol=1e-12)
    with pytest.raises(ValueError, match="n_samples"):
        make_trainer(E.lorenz(), dataclasses.replace(cfg, n_samples=63), mesh=mesh)


def test_inter_event_times_respect_the_theorem_3_2_bound():
    """x' = a x + u, u = -k x(t_k), h = c2 e^2 - c1 x^2: tau = log[(P+1)/(P + l_u/(1+l_u))]/l_f."""
    a, k, c1, c2 = 1.0, 3.0, 1.0, 4.0
    P, l_f, l_u = np.sqrt(c2 / c1), max(abs(a), 1.0), k
    tau = np.log((P + 1) / (P + l_u / (1 + l_u))) / l_f
    exact = np.log((k - a * P / (P + 1)) / (k - a)) / a  # every gap, by scale invariance
    system = linear_system(a)
    controller = lambda p, x: -k * x
    event = lambda y, p: c2 * y[1] ** 2 - c1 * y[0] ** 2
    simulate = jax.jit(
        jax.vmap(
            lambda x0: E.simulate_etc(
                system, controller, event, x0, None, 1.0, max_triggers=20, n_grid=20
            )
        )
    )
    traj = simulate(jnp.array([[1.0], [-3.0], [0.2]]))
    for i in range(3):
        n = int(traj.n_triggers[i])
        gaps = np.diff(np.concatenate([[0.0], np.asarray(traj.trigger_times[i, :n])]))
        assert n >= 5 and np.all(gaps >= tau)
        np.testing.assert_allclose(gaps, exact, rtol=1e-5)


def test_projected_controller_gives_exponential_decay(key):
    system = E.lorenz()
    ctrl_net, v_net = E.Controller(3, (16, 16)), E.ICNNLyapunov((16, 1))
    k1, k2 = jax.random.split(key)
    params = {"c": ctrl_net.init(k1, jnp.zeros(3)), "v": v_net.init(k2, jnp.zeros(3))}
    lyapunov = lambda p, x: v_net.apply(p["v"], x)
    projected = E.project(lambda p, x: ctrl_net.apply(p["c"], x), lyapunov, system)
    sigma = 0.5
    event = E.pi_event(system, projected, lyapunov, sigma)
    x0 = jnp.array([3.0, -4.0, 5.0])
    traj = jax.jit(
        lambda x: E.simulate_etc(
            system, projected, event, x, params, 0.5, max_triggers=300, n_grid=100
        )
    )(x0)
    values = jax.vmap(lambda x: lyapunov(params, x))(traj.states)
    bound = lyapunov(params, x0) * jnp.exp(-(1 - sigma) * traj.grid) * (1 + 1e-6)
    assert bool(jnp.all(values <= bound))

"""jaxlab.control.neural_etc building blocks, in float64: closed forms, invariants, gradients.

Compile budget: every program is built once per module (``functools.cache``d builders, one
jitted function per setup, no eager ``jnp`` loops) and reused by the tests that share its shapes:
one linear first-trigger program (closed form, gradients, fired / unfired batches), one program
of network checks, one linear event-triggered simulator (Theorem 3.2, escape, trigger cap), and
one MC and one PI trainer.
"""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.control import neural_etc as E
from jaxlab.control.neural_etc import ETCConfig, make_trainer
from jaxlab.core import sharding
from tests.helpers import assert_compiles_once, assert_traces_once


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):
        yield


def linear_system(a):
    return E.ControlSystem(
        "linear", 1, 1, lambda x: a * x, lambda x: jnp.ones((1, 1), x.dtype), 1.0
    )


# x' = x + u, u = -k x(t_k), event h = 4 e^2 - x^2 (fires when |e| = |x| / 2, P = 2): between
# triggers x(t) = x_k (k - (k - 1) e^{t - t_k}), so t1 = log((k - 2/3) / (k - 1)) from any x_k.
LINEAR_KS = np.array([2.0, 3.0, 6.0])
LINEAR_EPS = 1e-5


def linear_event(y, p):
    return 4.0 * y[1] ** 2 - y[0] ** 2


def linear_t1(k):
    return np.log((k - 2 / 3) / (k - 1))


def linear_dt1_dk(k):
    return 1 / (k - 2 / 3) - 1 / (k - 1)


@functools.cache
def linear_trigger_results():
    """First-trigger times of the linear loop for ks = (2, 3, 6) and k +- eps, t_max = 5 and 0.1.

    One program: ``(ks [9], t_max []) -> (t1, fired, dt1/dk)`` vmapped over ``ks``, and ``t1``
    one state at a time (``lax.map``, no batching); its second call (new t_max) must not retrace.
    """
    field = E.augmented_field(linear_system(1.0), lambda k, x: -k * x)
    cfg = E.ODESolverConfig(rtol=1e-11, atol=1e-11, root_tol=1e-13)

    def one(k, t_max):
        return E.first_trigger_time(field, linear_event, jnp.array([1.0]), k, t_max, cfg)

    def run(ks, t_max):
        (t1, fired), grad = jax.vmap(jax.value_and_grad(one, has_aux=True), (0, None))(ks, t_max)
        return t1, fired, grad, jax.lax.map(lambda k: one(k, t_max)[0], ks)

    ks = np.concatenate([LINEAR_KS, LINEAR_KS + LINEAR_EPS, LINEAR_KS - LINEAR_EPS])
    calls = [(ks, np.float64(5.0)), (ks, np.float64(0.1))]
    outs = assert_compiles_once(jax.jit(run), calls, name="linear first_trigger_time")
    return {
        t_max: [np.asarray(o) for o in out] for (_, t_max), out in zip(calls, outs, strict=True)
    }


def test_first_trigger_time_and_its_gradient_match_the_closed_form():
    t1, fired, grad, single = linear_trigger_results()[5.0]
    assert fired.all()
    np.testing.assert_allclose(t1, linear_t1(np.tile(LINEAR_KS, 3) + np.repeat([0, 1, -1], 3)
                                             * LINEAR_EPS), atol=1e-8)  # fmt: skip
    fd = (t1[3:6] - t1[6:9]) / (2 * LINEAR_EPS)
    np.testing.assert_allclose(grad[:3], fd, rtol=1e-4)  # IFT gradient == finite differences
    np.testing.assert_allclose(grad[:3], linear_dt1_dk(LINEAR_KS), rtol=1e-6)
    np.testing.assert_allclose(single, t1, atol=1e-12)  # batched == one at a time


def test_vmapped_trigger_times_mix_fired_and_unfired_states():
    # t_max = 0.1: t1 = 0.288 (k=2) and 0.154 (k=3) do not fire, 0.065 (k=6) does
    t1, fired, grad, single = linear_trigger_results()[0.1]
    np.testing.assert_array_equal(fired, [False, False, True] * 3)
    # no trigger: exactly the horizon, exactly zero gradient
    assert np.all(t1[~fired] == 0.1) and np.all(grad[~fired] == 0.0)
    np.testing.assert_allclose(t1[fired], linear_t1(6.0 + np.array([0, 1, -1]) * LINEAR_EPS),
                               atol=1e-8)  # fmt: skip
    np.testing.assert_allclose(grad[fired], linear_dt1_dk(6.0 + np.array([0, 1, -1]) * LINEAR_EPS),
                               rtol=1e-6)  # fmt: skip
    np.testing.assert_allclose(single, t1, atol=1e-12)  # batched == one at a time


def linear_capped_dt1_dk(k, t):
    """The implicit-function gradient at a capped time t (no trigger): -(dh/dk) / (dh/dt)."""
    x, dxdk, xdot = k - (k - 1) * np.exp(t), 1 - np.exp(t), -(k - 1) * np.exp(t)
    e = 1 - x  # x + e = x(0) = 1 between triggers
    dhdk = 8 * e * -dxdk - 2 * x * dxdk
    return -dhdk / (8 * e * -xdot - 2 * x * xdot)


@jax.jit
def _fixed_step_triggers(ks, e0s):
    """The official semantics (3/8-rule RK4, dt = 1e-3, midpoint) with a 100-step cap."""
    field = E.augmented_field(linear_system(1.0), lambda k, x: -k * x)
    trig = E.FixedStepTrigger(dt=1e-3, max_steps=100)

    def one(k, e0):
        return E.first_trigger_time(field, linear_event, jnp.array([1.0]), k, 5.0, trig, e0=e0)

    return jax.vmap(jax.value_and_grad(one, has_aux=True))(ks, e0s)


def test_fixed_step_trigger_is_the_midpoint_of_the_crossing_step_or_the_cap():
    # the last start has e0 = 0.6: h(0) = 4 e0^2 - 1 > 0, so its trigger is h's first fall
    # through 0; with c = 1 + e0 = x + e, x(t) = k c + (1 - k c) e^t reaches 2 c / 3 at t = 0.076
    ks, e0s = np.append(LINEAR_KS, 0.1), np.array([[0.0], [0.0], [0.0], [0.6]])
    (t1, fired), grad = _fixed_step_triggers(ks, e0s)
    exact = linear_t1(LINEAR_KS)  # 0.288, 0.154 (past the 0.1 cap) and 0.065
    np.testing.assert_array_equal(fired, [False, False, True, True])
    # k = 6: the midpoint of the step over which h crosses 0, and the IFT gradient at the
    # midpoint state, within O(dt) of the exact one
    np.testing.assert_allclose(t1[2], (np.floor(exact[2] / 1e-3) + 0.5) * 1e-3, atol=1e-12)
    np.testing.assert_allclose(grad[2], linear_dt1_dk(LINEAR_KS[2]), rtol=2e-3)  # 6e-4 here
    # k = 2, 3 never trigger: t1 = the cap 0.1 *with* the IFT gradient taken there (official)
    np.testing.assert_allclose(t1[:2], 0.1, atol=1e-12)
    np.testing.assert_allclose(grad[:2], linear_capped_dt1_dk(LINEAR_KS[:2], 0.1), rtol=1e-8)
    c = 1.6
    fall = np.log((2 * c / 3 - 0.1 * c) / (1 - 0.1 * c))
    np.testing.assert_allclose(t1[3], (np.floor(fall / 1e-3) + 0.5) * 1e-3, atol=1e-12)
    with pytest.raises(ValueError, match="`rule`"):
        E.FixedStepTrigger(rule="rk45")
    with pytest.raises(ValueError, match="`max_steps`"):
        E.FixedStepTrigger(max_steps=0)


@pytest.mark.parametrize("rule", ["3/8", "classic"])
def test_fixed_step_rk4_rules_are_fourth_order(rule):
    import diffrax

    from jaxlab.control.neural_etc.events import _RK4_SOLVERS

    term = diffrax.ODETerm(lambda t, y, args: y)
    y0 = jnp.ones((), jnp.float64)
    step = jax.jit(lambda dt: _RK4_SOLVERS[rule]().step(term, 0.0, dt, y0, None, None, False)[0])
    errors = [abs(float(step(dt)) - np.exp(dt)) for dt in (0.2, 0.1)]
    assert errors[0] / errors[1] == pytest.approx(32, rel=0.1)  # local error O(dt^5)


# ------------------------------------------------------------------------------- networks

CTRL, ICNN = E.Controller(3), E.ICNNLyapunov()
SMALL_ICNN, CTRL_1 = E.ICNNLyapunov(hidden=(16, 1)), E.Controller(1, hidden=(16, 16))


def controller(p, x):
    return CTRL.apply(p["c"], x)


def lyapunov(p, x):
    return ICNN.apply(p["v"], x)


@functools.cache
def net_checks():
    """Every network check's values from one jitted program (Lorenz nets, ICNN, class K, ...)."""
    system = E.lorenz()
    rng = np.random.default_rng(0)
    xs = rng.uniform(-10, 10, (2000, 3))  # projection test points
    normals = rng.normal(size=(50, 3)) * 5  # ICNN test points
    pair = rng.normal(size=(2, 3))  # Lipschitz test pair

    def init(key):
        k1, k2, k3, k4, k5, k6 = jax.random.split(key, 6)
        return {
            "lorenz": {"c": CTRL.init(k1, jnp.zeros(3)), "v": ICNN.init(k2, jnp.zeros(3))},
            "icnn": SMALL_ICNN.init(k3, jnp.zeros(3)),
            "c1": CTRL_1.init(k4, jnp.zeros(3)),
            "layer": E.SpectralDense(5).init(k5, jnp.zeros(3)),
            "alpha": E.ClassK().init(k6, jnp.zeros(())),
        }

    # (parameters made inside the checks' program let XLA fold them into the projection's
    # arithmetic, which then cancels to 1e-5 instead of 1e-13: they come from their own program)
    def run(nets, xs, normals, pair):
        params = nets["lorenz"]
        out = {}
        # augmented closed loop and PI event
        field = E.augmented_field(system, controller)
        y = jnp.array([1.0, -2.0, 3.0, 0.1, 0.2, -0.3])
        out["dy"] = field(y, params)
        x = y[:3]
        out["h0"] = E.pi_event(system, controller, lyapunov, 0.5)(
            jnp.concatenate([x, jnp.zeros(3)]), params
        )
        out["V(x)"] = lyapunov(params, x)
        # projection
        projected = E.project(controller, lyapunov, system)
        lie = E.lie_derivative(system, controller, lyapunov)
        lie_p = E.lie_derivative(system, projected, lyapunov)
        out["before"] = jax.vmap(lambda x: lie(params, x) + lyapunov(params, x))(xs)
        out["after"] = jax.vmap(lambda x: lie_p(params, x) + lyapunov(params, x))(xs)
        out["V(xs)"] = jax.vmap(lambda x: lyapunov(params, x))(xs)
        out["u"] = jax.vmap(lambda x: controller(params, x))(xs)
        out["pu"] = jax.vmap(lambda x: projected(params, x))(xs)
        twice = E.project(projected, lyapunov, system)
        out["ppu"] = jax.vmap(lambda x: twice(params, x))(xs[:100])
        grads = jax.grad(lambda p: projected(p, jnp.zeros(3)).sum())(params)
        out["grad_at_0"] = jnp.concatenate([g.ravel() for g in jax.tree_util.tree_leaves(grads)])
        # ICNN: V(0) = 0, V >= eps |x|^2, convex
        icnn = nets["icnn"]
        V = lambda x: SMALL_ICNN.apply(icnn, x)
        out["icnn_V0"] = V(jnp.zeros(3))
        out["icnn_margin"] = jax.vmap(V)(normals) - 1e-3 * jnp.sum(normals**2, axis=1)
        out["icnn_min_eig"] = jnp.linalg.eigvalsh(jax.vmap(jax.hessian(V))(normals[:5])).min()
        # smooth ReLU: value and slope continuous at 0 and d
        d, eps = 0.1, 1e-7
        zs = jnp.array([-eps, eps, d - eps, d + eps])
        out["relu_values"] = E.smooth_relu(zs, d)
        out["relu_slopes"] = jax.vmap(jax.grad(lambda t: E.smooth_relu(t, d)))(zs)
        # controllers: u(0) = 0 (both forms); each SpectralDense layer has spectral norm 1
        c1 = nets["c1"]
        out["u0"] = jnp.concatenate(
            [controller(params, jnp.zeros(3)), CTRL_1.apply(c1, jnp.zeros(3))]
        )
        layer = E.SpectralDense(5)
        lp = nets["layer"]
        out["layer_jacobian"] = jax.jacfwd(lambda z: layer.apply(lp, z))(pair[0])
        out["layer_kernel"] = lp["params"]["kernel"]
        mlps = [lambda z: CTRL.apply(params["c"], z, method=E.Controller.mlp),
                lambda z: CTRL_1.apply(c1, z, method=E.Controller.mlp)]  # fmt: skip
        out["mlp_gap"] = jnp.stack([jnp.linalg.norm(m(pair[0]) - m(pair[1])) for m in mlps])
        out["pair_gap"] = jnp.linalg.norm(pair[0] - pair[1])
        # class K: alpha(0) = 0, increasing, alpha = int q (trapezoid), alpha' = q
        alpha_net = E.ClassK()
        ap = nets["alpha"]
        alpha = lambda r: alpha_net.apply(ap, r)
        q = lambda r: alpha_net.apply(ap, r, method=E.ClassK.slope)
        out["alpha0"] = alpha(jnp.float64(0.0))
        out["alpha_grid"] = jax.vmap(alpha)(jnp.linspace(0.0, 10.0, 41))
        fine = jnp.linspace(0.0, 3.0, 200_001)
        out["alpha3"], out["trapezoid3"] = (
            alpha(jnp.float64(3.0)),
            jnp.trapezoid(jax.vmap(q)(fine), fine),
        )
        out["alpha_grad2"], out["q2"] = jax.grad(alpha)(jnp.float64(2.0)), q(jnp.float64(2.0))
        return out

    out = jax.jit(run)(jax.jit(init)(jax.random.key(0)), xs, normals, pair)
    return {k: np.asarray(v) for k, v in out.items()}


def test_augmented_state_invariant_and_pi_event_sign():
    out = net_checks()
    np.testing.assert_allclose(out["dy"][:3] + out["dy"][3:], 0.0, atol=1e-12)  # d(x + e)/dt = 0
    np.testing.assert_allclose(out["h0"], -0.5 * out["V(x)"], rtol=1e-12)  # e = 0: h = -sigma V
    assert out["h0"] < 0


def test_icnn_properties():
    out = net_checks()
    assert out["icnn_V0"] == 0.0
    assert np.all(out["icnn_margin"] >= -1e-12)
    assert out["icnn_min_eig"] >= -1e-9  # convex


def test_smooth_relu_is_c1():
    out = net_checks()
    values, slopes = out["relu_values"], out["relu_slopes"]
    assert abs(values[1] - values[0]) < 1e-6 and abs(values[3] - values[2]) < 1e-6
    assert abs(slopes[1] - slopes[0]) < 1e-5 and abs(slopes[3] - slopes[2]) < 1e-5
    np.testing.assert_allclose(slopes, [0.0, 1e-6, 1 - 1e-6, 1.0], atol=1e-9)  # 0, z/d, 1


def test_controller_vanishes_at_zero_and_is_spectrally_normalised():
    out = net_checks()
    np.testing.assert_array_equal(out["u0"], 0.0)
    # the layer's Jacobian is kernel^T / sigma_max(kernel): its spectral norm is exactly 1
    kernel = out["layer_kernel"]
    np.testing.assert_allclose(out["layer_jacobian"], kernel.T / np.linalg.svd(kernel)[1][0],
                               rtol=1e-12)  # fmt: skip
    assert np.linalg.svd(out["layer_jacobian"])[1][0] == pytest.approx(1.0, abs=1e-12)
    # the normalised network is 1-Lipschitz (ReLU layers of norm 1) before the x product
    assert np.all(out["mlp_gap"] <= out["pair_gap"] + 1e-9)


def test_controller_init_schemes():
    inits = jax.jit(lambda k: [E.Controller(3, (32, 16), s).init(k, jnp.zeros(3))["params"]
                               for s in ("torch", "lecun")])(jax.random.key(0))  # fmt: skip
    for name, fan_in in (("layers_0", 3), ("layers_1", 32), ("layers_2", 16)):
        torch_layer, lecun_layer = (p[name] for p in inits)
        bound = 1 / np.sqrt(fan_in)  # PyTorch's default Linear init: U(+-1/sqrt(fan_in))
        for leaf in (torch_layer["kernel"], torch_layer["bias"]):
            assert np.all(np.abs(leaf) <= bound) and np.all(leaf != 0), name
        assert np.abs(torch_layer["kernel"]).max() > 0.8 * bound, name  # >= 48 draws
        np.testing.assert_array_equal(lecun_layer["bias"], 0.0)  # LeCun-normal, zero bias
    with jax.enable_x64(True):  # both schemes give a float64 model (the torch one was float32)
        for scheme in ("torch", "lecun"):
            params = E.Controller(3, (4,), scheme).init(jax.random.key(0), jnp.zeros(3))
            dtypes = {leaf.dtype for leaf in jax.tree_util.tree_leaves(params)}
            assert dtypes == {np.dtype("float64")}, scheme
    with pytest.raises(ValueError, match="`controller_init`"):
        ETCConfig(controller_init="he")


@jax.jit
def _prepared_and_raw(key, xs):
    model = E.make_model(E.lorenz(), ETCConfig(method="pi"))
    params = model.init(key)

    def total(p, prepare):
        q = model.prepare(p) if prepare else p
        return jnp.sum(jax.vmap(lambda x: model.controller(q, x))(xs))

    values = [jax.vmap(lambda x, q=q: model.controller(q, x))(xs)
              for q in (params, model.prepare(params))]  # fmt: skip
    return values, [jax.grad(total)(params, flag) for flag in (False, True)], model.prepare(params)


def test_prepared_spectral_norms_change_no_value_or_gradient(key):
    xs = jax.random.uniform(jax.random.key(3), (16, 3), jnp.float64, -10, 10)
    (raw, prepared), (g_raw, g_prepared), params = _prepared_and_raw(key, xs)
    sigmas = params["controller"]["spectral"]
    kernels = params["controller"]["params"]
    assert set(sigmas) == set(kernels) == {"layers_0", "layers_1", "layers_2"}
    for name in kernels:  # the stored values are the kernels' largest singular values
        top = np.linalg.svd(kernels[name]["kernel"])[1][0]
        np.testing.assert_allclose(sigmas[name]["sigma"], top, rtol=1e-12)
    np.testing.assert_allclose(prepared, raw, rtol=1e-12, atol=1e-12)
    for a, b in zip(jax.tree_util.tree_leaves(g_raw), jax.tree_util.tree_leaves(g_prepared),
                    strict=True):  # fmt: skip
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_class_k_quadrature_and_slope():
    out = net_checks()
    assert out["alpha0"] == 0.0
    assert np.all(np.diff(out["alpha_grid"]) > 0)
    assert out["alpha3"] == pytest.approx(float(out["trapezoid3"]), rel=1e-6)
    np.testing.assert_allclose(out["alpha_grad2"], out["q2"], rtol=1e-6)


def test_projection_enforces_the_decrease_condition():
    out = net_checks()
    before, after = out["before"], out["after"]
    assert (before > 0).mean() > 0.1  # the raw controller violates it somewhere
    assert np.all(after <= 1e-9 * (1 + np.abs(out["V(xs)"])))
    # unchanged where the condition already holds; idempotent; finite at the origin
    np.testing.assert_allclose(out["pu"][before <= 0], out["u"][before <= 0], atol=1e-12)
    np.testing.assert_allclose(out["ppu"], out["pu"][:100], rtol=1e-9, atol=1e-9)
    assert np.all(np.isfinite(out["grad_at_0"]))


# ------------------------------------------------------------------------- LQR, simulation


def test_lqr_solves_the_riccati_equation():
    system = E.lorenz()
    Q, R = np.diag([5.0, 10.0, 5.0]), 0.1 * np.eye(3)
    gains = E.lqr(system, Q, R)
    A, B = (np.asarray(m) for m in jax.jit(system.linearization)())
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
    x0 = np.array([1.0, 2.0, 3.0])
    traj = jax.jit(
        lambda x0: E.simulate_etc(
            system, gains.controller, event, x0, None, 2.0, max_triggers=500, n_grid=200
        )
    )(x0)
    n = int(traj.n_triggers)
    times = np.asarray(traj.trigger_times[:n])
    assert 0 < n < 500 and np.all(np.diff(np.concatenate([[0.0], times])) > 0)
    assert bool(traj.ok) and not bool(traj.diverged)
    assert float(np.linalg.norm(traj.final_state)) < 1e-3
    assert not np.isnan(np.asarray(traj.states)).any()
    np.testing.assert_allclose(traj.states[0], x0, atol=1e-12)  # the grid starts at x0


LINEAR_CAP = 8


@functools.cache
def linear_simulator():
    """jit ``(x0 [1], k, horizon, escape_radius) -> ETCTrajectory`` of the linear loop above
    (``u = -k x(t_k)``, at most 8 triggers, 101 grid points): one program for every linear run."""
    system = linear_system(1.0)

    def sim(x0, k, horizon, radius):
        return E.simulate_etc(
            system,
            lambda p, x: -p * x,
            linear_event,
            x0,
            k,
            horizon,
            max_triggers=LINEAR_CAP,
            n_grid=101,
            escape_radius=radius,
        )

    return jax.jit(sim)


def linear_run(x0, k, horizon, radius=np.inf):
    out = linear_simulator()(np.array([x0]), np.float64(k), np.float64(horizon), np.float64(radius))
    return jax.tree_util.tree_map(np.asarray, out)


def test_inter_event_times_respect_the_theorem_3_2_bound():
    """x' = a x + u, u = -k x(t_k), h = c2 e^2 - c1 x^2: tau = log[(P+1)/(P + l_u/(1+l_u))]/l_f."""
    a, k, c1, c2 = 1.0, 3.0, 1.0, 4.0
    P, l_f, l_u = np.sqrt(c2 / c1), max(abs(a), 1.0), k
    tau = np.log((P + 1) / (P + l_u / (1 + l_u))) / l_f
    exact = linear_t1(k)  # every gap, by scale invariance
    for x0 in (1.0, -3.0, 0.2):
        traj = linear_run(x0, k, 1.0)
        n = int(traj.n_triggers)
        gaps = np.diff(np.concatenate([[0.0], traj.trigger_times[:n]]))
        assert 5 <= n < LINEAR_CAP and np.all(gaps >= tau)
        np.testing.assert_allclose(gaps, exact, rtol=1e-5)


def test_simulation_holds_the_control_after_the_trigger_cap():
    # k = 3 triggers every 0.154: 8 triggers by t = 1.23, then the 8th sample is held up to t = 2
    traj = linear_run(1.0, 3.0, 2.0)
    assert int(traj.n_triggers) == LINEAR_CAP and bool(traj.ok) and not bool(traj.diverged)
    assert not np.isnan(traj.states).any()  # covers [0, horizon] despite the cap
    # closed form on the whole grid: x(t) = x_i (3 - 2 e^{t - t_i}) from the last sample x_i at
    # t_i (t_0 = 0, x_0 = 1), also after the cap, where x crosses 0 (a triggered run stays > 0)
    t_i = np.concatenate([[0.0], traj.trigger_times])
    x_i = np.concatenate([[1.0], traj.trigger_states[:, 0]])
    grid = traj.grid
    last = np.searchsorted(t_i, grid, side="right") - 1
    want = x_i[last] * (3 - 2 * np.exp(grid - t_i[last]))
    np.testing.assert_allclose(traj.states[:, 0], want, atol=1e-6)
    np.testing.assert_allclose(x_i[1:], (2 / 3) ** np.arange(1, LINEAR_CAP + 1), rtol=1e-5)
    assert traj.states[-1, 0] < 0 and traj.final_state[0] == pytest.approx(want[-1], abs=1e-6)


def test_simulation_stops_when_the_state_escapes():
    # u = +x(t_k) (k = -1): x doubles between triggers, past the radius 10 at the 4th trigger
    traj = linear_run(1.0, -1.0, 5.0, 10.0)
    assert bool(traj.diverged) and bool(traj.ok)
    n = int(traj.n_triggers)
    t_stop = float(traj.trigger_times[n - 1])
    assert abs(traj.trigger_states[n - 1, 0]) > 10.0
    assert abs(traj.trigger_states[n - 2, 0]) <= 10.0
    assert not np.isnan(traj.states[traj.grid <= t_stop]).any()
    assert np.isnan(traj.states[traj.grid > t_stop]).all()
    assert not bool(linear_run(1.0, -1.0, 5.0).diverged)


def test_projected_controller_gives_exponential_decay():
    """Theorem 4.1 in closed loop: V = |x|^2 / 2 and u = -x violate L V + V <= 0 at x0; the
    projected controller with the PI event gives V(x(t)) <= V(x0) e^{-(1 - sigma) t}."""
    system = E.lorenz()
    lyap = lambda p, x: 0.5 * x @ x
    raw = lambda p, x: -p * x
    projected = E.project(raw, lyap, system)
    sigma = 0.5
    event = E.pi_event(system, projected, lyap, sigma)
    x0 = np.array([3.0, 4.0, 5.0])

    def run(x0):
        traj = E.simulate_etc(system, projected, event, x0, 1.0, 0.5, max_triggers=300, n_grid=100)
        lie = E.lie_derivative(system, raw, lyap)
        return traj, jax.vmap(lambda x: lyap(1.0, x))(traj.states), lie(1.0, x0) + lyap(1.0, x0)

    traj, values, raw_excess = jax.jit(run)(x0)
    assert float(raw_excess) > 0  # the projection is active at the start
    assert bool(traj.ok) and 0 < int(traj.n_triggers) < 300
    bound = 0.5 * x0 @ x0 * np.exp(-(1 - sigma) * np.asarray(traj.grid)) * (1 + 1e-6)
    assert np.all(np.asarray(values) <= bound)


def test_grn_target_is_an_equilibrium():
    system = E.grn()
    drift, actuator = jax.jit(lambda z: (system.drift(z), system.actuator(z)))(np.zeros(2))
    np.testing.assert_allclose(drift, 0.0, atol=1e-12)
    assert actuator.shape == (2, 1)


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

MC = ETCConfig(
    method="mc", n_samples=64, lyapunov_hidden=(8, 1), controller_hidden=(8, 8), alpha_hidden=(4, 4)
)  # fmt: skip  (the package example's learner)
# train_event_start: the official t0 / e0 quirk, so the FD check covers their gradients too
PI = ETCConfig(method="pi", n_samples=64, event_batch=2, event_weight=1.0,
               lyapunov_hidden=(8, 1), controller_hidden=(8, 8),
               train_event_start=True)  # fmt: skip
PI_SOLVER = E.ODESolverConfig(rtol=1e-10, atol=1e-10, root_tol=1e-12)  # finite differences
PI_WARMUP = 100


@functools.cache
def mc_setup():
    """The MC trainer with its jitted ``init`` and ``step`` (one compile per module)."""
    trainer = make_trainer(E.lorenz(), MC)
    return trainer, jax.jit(trainer.init), jax.jit(trainer.step)


@functools.cache
def pi_warm_state():
    """The PI trainer (full IFT event-time gradient) and its state after the warm-up steps."""
    trainer = make_trainer(E.lorenz(), PI, PI_SOLVER)
    step = jax.jit(trainer.step)
    state = jax.jit(trainer.init)(jax.random.key(1))
    for _ in range(PI_WARMUP):
        state, _ = step(state)
    return trainer, state


def test_mc_training_reduces_its_loss_and_keeps_alpha_class_k():
    trainer, init, step = mc_setup()
    starts = [init(jax.random.key(0)), init(jax.random.key(7))]
    # the hot step: new values of the same shapes do not compile it again
    (state, first), _ = assert_compiles_once(step, [(s,) for s in starts], name="MC step")
    losses = [float(first["loss"])]
    for _ in range(59):
        state, metrics = step(state)
        losses.append(float(metrics["loss"]))
    assert losses[-1] < 0.2 * losses[0]
    alpha = lambda r: trainer.model.alpha(state.params, r)
    at0, grid = jax.jit(
        lambda: (alpha(jnp.zeros(())), jax.vmap(alpha)(jnp.linspace(0.0, 10.0, 21)))
    )()
    assert float(at0) == 0.0
    assert np.all(np.diff(np.asarray(grid)) > 0)


def test_pi_event_step_gradient_matches_finite_differences():
    """The PI event step's loss gradient (stability + event loss with IFT trigger-time
    gradients) against central differences of its loss along a random direction.

    The gradient is read from Adam's first moment: from a zero optimiser state one step sets
    ``mu = (1 - b1) grad`` (optax.adam, b1 = 0.9). The three calls (params, params +- eps d) also
    show that the hot step does not retrace on new values.
    """
    trainer, warm = pi_warm_state()
    # float64 parameters (flax makes float32 ones): eps = 1e-6 shifts must not round away
    to64 = lambda a: a.astype(jnp.float64) if jnp.issubdtype(a.dtype, jnp.floating) else a
    warm = jax.tree_util.tree_map(to64, warm)
    state = warm.replace(opt_state=jax.tree_util.tree_map(jnp.zeros_like, warm.opt_state))
    leaves, treedef = jax.tree_util.tree_flatten(state.params)
    rng = np.random.default_rng(2)
    direction = [rng.normal(size=leaf.shape) for leaf in leaves]
    eps = 1e-6

    def shifted(s):
        moved = [(p + s * d).astype(p.dtype) for p, d in zip(leaves, direction, strict=True)]
        return state.replace(params=jax.tree_util.tree_unflatten(treedef, moved))

    outs = assert_traces_once(trainer.event_step, [(state,), (shifted(eps),), (shifted(-eps),)],
                              name="PI event step")  # fmt: skip
    (new, m), (_, plus), (_, minus) = outs
    # the step: one Adam step, finite moved parameters
    assert int(new.step) == PI_WARMUP + 1
    moved = [
        np.abs(np.asarray(a) - np.asarray(b)).max()
        for a, b in zip(jax.tree_util.tree_leaves(new.params), leaves, strict=True)
    ]
    assert np.all(np.isfinite(moved)) and max(moved) > 0
    # trigger times: `fired` counts starts (of M = 2); unfired starts contribute 1 / t_max
    fired = float(m["fired"]) * PI.event_batch
    assert fired == round(fired) and fired >= 1  # the IFT part of the gradient is exercised
    assert float(m["event"]) > 1 / PI.t_max
    assert float(m["loss"]) == pytest.approx(float(m["stab"]) + PI.event_weight * float(m["event"]))
    # the trained start: the warm-up leaves it at 0 (no gradient); dL/dt0 = -mean 1/t1^2 < 0, so
    # Adam's first step raises t0 by the learning rate, and e0 moves too
    start, new_start = warm.params["event_start"], new.params["event_start"]
    assert float(start["t0"]) == 0.0 and np.all(np.asarray(start["e0"]) == 0.0)
    assert float(new_start["t0"]) == pytest.approx(PI.learning_rate, rel=1e-6)
    assert np.any(np.asarray(new_start["e0"]) != 0.0)
    # the gradient, against central differences of the loss
    grad = [np.asarray(g) / (1 - 0.9) for g in jax.tree_util.tree_leaves(new.opt_state[0].mu)]
    along = sum(float(np.vdot(g, d)) for g, d in zip(grad, direction, strict=True))
    fd = (float(plus["loss"]) - float(minus["loss"])) / (2 * eps)
    fd_event = PI.event_weight * (float(plus["event"]) - float(minus["event"])) / (2 * eps)
    assert abs(fd_event) > 0.1 * abs(fd)  # the event loss is a sizeable part of the derivative
    assert along == pytest.approx(fd, rel=1e-4)


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
    ETCConfig(method="pi", n_samples=8, event_batch=9, event_replace=True)  # with replacement
    field = E.augmented_field(linear_system(1.0), lambda k, x: -k * x)
    with pytest.raises(ValueError, match="`e0` must have the shape"):
        E.first_trigger_time(field, linear_event, jnp.ones(1), 2.0, 1.0, e0=jnp.zeros(2))
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
    state = jax.jit(trainer.init)(jax.random.key(5))
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


def test_sharded_mc_loss_equals_unsharded(mesh):
    cfg = MC
    _, init, step = mc_setup()  # the MC training test's compiled step
    state = init(jax.random.key(4))
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

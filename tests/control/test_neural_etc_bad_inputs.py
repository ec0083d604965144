"""Bad input to jaxlab.control.neural_etc gets a clear error at the API boundary (issue 23).

One table of cases (entry point, argument, bad value, exception type, message fragment), run by
one parametrised test; every error is raised before anything compiles (trainer states are
``jax.eval_shape`` structures), so the file is fast. Then the training step's ``finite`` flag: a
step that became non-finite is flagged, never a silent loss.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.control import neural_etc as E
from jaxlab.control.neural_etc import ETCConfig, make_trainer, run_schedule

NAN = float("nan")
KEY = jax.random.key(0)
SYS = E.lorenz()
GAINS = E.lqr(SYS, np.eye(3), np.eye(3))
CTRL, LYAP = GAINS.controller, GAINS.lyapunov
EVENT = E.lqr_event(SYS, GAINS, 0.5)
FIELD = E.augmented_field(SYS, CTRL)
X0 = jnp.array([1.0, -1.0, 0.5])
MC = ETCConfig(method="mc", n_samples=8, lyapunov_hidden=(4, 1), controller_hidden=(4,),
               alpha_hidden=(2,))  # fmt: skip
TR = make_trainer(SYS, MC)
STATE = jax.eval_shape(TR.init, KEY)  # shapes only: nothing runs
OTHER_SIZE = STATE.replace(data=jax.ShapeDtypeStruct((5, 3), STATE.data.dtype))
OTHER_NET = jax.eval_shape(make_trainer(SYS, dataclasses.replace(MC, controller_hidden=(5,))).init,
                           KEY)  # fmt: skip
PI_TR = make_trainer(SYS, ETCConfig(method="pi", n_samples=8, event_batch=2,
                                    lyapunov_hidden=(4, 1), controller_hidden=(4,)))  # fmt: skip
PI_OTHER = jax.eval_shape(PI_TR.init, KEY)
PI_OTHER = PI_OTHER.replace(data=jax.ShapeDtypeStruct((4, 3), PI_OTHER.data.dtype))


def sim(**kw):
    args = dict(system=SYS, controller=CTRL, event=EVENT, x0=X0, params=None, horizon=1.0)
    return E.simulate_etc(**{**args, **kw})


def trigger(**kw):
    args = dict(field=FIELD, event=EVENT, x0=X0, params=None, t_max=1.0)
    return E.first_trigger_time(**{**args, **kw})


# (id, call, exception, message fragment)
CASES = [
    # ETCConfig
    ("cfg_method", lambda: ETCConfig(method="rl"), ValueError, "`method`"),
    ("cfg_n_samples_zero", lambda: ETCConfig(n_samples=0), ValueError, "`n_samples`"),
    ("cfg_n_samples_float", lambda: ETCConfig(n_samples=2.5), ValueError, "`n_samples`"),
    ("cfg_lr_negative", lambda: ETCConfig(learning_rate=-0.05), ValueError, "`learning_rate`"),
    ("cfg_lr_str", lambda: ETCConfig(learning_rate="0.05"), TypeError, "`learning_rate`"),
    ("cfg_event_weight_nan", lambda: ETCConfig(event_weight=NAN), ValueError, "`event_weight`"),
    ("cfg_sigma_above", lambda: ETCConfig(sigma=1.5), ValueError, "`sigma`"),
    ("cfg_sigma_zero", lambda: ETCConfig(sigma=0.0), ValueError, "`sigma`"),
    ("cfg_sigma_bool", lambda: ETCConfig(sigma=True), TypeError, "`sigma`"),
    ("cfg_steps_negative", lambda: ETCConfig(steps=-1), ValueError, "`steps`"),
    ("cfg_warmup_float", lambda: ETCConfig(warmup_steps=2.5), ValueError, "`warmup_steps`"),
    ("cfg_event_batch_zero", lambda: ETCConfig(event_batch=0), ValueError, "`event_batch`"),
    ("cfg_t_max_zero", lambda: ETCConfig(t_max=0.0), ValueError, "`t_max`"),
    ("cfg_t_max_inf", lambda: ETCConfig(t_max=float("inf")), ValueError, "`t_max`"),
    ("cfg_alpha_grid_max", lambda: ETCConfig(alpha_grid_max=-1.0), ValueError,
     "`alpha_grid_max`"),
    ("cfg_icnn_output", lambda: ETCConfig(lyapunov_hidden=(8, 2)), ValueError,
     "`lyapunov_hidden`"),
    ("cfg_hidden_list", lambda: ETCConfig(controller_hidden=[8, 8]), ValueError,
     "`controller_hidden`"),
    ("cfg_alpha_hidden_zero", lambda: ETCConfig(alpha_hidden=(0,)), ValueError, "`alpha_hidden`"),
    ("cfg_init", lambda: ETCConfig(controller_init="he"), ValueError, "`controller_init`"),
    ("cfg_resample_str", lambda: ETCConfig(resample="yes"), TypeError, "`resample`"),
    ("cfg_event_replace_int", lambda: ETCConfig(event_replace=1), TypeError, "`event_replace`"),
    # solver configs
    ("ode_rtol_zero", lambda: E.ODESolverConfig(rtol=0.0), ValueError, "`rtol`"),
    ("ode_atol_nan", lambda: E.ODESolverConfig(atol=NAN), ValueError, "`atol`"),
    ("ode_dt0_negative", lambda: E.ODESolverConfig(dt0=-1e-3), ValueError, "`dt0`"),
    ("ode_max_steps_zero", lambda: E.ODESolverConfig(max_steps=0), ValueError, "`max_steps`"),
    ("ode_max_steps_float", lambda: E.ODESolverConfig(max_steps=1.5), ValueError, "`max_steps`"),
    ("ode_root_tol_str", lambda: E.ODESolverConfig(root_tol="x"), TypeError, "`root_tol`"),
    ("fixed_dt_zero", lambda: E.FixedStepTrigger(dt=0.0), ValueError, "`dt`"),
    ("fixed_max_steps", lambda: E.FixedStepTrigger(max_steps=-1), ValueError, "`max_steps`"),
    ("fixed_rule", lambda: E.FixedStepTrigger(rule="rk45"), ValueError, "`rule`"),
    # systems
    ("lorenz_nan", lambda: E.lorenz(sigma=NAN), ValueError, "`sigma`"),
    ("lorenz_str", lambda: E.lorenz(rho="28"), TypeError, "`rho`"),
    ("grn_s_zero", lambda: E.grn(s=0.0), ValueError, "`s`"),
    ("grn_n_float", lambda: E.grn(n=2.5), ValueError, "`n`"),
    ("grn_scale", lambda: E.grn(scale=-1.0), ValueError, "`scale`"),
    ("grn_k_negative", lambda: E.grn(k=-1.0), ValueError, "`k`"),
    ("closed_loop_system", lambda: E.closed_loop("sys", CTRL), TypeError, "`system`"),
    ("closed_loop_controller", lambda: E.closed_loop(SYS, None), TypeError, "`controller`"),
    ("system_state_dim", lambda: E.closed_loop(SYS._replace(state_dim=0), CTRL), ValueError,
     "`system.state_dim`"),
    ("system_domain", lambda: E.closed_loop(SYS._replace(domain=-1.0), CTRL), ValueError,
     "`system.domain`"),
    # models
    ("smooth_relu_d", lambda: E.smooth_relu(1.0, 0.0), ValueError, "`d`"),
    ("smooth_relu_str", lambda: E.smooth_relu("a"), TypeError, "`z`"),
    ("cc_zero", lambda: E.clenshaw_curtis(0), ValueError, "`n`"),
    ("cc_float", lambda: E.clenshaw_curtis(2.5), ValueError, "`n`"),
    ("spectral_norm_rank", lambda: E.spectral_norm(jnp.zeros(3)), ValueError, "`kernel`"),
    ("spectral_norm_nan", lambda: E.spectral_norm(jnp.full((2, 2), NAN)), ValueError, "`kernel`"),
    ("with_norms_dict", lambda: E.with_spectral_norms({"a": 1}), TypeError, "`variables`"),
    ("icnn_output", lambda: E.ICNNLyapunov((4, 2)).init(KEY, X0), ValueError, "`hidden`"),
    ("controller_dim", lambda: E.Controller(0).init(KEY, X0), ValueError, "`control_dim`"),
    ("controller_hidden", lambda: E.Controller(3, ()).init(KEY, X0), ValueError, "`hidden`"),
    ("controller_x_scalar", lambda: E.Controller(3, (2,)).init(KEY, jnp.zeros(())), ValueError,
     "`x`"),
    ("dense_features", lambda: E.SpectralDense(0).init(KEY, X0), ValueError, "`features`"),
    ("class_k_hidden", lambda: E.ClassK((0,)).init(KEY, jnp.zeros(())), ValueError, "`hidden`"),
    ("class_k_r_rank", lambda: E.ClassK().init(KEY, jnp.zeros(3)), ValueError, "`r`"),
    # projection / events
    ("lie_controller", lambda: E.lie_derivative(SYS, "u", LYAP), TypeError, "`controller`"),
    ("project_system", lambda: E.project(CTRL, LYAP, "sys"), TypeError, "`system`"),
    ("field_controller", lambda: E.augmented_field(SYS, 3), TypeError, "`controller`"),
    ("pi_event_sigma", lambda: E.pi_event(SYS, CTRL, LYAP, 1.5), ValueError, "`sigma`"),
    ("pi_event_sigma_nan", lambda: E.pi_event(SYS, CTRL, LYAP, NAN), ValueError, "`sigma`"),
    ("mc_event_alpha", lambda: E.mc_event(SYS, CTRL, LYAP, None, 0.5), TypeError, "`alpha`"),
    ("trigger_x0_nan", lambda: trigger(x0=jnp.array([NAN, 0.0, 0.0])), ValueError, "`x0`"),
    ("trigger_x0_rank", lambda: trigger(x0=jnp.zeros((2, 3))), ValueError, "`x0`"),
    ("trigger_x0_str", lambda: trigger(x0="abc"), TypeError, "`x0`"),
    ("trigger_t_max", lambda: trigger(t_max=-1.0), ValueError, "`t_max`"),
    ("trigger_x0_size", lambda: trigger(x0=jnp.ones(2)), ValueError, r"`x0` \(size 2\) and"),
    ("trigger_solver", lambda: trigger(solver_cfg="tsit5"), TypeError, "`solver_cfg`"),
    ("trigger_e0_shape", lambda: trigger(e0=jnp.zeros(2)), ValueError, "`e0`"),
    ("trigger_e0_nan", lambda: trigger(e0=jnp.full(3, NAN)), ValueError, "`e0`"),
    ("trigger_sgo_str", lambda: trigger(state_gradient_only="no"), TypeError,
     "`state_gradient_only`"),
    ("trigger_field", lambda: trigger(field="f"), TypeError, "`field`"),
    ("sim_horizon_zero", lambda: sim(horizon=0.0), ValueError, "`horizon`"),
    ("sim_horizon_nan", lambda: sim(horizon=NAN), ValueError, "`horizon`"),
    ("sim_max_triggers_zero", lambda: sim(max_triggers=0), ValueError, "`max_triggers`"),
    ("sim_max_triggers_float", lambda: sim(max_triggers=2.5), ValueError, "`max_triggers`"),
    ("sim_n_grid", lambda: sim(n_grid=1), ValueError, "`n_grid`"),
    ("sim_solver", lambda: sim(solver_cfg=E.FixedStepTrigger()), TypeError, "`solver_cfg`"),
    ("sim_nudge", lambda: sim(nudge=-1.0), ValueError, "`nudge`"),
    ("sim_escape_radius", lambda: sim(escape_radius=0.0), ValueError, "`escape_radius`"),
    ("sim_x0_shape", lambda: sim(x0=jnp.zeros(2)), ValueError, "`x0`"),
    ("sim_x0_str", lambda: sim(x0=["a", "b", "c"]), TypeError, "`x0`"),
    ("sim_x0_bool", lambda: sim(x0=jnp.ones(3, bool)), TypeError, "`x0`"),
    # LQR
    ("lqr_r_negative", lambda: E.lqr(SYS, np.eye(3), -np.eye(3)), ValueError, "`R`"),
    ("lqr_r_singular", lambda: E.lqr(SYS, np.eye(3), np.zeros((3, 3))), ValueError, "`R`"),
    ("lqr_q_nan", lambda: E.lqr(SYS, np.full((3, 3), NAN), np.eye(3)), ValueError, "`Q`"),
    ("lqr_q_asymmetric", lambda: E.lqr(SYS, np.eye(3) + np.eye(3, k=1), np.eye(3)), ValueError,
     "`Q`"),
    ("lqr_q_negative", lambda: E.lqr(SYS, -np.eye(3), np.eye(3)), ValueError, "`Q`"),
    ("lqr_system", lambda: E.lqr("sys", np.eye(3), np.eye(3)), TypeError, "`system`"),
    ("lqr_event_gains", lambda: E.lqr_event(SYS, "gains", 0.5), TypeError, "`gains`"),
    ("lqr_event_other_system", lambda: E.lqr_event(E.grn(), GAINS, 0.5), ValueError, "`gains`"),
    ("lqr_event_sigma", lambda: E.lqr_event(SYS, GAINS, 1.0), ValueError, "`sigma`"),
    # trainer
    ("model_system", lambda: E.make_model("sys", MC), TypeError, "`system`"),
    ("model_cfg", lambda: E.make_model(SYS, {"method": "mc"}), TypeError, "`cfg`"),
    ("trainer_solver", lambda: make_trainer(SYS, MC, solver_config="x"), TypeError,
     "`solver_config`"),
    ("trainer_mesh", lambda: make_trainer(SYS, MC, mesh="m"), TypeError, "`mesh`"),
    ("trainer_config", lambda: make_trainer(SYS, None), TypeError, "`config`"),
    ("init_key_int", lambda: TR.init(0), ValueError, "`key`"),
    ("init_key_u32x3", lambda: TR.init(jnp.zeros(3, jnp.uint32)), ValueError, "`key`"),
    ("init_key_float", lambda: TR.init(jnp.zeros(2)), ValueError, "`key`"),
    ("model_init_key", lambda: TR.model.init(0), ValueError, "`key`"),
    ("step_x", lambda: TR.step(STATE, jnp.zeros(3)), ValueError, "`x`"),
    ("step_state_str", lambda: TR.step("state"), TypeError, "`state`"),
    ("step_other_size", lambda: TR.step(OTHER_SIZE), ValueError, "`state.data`"),
    ("step_other_net", lambda: TR.step(OTHER_NET), ValueError, "`state.params"),
    ("event_step_other_size", lambda: PI_TR.event_step(PI_OTHER), ValueError, "`state.data`"),
    ("schedule_trainer", lambda: run_schedule("trainer", STATE), TypeError, "`trainer`"),
    ("schedule_state", lambda: run_schedule(TR, "state"), TypeError, "`state`"),
    ("schedule_chunks", lambda: run_schedule(TR, STATE, chunks=0), ValueError, "`chunks`"),
    ("schedule_vmap", lambda: run_schedule(TR, STATE, vmap="yes"), TypeError, "`vmap`"),
    ("schedule_on_chunk", lambda: run_schedule(TR, STATE, on_chunk=3), TypeError, "`on_chunk`"),
]  # fmt: skip


@pytest.mark.parametrize(("call", "exc", "fragment"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_bad_input_raises_a_clear_error(call, exc, fragment):
    with pytest.raises(exc, match=fragment):
        call()


def test_case_table_is_large_and_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 80


def test_valid_inputs_pass_the_checks():
    """What should pass does: legacy keys, integer Hill exponents, the default solvers."""
    assert jax.eval_shape(TR.init, jax.random.PRNGKey(0)).data.shape == (8, 3)
    E.ODESolverConfig()
    E.grn(n=np.int64(3))
    E.lqr(SYS, np.diag([5.0, 10.0, 5.0]), 0.1 * np.eye(3))


def test_non_finite_step_is_flagged():
    """A training step whose loss or new parameters are non-finite says so (``finite``)."""
    nlc = make_trainer(SYS, ETCConfig(method="nlc", n_samples=4, controller_hidden=(2,)))
    step = jax.jit(nlc.step)
    state = jax.jit(nlc.init)(KEY)
    _, good = step(state)
    poisoned = jax.tree_util.tree_map(lambda p: jnp.full_like(p, NAN), state.params)
    _, bad = step(state.replace(params=poisoned))
    assert bool(good["finite"]) and np.isfinite(float(good["loss"]))
    assert not bool(bad["finite"])

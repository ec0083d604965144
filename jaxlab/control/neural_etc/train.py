"""Training Neural ETC (Monte Carlo and path integral) and the NLC baseline as init/step pairs.

Losses over ``N`` states ``x_i`` sampled uniformly from the box ``D = [-r, r]^n``:

- PI stabilisation: ``L_stab = mean_i [L_{f_u} V(x_i) + V(x_i)]_+``;
- MC stabilisation: ``L~_stab = mean_i [L_{f_u} V(x_i) + alpha(||x_i||)]_+``;
- PI event loss: ``L_event = mean_{i <= M} 1 / t1(x_i)`` with differentiable first-trigger times
  of ``M`` states per step (:func:`~jaxlab.control.neural_etc.events.first_trigger_time`);
- MC inverse-Lipschitz loss: ``L_{alpha^-1} = mean_{r in grid} 1 / q(r)`` on 1000 points of
  ``[0, alpha_grid_max]``;
- NLC (Chang et al. 2019), their published Lyapunov risk
  ``mean [-V]_+ + 1.5 mean [L V + 0.5]_+ + 2.2 V(0)^2`` with tanh MLPs, data from
  ``[-r/2, r/2]^n``. (The spec's margin-free ``mean [L V]_+ + mean [-V]_+ + [V(0)]_+`` is
  minimised by ``V = 0``, which leaves the controller untrained; the 0.5 margin prevents that.)

Training states: the official code draws ``N`` states once and reuses them every step (the
default here). With ``resample=True`` a fresh uniform sample is drawn each step: the same loss
in expectation, but regions between fixed samples are no longer left untrained. On Lorenz with
the fixed sample, MC controllers kept spurious closed-loop equilibria (``f(x) + u(x) = 0`` away
from 0, where no ``V`` can decrease) in 4 of 6 seeds; resampled, all 6 converged.

Totals: PI ``L_stab`` for ``warmup_steps`` then ``L_stab + lambda L_event`` for ``event_steps``;
MC ``L~_stab + lambda L_{alpha^-1}`` for ``steps``; Adam throughout. Lie derivatives are one
``jax.jvp`` per state. Run in float64 (``jax.enable_x64``) as the official code does.

:func:`make_trainer` builds the pure steps; :func:`run_schedule` runs a method's whole schedule
(:attr:`Trainer.phases`: ``steps`` steps for MC / NLC; ``warmup_steps`` warm-up steps, then
``event_steps`` event steps for PI) as jitted chunks with optional checkpoints.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.sharding import Mesh

from jaxlab.control.neural_etc import _checks
from jaxlab.control.neural_etc.events import (
    TRAINING_SOLVER,
    FixedStepTrigger,
    ODESolverConfig,
    augmented_field,
    check_sigma,
    first_trigger_time,
    mc_event,
    pi_event,
)
from jaxlab.control.neural_etc.models import (
    ClassK,
    Controller,
    ICNNLyapunov,
    with_spectral_norms,
)
from jaxlab.control.neural_etc.projection import lie_derivative, project
from jaxlab.control.neural_etc.systems import ControlSystem
from jaxlab.core import sharding
from jaxlab.core.checkpoint import Checkpointer
from jaxlab.core.checks import check_choice, check_int, check_key, check_scalar
from jaxlab.core.nn import INIT_SCHEMES, MLP
from jaxlab.core.training import ChunkCallback, all_finite, run_chunked

__all__ = [
    "METHODS",
    "OFFICIAL_PI",
    "OFFICIAL_PI_TRIGGER",
    "ETCConfig",
    "ETCModel",
    "ETCState",
    "Phase",
    "Trainer",
    "make_model",
    "make_trainer",
    "run_schedule",
]

Method = Literal["mc", "pi", "nlc"]
METHODS = ("mc", "pi", "nlc")


def _check_widths(widths, name: str) -> tuple[int, ...]:
    if not isinstance(widths, tuple):
        raise ValueError(f"`{name}` must be a non-empty tuple of positive ints, got {widths!r}.")
    return _checks.check_widths(widths, name)


@dataclasses.dataclass(frozen=True)
class ETCConfig:
    """Hyperparameters (defaults: the official Lorenz settings for the chosen method).

    Attributes:
      method: ``"mc"``, ``"pi"`` or ``"nlc"``.
      n_samples: training states ``N`` (MC 5000, PI 2000, NLC 5000).
      learning_rate: Adam step size (0.05).
      event_weight: ``lambda_2`` (MC 0.1, PI 0.05).
      sigma: event-function parameter, in ``(0, 1)`` (0.5).
      steps: Adam steps of the MC / NLC schedule (:func:`run_schedule`; PI ignores it).
      warmup_steps: PI's stability-only steps before the event loss is switched on (MC / NLC
        ignore it).
      event_steps: PI's steps with the event loss, after the warm-up (MC / NLC ignore it).
      event_batch: ``M`` first-trigger solves per PI event step (10).
      event_replace: draw the ``M`` start states from the ``N`` training states with
        replacement, fresh each step (the official ``np.random.choice(N, M)``); default without.
      t_max: cap for first-trigger solves (no trigger -> ``t_max``; masked gradient with the
        adaptive solver, the IFT gradient at the cap with ``FixedStepTrigger``).
      lyapunov_hidden: widths of the ICNN (MC / PI; the last one is its output, 1).
      controller_hidden: hidden widths of the controller (MC / PI), and of both tanh MLPs (NLC).
      controller_init: the controller layers' init (MC / PI): ``"lecun"`` (LeCun-normal kernels,
        zero biases) or ``"torch"`` (PyTorch's default Linear init: the official code).
      alpha_hidden: hidden widths of the class-K function's slope network (MC).
      alpha_grid_max: upper end of the ``1/q`` grid (10 for Lorenz).
      resample: draw a fresh set of ``n_samples`` training states every step instead of
        fixing them at ``init`` (the official code fixes them; see the module docstring).
      state_gradient_only: PI event-time gradient as the official code computes it (see
        :func:`~jaxlab.control.neural_etc.events.first_trigger_time`); default the full IFT one.
      train_event_start: PI, the official code as it runs on CPU: its start time ``t0`` and
        initial sampling error ``e0`` of the first-trigger solves are ``nn.Parameter`` s that
        Adam trains with the networks (``params["event_start"] = {"t0": [], "e0": [n]}``, both 0
        at init; the event loss is ``mean 1 / (t0 + t1)`` with ``t1`` solved from
        ``(x0, e0)``). Since ``dL/dt0 < 0``, Adam raises ``t0`` by about the learning rate per
        event step, which fades the event loss's gradient. Off by default (a quirk, not the
        method); evaluation always starts from ``t = 0``, ``e = 0``.
    """

    method: Method = "mc"
    n_samples: int = 5000
    learning_rate: float = 0.05
    event_weight: float = 0.1
    sigma: float = 0.5
    steps: int = 600
    warmup_steps: int = 500
    event_steps: int = 100
    event_batch: int = 10
    event_replace: bool = False
    t_max: float = 5.0
    lyapunov_hidden: tuple[int, ...] = (64, 1)
    controller_hidden: tuple[int, ...] = (64, 64)
    controller_init: str = "lecun"
    alpha_hidden: tuple[int, ...] = (10, 10)
    alpha_grid_max: float = 10.0
    resample: bool = False
    state_gradient_only: bool = False
    train_event_start: bool = False

    def __post_init__(self):
        check_choice(self.method, "method", METHODS)
        check_choice(self.controller_init, "controller_init", INIT_SCHEMES)
        check_int(self.n_samples, "n_samples", minimum=1)
        check_scalar(self.learning_rate, "learning_rate", 0.0, low_open=True)
        check_scalar(self.event_weight, "event_weight", 0.0)
        check_sigma(self.sigma)
        for name in ("event_replace", "resample", "state_gradient_only", "train_event_start"):
            _checks.check_bool(getattr(self, name), name)
        for name in ("steps", "warmup_steps", "event_steps"):
            check_int(getattr(self, name), name, minimum=0)
        # PI draws its event starts from the training states, without replacement by default
        cap = self.n_samples if self.method == "pi" and not self.event_replace else None
        check_int(self.event_batch, "event_batch", minimum=1, maximum=cap)
        check_scalar(self.t_max, "t_max", 0.0, low_open=True)
        check_scalar(self.alpha_grid_max, "alpha_grid_max", 0.0, low_open=True)
        for name in ("lyapunov_hidden", "controller_hidden", "alpha_hidden"):
            _check_widths(getattr(self, name), name)
        if self.method != "nlc" and self.lyapunov_hidden[-1] != 1:
            raise ValueError(
                f"`lyapunov_hidden` must end in the ICNN's output width 1, got "
                f"{self.lyapunov_hidden!r}."
            )


OFFICIAL_PI = ETCConfig(
    method="pi",
    n_samples=2000,
    learning_rate=0.05,
    event_weight=0.05,
    sigma=0.5,
    warmup_steps=501,
    event_steps=99,
    event_batch=10,
    event_replace=True,
    controller_init="torch",
    resample=False,
    state_gradient_only=True,
)
"""The official ``lorenz/NETC-PI.py`` training of PI; train it with :data:`OFFICIAL_PI_TRIGGER`.

2000 training states drawn once and used full-batch; Adam 0.05; 501 stability-only steps
(``i = 0 .. 500``) then 99 steps adding ``0.05 mean(1 / t1)`` over 10 start states drawn with
replacement each step; the event-time gradient without the event function's own parameters;
PyTorch's default init for the controller (the ICNN's Xavier-normal init is the only one here).
The official ``t0`` and initial sampling error are ``nn.Parameter`` s that Adam moves during
the event phase (an artefact of ``.to('cpu')``; not saved, 0 at evaluation): off here,
``train_event_start=True`` adds them. Not modelled: the spectral norm's one power iteration per
forward call from persistent vectors (measured on our warm-up: 50% below the exact norm at step
1, within 1% after 20 steps, so the exact SVD here), and the adjoint gradient on the same RK4
grid where ours differentiates the RK4 steps (the two agree to the solver's accuracy).
"""

OFFICIAL_PI_TRIGGER = FixedStepTrigger(dt=1e-3, max_steps=300, rule="3/8")
"""The official first-trigger solver for :data:`OFFICIAL_PI` (``make_trainer(solver_config=)``)."""


class ETCModel(NamedTuple):
    """The networks as ``fn(params, x)`` plus their initialiser.

    ``params`` is ``{"controller": ..., "lyapunov": ..., "alpha": ...}`` (``alpha`` for MC only;
    ``alpha_slope`` is its derivative ``q``). ``event`` is the method's event function.

    Attributes:
      init: ``init(key) -> params``.
      controller: ``u(params, x [n]) -> [m]``, ``u(0) = 0``.
      lyapunov: ``V(params, x [n]) -> []``.
      alpha: ``alpha(params, r []) -> []`` (MC), else ``None``.
      alpha_slope: ``q(params, r []) -> []``, ``alpha' = q > 0`` (MC), else ``None``.
      event: ``h(y [2n], params) -> []`` on ``y = (x, e)``.
      prepare: ``prepare(params) -> params`` with the controller's spectral norms computed once
        (:func:`~jaxlab.control.neural_etc.models.with_spectral_norms`; NLC: the identity). Every
        function above gives the same values on both; pass prepared parameters to ODE solves,
        where the controller is evaluated many times (4x faster PI event steps on Lorenz).
    """

    init: Callable[[jax.Array], dict]
    controller: Callable
    lyapunov: Callable
    alpha: Callable | None
    alpha_slope: Callable | None
    event: Callable
    prepare: Callable[[dict], dict]


def make_model(system: ControlSystem, cfg: ETCConfig) -> ETCModel:
    """Networks for ``cfg.method`` on ``system`` (NLC: tanh MLPs; MC/PI: ICNN + spectral MLP)."""
    _checks.check_system(system)
    _checks.check_instance(cfg, "cfg", ETCConfig)
    n, m = system.state_dim, system.control_dim
    if cfg.method == "nlc":
        v_net = MLP((*cfg.controller_hidden, 1), activation="tanh")
        u_net = MLP((*cfg.controller_hidden, m), activation="tanh")

        def controller(p, x):
            out = u_net.apply(p["controller"], x)
            return x * out if m == n else out - u_net.apply(p["controller"], jnp.zeros_like(x))

        def lyapunov(p, x):
            return v_net.apply(p["lyapunov"], x)[0]
    else:
        v_net = ICNNLyapunov(cfg.lyapunov_hidden)
        u_net = Controller(m, cfg.controller_hidden, cfg.controller_init)
        controller = lambda p, x: u_net.apply(p["controller"], x)
        lyapunov = lambda p, x: v_net.apply(p["lyapunov"], x)
    a_net = ClassK(cfg.alpha_hidden) if cfg.method == "mc" else None
    alpha = alpha_slope = None
    if a_net is not None:
        alpha = lambda p, r: a_net.apply(p["alpha"], r)
        alpha_slope = lambda p, r: a_net.apply(p["alpha"], r, method=ClassK.slope)

    def init(key):
        key = check_key(key)
        kv, ku, ka = jax.random.split(key, 3)
        x = jnp.zeros(n)
        params = {"controller": u_net.init(ku, x), "lyapunov": v_net.init(kv, x)}
        if a_net is not None:
            params["alpha"] = a_net.init(ka, jnp.zeros(()))
        return params

    lie = lie_derivative(system, controller, lyapunov)
    if cfg.method == "mc":
        event = mc_event(system, controller, lyapunov, alpha, cfg.sigma)
    elif cfg.method == "pi":
        event = pi_event(system, controller, lyapunov, cfg.sigma)
    else:  # NLC's standard rule: trigger when V' loses a fraction sigma of its continuous value

        def event(y, p):
            x, e = y[:n], y[n:]
            grad_v = jax.grad(lyapunov, argnums=1)(p, x)
            return grad_v @ system.field(x, controller(p, x + e)) - (1.0 - cfg.sigma) * lie(p, x)

    def prepare(params):
        if cfg.method == "nlc":
            return params
        return {**params, "controller": with_spectral_norms(params["controller"])}

    return ETCModel(init, controller, lyapunov, alpha, alpha_slope, event, prepare)


@struct.dataclass
class ETCState:
    """Training state of one learner (a pytree; ``N = n_samples``, ``n = state_dim``).

    Attributes:
      params: ``{"controller", "lyapunov"[, "alpha"]}`` network parameters (:class:`ETCModel`).
      opt_state: Adam's state for ``params``.
      data: ``[N, n]`` the training states drawn at ``init`` (with ``resample`` the loss uses a
        fresh draw of the same shape each step); PI's event steps draw their ``event_batch``
        start states from these rows.
      key: ``[]`` typed PRNG key; step ``t`` draws ``fold_in(key, t)`` (PI's event starts) and
        ``fold_in(fold_in(key, 1), t)`` (resampled training states).
      step: ``[]`` int32, Adam steps taken (across both PI phases).
    """

    params: dict
    opt_state: optax.OptState
    data: jax.Array
    key: jax.Array
    step: jax.Array


Step = Callable[[ETCState, object], tuple[ETCState, dict]]


class Phase(NamedTuple):
    """One stage of a training schedule: ``n_steps`` applications of ``step``."""

    name: str
    step: Step
    n_steps: int


class Trainer(NamedTuple):
    """The pure functions of one learner (see :func:`make_trainer`).

    Attributes:
      init: ``init(key) -> ETCState``.
      step: ``step(state, x=None) -> (state, metrics)``: the MC / NLC step or the PI warm-up
        step (stability loss only). Metrics: ``loss``, ``stab`` (and ``alpha_inv`` for MC), and
        ``finite`` (``[]`` bool: the loss and the new parameters are free of NaN / inf; a run's
        losses and controllers are valid only where it is ``True``). ``x`` must be ``None``; a
        ``state`` built for another config or system is refused (shapes checked when traced).
      event_step: the PI step with the event loss (``None`` for MC / NLC). Metrics: ``loss``,
        ``stab``, ``event`` (mean ``1 / t1``), ``fired`` (fraction of starts that triggered),
        ``finite``.
      model: the networks (:class:`ETCModel`).
      projected_controller: ``u_hat(params, x)``, the controller through the projection.
      config: the :class:`ETCConfig`.
      phases: the schedule :func:`run_schedule` runs: ``(Phase("train", step, steps),)`` for MC /
        NLC, ``(Phase("warmup", step, warmup_steps), Phase("event", event_step, event_steps))``
        for PI.
    """

    init: Callable[[jax.Array], ETCState]
    step: Step
    event_step: Step | None
    model: ETCModel
    projected_controller: Callable
    config: ETCConfig
    phases: tuple[Phase, ...]


def make_trainer(
    system: ControlSystem,
    config: ETCConfig,
    solver_config: ODESolverConfig | FixedStepTrigger | None = None,
    mesh: Mesh | None = None,
) -> Trainer:
    """The pure ``init`` / ``step`` functions of ``config.method`` on ``system``.

    Args:
      system: the control-affine system (its ``domain`` is the training box).
      config: the learner's hyperparameters.
      solver_config: PI's first-trigger solver: diffrax settings (default
        :data:`~jaxlab.control.neural_etc.events.TRAINING_SOLVER`: adaptive Tsit5, exact root)
        or :class:`~jaxlab.control.neural_etc.events.FixedStepTrigger` (the official code's
        fixed-step RK4 with the midpoint event time and the step cap).
      mesh: optional 1-D ``"data"`` mesh (:func:`jaxlab.core.sharding.data_mesh`): the
        ``n_samples`` training states are sharded across it (``n_samples`` a multiple of the
        device count); ``None`` runs on one device with the same code.

    Returns:
      A :class:`Trainer`; ``step`` is the MC / NLC step or the PI warm-up step, ``event_step``
      the PI step with the event loss (``None`` otherwise).
    """
    _checks.check_system(system)
    cfg = _checks.check_instance(config, "config", ETCConfig)
    if solver_config is not None:
        _checks.check_instance(solver_config, "solver_config", (ODESolverConfig, FixedStepTrigger))
    if mesh is not None:
        _checks.check_instance(mesh, "mesh", Mesh)
        sharding.check_divisible(cfg.n_samples, mesh, "n_samples")
    model = make_model(system, cfg)
    solver_cfg = TRAINING_SOLVER if solver_config is None else solver_config
    lie = lie_derivative(system, model.controller, model.lyapunov)
    optimizer = optax.adam(cfg.learning_rate)
    box = system.domain / 2 if cfg.method == "nlc" else system.domain
    field = augmented_field(system, model.controller)

    def init(key) -> ETCState:
        key = check_key(key)
        k_params, k_data, k_run = jax.random.split(key, 3)
        params = model.init(k_params)
        if cfg.method == "pi" and cfg.train_event_start:
            dtype = jnp.result_type(float)
            params["event_start"] = {"t0": jnp.zeros((), dtype),
                                     "e0": jnp.zeros(system.state_dim, dtype)}  # fmt: skip
        shape = (cfg.n_samples, system.state_dim)
        data = jax.random.uniform(k_data, shape, jnp.result_type(float), -box, box)
        data = sharding.constrain_batch(data, mesh)
        return ETCState(params, optimizer.init(params), data, k_run, jnp.zeros((), jnp.int32))

    def stability(params, data):
        lv = jax.vmap(lambda x: lie(params, x))(data)
        if cfg.method == "pi":
            return jnp.mean(jax.nn.relu(lv + jax.vmap(lambda x: model.lyapunov(params, x))(data)))
        if cfg.method == "mc":
            norms = jnp.sqrt(jnp.sum(data * data, axis=1))
            return jnp.mean(jax.nn.relu(lv + jax.vmap(lambda r: model.alpha(params, r))(norms)))
        v = jax.vmap(lambda x: model.lyapunov(params, x))(data)
        v0 = model.lyapunov(params, jnp.zeros_like(data[0]))
        return jnp.mean(jax.nn.relu(-v)) + 1.5 * jnp.mean(jax.nn.relu(lv + 0.5)) + 2.2 * v0**2

    def alpha_inverse_loss(params):
        grid = jnp.linspace(0.0, cfg.alpha_grid_max, 1000, dtype=jnp.result_type(float))
        return jnp.mean(1.0 / jax.vmap(lambda r: model.alpha_slope(params, r))(grid))

    @functools.cache
    def template():
        return jax.eval_shape(init, jax.random.key(0))

    def check_state(state, x):
        if x is not None:
            raise ValueError(
                f"Trainer.step: `x` must be None (training states come from `state`), got "
                f"{type(x).__name__}."
            )
        _checks.check_instance(state, "state", ETCState)
        want = template()
        if tuple(state.data.shape) != tuple(want.data.shape):
            raise ValueError(
                f"`state.data` must have shape {want.data.shape} ([n_samples, state_dim]), got "
                f"{state.data.shape}: was the state built for another config or system?"
            )
        _checks.check_same_tree(state.params, "state.params", want.params, "this trainer's init")

    def adam_step(state, loss_fn):
        (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        new = state.replace(params=params, opt_state=opt_state, step=state.step + 1)
        return new, {"loss": loss, **aux, "finite": all_finite(loss, params)}

    def batch(state: ETCState) -> jax.Array:
        if not cfg.resample:
            return sharding.constrain_batch(state.data, mesh)
        key = jax.random.fold_in(jax.random.fold_in(state.key, 1), state.step)
        data = jax.random.uniform(key, state.data.shape, state.data.dtype, -box, box)
        return sharding.constrain_batch(data, mesh)

    def step(state: ETCState, x=None):
        check_state(state, x)
        data = batch(state)

        def loss_fn(raw):
            params = model.prepare(raw)  # one SVD per layer, not one per controller call
            stab = stability(params, data)
            if cfg.method == "mc":
                extra = alpha_inverse_loss(params)
                return stab + cfg.event_weight * extra, {"stab": stab, "alpha_inv": extra}
            return stab, {"stab": stab}

        return adam_step(state, loss_fn)

    def event_step(state: ETCState, x=None):
        check_state(state, x)
        key = jax.random.fold_in(state.key, state.step)
        idx = jax.random.choice(key, cfg.n_samples, (cfg.event_batch,), replace=cfg.event_replace)
        starts = state.data[idx]
        data = batch(state)

        def loss_fn(raw):
            params = model.prepare(raw)  # one SVD per layer, not one per controller call
            stab = stability(params, data)
            start = params.get("event_start", {"t0": 0.0, "e0": None})
            t1, fired = jax.vmap(
                lambda x0: first_trigger_time(
                    field, model.event, x0, params, cfg.t_max, solver_cfg,
                    cfg.state_gradient_only, e0=start["e0"],
                )
            )(starts)  # fmt: skip
            event_loss = jnp.mean(1.0 / (start["t0"] + t1))
            total = stab + cfg.event_weight * event_loss
            return total, {"stab": stab, "event": event_loss, "fired": jnp.mean(fired)}

        return adam_step(state, loss_fn)

    projected = project(model.controller, model.lyapunov, system)
    if cfg.method == "pi":
        phases = (Phase("warmup", step, cfg.warmup_steps), Phase("event", event_step,
                                                                 cfg.event_steps))  # fmt: skip
    else:
        phases = (Phase("train", step, cfg.steps),)
    return Trainer(
        init, step, event_step if cfg.method == "pi" else None, model, projected, cfg, phases
    )


def run_schedule(
    trainer: Trainer,
    state: ETCState,
    *,
    chunks: int = 4,
    checkpointer: Callable[[str], Checkpointer | None] | None = None,
    on_chunk: ChunkCallback | None = None,
    vmap: bool = False,
) -> tuple[ETCState, dict[str, dict]]:
    """Run the learner's whole schedule (:attr:`Trainer.phases`) from ``state``.

    MC / NLC: ``config.steps`` steps of ``step``. PI: ``config.warmup_steps`` warm-up steps
    (stability loss only), then ``config.event_steps`` steps of ``event_step`` (with the event
    loss). Each phase runs in jitted chunks of ``max(1, n_steps // chunks)`` steps
    (:func:`jaxlab.core.training.run_chunked`; the chunking does not change the result); a phase
    of 0 steps is skipped.

    Args:
      trainer: from :func:`make_trainer`.
      state: the initial state (``trainer.init(key)``).
      chunks: about how many chunks (host syncs) per phase.
      checkpointer: ``checkpointer(phase_name) -> Checkpointer | None``: periodic checkpoints and
        resume of each phase (``run_chunked``'s ``checkpointer``).
      on_chunk: ``run_chunked``'s host callback, called after every chunk of every phase.
      vmap: ``state`` holds independent runs along a leading axis (``jax.vmap(trainer.init)``
        of ``[S]`` keys); every step is ``jax.vmap``-ed over it, one program for all ``S``.

    Returns:
      ``(state, metrics)``: ``metrics[phase_name]`` is that phase's metrics dict, leaves NumPy
      arrays ``[n_steps, ...]`` (``[S, n_steps, ...]`` with ``vmap``; phases of 0 steps are
      absent).
    """
    _checks.check_instance(trainer, "trainer", Trainer)
    _checks.check_instance(state, "state", ETCState)
    check_int(chunks, "chunks", minimum=1)
    for name, fn in (("checkpointer", checkpointer), ("on_chunk", on_chunk)):
        if fn is not None:
            _checks.check_callable(fn, name)
    _checks.check_bool(vmap, "vmap")
    metrics = {}
    for phase in trainer.phases:
        if phase.n_steps == 0:
            continue
        ckpt = None if checkpointer is None else checkpointer(phase.name)
        state, metrics[phase.name] = run_chunked(
            phase.step,
            state,
            phase.n_steps,
            chunk_size=max(1, phase.n_steps // chunks),
            checkpointer=ckpt,
            on_chunk=on_chunk,
            vmap=vmap,
        )
    return state, metrics

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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Literal, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxlab.control.neural_etc.events import (
    SolverConfig,
    augmented_field,
    check_sigma,
    first_trigger_time,
    mc_event,
    pi_event,
)
from jaxlab.control.neural_etc.models import ClassK, Controller, ICNNLyapunov
from jaxlab.control.neural_etc.projection import lie_derivative, project
from jaxlab.control.neural_etc.systems import ControlSystem

__all__ = ["ETCConfig", "ETCModel", "TrainState", "make_model", "make_trainer"]

Method = Literal["mc", "pi", "nlc"]


@dataclasses.dataclass(frozen=True)
class ETCConfig:
    """Hyperparameters (defaults: the official Lorenz settings for the chosen method).

    Attributes:
      method: ``"mc"``, ``"pi"`` or ``"nlc"``.
      n_samples: training states (MC 5000, PI 2000, NLC 5000).
      learning_rate: Adam step size (0.05).
      event_weight: ``lambda_2`` (MC 0.1, PI 0.05).
      sigma: event-function parameter (0.5).
      steps: MC/NLC Adam steps; PI uses ``warmup_steps`` + ``event_steps``.
      event_batch: ``M`` first-trigger solves per PI step (10).
      t_max: cap for first-trigger solves (no trigger -> ``t_max``, masked gradient).
      lyapunov_hidden, controller_hidden, alpha_hidden: network sizes.
      alpha_grid_max: upper end of the ``1/q`` grid (10 for Lorenz).
      state_gradient_only: PI event-time gradient as the official code computes it (see
        :func:`~jaxlab.control.neural_etc.events.first_trigger_time`); default the full IFT one.
      resample: draw a fresh set of ``n_samples`` training states every step instead of
        fixing them at ``init`` (the official code fixes them; see the module docstring).
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
    t_max: float = 5.0
    lyapunov_hidden: tuple[int, ...] = (64, 1)
    controller_hidden: tuple[int, ...] = (64, 64)
    alpha_hidden: tuple[int, ...] = (10, 10)
    alpha_grid_max: float = 10.0
    resample: bool = False
    state_gradient_only: bool = False

    def __post_init__(self):
        if self.method not in ("mc", "pi", "nlc"):
            raise ValueError(f"`method` must be 'mc', 'pi' or 'nlc', got {self.method!r}.")
        check_sigma(self.sigma)
        for name in ("n_samples", "event_batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"`{name}` must be >= 1, got {getattr(self, name)}.")


class _TanhMLP(nn.Module):
    features: tuple[int, ...]

    @nn.compact
    def __call__(self, x):
        for f in self.features[:-1]:
            x = jnp.tanh(nn.Dense(f)(x))
        return nn.Dense(self.features[-1])(x)


class ETCModel(NamedTuple):
    """The networks as ``fn(params, x)`` plus their initialiser.

    ``params`` is ``{"controller": ..., "lyapunov": ..., "alpha": ...}`` (``alpha`` for MC only;
    ``alpha_slope`` is its derivative ``q``). ``event`` is the method's event function.
    """

    init: Callable[[jax.Array], dict]
    controller: Callable
    lyapunov: Callable
    alpha: Callable | None
    alpha_slope: Callable | None
    event: Callable


def make_model(system: ControlSystem, cfg: ETCConfig) -> ETCModel:
    """Networks for ``cfg.method`` on ``system`` (NLC: tanh MLPs; MC/PI: ICNN + spectral MLP)."""
    n, m = system.state_dim, system.control_dim
    if cfg.method == "nlc":
        v_net = _TanhMLP((*cfg.controller_hidden, 1))
        u_net = _TanhMLP((*cfg.controller_hidden, m))

        def controller(p, x):
            out = u_net.apply(p["controller"], x)
            return x * out if m == n else out - u_net.apply(p["controller"], jnp.zeros_like(x))

        def lyapunov(p, x):
            return v_net.apply(p["lyapunov"], x)[0]
    else:
        v_net = ICNNLyapunov(cfg.lyapunov_hidden)
        u_net = Controller(m, cfg.controller_hidden)
        controller = lambda p, x: u_net.apply(p["controller"], x)
        lyapunov = lambda p, x: v_net.apply(p["lyapunov"], x)
    a_net = ClassK(cfg.alpha_hidden) if cfg.method == "mc" else None
    alpha = alpha_slope = None
    if a_net is not None:
        alpha = lambda p, r: a_net.apply(p["alpha"], r)
        alpha_slope = lambda p, r: a_net.apply(p["alpha"], r, method=ClassK.slope)

    def init(key):
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

    return ETCModel(init, controller, lyapunov, alpha, alpha_slope, event)


@struct.dataclass
class TrainState:
    """``params``, Adam state, the training states ``data [N, n]``, ``key`` and ``step``."""

    params: dict
    opt_state: optax.OptState
    data: jax.Array
    key: jax.Array
    step: jax.Array


class Trainer(NamedTuple):
    init: Callable[[jax.Array], TrainState]
    step: Callable[[TrainState, object], tuple[TrainState, dict]]
    event_step: Callable[[TrainState, object], tuple[TrainState, dict]] | None
    model: ETCModel
    projected_controller: Callable


def make_trainer(
    system: ControlSystem, cfg: ETCConfig, solver_cfg: SolverConfig | None = None
) -> Trainer:
    """``init(key)`` and the pure steps of ``cfg.method``.

    ``step`` is the MC / NLC step or the PI warm-up step (stability only); ``event_step`` is the
    PI step with the event loss (``None`` otherwise).
    """
    model = make_model(system, cfg)
    solver_cfg = solver_cfg or SolverConfig()
    lie = lie_derivative(system, model.controller, model.lyapunov)
    optimizer = optax.adam(cfg.learning_rate)
    box = system.domain / 2 if cfg.method == "nlc" else system.domain
    field = augmented_field(system, model.controller)

    def init(key) -> TrainState:
        k_params, k_data, k_run = jax.random.split(key, 3)
        params = model.init(k_params)
        shape = (cfg.n_samples, system.state_dim)
        data = jax.random.uniform(k_data, shape, jnp.result_type(float), -box, box)
        return TrainState(params, optimizer.init(params), data, k_run, jnp.zeros((), jnp.int32))

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

    def adam_step(state, loss_fn):
        (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.params)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        new = state.replace(params=params, opt_state=opt_state, step=state.step + 1)
        return new, {"loss": loss, **aux}

    def batch(state: TrainState) -> jax.Array:
        if not cfg.resample:
            return state.data
        key = jax.random.fold_in(jax.random.fold_in(state.key, 1), state.step)
        return jax.random.uniform(key, state.data.shape, state.data.dtype, -box, box)

    def step(state: TrainState, _=None):
        data = batch(state)

        def loss_fn(params):
            stab = stability(params, data)
            if cfg.method == "mc":
                extra = alpha_inverse_loss(params)
                return stab + cfg.event_weight * extra, {"stab": stab, "alpha_inv": extra}
            return stab, {"stab": stab}

        return adam_step(state, loss_fn)

    def event_step(state: TrainState, _=None):
        key = jax.random.fold_in(state.key, state.step)
        idx = jax.random.choice(key, cfg.n_samples, (cfg.event_batch,), replace=False)
        starts = state.data[idx]
        data = batch(state)

        def loss_fn(params):
            stab = stability(params, data)
            t1, fired = jax.vmap(
                lambda x: first_trigger_time(
                    field, model.event, x, params, cfg.t_max, solver_cfg, cfg.state_gradient_only
                )
            )(starts)
            event_loss = jnp.mean(1.0 / t1)
            total = stab + cfg.event_weight * event_loss
            return total, {"stab": stab, "event": event_loss, "fired": jnp.mean(fired)}

        return adam_step(state, loss_fn)

    projected = project(model.controller, model.lyapunov, system)
    return Trainer(init, step, event_step if cfg.method == "pi" else None, model, projected)

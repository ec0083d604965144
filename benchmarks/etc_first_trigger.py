"""Benchmark: Neural ETC hot cores (float64).

(a) First-trigger times ``t1(x_i)`` of the PI event-triggered Lorenz loop from ``M`` initial
    states (the PI training inner loop and inter-event maps): ``jit(vmap)`` over diffrax solves,
    the same solve jitted once and called in a Python loop, the vmapped solve with the state axis
    sharded over 2, 4, ... devices, and ``scipy.integrate.solve_ivp(events=...)`` with the same
    (jitted) vector field and event function (small ``M`` only). Unit: solves/s.
(b) The MC training objective's value and gradient over ``N`` sampled states (Lie derivatives by
    ``jax.jvp``, class-K quadrature). Unit: states/s; the time should grow linearly in ``N``.

Equal work: every first-trigger implementation solves the same ODE from the same states with
rtol = atol = 1e-6 and stops at the first upward zero of the same event function.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from scipy.integrate import solve_ivp

from jaxlab.control import neural_etc as E
from jaxlab.control.neural_etc import ETCConfig, make_trainer
from jaxlab.core import sharding
from jaxlab.core.timing import result_row, time_call

NAME = "etc_first_trigger"
DESCRIPTION = "Neural ETC first-trigger solves (vmap vs loop vs solve_ivp) and the MC loss+grad"
SIZES = {
    "small": {"M": (1, 10, 100), "N": (1_000, 10_000)},
    "large": {"M": (1, 10, 100, 1000), "N": (1_000, 10_000, 100_000)},
}
T_MAX = 5.0
SCIPY_MAX_M = 10


def run(size: str) -> list[dict]:
    with jax.enable_x64(True):
        return _run(size)


def _run(size: str) -> list[dict]:
    system = E.lorenz()
    pi = make_trainer(system, ETCConfig(method="pi", n_samples=256))
    state = pi.init(jax.random.key(0))
    state, _ = jax.jit(lambda s: jax.lax.scan(pi.step, s, None, 50))(state)  # triggers exist
    params = state.params
    field = E.augmented_field(system, pi.model.controller)
    event = pi.model.event
    solver = E.ODESolverConfig(rtol=1e-6, atol=1e-6)
    t1 = lambda p, x0: E.first_trigger_time(field, event, x0, p, T_MAX, solver)[0]
    rows = []

    single = jax.jit(t1)
    batched = jax.jit(jax.vmap(t1, in_axes=(None, 0)))
    field_np = jax.jit(lambda y: field(y, params))
    event_np = jax.jit(lambda y: event(y, params))

    def loop(p, xs):
        return [single(p, x) for x in xs]

    def scipy_solves(xs):
        def ev(t, y):
            return float(event_np(y))

        ev.terminal, ev.direction = True, 1.0
        out = []
        for x in np.asarray(xs):
            y0 = np.concatenate([x, np.zeros_like(x)])
            sol = solve_ivp(
                lambda t, y: np.asarray(field_np(y)),
                (0.0, T_MAX),
                y0,
                rtol=1e-6,
                atol=1e-6,
                events=ev,
            )
            out.append(sol.t_events[0][0] if sol.t_events[0].size else T_MAX)
        return out

    for m in SIZES[size]["M"]:
        xs = jax.random.uniform(jax.random.key(m), (m, 3), jnp.float64, -10.0, 10.0)
        common = dict(work=m, unit="solves", M=m)
        rows.append(
            result_row(
                NAME,
                "first trigger: jit(vmap)",
                size,
                time_call(batched, params, xs, n_runs=3),
                **common,
            )
        )
        rows.append(
            result_row(
                NAME,
                "first trigger: python loop of jit",
                size,
                time_call(loop, params, xs, n_runs=3),
                **common,
            )
        )
        devices = 2
        while devices <= jax.device_count() and m % devices == 0:
            mesh = sharding.data_mesh(jax.devices()[:devices])
            sharded = sharding.sharded_map(t1, mesh)
            rows.append(
                result_row(
                    NAME,
                    "first trigger: jit(vmap), M sharded",
                    size,
                    time_call(sharded, params, xs, n_runs=3),
                    devices=devices,
                    **common,
                )
            )
            devices *= 2
        if m <= SCIPY_MAX_M:
            rows.append(
                result_row(
                    NAME,
                    "first trigger: scipy solve_ivp",
                    size,
                    time_call(scipy_solves, xs, n_warmup=1, n_runs=2),
                    **common,
                )
            )

    mc = make_trainer(system, ETCConfig(method="mc", n_samples=max(SIZES[size]["N"])))
    mc_state = mc.init(jax.random.key(1))
    step = jax.jit(mc.step)
    for n in SIZES[size]["N"]:
        sub = mc_state.replace(data=mc_state.data[:n])
        rows.append(
            result_row(
                NAME,
                "MC loss+grad+Adam step",
                size,
                time_call(step, sub, n_runs=5),
                work=n,
                unit="states",
                N=n,
            )
        )
    return rows

"""The analytic projection onto stabilising controllers (Neural ETC, Theorem 4.1).

For ``x' = f(x) + g(x) u`` and a Lyapunov function ``V``, with ``a(x) = g(x)^T grad V(x)``:

.. math::
    \\pi(u)(x) = u(x) - \\frac{\\max(0, L_{f_u} V(x) + V(x))}{\\|a(x)\\|^2}\\, a(x)

gives ``L_{f_{pi(u)}} V = min(L_{f_u} V, -V) <= -V`` at every ``x`` (not only on training
samples), so the PI event function certifies exponential decay with rate ``1 - sigma``. Where the
constraint already holds ``pi(u) = u``; ``pi`` is idempotent. Where ``a(x) = 0`` (e.g. ``x = 0``)
no correction is possible and ``u`` is returned (a double ``where`` keeps gradients finite).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxlab.control.neural_etc import _checks
from jaxlab.control.neural_etc.events import ParamFn
from jaxlab.control.neural_etc.systems import ControlSystem

__all__ = ["lie_derivative", "project"]


def lie_derivative(system: ControlSystem, controller: ParamFn, lyapunov: ParamFn):
    """``(params, x) -> L_{f_u} V(x) = grad V(x) . (f(x) + g(x) u(x))``, one ``jax.jvp``."""
    _checks.check_system(system)
    _checks.check_callable(controller, "controller")
    _checks.check_callable(lyapunov, "lyapunov")

    def lie(params, x):
        velocity = system.field(x, controller(params, x))
        return jax.jvp(lambda z: lyapunov(params, z), (x,), (velocity,))[1]

    return lie


def project(controller: ParamFn, lyapunov: ParamFn, system: ControlSystem) -> ParamFn:
    """``pi(u)``: a controller ``(params, x) -> [m]`` satisfying ``L V + V <= 0`` everywhere."""
    _checks.check_callable(controller, "controller")
    _checks.check_callable(lyapunov, "lyapunov")
    _checks.check_system(system)
    lie = lie_derivative(system, controller, lyapunov)

    def projected(params, x):
        u = controller(params, x)
        a = system.actuator(x).T @ jax.grad(lyapunov, argnums=1)(params, x)
        excess = jnp.maximum(0.0, lie(params, x) + lyapunov(params, x))
        norm2 = a @ a
        ok = norm2 > 0
        return u - jnp.where(ok, excess / jnp.where(ok, norm2, 1.0), 0.0) * a

    return projected

"""Control-affine systems ``x' = f(x) + g(x) u`` with the target shifted to the origin.

Each system is a :class:`ControlSystem` of pure functions, so closed loops, Lie derivatives and
event functions compose with ``jit``/``vmap``/``grad``. Dtypes follow the input (the Neural ETC
simulations run in float64 under ``jax.enable_x64``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxlab.core.checks import check_int, check_scalar

Array = jax.Array

__all__ = ["ControlSystem", "closed_loop", "grn", "lorenz"]


class ControlSystem(NamedTuple):
    """A control-affine system ``x' = drift(x) + actuator(x) @ u``.

    Attributes:
      name: identifier.
      state_dim, control_dim: ``n`` and ``m``.
      drift: ``f: [n] -> [n]`` with ``f(0) = 0`` (target at the origin).
      actuator: ``g: [n] -> [n, m]``.
      domain: half-width ``r`` of the training box ``[-r, r]^n``.

    Methods: :meth:`field` ``f(x) + g(x) u``; :meth:`linearization` ``(A, B)``, the Jacobian of
    ``f`` and ``g`` at the origin.
    """

    name: str
    state_dim: int
    control_dim: int
    drift: Callable[[Array], Array]
    actuator: Callable[[Array], Array]
    domain: float

    def field(self, x: Array, u: Array) -> Array:
        """``f(x) + g(x) u``: ``x [n]``, ``u [m]`` -> ``[n]``."""
        return self.drift(x) + self.actuator(x) @ u

    def linearization(self) -> tuple[Array, Array]:
        zero = jnp.zeros(self.state_dim)
        return jax.jacfwd(self.drift)(zero), self.actuator(zero)


def closed_loop(system: ControlSystem, controller: Callable[[Array], Array]):
    """``x -> f(x) + g(x) u(x)``: the continuous-time closed-loop field."""
    from jaxlab.control.neural_etc import _checks

    _checks.check_system(system)
    _checks.check_callable(controller, "controller")
    return lambda x: system.field(x, controller(x))


def lorenz(sigma: float = 10.0, rho: float = 28.0, beta: float = 8.0 / 3.0) -> ControlSystem:
    """Fully actuated Lorenz system on ``[-10, 10]^3``:
    ``x' = sigma (y - x) + u1``, ``y' = rho x - y - x z + u2``, ``z' = x y - beta z + u3``
    (finite real parameters)."""
    for name, v in (("sigma", sigma), ("rho", rho), ("beta", beta)):
        check_scalar(v, name)

    def drift(s):
        x, y, z = s[0], s[1], s[2]
        return jnp.stack([sigma * (y - x), rho * x - y - x * z, x * y - beta * z])

    return ControlSystem("lorenz", 3, 3, drift, lambda s: jnp.eye(3, dtype=s.dtype), 10.0)


GRN_TARGET = 0.6256


def grn(
    a: float = 1.0, b: float = 0.2, k: float = 1.1, s: float = 0.5, n: int = 2, scale: float = 10.0
) -> ControlSystem:
    """Two-gene regulatory network, control on the gain ``a1``, coordinates scaled by ``scale``.

    In unscaled coordinates ``x1' = (a1 + u) x1^n/(s^n + x1^n) + b s^n/(s^n + x2^n) - k x1`` and
    symmetrically for ``x2`` (without control). The target attractor
    ``P1 = scale * (0.6256, 0.6256)`` is shifted to the origin; the state is ``X - P1``.
    Rates ``a, b, k >= 0``, threshold ``s > 0``, Hill exponent ``n`` an int >= 1, ``scale > 0``.
    """
    for name, v in (("a", a), ("b", b), ("k", k)):
        check_scalar(v, name, 0.0)
    check_scalar(s, "s", 0.0, low_open=True)
    n = check_int(n, "n", minimum=1)
    check_scalar(scale, "scale", 0.0, low_open=True)
    target = scale * GRN_TARGET

    def hill(x):
        return x**n / (s**n + x**n)

    def repress(x):
        return s**n / (s**n + x**n)

    def raw(state):  # unscaled field of the absolute coordinates
        x1, x2 = state[0], state[1]
        return jnp.stack(
            [a * hill(x1) + b * repress(x2) - k * x1, a * hill(x2) + b * repress(x1) - k * x2]
        )

    def drift(z):
        x = (z + target) / scale
        return scale * (raw(x) - raw(jnp.full_like(x, GRN_TARGET)))

    def actuator(z):
        x1 = (z[0] + target) / scale
        return jnp.stack([scale * hill(x1), jnp.zeros_like(x1)])[:, None]

    return ControlSystem("grn", 2, 1, drift, actuator, 10.0)

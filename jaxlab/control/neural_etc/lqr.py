"""LQR baseline for event-triggered control (Heemels-style event rule on the LQR Lyapunov function).

``K = R^{-1} B^T S`` with ``S`` the stabilising solution of the continuous algebraic Riccati
equation ``A^T S + S A - S B R^{-1} B^T S + Q = 0`` (``scipy.linalg.solve_continuous_are``);
``u = -K x``, ``V = x^T S x / 2``. With ``Q1 = Q + K^T R K`` the linearised closed loop has
``L_{f_u} V = -x^T Q1 x / 2``; the event fires when the sampling error has eaten all but a
fraction ``sigma`` of that decrease (the spec's ``(sigma - 1) x^T Q1 x + 2 x^T S B K e`` rule,
whose Lorenz setting ``sigma = 0.99`` leaves 1% slack):

    ``h(x, e) = grad V(x) . g(x) [u(x + e) - u(x)] - (1 - sigma) x^T Q1 x / 2``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
import scipy.linalg

from jaxlab.control.neural_etc.events import check_sigma
from jaxlab.control.neural_etc.systems import ControlSystem

__all__ = ["LQR", "lqr", "lqr_event"]


class LQR(NamedTuple):
    """Gains and Riccati solution (NumPy float64): ``K [m, n]``, ``S [n, n]``, ``Q1 [n, n]``."""

    K: np.ndarray
    S: np.ndarray
    Q1: np.ndarray

    def controller(self, params, x):
        return -jnp.asarray(self.K, x.dtype) @ x

    def lyapunov(self, params, x):
        return 0.5 * x @ jnp.asarray(self.S, x.dtype) @ x


def lqr(system: ControlSystem, Q: np.ndarray, R: np.ndarray) -> LQR:
    """LQR of the linearisation of ``system`` at the origin."""
    A, B = (np.asarray(m, np.float64) for m in system.linearization())
    Q, R = np.asarray(Q, np.float64), np.asarray(R, np.float64)
    if Q.shape != A.shape or R.shape != (B.shape[1], B.shape[1]):
        raise ValueError(
            f"`Q` must be {A.shape} and `R` {(B.shape[1],) * 2}; got {Q.shape}, {R.shape}."
        )
    S = scipy.linalg.solve_continuous_are(A, B, Q, R)
    K = np.linalg.solve(R, B.T @ S)
    return LQR(K, S, Q + K.T @ R @ K)


def lqr_event(system: ControlSystem, gains: LQR, sigma: float):
    """The LQR event function ``h(y, params)`` on ``y = (x, e)``."""
    check_sigma(sigma)

    def event(y, params):
        n = y.shape[-1] // 2
        x, e = y[:n], y[n:]
        grad_v = jnp.asarray(gains.S, x.dtype) @ x
        du = gains.controller(params, x + e) - gains.controller(params, x)
        q1 = jnp.asarray(gains.Q1, x.dtype)
        return grad_v @ (system.actuator(x) @ du) - (1.0 - sigma) * 0.5 * x @ q1 @ x

    return event

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

from jaxlab.control.neural_etc import _checks
from jaxlab.control.neural_etc.events import check_sigma
from jaxlab.control.neural_etc.systems import ControlSystem
from jaxlab.core.checks import check_finite, check_real

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
    """LQR of the linearisation of ``system`` at the origin.

    ``Q`` ``[n, n]`` symmetric positive semi-definite, ``R`` ``[m, m]`` symmetric positive
    definite, both finite; raises ``ValueError`` naming the argument otherwise, or when the
    Riccati equation has no stabilising solution (the linearisation is not stabilisable).
    """
    _checks.check_system(system)
    for name, m in (("Q", Q), ("R", R)):
        check_real(m, name)
        check_finite(m, name)
    A, B = (np.asarray(m, np.float64) for m in system.linearization())
    Q, R = np.asarray(Q, np.float64), np.asarray(R, np.float64)
    if Q.shape != A.shape or R.shape != (B.shape[1], B.shape[1]):
        raise ValueError(
            f"`Q` must be {A.shape} and `R` {(B.shape[1],) * 2}; got {Q.shape}, {R.shape}."
        )
    for name, m, strict in (("Q", Q, False), ("R", R, True)):
        if not np.allclose(m, m.T, rtol=1e-10, atol=1e-12):
            raise ValueError(f"`{name}` must be symmetric, got {m.tolist()}.")
        low = float(np.min(np.linalg.eigvalsh(m)))
        tol = 1e-12 * max(1.0, float(np.max(np.abs(m))))
        if (low <= tol) if strict else (low < -tol):
            want = "positive definite" if strict else "positive semi-definite"
            raise ValueError(f"`{name}` must be {want}; its smallest eigenvalue is {low:.4g}.")
    if not (np.all(np.isfinite(A)) and np.all(np.isfinite(B))):
        raise ValueError(f"`system` ({system.name}) has a non-finite linearisation at the origin.")
    try:
        S = scipy.linalg.solve_continuous_are(A, B, Q, R)
    except (np.linalg.LinAlgError, ValueError) as e:
        raise ValueError(
            f"lqr: no stabilising Riccati solution for `system` ({system.name}) with these `Q`, "
            f"`R` ({e})."
        ) from None
    K = np.linalg.solve(R, B.T @ S)
    return LQR(K, S, Q + K.T @ R @ K)


def lqr_event(system: ControlSystem, gains: LQR, sigma: float):
    """The LQR event function ``h(y, params)`` on ``y = (x, e)``."""
    _checks.check_system(system)
    _checks.check_instance(gains, "gains", LQR)
    n, m = system.state_dim, system.control_dim
    if np.shape(gains.K) != (m, n) or np.shape(gains.S) != (n, n) or np.shape(gains.Q1) != (n, n):
        raise ValueError(
            f"`gains` must be the LQR of a system with n = {n}, m = {m} (K [{m}, {n}], S and Q1 "
            f"[{n}, {n}]), got K {np.shape(gains.K)}, S {np.shape(gains.S)}."
        )
    check_sigma(sigma)

    def event(y, params):
        n = y.shape[-1] // 2
        x, e = y[:n], y[n:]
        grad_v = jnp.asarray(gains.S, x.dtype) @ x
        du = gains.controller(params, x + e) - gains.controller(params, x)
        q1 = jnp.asarray(gains.Q1, x.dtype)
        return grad_v @ (system.actuator(x) @ du) - (1.0 - sigma) * 0.5 * x @ q1 @ x

    return event

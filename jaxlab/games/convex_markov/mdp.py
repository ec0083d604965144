"""Tabular MDP primitives: occupancy measures, action values, policy gradients, value iteration.

Conventions (one player's MDP, the building block of a factored Markov game):

- ``p: [S, A, S]`` with ``p[s, a, s'] = P(s' | s, a)`` (rows sum to one);
- ``rho: [S]`` the initial distribution, ``gamma`` in ``(0, 1)`` the discount;
- a policy ``pi: [S, A]`` has rows on the simplex;
- a reward or pseudo-reward ``r: [S, A]``.

The normalised discounted occupancy is ``lambda(s, a) = (1 - gamma) sum_t gamma^t Pr(s_t = s,
a_t = a) = d(s) pi(a | s)`` with ``d = (1 - gamma) (I - gamma P_pi^T)^-1 rho`` (one linear solve);
it sums to one, and ``<r, lambda>`` is the normalised value ``(1 - gamma) rho^T V^pi_r``.

Policy-gradient theorem in this normalisation (direct parameterisation, ``pi(a | s)`` treated as
free coordinates): ``d <r, lambda(pi)> / d pi(a | s) = d(s) Q_r(s, a)`` with
``Q_r = r + gamma P V``, ``V = (I - gamma P_pi)^-1 r_pi`` (not rescaled by ``1 - gamma``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core import checks
from jaxlab.core.checks import (
    check_bool,
    check_count,
    check_distribution,
    check_static_float,
)

__all__ = [
    "check_mdp",
    "greedy_policy",
    "occupancy",
    "policy_gradient",
    "project_simplex",
    "q_values",
    "state_occupancy",
    "transition_matrix",
    "value_iteration",
]


def _rho_name(name: str) -> str:
    return "rho" + name[1:] if name.startswith("p") else f"rho of {name}"


def _check_gamma(gamma, name: str = "gamma"):
    """``gamma`` must be a real scalar in ``(0, 1)`` (a traced one passes the value check)."""
    return checks.check_scalar(gamma, name, 0.0, 1.0, low_open=True, high_open=True)


def _tolerance(a: np.ndarray, atol: float) -> float:
    """``atol``, widened to the rounding of a sum of ``a.shape[-1]`` entries of ``a``'s dtype."""
    eps = np.finfo(a.dtype).eps if np.issubdtype(a.dtype, np.floating) else 0.0
    return max(atol, 10.0 * a.shape[-1] * float(eps)) if a.ndim else atol


def _check_kernel(p, rho, name: str, atol: float) -> None:
    """Value checks of a concrete kernel ``p [..., S, A, S]`` and ``rho [..., S]`` (or None)."""
    if checks.is_concrete(p):
        host = np.asarray(jax.device_get(p))
        tol, a = _tolerance(host, atol), host.astype(np.float64)
        if a.size and (np.any(a < -tol) or not np.allclose(a.sum(-1), 1.0, atol=tol)):
            worst = float(np.max(np.abs(a.sum(-1) - 1.0)))
            raise ValueError(
                f"`{name}` is not a transition kernel: rows P(. | s, a) must be nonnegative and "
                f"sum to 1 (smallest entry {a.min():.3g}, largest row-sum error {worst:.3g})."
            )
    if rho is not None and checks.is_concrete(rho):
        host = np.asarray(jax.device_get(rho))
        tol, r = _tolerance(host, atol), host.astype(np.float64)
        if r.size and (np.any(r < -tol) or not np.allclose(r.sum(-1), 1.0, atol=tol)):
            raise ValueError(
                f"`{_rho_name(name)}` (the initial distribution of `{name}`) must be nonnegative "
                f"and sum to 1; got entries in [{r.min():.3g}, {r.max():.3g}]."
            )


def _mdp_shapes(p, rho, name: str) -> tuple[int, int]:
    """Static checks of ``p [S, A, S]`` and ``rho [S]`` (or None): returns ``(S, A)``."""
    checks.check_array(p, name, ndim=3, finite=False)
    s, a, s_next = np.shape(p)
    if s != s_next or s < 1 or a < 1:
        raise ValueError(f"`{name}` must have shape [S, A, S] with S, A >= 1, got {np.shape(p)}.")
    if rho is not None:
        checks.check_array(rho, _rho_name(name), shape=(s,), dims="[S]", finite=False)
    return s, a


def check_mdp(p, rho, gamma, name: str = "p", atol: float = 1e-6) -> None:
    """Raise ``ValueError`` (``TypeError`` for a dtype) for a malformed MDP: ``p`` not
    ``[S, A, S]``, ``rho`` not ``[S]``, rows of ``p`` or ``rho`` not probability vectors, NaN /
    inf entries, or ``gamma`` not a scalar in ``(0, 1)``. Shapes and dtypes are checked always
    (also on traced arrays), values where concrete."""
    _mdp_shapes(p, rho, name)
    checks.check_finite(p, name)
    checks.check_finite(rho, _rho_name(name))
    _check_kernel(p, rho, name, atol)
    _check_gamma(gamma)


_NO = object()  # an argument a public function does not take


def _kernel(p, rho=_NO, gamma=_NO, name: str = "p"):
    """``(p, rho)`` checked (shapes always, values where concrete) and as float arrays; ``rho``
    and ``gamma`` are checked when the caller takes them."""
    _mdp_shapes(p, None if rho is _NO else rho, name)
    p = checks.check_array(p, name, kind="float")
    if rho is not _NO:
        rho = checks.check_array(rho, _rho_name(name), kind="float")
    _check_kernel(p, None if rho is _NO else rho, name, 1e-6)
    if gamma is not _NO:
        _check_gamma(gamma)
    return p, rho


def _policy(pi, p, name: str = "pi") -> jax.Array:
    s, a = np.shape(p)[:2]
    return check_distribution(pi, name, (s, a), "[S, A]")


def _reward(r, p, name: str = "r") -> jax.Array:
    s, a = np.shape(p)[:2]
    return checks.check_array(r, name, shape=(s, a), dims="[S, A]", kind="float")


def transition_matrix(p: jax.Array, pi: jax.Array) -> jax.Array:
    """``P_pi[s, s'] = sum_a pi(a | s) p[s, a, s']``: ``[S, S]``."""
    p, _ = _kernel(p)
    return _transition_matrix(p, _policy(pi, p))


def _transition_matrix(p, pi):
    return jnp.einsum("sa,sat->st", pi, p)


def state_occupancy(p: jax.Array, rho: jax.Array, pi: jax.Array, gamma) -> jax.Array:
    """``d = (1 - gamma) (I - gamma P_pi^T)^-1 rho``: ``[S]``, sums to one."""
    p, rho = _kernel(p, rho, gamma)
    return _state_occupancy(p, rho, _policy(pi, p), gamma)


def _state_occupancy(p, rho, pi, gamma):
    s = rho.shape[0]
    a = jnp.eye(s, dtype=p.dtype) - gamma * _transition_matrix(p, pi).T
    return (1.0 - gamma) * jnp.linalg.solve(a, rho)


def occupancy(p: jax.Array, rho: jax.Array, pi: jax.Array, gamma) -> jax.Array:
    """State-action occupancy ``lambda = d[:, None] * pi``: ``[S, A]``, sums to one."""
    p, rho = _kernel(p, rho, gamma)
    return _occupancy(p, rho, _policy(pi, p), gamma)


def _occupancy(p, rho, pi, gamma):
    return _state_occupancy(p, rho, pi, gamma)[:, None] * pi


def q_values(p: jax.Array, pi: jax.Array, r: jax.Array, gamma) -> jax.Array:
    """``Q_r = r + gamma p V`` with ``V = (I - gamma P_pi)^-1 sum_a pi r``: ``[S, A]``."""
    p, _ = _kernel(p, gamma=gamma)
    return _q_values(p, _policy(pi, p), _reward(r, p), gamma)


def _q_values(p, pi, r, gamma):
    s = r.shape[0]
    v = jnp.linalg.solve(
        jnp.eye(s, dtype=p.dtype) - gamma * _transition_matrix(p, pi), jnp.sum(pi * r, -1)
    )
    return r + gamma * jnp.einsum("sat,t->sa", p, v)


def policy_gradient(p: jax.Array, rho: jax.Array, pi: jax.Array, r: jax.Array, gamma) -> jax.Array:
    """``d <r, lambda(pi)> / d pi = d(s) Q_r(s, a)``: ``[S, A]`` (two linear solves)."""
    p, rho = _kernel(p, rho, gamma)
    return _policy_gradient(p, rho, _policy(pi, p), _reward(r, p), gamma)


def _policy_gradient(p, rho, pi, r, gamma):
    return _state_occupancy(p, rho, pi, gamma)[:, None] * _q_values(p, pi, r, gamma)


def project_simplex(v: jax.Array) -> jax.Array:
    """Euclidean projection of each row of ``v: [..., n]`` onto the probability simplex.

    Sort-based (Held et al. 1974; Duchi et al. 2008): with ``u`` sorted decreasingly and
    ``k = max{j : u_j > (sum_{i <= j} u_i - 1) / j}``, ``theta = (sum_{i <= k} u_i - 1) / k`` and
    the projection is ``max(v - theta, 0)``. Adding a constant to a row does not change its image.
    """
    v = checks.check_array(v, "v", kind="float")
    if v.ndim < 1 or v.shape[-1] < 1:
        raise ValueError(f"`v` must have rank >= 1 and a last axis of size >= 1, got {v.shape}.")
    return _project_simplex(v)


def _project_simplex(v):
    n = v.shape[-1]
    u = -jnp.sort(-v, axis=-1)
    css = jnp.cumsum(u, axis=-1) - 1.0
    ranks = jnp.broadcast_to(jnp.arange(1, n + 1, dtype=v.dtype), v.shape)
    k = jnp.sum(u - css / ranks > 0, axis=-1, keepdims=True)  # >= 1 always
    theta = jnp.take_along_axis(css, k - 1, axis=-1) / k.astype(v.dtype)
    return jnp.maximum(v - theta, 0.0)


def value_iteration(
    p: jax.Array, r: jax.Array, gamma, maximize: bool = True, tol: float = 1e-12,
    max_iter: int = 2000,
) -> jax.Array:  # fmt: skip
    """Optimal action values ``Q*`` of reward ``r`` (``max`` or ``min`` over actions): ``[S, A]``.

    Iterates ``V <- opt_a (r + gamma p V)`` from ``V = 0`` until ``max |Delta V| <= tol`` (raised to
    ``100 eps`` of the dtype so float32 stops) or ``max_iter`` sweeps (``lax.while_loop``).
    ``tol`` is a Python number (static); ``max_iter`` may be traced.
    """
    p, _ = _kernel(p, gamma=gamma)
    r = _reward(r, p)
    check_bool(maximize, "maximize")
    check_static_float(tol, "tol", 0.0)
    check_count(max_iter, "max_iter", 1)
    return _value_iteration(p, r, gamma, maximize, tol, max_iter)


def _value_iteration(p, r, gamma, maximize=True, tol=1e-12, max_iter=2000):
    tol = max(float(tol), 100.0 * float(jnp.finfo(r.dtype).eps))
    opt = jnp.max if maximize else jnp.min

    def backup(v):
        return r + gamma * jnp.einsum("sat,t->sa", p, v)

    def cond(carry):
        _, delta, i = carry
        return (delta > tol) & (i < max_iter)

    def body(carry):
        v, _, i = carry
        v_new = opt(backup(v), axis=-1)
        return v_new, jnp.max(jnp.abs(v_new - v)), i + 1

    v0 = jnp.zeros(r.shape[0], r.dtype)
    v, _, _ = jax.lax.while_loop(cond, body, (v0, jnp.asarray(jnp.inf, r.dtype), 0))
    return backup(v)


def greedy_policy(q: jax.Array, maximize: bool = True) -> jax.Array:
    """Deterministic policy with mass one on the ``argmax`` (``argmin``) of each row: ``[S, A]``."""
    q = checks.check_array(q, "q", kind="float")
    if q.ndim < 1 or q.shape[-1] < 1:
        raise ValueError(f"`q` must have rank >= 1 and a last axis of size >= 1, got {q.shape}.")
    return _greedy_policy(q, check_bool(maximize, "maximize"))


def _greedy_policy(q, maximize=True):
    best = jnp.argmax(q, -1) if maximize else jnp.argmin(q, -1)
    return jax.nn.one_hot(best, q.shape[-1], dtype=q.dtype)

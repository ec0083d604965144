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


def check_mdp(p, rho, gamma, name: str = "p", atol: float = 1e-6) -> None:
    """Raise ``ValueError`` for a malformed MDP: ``p`` not ``[S, A, S]``, rows of ``p`` or ``rho``
    not probability vectors, or ``gamma`` outside ``(0, 1)``. Concrete arrays only (API
    boundary)."""
    p, rho = np.asarray(p), np.asarray(rho)
    if p.ndim != 3 or p.shape[0] != p.shape[2]:
        raise ValueError(f"`{name}` must have shape [S, A, S], got {p.shape}.")
    if rho.shape != (p.shape[0],):
        raise ValueError(f"initial distribution for `{name}` must have shape [{p.shape[0]}], "
                         f"got {rho.shape}.")  # fmt: skip
    if np.any(p < -atol) or not np.allclose(p.sum(-1), 1.0, atol=atol):
        worst = float(np.max(np.abs(p.sum(-1) - 1.0)))
        raise ValueError(
            f"`{name}` is not a transition kernel: rows P(. | s, a) must be nonnegative and sum to "
            f"1 (largest row-sum error {worst:.3g})."
        )
    if np.any(rho < -atol) or not np.isclose(rho.sum(), 1.0, atol=atol):
        raise ValueError(f"initial distribution for `{name}` must be nonnegative and sum to 1.")
    g = np.asarray(gamma)
    if g.ndim != 0 or not 0.0 < float(g) < 1.0:
        raise ValueError(f"`gamma` must be a scalar in (0, 1), got {gamma}.")


def transition_matrix(p: jax.Array, pi: jax.Array) -> jax.Array:
    """``P_pi[s, s'] = sum_a pi(a | s) p[s, a, s']``: ``[S, S]``."""
    return jnp.einsum("sa,sat->st", pi, p)


def state_occupancy(p: jax.Array, rho: jax.Array, pi: jax.Array, gamma) -> jax.Array:
    """``d = (1 - gamma) (I - gamma P_pi^T)^-1 rho``: ``[S]``, sums to one."""
    s = rho.shape[0]
    a = jnp.eye(s, dtype=p.dtype) - gamma * transition_matrix(p, pi).T
    return (1.0 - gamma) * jnp.linalg.solve(a, rho)


def occupancy(p: jax.Array, rho: jax.Array, pi: jax.Array, gamma) -> jax.Array:
    """State-action occupancy ``lambda = d[:, None] * pi``: ``[S, A]``, sums to one."""
    return state_occupancy(p, rho, pi, gamma)[:, None] * pi


def q_values(p: jax.Array, pi: jax.Array, r: jax.Array, gamma) -> jax.Array:
    """``Q_r = r + gamma p V`` with ``V = (I - gamma P_pi)^-1 sum_a pi r``: ``[S, A]``."""
    s = r.shape[0]
    v = jnp.linalg.solve(
        jnp.eye(s, dtype=p.dtype) - gamma * transition_matrix(p, pi), jnp.sum(pi * r, -1)
    )
    return r + gamma * jnp.einsum("sat,t->sa", p, v)


def policy_gradient(p: jax.Array, rho: jax.Array, pi: jax.Array, r: jax.Array, gamma) -> jax.Array:
    """``d <r, lambda(pi)> / d pi = d(s) Q_r(s, a)``: ``[S, A]`` (two linear solves)."""
    return state_occupancy(p, rho, pi, gamma)[:, None] * q_values(p, pi, r, gamma)


def project_simplex(v: jax.Array) -> jax.Array:
    """Euclidean projection of each row of ``v: [..., n]`` onto the probability simplex.

    Sort-based (Held et al. 1974; Duchi et al. 2008): with ``u`` sorted decreasingly and
    ``k = max{j : u_j > (sum_{i <= j} u_i - 1) / j}``, ``theta = (sum_{i <= k} u_i - 1) / k`` and
    the projection is ``max(v - theta, 0)``. Adding a constant to a row does not change its image.
    """
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
    """
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
    best = jnp.argmax(q, -1) if maximize else jnp.argmin(q, -1)
    return jax.nn.one_hot(best, q.shape[-1], dtype=q.dtype)

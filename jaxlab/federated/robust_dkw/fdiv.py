"""f-divergence meta-shift: the robust risk-tail certificate by the exact two-level reduction
(spec section 2.3), its population limit and closed forms.

Target networks draw clients from ``mu'`` with ``D_f(mu' || mu) = E_mu f(d mu' / d mu) <= eps``.
The worst-case tail ``G*(lam) = sup {E_mu[w 1{R >= lam}] : w >= 0, E_mu w = 1, E_mu f(w) <= eps}``
is certified from the source clients' empirical risks as (the official program's constants)::

    G_hat(lam) = min(1, V(lam) + s_K),   s_K = sqrt(log(K / delta) / K),
    V(lam) = max_alpha (1/K) sum_k alpha_k 1{R_hat_k >= lam - t}
             s.t. 0 <= alpha_k <= Lam, |mean(alpha) - 1| <= c1 s_K, mean f(alpha) <= eps + c2 s_K,

with ``t = sqrt(log((K + 2) / delta) / (2 n))``, ``Lam`` the largest root of ``f(Lam) = eps /
delta``, ``c1 = Lam - 1`` and ``c2 = (f(Lam) - f(1 / Lam)) / 2`` (KL) or ``f(Lam) / 2`` (chi2).

**Two-level reduction.** The program depends on ``alpha`` only through ``A = {k : R_hat_k >= lam -
t}``, ``p = |A| / K``, and its constraints are convex and symmetric within ``A`` and within its
complement, so averaging a feasible ``alpha`` over each part stays feasible (Jensen) with the same
objective: the optimum is ``alpha = a`` on ``A``, ``b`` off it. For fixed ``a`` the best ``b`` is
``b*(a) = clip(argmin f, lo(a), hi(a))`` on the interval the mean constraint and the box allow,
``g(a) = p f(a) + (1 - p) f(b*(a))`` is convex with ``g(1) <= 0``, so the feasible ``a`` are an
interval ``[1, a*]`` and ``a*`` is found by bisection (a fixed number of halvings; elementwise, so
it broadcasts over ``lam``, ``eps`` and replicates). ``V = p a*``. Note ``argmin t log t = 1/e``,
not 1: the relaxed mean constraint lets ``b`` go below 1, and clipping at 1 under-estimates ``V``.

With ``tau = 0`` and ``Lam = inf`` the reduction is the population worst case:
chi2 ``G* = min(1, p + sqrt(eps p (1 - p)))``; KL ``G*`` = the ``q >= p`` with ``kl(q || p) = eps``
(:func:`chi2_worst_tail`, :func:`kl_worst_tail`, reproduced by :func:`population_worst_tail`).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import digamma, gammaln, xlogy

from jaxlab.core.checks import check_choice, check_int, check_scalar
from jaxlab.federated.robust_dkw._checks import (
    as_array,
    as_jax,
    check_count,
    check_result,
    check_values,
)
from jaxlab.federated.robust_dkw.dkw import (
    _check_clients,
    _check_delta,
    _check_points,
    tail_fraction,
)

__all__ = [
    "DIVERGENCES",
    "chi2_worst_tail",
    "dirichlet_kl",
    "divergence_constants",
    "f_div",
    "kl_bernoulli",
    "kl_worst_tail",
    "population_worst_tail",
    "robust_tail_bound",
    "two_level_weights",
]

DIVERGENCES = ("kl", "chi2")


def _float_dtype():
    """The default float dtype (float64 under ``jax.enable_x64``, else float32)."""
    return jnp.result_type(float)


def _check_divergence(divergence: str) -> str:
    if not isinstance(divergence, str):
        raise ValueError(f"`divergence` must be one of {DIVERGENCES}, got {divergence!r:.60}.")
    return check_choice(divergence, "divergence", DIVERGENCES)


def _check_iters(iters) -> int:
    return check_int(iters, "iters", minimum=1)


def _check_fraction(p, name: str = "p") -> None:
    check_values(p, name, 0.0, 1.0)


def _check_budget(eps, name: str = "eps") -> None:
    check_values(eps, name, 0.0)


def _check_broadcast(**arrays) -> None:
    """The arguments broadcast to one shape (elementwise functions)."""
    shapes = {name: tuple(jnp.shape(a)) for name, a in arrays.items()}
    try:
        np.broadcast_shapes(*shapes.values())
    except ValueError:
        names = ", ".join(f"`{n}` {s}" for n, s in shapes.items())
        raise ValueError(f"the shapes of {names} do not broadcast together.") from None


def f_div(t: jax.Array, divergence: str) -> jax.Array:
    """The generator ``f``: ``t log t`` (KL, ``0 log 0 = 0``) or ``(t - 1)^2`` (chi2), ``t >= 0``
    (a likelihood ratio)."""
    check_values(t, "t", 0.0)
    t = as_array(t)
    if _check_divergence(divergence) == "kl":
        return check_result(xlogy(t, t), "f_div: `t` log `t`")
    return check_result((t - 1.0) ** 2, "f_div: (`t` - 1)^2")


def _argmin_f(divergence: str) -> float:
    return math.exp(-1.0) if divergence == "kl" else 1.0


def _bisect(pred, lo, hi, iters: int):
    """Largest ``x`` in ``[lo, hi]`` with ``pred(x)`` true, given ``pred(lo)`` true and ``pred``
    monotone (true then false); elementwise over broadcast arrays, ``iters`` halvings."""

    def body(_, state):
        a, b = state
        mid = 0.5 * (a + b)
        ok = pred(mid)
        return jnp.where(ok, mid, a), jnp.where(ok, b, mid)

    lo, hi = jnp.broadcast_arrays(jnp.asarray(lo, _float_dtype()), jnp.asarray(hi, _float_dtype()))
    a, _ = jax.lax.fori_loop(0, iters, body, (lo, hi))
    return jnp.where(pred(hi), hi, a)


def divergence_constants(eps, delta, divergence: str, iters: int = 100):
    """``(Lam, c1, c2)`` of the official certificate: ``f(Lam) = eps / delta`` (largest root),
    ``c1 = Lam - 1``, ``c2 = (f(Lam) - f(1/Lam)) / 2`` (KL) or ``f(Lam) / 2`` (chi2).

    The KL root is bracketed in ``[1, max(y, e) + 1]`` with ``y = eps / delta`` (``t log t`` is
    increasing above ``1/e`` and ``t log t >= t`` for ``t >= e``), so small ``eps / delta`` gives
    a root just above 1 instead of the official bracket's failure.
    """
    _check_budget(eps)
    check_values(delta, "delta", 0.0, 1.0, low_open=True, high_open=True)
    _check_divergence(divergence)
    out = _constants(eps, delta, divergence, _check_iters(iters))
    return check_result(out, "divergence_constants: the root of f(Lam) = `eps` / `delta`")


@functools.partial(jax.jit, static_argnames=("divergence", "iters"))
def _constants(eps, delta, divergence: str, iters: int):
    y = jnp.asarray(eps, _float_dtype()) / delta
    if divergence == "chi2":
        lam = 1.0 + jnp.sqrt(y)
        return lam, lam - 1.0, f_div(lam, "chi2") / 2.0
    upper = jnp.maximum(y, jnp.e) + 1.0
    lam = _bisect(lambda t: xlogy(t, t) <= y, jnp.ones_like(y), upper, iters)
    return lam, lam - 1.0, (f_div(lam, "kl") - f_div(1.0 / lam, "kl")) / 2.0


def two_level_weights(p, budget, tau1, lam_max, divergence: str, iters: int = 60):
    """The optimal two-level weights ``(a*, b*)`` of the reduction (module docstring).

    Args:
      p: fraction of clients in ``A`` (``m / K``, or a population probability), any shape.
      budget: ``eps + tau2`` (>= 0).
      tau1: slack of the mean constraint ``|mean(alpha) - 1| <= tau1``.
      lam_max: the box ``alpha <= Lam``, ``>= 1`` (``jnp.inf`` for none).
      divergence: ``"kl"`` or ``"chi2"``.
      iters: bisection halvings (60 resolve the bracket to ``2^-60`` of its width).

    Returns:
      ``(a, b)`` broadcast to a common shape; the value is ``V = p a`` (0 where ``p = 0``).
    """
    _check_fraction(p)
    _check_budget(budget, "budget")
    _check_budget(tau1, "tau1")
    check_values(lam_max, "lam_max", 1.0, finite=False)
    _check_divergence(divergence)
    _check_broadcast(p=p, budget=budget, tau1=tau1, lam_max=lam_max)
    return _two_level(p, budget, tau1, lam_max, divergence, _check_iters(iters))


@functools.partial(jax.jit, static_argnames=("divergence", "iters"))
def _two_level(p, budget, tau1, lam_max, divergence: str, iters: int):
    f = lambda t: f_div(t, divergence)  # noqa: E731
    t_f = _argmin_f(divergence)
    p, budget, tau1, lam_max = jnp.broadcast_arrays(
        *(jnp.asarray(v, _float_dtype()) for v in (p, budget, tau1, lam_max))
    )
    full = p >= 1.0
    p_pos = jnp.where(p > 0.0, p, 1.0)
    rest = jnp.where(full, 1.0, 1.0 - p)  # safe denominator

    def best_b(a):
        lo = jnp.maximum(0.0, (1.0 - tau1 - p * a) / rest)
        hi = jnp.minimum(lam_max, (1.0 + tau1 - p * a) / rest)
        return jnp.clip(t_f, lo, jnp.maximum(lo, hi))

    def g(a):
        return jnp.where(full, f(a), p * f(a) + (1.0 - p) * f(best_b(a)))

    a_hi = jnp.minimum(lam_max, jnp.where(full, 1.0 + tau1, (1.0 + tau1) / p_pos))
    a = _bisect(lambda x: g(x) <= budget, jnp.ones_like(p), a_hi, iters)
    return a, best_b(a)


def population_worst_tail(p, eps, divergence: str, iters: int = 60) -> jax.Array:
    """``G* = p a*`` of the reduction with ``tau = 0`` and ``Lam = inf`` (the population limit)."""
    _check_fraction(p)
    _check_budget(eps)
    _check_divergence(divergence)
    _check_broadcast(p=p, eps=eps)
    return _population(p, eps, divergence, _check_iters(iters))


@functools.partial(jax.jit, static_argnames=("divergence", "iters"))
def _population(p, eps, divergence: str, iters: int) -> jax.Array:
    a, _ = _two_level(p, eps, 0.0, jnp.inf, divergence, iters)
    return jnp.where(jnp.asarray(p) > 0.0, p * a, 0.0)


def chi2_worst_tail(p, eps) -> jax.Array:
    """Closed form of the chi-square worst-case tail: ``min(1, p + sqrt(eps p (1 - p)))``."""
    _check_fraction(p)
    _check_budget(eps)
    p, eps = as_array(p), as_array(eps)
    return jnp.minimum(1.0, p + jnp.sqrt(eps * p * (1.0 - p)))


def kl_bernoulli(q, p) -> jax.Array:
    """``kl(q || p) = q log(q / p) + (1 - q) log((1 - q) / (1 - p))`` (Bernoulli KL), ``q, p`` in
    ``[0, 1]``; ``+inf`` (the exact value) where ``p`` is 0 or 1 and ``q != p``."""
    _check_fraction(q, "q")
    _check_fraction(p)
    return _kl_bernoulli(as_array(q), as_array(p))


def _kl_bernoulli(q, p) -> jax.Array:
    return xlogy(q, q) - xlogy(q, p) + xlogy(1.0 - q, 1.0 - q) - xlogy(1.0 - q, 1.0 - p)


def kl_worst_tail(p, eps, iters: int = 100) -> jax.Array:
    """Closed form of the KL worst-case tail: the ``q in [p, 1]`` with ``kl(q || p) = eps``
    (``1`` when ``kl(1 || p) = -log p <= eps``), by bisection of the increasing ``kl(. || p)``."""
    _check_fraction(p)
    _check_budget(eps)
    _check_broadcast(p=p, eps=eps)
    return _kl_tail(p, eps, _check_iters(iters))


@functools.partial(jax.jit, static_argnames=("iters",))
def _kl_tail(p, eps, iters: int) -> jax.Array:
    p, eps = jnp.broadcast_arrays(jnp.asarray(p, _float_dtype()), jnp.asarray(eps, _float_dtype()))
    return _bisect(lambda q: _kl_bernoulli(q, p) <= eps, p, jnp.ones_like(p), iters)


def robust_tail_bound(
    r_hat: jax.Array,
    lam: jax.Array,
    eps,
    *,
    n,
    delta=0.05,
    divergence: str = "chi2",
    iters: int = 60,
) -> jax.Array:
    """Certified upper bound on the risk tail ``P_{mu'}[R >= lam]`` of every ``mu'`` with
    ``D_f(mu' || mu) <= eps`` (module docstring; the official constants with ``n`` an argument).

    Args:
      r_hat: ``[K]`` source clients' empirical risks in ``[0, 1]``, ``K >= 2``.
      lam: ``[L]`` thresholds. (For 0-1 loss, ``P[acc <= a] = P[R >= 1 - a]``.)
      eps: divergence budget ``>= 0`` (scalar; ``vmap`` for a grid).
      n: per-client sample size in the Hoeffding shift ``t``.
      delta: failure probability in ``(0, 1)``.
      divergence: ``"kl"`` (``f = t log t``) or ``"chi2"`` (``f = (t - 1)^2``).

    Returns:
      ``[L]`` bound in ``[0, 1]``, non-increasing in ``lam`` and non-decreasing in ``eps``.
    """
    r_hat = _check_clients(r_hat)
    lam = _check_points(lam)
    check_scalar(eps, "eps", 0.0)
    check_count(n, "n")
    _check_delta(delta)
    _check_divergence(divergence)
    return _tail_bound(r_hat, lam, eps, n, delta, divergence, _check_iters(iters))


@functools.partial(jax.jit, static_argnames=("divergence", "iters"))
def _tail_bound(r_hat, lam, eps, n, delta, divergence: str, iters: int):
    k = r_hat.shape[-1]
    t = jnp.sqrt(jnp.log((k + 2.0) / delta) / (2.0 * n))
    s_k = jnp.sqrt(jnp.log(k / delta) / k)
    lam_max, c1, c2 = _constants(eps, delta, divergence, 100)
    p = tail_fraction(r_hat, lam - t)  # #{R_hat >= lam - t} / K
    a, _ = _two_level(p, eps + c2 * s_k, c1 * s_k, lam_max, divergence, iters)
    v = jnp.where(p > 0.0, p * a, 0.0)
    return jnp.minimum(1.0, v + s_k)


def dirichlet_kl(alpha_p: jax.Array, alpha_q: jax.Array) -> jax.Array:
    """``KL(Dir(alpha_p) || Dir(alpha_q))`` for concentration vectors ``[C]``.

    By data processing it bounds the KL between the induced risk meta-distributions when target
    and source networks differ only in their Dirichlet label proportions: a certified ``eps``.
    """
    for a, name in ((alpha_p, "alpha_p"), (alpha_q, "alpha_q")):
        check_values(a, name, 0.0, low_open=True)
        if jnp.ndim(a) < 1 or jnp.shape(a)[-1] < 1:
            raise ValueError(
                f"`{name}` must be a concentration vector [C], got shape {jnp.shape(a)}."
            )
    if jnp.shape(alpha_p)[-1] != jnp.shape(alpha_q)[-1]:
        raise ValueError(
            f"`alpha_p` and `alpha_q` must have the same number of classes; got shapes "
            f"{jnp.shape(alpha_p)} and {jnp.shape(alpha_q)}."
        )
    alpha_p, alpha_q = as_jax(alpha_p), as_jax(alpha_q)
    sp, sq = alpha_p.sum(-1), alpha_q.sum(-1)
    return (
        gammaln(sp)
        - gammaln(alpha_p).sum(-1)
        - gammaln(sq)
        + gammaln(alpha_q).sum(-1)
        + ((alpha_p - alpha_q) * (digamma(alpha_p) - digamma(sp)[..., None])).sum(-1)
    )

"""Single-item auction mechanisms: interim utilities and their closed-form bid derivatives.

A bidder with value ``v`` bids ``b`` against the market price ``m`` (the highest other bid), whose
CDF, density and density derivative at ``b`` are ``G, g, g'``. Payoffs ``z`` pass through the CRRA
utility ``U(z) = z^rho`` for ``z > 0`` and ``U(z) = z`` for ``z <= 0`` (``rho = 1``: risk neutral):

- first price (``"fp"``):  ``u(b; v) = U(v - b) G(b)``
- second price (``"sp"``): ``u(b; v) = int_0^b U(v - m) g(m) dm``
- all-pay (``"allpay"``):  ``u(b; v) = G(b) U(v - b) + (1 - G(b)) U(-b)``

Differentiating the interim utility (Leibniz rule), with ``z = v - b`` and ``U, U', U''`` at ``z``:

- FP:      ``u' = U g - U' G``;                 ``u'' = U g' - 2 U' g + U'' G``
- SP:      ``u' = U g``;                        ``u'' = U g' - U' g``
- all-pay: ``u' = g (U + b) - U' G - (1 - G)``;  ``u'' = g' (U + b) + 2 g (1 - U') + U'' G``

(all-pay uses ``U(-b) = -b`` for ``b >= 0``). With ``rho = 1`` these are the risk-neutral forms,
e.g. FP ``u' = (v - b) g - G``, ``u'' = (v - b) g' - 2 g``; for ``rho < 1`` and ``v > b`` FP gives
``u' = (v-b)^rho g - rho (v-b)^(rho-1) G``, the spec's risk-averse formula.

References: Huang et al., "Learning Bayesian Nash Equilibrium in Auction Games via Approximate
Best Response", ICML 2025, Sec. 4 (analytic gradient).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core import checks
from jaxlab.core.checks import check_callable, check_static_float

MECHANISMS = ("fp", "sp", "allpay")

__all__ = [
    "MECHANISMS",
    "check_mechanism",
    "crra",
    "interim_derivatives",
    "interim_utility",
    "smoothed_ex_post_utility",
]


def check_mechanism(mechanism: str, risk_aversion: float = 1.0) -> None:
    """Raise ``ValueError`` naming the argument for an unknown mechanism or a bad CRRA ``rho``
    (a concrete number in ``(0, 1]``; ``TypeError`` for a bool, string or traced value)."""
    if not isinstance(mechanism, str) or mechanism not in MECHANISMS:
        raise ValueError(f"`mechanism` must be one of {MECHANISMS}, got {mechanism!r}.")
    check_static_float(risk_aversion, "risk_aversion", 0.0, 1.0, low_open=True)


def crra(z: jax.Array, rho: float) -> tuple[jax.Array, jax.Array, jax.Array]:
    """CRRA utility of a payoff and its first two derivatives: ``(U(z), U'(z), U''(z))``.

    ``U(z) = z^rho`` for ``z > 0`` and ``z`` for ``z <= 0``; ``rho = 1`` is risk neutral (a
    concrete number in ``(0, 1]``).
    """
    z = checks.check_array(z, "z", kind="float")
    check_static_float(rho, "rho", 0.0, 1.0, low_open=True)
    return _crra(z, rho)


def _crra(z, rho):
    if rho == 1.0:
        return z, jnp.ones_like(z), jnp.zeros_like(z)
    positive = z > 0
    zp = jnp.where(positive, z, 1.0)  # keeps the unused branch finite (no inf * 0 in where)
    u = jnp.where(positive, zp**rho, z)
    du = jnp.where(positive, rho * zp ** (rho - 1.0), 1.0)
    d2u = jnp.where(positive, rho * (rho - 1.0) * zp ** (rho - 2.0), 0.0)
    return u, du, d2u


_TOL = 1e-5  # float rounding allowed on a CDF in [0, 1] and a density >= 0


def _nonneg(x, name: str, what: str = "nonnegative") -> None:
    if checks.is_concrete(x):
        a = np.asarray(jax.device_get(x))
        if np.any(a < -_TOL):
            raise ValueError(f"`{name}` must be {what}; got min {float(np.min(a)):.4g}.")


def interim_derivatives(
    mechanism: str,
    bids: jax.Array,
    values: jax.Array,
    cdf: jax.Array,
    pdf: jax.Array,
    dpdf: jax.Array,
    risk_aversion: float = 1.0,
) -> tuple[jax.Array, jax.Array]:
    """Closed-form ``u'(b; v)`` and ``u''(b; v)`` given the market ``G, g, g'`` at the bids.

    Args:
      mechanism: ``"fp"``, ``"sp"`` or ``"allpay"`` (static).
      bids, values: ``[...]`` bids ``b >= 0`` and values ``v >= 0`` (same shape).
      cdf, pdf, dpdf: ``G(b)`` in ``[0, 1]``, ``g(b) >= 0``, ``g'(b)``, shaped like ``bids``.
      risk_aversion: CRRA ``rho`` in (0, 1] (static); 1 is risk neutral.

    Returns:
      ``(u1, u2)``, each shaped like ``bids``.
    """
    check_mechanism(mechanism, risk_aversion)
    bids = checks.check_array(bids, "bids", kind="float")
    shape = bids.shape
    values, cdf, pdf, dpdf = (
        checks.check_array(x, name, shape=shape, kind="float")
        for x, name in ((values, "values"), (cdf, "cdf"), (pdf, "pdf"), (dpdf, "dpdf"))
    )
    _nonneg(bids, "bids")
    _nonneg(values, "values")
    _nonneg(pdf, "pdf")
    checks.check_in_range(cdf, "cdf", -_TOL, 1.0 + _TOL)
    return _interim_derivatives(mechanism, bids, values, cdf, pdf, dpdf, risk_aversion)


def _interim_derivatives(mechanism, bids, values, cdf, pdf, dpdf, risk_aversion=1.0):
    u, du, d2u = _crra(values - bids, risk_aversion)
    if mechanism == "fp":
        return u * pdf - du * cdf, u * dpdf - 2.0 * du * pdf + d2u * cdf
    if mechanism == "sp":
        return u * pdf, u * dpdf - du * pdf
    # all-pay: losing costs the bid, U(-b) = -b for b >= 0
    return (
        pdf * (u + bids) - du * cdf - (1.0 - cdf),
        dpdf * (u + bids) + 2.0 * pdf * (1.0 - du) + d2u * cdf,
    )


def _scalar_bid_value(bid, value):
    bid = checks.check_array(bid, "bid", ndim=0, kind="float")
    value = checks.check_array(value, "value", ndim=0, kind="float")
    _nonneg(bid, "bid")
    _nonneg(value, "value")
    return bid, value


_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(128)


def interim_utility(
    mechanism: str,
    bid: jax.Array,
    value: jax.Array,
    market_cdf: Callable[[jax.Array], jax.Array],
    market_pdf: Callable[[jax.Array], jax.Array],
    risk_aversion: float = 1.0,
) -> jax.Array:
    """Exact interim utility ``u(b; v)`` for a known market distribution (scalar ``b``, ``v``).

    The SP integral ``int_0^b U(v - m) g(m) dm`` uses 128-point Gauss-Legendre quadrature on
    ``[0, b]`` (accurate for smooth integrands; differentiable in ``b`` and ``v``). Used to check
    :func:`interim_derivatives` against ``jax.grad`` and to evaluate strategies exactly.
    """
    check_mechanism(mechanism, risk_aversion)
    bid, value = _scalar_bid_value(bid, value)
    check_callable(market_cdf, "market_cdf")
    check_callable(market_pdf, "market_pdf")
    U = lambda z: _crra(z, risk_aversion)[0]
    if mechanism == "fp":
        return U(value - bid) * market_cdf(bid)
    if mechanism == "sp":
        m = 0.5 * bid * (jnp.asarray(_GL_NODES, jnp.float32) + 1.0)
        w = 0.5 * bid * jnp.asarray(_GL_WEIGHTS, jnp.float32)
        return jnp.sum(w * U(value - m) * market_pdf(m))
    G = market_cdf(bid)
    return G * U(value - bid) + (1.0 - G) * U(-bid)


def smoothed_ex_post_utility(
    mechanism: str,
    bid: jax.Array,
    value: jax.Array,
    soft_max_others: jax.Array,
    max_others: jax.Array,
    temperature: float,
    risk_aversion: float = 1.0,
) -> jax.Array:
    """Softmax-smoothed ex-post utilities (the SM baseline of Kohring et al., ICML 2023).

    The hard allocation ``1[b > max others]`` becomes the softmax weight of the bidder's own bid
    among all ``n`` bids, ``exp(b/T) / (exp(b/T) + sum_j exp(o_j/T))``, which equals
    ``sigmoid((b - L)/T)`` with ``L = T logsumexp(o/T)``; prices are ``b`` (FP, all-pay) or the
    highest other bid (SP). Their mean over market samples is the smoothed interim utility.

    Args:
      bid, value: scalars.
      soft_max_others: ``[S]`` per market sample ``L = T logsumexp_j(o_j / T)``.
      max_others: ``[S]`` per market sample the highest other bid.
      temperature: ``T > 0``.

    Returns:
      ``[S]`` smoothed ex-post utility per market sample.
    """
    check_mechanism(mechanism, risk_aversion)
    bid, value = _scalar_bid_value(bid, value)
    soft_max_others = checks.check_array(soft_max_others, "soft_max_others", ndim=1, kind="float")
    max_others = checks.check_array(max_others, "max_others", shape=soft_max_others.shape,
                                    dims="[S]", kind="float")  # fmt: skip
    checks.check_scalar(temperature, "temperature", 0.0, low_open=True)
    return _smoothed_ex_post_utility(
        mechanism, bid, value, soft_max_others, max_others, temperature, risk_aversion
    )


def _smoothed_ex_post_utility(
    mechanism, bid, value, soft_max_others, max_others, temperature, risk_aversion=1.0
):
    U = lambda z: _crra(z, risk_aversion)[0]
    alloc = jax.nn.sigmoid((bid - soft_max_others) / temperature)
    if mechanism == "fp":
        ex_post = alloc * U(value - bid)
    elif mechanism == "sp":
        ex_post = alloc * U(value - max_others)
    else:
        ex_post = alloc * U(value - bid) + (1.0 - alloc) * U(-bid)
    return ex_post

"""Analytic Bayesian Nash equilibria for evaluation, the L2 distance to them, and epsilon-BNE.

Closed forms (independent private values, uniform priors):

- symmetric FP, ``n`` bidders, ``U[0, c]``, CRRA ``rho``: ``b(v) = (n - 1) v / (n - 1 + rho)``
  (``rho = 1``: ``(n-1) v / n``);
- symmetric SP (any ``rho``): truthful, ``b(v) = v``;
- symmetric all-pay, risk neutral, ``U[0, c]``: ``b(v) = (n - 1) v^n / (n c^(n-1))``;
- asymmetric FP, two bidders ``U[0, a]`` (weak) and ``U[0, c]`` (strong), ``a < c``:
  ``b(v) = (1 - sqrt(1 - k v^2)) / (k v)`` with ``k = 1/a^2 - 1/c^2`` for the weak bidder and
  ``k = -(1/a^2 - 1/c^2)`` for the strong one (both top out at the same bid).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp

from jaxlab.games.auctions.mechanisms import check_mechanism, crra

BidFn = Callable[[jax.Array], jax.Array]

__all__ = [
    "asymmetric_fp_bne",
    "game_bne",
    "grid_utility_loss",
    "l2_distance",
    "symmetric_bne",
]


def symmetric_bne(
    mechanism: str, n_bidders: int, risk_aversion: float = 1.0, upper: float = 1.0
) -> BidFn:
    """The symmetric BNE bid function for ``n_bidders`` with values ``U[0, upper]``.

    Raises:
      ValueError: ``n_bidders < 2`` or an unknown mechanism.
      NotImplementedError: risk-averse all-pay (no closed form here).
    """
    check_mechanism(mechanism, risk_aversion)
    if n_bidders < 2:
        raise ValueError(f"`n_bidders` must be >= 2, got {n_bidders}.")
    n = n_bidders
    if mechanism == "fp":
        return lambda v: (n - 1) * v / (n - 1 + risk_aversion)
    if mechanism == "sp":
        return lambda v: v
    if risk_aversion != 1.0:
        raise NotImplementedError("no closed-form BNE for risk-averse all-pay auctions.")
    return lambda v: (n - 1) / n * v**n / upper ** (n - 1)


def asymmetric_fp_bne(weak_upper: float, strong_upper: float) -> tuple[BidFn, BidFn]:
    """BNE bids ``(weak, strong)`` of 2-bidder FP with values ``U[0, a]`` vs ``U[0, c]``, a < c."""
    if not 0 < weak_upper < strong_upper:
        raise ValueError(
            f"need 0 < weak_upper < strong_upper, got {weak_upper} and {strong_upper}."
        )
    k = 1.0 / weak_upper**2 - 1.0 / strong_upper**2

    def bid(kk):
        def fn(v):
            v_safe = jnp.where(v > 0, v, 1.0)
            b = (1.0 - jnp.sqrt(jnp.maximum(1.0 - kk * v_safe**2, 0.0))) / (kk * v_safe)
            return jnp.where(v > 0, b, 0.0)

        return fn

    return bid(k), bid(-k)


def game_bne(
    mechanism: str,
    bidders_per_type: Sequence[int],
    value_ranges: Sequence[tuple[float, float]],
    risk_aversion: float = 1.0,
) -> tuple[BidFn, ...]:
    """Per-type analytic BNE for the games with a closed form (symmetric, or 1 vs 1 asymmetric FP).

    Raises:
      NotImplementedError: for games without a closed form here.
    """
    n = sum(bidders_per_type)
    if len(bidders_per_type) == 1:
        lo, hi = value_ranges[0]
        if lo != 0.0:
            raise NotImplementedError("closed forms assume values U[0, c].")
        return (symmetric_bne(mechanism, n, risk_aversion, hi),)
    if mechanism == "sp":  # truthful bidding is dominant whatever the priors
        return tuple(symmetric_bne("sp", n) for _ in bidders_per_type)
    if (
        mechanism == "fp"
        and risk_aversion == 1.0
        and tuple(bidders_per_type) == (1, 1)
        and all(lo == 0.0 for lo, _ in value_ranges)
    ):
        (_, a), (_, c) = value_ranges
        weak, strong = asymmetric_fp_bne(min(a, c), max(a, c))
        return (weak, strong) if a < c else (strong, weak)
    raise NotImplementedError(
        f"no closed-form BNE for {mechanism} with bidders_per_type={tuple(bidders_per_type)}."
    )


def _check_support(lower: float, upper: float) -> None:
    if not 0.0 <= lower < upper:
        raise ValueError(
            f"values outside the support: need 0 <= lower < upper, got lower={lower}, "
            f"upper={upper}."
        )


def l2_distance(bid_fn: BidFn, bne_fn: BidFn, lower: float, upper: float, n_grid: int = 10_000):
    """RMS distance on a uniform value grid: ``sqrt(mean_v (b(v) - b*(v))^2)``.

    Args:
      bid_fn: ``[G] values -> [G] bids`` (the learned strategy).
      bne_fn: the equilibrium strategy, same signature.
      lower, upper: the value range; ``n_grid`` points including both ends.
    """
    _check_support(lower, upper)
    grid = jnp.linspace(lower, upper, n_grid)
    return jnp.sqrt(jnp.mean((bid_fn(grid) - bne_fn(grid)) ** 2))


def grid_utility_loss(
    mechanism: str,
    bid_fn: BidFn,
    market: jax.Array,
    lower: float,
    upper: float,
    risk_aversion: float = 1.0,
    n_values: int = 256,
    n_bid_levels: int = 512,
    max_bid: float | None = None,
) -> jax.Array:
    """Epsilon-BNE estimate: mean over values of the utility gained by a grid best response.

    Against the empirical market (samples of the highest other bid under the current profile),
    ``eps = mean_v [max_{b in grid U {beta(v)}} u(b; v) - u(beta(v); v)] >= 0`` with the exact
    (hard) allocation and ``n_bid_levels`` bids in ``[0, max_bid]`` (default: the value upper
    bound), on ``n_values`` values in ``[lower, upper]``.
    """
    check_mechanism(mechanism, risk_aversion)
    _check_support(lower, upper)
    m = jnp.sort(jax.lax.stop_gradient(market))
    s = m.shape[0]
    values = jnp.linspace(lower, upper, n_values)  # [V]
    levels = jnp.linspace(0.0, upper if max_bid is None else max_bid, n_bid_levels)
    bids = jnp.concatenate(
        [jnp.broadcast_to(levels, (n_values, n_bid_levels)), bid_fn(values)[:, None]], axis=1
    )  # [V, L+1]
    wins = jnp.searchsorted(m, bids, side="left")  # market samples strictly below each bid
    U = lambda z: crra(z, risk_aversion)[0]
    if mechanism == "sp":
        # u(b; v) = (1/S) sum_j U(v - m_j) 1[m_j < b]: prefix sums over the sorted market.
        prefix = jnp.concatenate(
            [jnp.zeros((n_values, 1)), jnp.cumsum(U(values[:, None] - m[None, :]), axis=1)], axis=1
        )
        utility = jnp.take_along_axis(prefix, wins, axis=1) / s
    else:
        cdf = wins / s
        utility = cdf * U(values[:, None] - bids)
        if mechanism == "allpay":
            utility = utility + (1.0 - cdf) * U(-bids)
    return jnp.mean(jnp.max(utility, axis=1) - utility[:, -1])

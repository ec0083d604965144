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
import numpy as np

from jaxlab.core import checks
from jaxlab.core.checks import (
    check_callable,
    check_ints,
    check_static_float,
)
from jaxlab.games.auctions.mechanisms import _crra, check_mechanism

BidFn = Callable[[jax.Array], jax.Array]


class NoClosedFormError(NotImplementedError, ValueError):
    """A game without a closed-form BNE here: a ``NotImplementedError`` (as documented) that is
    also a ``ValueError`` about the argument that rules the closed forms out."""


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
      NotImplementedError: risk-averse all-pay (no closed form here; a
        :class:`NoClosedFormError`, also a ``ValueError``).
    """
    check_mechanism(mechanism, risk_aversion)
    n_bidders = checks.check_int(n_bidders, "n_bidders", minimum=2)
    check_static_float(upper, "upper", 0.0, low_open=True)
    n = n_bidders
    if mechanism == "fp":
        return lambda v: (n - 1) * v / (n - 1 + risk_aversion)
    if mechanism == "sp":
        return lambda v: v
    if risk_aversion != 1.0:
        raise NoClosedFormError(
            f"`risk_aversion` must be 1.0 for an all-pay closed form (no closed-form BNE for "
            f"risk-averse all-pay auctions), got {risk_aversion}."
        )
    return lambda v: (n - 1) / n * v**n / upper ** (n - 1)


def asymmetric_fp_bne(weak_upper: float, strong_upper: float) -> tuple[BidFn, BidFn]:
    """BNE bids ``(weak, strong)`` of 2-bidder FP with values ``U[0, a]`` vs ``U[0, c]``, a < c."""
    check_static_float(weak_upper, "weak_upper", 0.0, low_open=True)
    check_static_float(strong_upper, "strong_upper", 0.0, low_open=True)
    if not weak_upper < strong_upper:
        raise ValueError(
            f"`weak_upper` must be < `strong_upper`, got {weak_upper} and {strong_upper}."
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
      ValueError / TypeError: a malformed game (as :class:`~jaxlab.games.auctions.AuctionGame`).
      NotImplementedError: for games without a closed form here (a :class:`NoClosedFormError`,
        also a ``ValueError``).
    """
    check_mechanism(mechanism, risk_aversion)
    bidders_per_type, value_ranges = check_types(bidders_per_type, value_ranges)
    n = sum(bidders_per_type)
    if len(bidders_per_type) == 1:
        lo, hi = value_ranges[0]
        if lo != 0.0:
            raise NoClosedFormError(
                f"`value_ranges` must start at 0 for a closed form (values U[0, c]), got "
                f"{tuple(value_ranges)}."
            )
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
        if a == c:  # the same prior: the symmetric 2-bidder equilibrium
            return (symmetric_bne("fp", 2, 1.0, a),) * 2
        weak, strong = asymmetric_fp_bne(min(a, c), max(a, c))
        return (weak, strong) if a < c else (strong, weak)
    raise NoClosedFormError(
        f"`bidders_per_type` / `value_ranges`: no closed-form BNE for {mechanism!r} with "
        f"bidders_per_type={tuple(bidders_per_type)} and value_ranges={tuple(value_ranges)} "
        "(closed forms: symmetric U[0, c], second price, or 1 vs 1 risk-neutral first price "
        "from 0)."
    )


def check_types(bidders_per_type, value_ranges) -> tuple[tuple[int, ...], tuple]:
    """``(bidders_per_type, value_ranges)`` as tuples after checking them: ints ``>= 1``, at
    least two bidders in all, one finite ``(low, high)`` pair with ``0 <= low < high`` per type.
    """
    counts = check_ints(bidders_per_type, "bidders_per_type", minimum=1)
    if isinstance(value_ranges, str) or not isinstance(value_ranges, tuple | list):
        raise TypeError(f"`value_ranges` must be a tuple of (low, high) pairs, got "
                        f"{type(value_ranges).__name__}: {value_ranges!r:.60}.")  # fmt: skip
    ranges = []
    for r in value_ranges:
        if isinstance(r, str) or not isinstance(r, tuple | list) or len(r) != 2:
            raise ValueError(f"`value_ranges` must be (low, high) pairs, got {value_ranges}.")
        lo = check_static_float(r[0], "value_ranges")
        hi = check_static_float(r[1], "value_ranges")
        if not 0.0 <= lo < hi:
            raise ValueError(f"`value_ranges` needs 0 <= low < high, got ({lo}, {hi}).")
        ranges.append((lo, hi))
    if len(counts) != len(ranges):
        raise ValueError(
            f"`bidders_per_type` has {len(counts)} types but `value_ranges` has {len(ranges)}."
        )
    if sum(counts) < 2:
        raise ValueError(f"`bidders_per_type` needs n >= 2 bidders in all, got {counts}.")
    return counts, tuple(tuple(r) for r in ranges)


def _check_support(lower: float, upper: float) -> None:
    """``0 <= lower < upper``, both finite real scalars (traced ones pass the value checks)."""
    checks.check_scalar(lower, "lower")
    checks.check_scalar(upper, "upper")
    if checks.is_concrete((lower, upper)) and not 0.0 <= float(lower) < float(upper):
        raise ValueError(
            f"values outside the support: need 0 <= `lower` < `upper`, got lower={lower}, "
            f"upper={upper}."
        )


def _check_bid_output(out, grid, name: str):
    if np.shape(out) != np.shape(grid):
        raise ValueError(
            f"`{name}` must map values [G] to bids [G], got shape {np.shape(out)} for "
            f"{np.shape(grid)}."
        )
    checks.check_real(out, f"{name}(values)")
    checks.check_finite(out, f"{name}(values)")  # a diverged strategy is an error, not an L2
    return out


def l2_distance(bid_fn: BidFn, bne_fn: BidFn, lower: float, upper: float, n_grid: int = 10_000):
    """RMS distance on a uniform value grid: ``sqrt(mean_v (b(v) - b*(v))^2)``.

    Args:
      bid_fn: ``[G] values -> [G] bids`` (the learned strategy).
      bne_fn: the equilibrium strategy, same signature.
      lower, upper: the value range; ``n_grid >= 2`` points including both ends.
    """
    check_callable(bid_fn, "bid_fn")
    check_callable(bne_fn, "bne_fn")
    _check_support(lower, upper)
    checks.check_int(n_grid, "n_grid", minimum=2)
    grid = jnp.linspace(lower, upper, n_grid)
    bids = _check_bid_output(bid_fn(grid), grid, "bid_fn")
    return jnp.sqrt(jnp.mean((bids - _check_bid_output(bne_fn(grid), grid, "bne_fn")) ** 2))


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
    bound), on ``n_values`` values in ``[lower, upper]``. A market with NaN / inf samples
    (possible inside ``jit``, where they cannot be rejected) gives NaN, never a finite loss.
    """
    check_mechanism(mechanism, risk_aversion)
    check_callable(bid_fn, "bid_fn")
    market = checks.check_array(market, "market", ndim=1, dims="[S]", kind="float")
    if market.shape[0] < 1:
        raise ValueError("`market` must hold at least one sample, got shape (0,).")
    _check_support(lower, upper)
    checks.check_int(n_values, "n_values", minimum=1)
    checks.check_int(n_bid_levels, "n_bid_levels", minimum=1)
    if max_bid is not None:
        check_static_float(max_bid, "max_bid", 0.0, low_open=True)
    m = jnp.sort(jax.lax.stop_gradient(market))
    s = m.shape[0]
    values = jnp.linspace(lower, upper, n_values)  # [V]
    levels = jnp.linspace(0.0, upper if max_bid is None else max_bid, n_bid_levels)
    own = _check_bid_output(bid_fn(values), values, "bid_fn")
    bids = jnp.concatenate(
        [jnp.broadcast_to(levels, (n_values, n_bid_levels)), own[:, None]], axis=1
    )  # [V, L+1]
    wins = jnp.searchsorted(m, bids, side="left")  # market samples strictly below each bid
    U = lambda z: _crra(z, risk_aversion)[0]
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
    loss = jnp.mean(jnp.max(utility, axis=1) - utility[:, -1])
    return jnp.where(jnp.all(jnp.isfinite(m)), loss, jnp.nan)

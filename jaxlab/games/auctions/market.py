"""Market-price estimates at the bids: Gaussian KDE of ``G, g, g'`` and the smoothed (SM) market.

Both are means over ``S`` market samples for each of ``B`` bids, ``O(B S)`` work. The sample axis
is processed in chunks of ``chunk_size`` inside a ``lax.scan`` so peak memory is ``O(B chunk)``,
not ``O(B S)``; a last partial chunk is padded and masked, so any ``S`` works.

Gaussian KDE with bandwidth ``h`` on market samples ``m_1..m_S``, with ``z_j = (b - m_j) / h``:

.. math::
    \\hat G(b) = \\frac1S \\sum_j \\Phi(z_j), \\quad
    \\hat g(b) = \\frac1S \\sum_j \\frac{\\varphi(z_j)}{h}, \\quad
    \\hat g'(b) = \\frac1S \\sum_j -\\frac{z_j}{h} \\frac{\\varphi(z_j)}{h}

(``g'`` is exactly the derivative of ``g``; ``G`` is nondecreasing and ``g >= 0`` by construction).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core import checks
from jaxlab.core.checks import (
    check_callable,
    check_ints,
    check_positive_scalar,
    check_static_float,
)
from jaxlab.games.auctions.mechanisms import _smoothed_ex_post_utility, check_mechanism

__all__ = [
    "binned_kde_market_stats",
    "chunked_sample_mean",
    "kde_market_stats",
    "product_market_stats",
    "smoothed_derivatives",
]

_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def chunked_sample_mean(fn: Callable[[Any, jax.Array], Any], samples: Any, chunk_size: int) -> Any:
    """``(1/S) sum_j fn``, accumulated over chunks of the sample axis.

    Args:
      fn: ``fn(chunk, mask) -> pytree of sums`` over one chunk; ``chunk`` has the leaves of
        ``samples`` cut to ``[K]`` and ``mask: [K]`` (float) zeroes padded entries.
      samples: pytree of ``[S, ...]`` real arrays (the sample axis first, ``S >= 1``; no NaN /
        inf).
      chunk_size: ``K``, the most samples evaluated at once.
    """
    check_callable(fn, "fn")
    checks.check_int(chunk_size, "chunk_size", minimum=1)
    leaves = jax.tree_util.tree_leaves(samples)
    if not leaves:
        raise ValueError("`samples` must hold at least one array, got an empty pytree.")
    sizes = {np.shape(x)[0] if np.ndim(x) else None for x in leaves}
    if None in sizes or len(sizes) != 1 or 0 in sizes:
        shapes = [np.shape(x) for x in leaves]
        raise ValueError(
            f"`samples` must be arrays sharing a leading sample axis of size >= 1, got shapes "
            f"{shapes}."
        )
    for x in leaves:
        checks.check_finite(x, "samples")  # real numbers, no NaN / inf where concrete
    samples = jax.tree_util.tree_map(jnp.asarray, samples)
    leaves = jax.tree_util.tree_leaves(samples)
    n = leaves[0].shape[0]
    k = min(chunk_size, n)
    n_chunks = -(-n // k)
    pad = n_chunks * k - n
    mask = jnp.arange(n_chunks * k) < n

    def to_chunks(x):
        x = jnp.concatenate([x, jnp.repeat(x[-1:], pad, axis=0)]) if pad else x
        return x.reshape((n_chunks, k) + x.shape[1:])

    chunks = jax.tree_util.tree_map(to_chunks, samples)
    mask = mask.reshape(n_chunks, k).astype(leaves[0].dtype)
    if n_chunks == 1:
        total = fn(jax.tree_util.tree_map(lambda c: c[0], chunks), mask[0])
    else:
        first = jax.eval_shape(fn, jax.tree_util.tree_map(lambda c: c[0], chunks), mask[0])
        zeros = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), first)

        def body(acc, xs):
            part = fn(*xs)
            return jax.tree_util.tree_map(jnp.add, acc, part), None

        total, _ = jax.lax.scan(body, zeros, (chunks, mask))
    return jax.tree_util.tree_map(lambda t: t / n, total)


def kde_market_stats(
    bids: jax.Array, market: jax.Array, bandwidth: float, chunk_size: int = 2048
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Gaussian-KDE estimates of the market CDF, density and density slope at each bid.

    Args:
      bids: ``[B]`` points to evaluate at.
      market: ``[S]`` market-price samples (highest other bid), treated as constants.
      bandwidth: kernel width ``h > 0``.
      chunk_size: market samples per chunk (memory ``O(B chunk_size)``).

    Returns:
      ``(G, g, dg)``, each ``[B]``.
    """
    bids, market = _check_kde_args(bids, market, bandwidth)
    checks.check_int(chunk_size, "chunk_size", minimum=1)
    market = jax.lax.stop_gradient(market)
    return _weighted_kde(bids, market, jnp.ones_like(market), bandwidth, chunk_size, market.size)


def binned_kde_market_stats(
    bids: jax.Array,
    market: jax.Array,
    bandwidth: float,
    grid_size: int,
    bins_per_bandwidth: float = 16.0,
    chunk_size: int = 2048,
    reach: float | None = 6.0,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    r""":func:`kde_market_stats` with the market linearly binned first: ``O(B M)``, not ``O(B S)``.

    The samples are spread onto ``M = grid_size`` equally spaced points ``x_k = m_min + k d``
    by linear binning (each sample splits its unit weight between its two neighbouring points,
    keeping its mean), and the kernel sums run over the ``M`` weighted points. The spacing is
    ``d = max(h / bins_per_bandwidth, (m_max - m_min) / (M - 1))``, so ``d = h / 16`` by default
    whenever the samples span at most ``(M - 1) h / 16`` (size ``grid_size`` for that span).
    Replacing a sample by its two neighbours changes each kernel term by at most
    ``(d^2 / 8) max|K''|``, a relative error of about ``(d / h)^2 / 8`` (2e-3 at ``d = h / 8``,
    5e-4 at ``h / 16``), far below the Monte Carlo error of a KDE from ``10^4`` samples (a few
    percent); the tests measure it. An option, not the paper's estimator: it makes the
    every-bidder protocol (``n`` markets per step) fit on a CPU.

    With ``reach``, each bid sums only the ``2 ceil(reach r) + 1`` grid points within
    ``reach h`` of it (``r = bins_per_bandwidth``) and adds the total weight below that window
    to ``G``, when that window is at most half the grid (small ``h``: 193 of 1601 points at
    ``h = 0.01``). Beyond ``6 h`` a Gaussian term is below ``1.5e-8`` of its peak (and
    ``Phi(-6) = 1e-9``), under float32 resolution, so the window changes the result by float
    rounding only (measured: at most 6e-6 of the largest value, the same as reordering the sum).

    Args:
      bids: ``[B]``.
      market: ``[S]`` market samples.
      bandwidth: kernel width ``h > 0``.
      grid_size: ``M >= 2``, static (for example ``ceil(bins_per_bandwidth * span / h) + 1``
        for the value span the market is expected to cover).
      bins_per_bandwidth: ``h / d`` at the finest spacing.
      chunk_size: grid points per chunk (the full-grid sum).
      reach: window half-width in bandwidths (``None``: always sum over the whole grid).

    Returns:
      ``(G, g, dg)``, each ``[B]``.
    """
    bids, market = _check_kde_args(bids, market, bandwidth)
    checks.check_int(grid_size, "grid_size", minimum=2)
    check_static_float(bins_per_bandwidth, "bins_per_bandwidth", 0.0, low_open=True)
    checks.check_int(chunk_size, "chunk_size", minimum=1)
    if reach is not None:
        check_static_float(reach, "reach", 0.0, low_open=True)
    market = jax.lax.stop_gradient(market)
    lo, hi = jnp.min(market), jnp.max(market)
    spacing = jnp.maximum(bandwidth / bins_per_bandwidth, (hi - lo) / (grid_size - 1))
    pos = (market - lo) / spacing
    left = jnp.clip(jnp.floor(pos), 0, grid_size - 2).astype(jnp.int32)
    frac = jnp.clip(pos - left, 0.0, 1.0)
    weights = jnp.zeros(grid_size, market.dtype).at[left].add(1.0 - frac).at[left + 1].add(frac)
    half = None if reach is None else int(math.ceil(reach * bins_per_bandwidth))
    if half is not None and 2 * (2 * half + 1) <= grid_size:
        return _windowed_kde(bids, lo, spacing, weights, bandwidth, half, market.size)
    grid = lo + spacing * jnp.arange(grid_size, dtype=market.dtype)
    return _weighted_kde(bids, grid, weights, bandwidth, chunk_size, market.size)


def _windowed_kde(bids, lo, spacing, weights, bandwidth, half, total):
    """The grid KDE summed over the ``2 half + 1`` points nearest each bid.

    Grid points more than ``half`` cells below a bid have ``z >= half d / h >= reach``
    (``Phi = 1``, ``phi = 0`` to float precision): their weight goes to ``G`` as a cumulative
    sum; points more than ``half`` cells above contribute nothing."""
    width = 2 * half + 1
    padded = jnp.pad(weights, (half, half))  # every window lies inside
    below = jnp.concatenate([jnp.zeros(1, weights.dtype), jnp.cumsum(padded)])
    pos = (bids - lo) / spacing
    centre = jnp.clip(jnp.floor(pos), 0, weights.shape[0] - 1).astype(jnp.int32)
    # window j of a bid is grid point centre - half + j = padded[centre + j]
    w = jax.vmap(lambda c: jax.lax.dynamic_slice(padded, (c,), (width,)))(centre)
    ratio = spacing / bandwidth
    z = ((pos - centre)[:, None] + (half - jnp.arange(width, dtype=bids.dtype))[None]) * ratio
    cdf, phi = _kernel_terms(z, bandwidth)
    G = (below[centre] + jnp.sum(cdf * w, axis=-1)) / total
    g = jnp.sum(phi * w, axis=-1) / total
    dg = jnp.sum(-z * phi * w, axis=-1) / (bandwidth * total)
    return G, g, dg


def _check_kde_args(bids, market, bandwidth):
    """``(bids [B], market [S])`` as float arrays (``S >= 1``, no NaN / inf where concrete)."""
    bids = checks.check_array(bids, "bids", ndim=1, dims="[B]", kind="float")
    market = checks.check_array(market, "market", ndim=1, dims="[S]", kind="float")
    if market.shape[0] < 1:
        raise ValueError("`market` must hold at least one sample, got shape (0,).")
    check_positive_scalar(bandwidth, "bandwidth")
    return bids, market


def _kernel_terms(z, bandwidth):
    """``(Phi(z), phi(z) / h)``: the Gaussian CDF and the density kernel at ``z = (b - x) / h``
    (``g'`` uses ``-z phi(z) / h^2``)."""
    phi = jnp.exp(-0.5 * z * z) * (_INV_SQRT_2PI / bandwidth)
    cdf = 0.5 * (1.0 + jax.lax.erf(z * (1.0 / math.sqrt(2.0))))
    return cdf, phi


def _weighted_kde(bids, points, weights, bandwidth, chunk_size, total):
    """``(1 / total) sum_j w_j (Phi(z_j), phi(z_j) / h, -z_j phi(z_j) / h^2)``, where
    ``z_j = (b - x_j) / h``."""

    def sums(chunk, mask):
        x, w = chunk
        z = (bids[:, None] - x[None, :]) / bandwidth  # [B, K]
        cdf, phi = _kernel_terms(z, bandwidth)
        w = w * mask
        return (cdf @ w, phi @ w, (-z * phi) @ w / bandwidth)

    n = points.shape[0]
    means = chunked_sample_mean(sums, (points, weights), chunk_size)
    return tuple(m * (n / total) for m in means)  # chunked_sample_mean divides by n


def product_market_stats(
    bids: jax.Array,
    opponent_bids: jax.Array,
    counts: tuple[int, ...],
    bandwidth: float,
    chunk_size: int = 2048,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    r"""Market ``G, g, g'`` as a product of per-opponent-type bid CDFs (an ablation, not the paper).

    With independent bidders the highest opposing bid has CDF ``G(b) = prod_s H_s(b)^{c_s}``,
    where ``H_s`` is the bid CDF of one opponent of type ``s`` and ``c_s`` the number of such
    opponents. Each ``H_s, h_s, h_s'`` is a Gaussian KDE of that type's bids, and

    .. math::
        F_s = H_s^{c}, \quad F_s' = c H_s^{c-1} h_s, \quad
        F_s'' = c (c-1) H_s^{c-2} h_s^2 + c H_s^{c-1} h_s'

    are combined by the product rule. Unlike a KDE of the maximum, this keeps a (tiny but
    nonzero, correctly shaped) market density at bids far below the top when ``n`` is large,
    where the maximum has no samples.

    Args:
      bids: ``[B]``.
      opponent_bids: ``[K, S]`` bids of one opponent of each of ``K`` types.
      counts: ``K`` static opponent counts ``c_s >= 1``.
      bandwidth, chunk_size: as in :func:`kde_market_stats`.

    Returns:
      ``(G, g, dg)``, each ``[B]``.
    """
    counts = check_ints(counts, "counts", minimum=1)
    bids = checks.check_array(bids, "bids", ndim=1, dims="[B]", kind="float")
    opponent_bids = checks.check_array(opponent_bids, "opponent_bids", kind="float")
    if opponent_bids.ndim != 2 or opponent_bids.shape[0] != len(counts):
        raise ValueError(
            f"`opponent_bids` must be [len(counts)={len(counts)}, S], got {opponent_bids.shape}."
        )
    G, g, dg = jnp.ones_like(bids), jnp.zeros_like(bids), jnp.zeros_like(bids)
    for s, c in enumerate(counts):
        H, h, dh = kde_market_stats(bids, opponent_bids[s], bandwidth, chunk_size)
        if c == 1:
            F, dF, d2F = H, h, dh
        else:
            F = H**c
            dF = c * H ** (c - 1) * h
            d2F = c * (c - 1) * H ** (c - 2) * h * h + c * H ** (c - 1) * dh
        G, g, dg = G * F, g * F + G * dF, dg * F + 2.0 * g * dF + G * d2F
    return G, g, dg


def smoothed_derivatives(
    mechanism: str,
    bids: jax.Array,
    values: jax.Array,
    soft_max_others: jax.Array,
    max_others: jax.Array,
    temperature: float,
    risk_aversion: float = 1.0,
    chunk_size: int = 2048,
) -> tuple[jax.Array, jax.Array]:
    """``u'`` and ``u''`` of the softmax-smoothed interim utility, by autodiff, per bid.

    Args:
      bids, values: ``[B]``.
      soft_max_others, max_others: ``[S]`` per market sample (see
        :func:`~jaxlab.games.auctions.mechanisms.smoothed_ex_post_utility`).
      temperature: softmax temperature ``T > 0``.

    Returns:
      ``(u1, u2)``, each ``[B]``.
    """
    check_mechanism(mechanism, risk_aversion)
    check_positive_scalar(temperature, "temperature")
    bids = checks.check_array(bids, "bids", ndim=1, dims="[B]", kind="float")
    values = checks.check_array(values, "values", shape=bids.shape, dims="[B]", kind="float")
    soft_max_others = checks.check_array(soft_max_others, "soft_max_others", ndim=1, dims="[S]",
                                         kind="float")  # fmt: skip
    if soft_max_others.shape[0] < 1:
        raise ValueError("`soft_max_others` must hold at least one market sample, got none.")
    max_others = checks.check_array(max_others, "max_others", shape=soft_max_others.shape,
                                    dims="[S]", kind="float")  # fmt: skip
    checks.check_int(chunk_size, "chunk_size", minimum=1)

    def sums(market, mask):
        soft, hard = market

        def total(b, v):
            ex_post = _smoothed_ex_post_utility(
                mechanism, b, v, soft, hard, temperature, risk_aversion
            )
            return jnp.sum(ex_post * mask)

        d1 = jax.grad(total)
        d2 = jax.grad(d1)
        return jax.vmap(d1)(bids, values), jax.vmap(d2)(bids, values)

    market = jax.lax.stop_gradient((soft_max_others, max_others))
    return chunked_sample_mean(sums, market, chunk_size)

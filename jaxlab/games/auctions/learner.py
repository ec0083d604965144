"""Learning BNE with bid networks: Utility Gradient (UG) and Approximate Best Response (aBR).

Each bidder *type* has one bid network ``beta_theta: v -> b`` (MLP 1-32-32-1, ReLU, ``abs``
output); all bidders of a type share it. One step (Algorithm "stochastic approximate BR gradient"):

1. **Market** (no gradient): draw ``S_j`` value profiles for all ``n`` bidders, push them through
   the networks, and for one representative bidder per type take ``m = max_{j != i} b_j``
   (bidders of a type are exchangeable, so one market per type suffices: the symmetric trick).
   With ``ante_bidders="all"`` every bidder gets its own market from the same profiles, as in
   the official code.
2. **Ante samples**: draw ``S_i`` values per type (``"all"``: per bidder, ``n S_i`` in all),
   bids ``b = beta_theta(v)``.
3. **Interim derivatives** ``u'(b; v), u''(b; v)``: closed form from the KDE of the market
   (``estimator="kde"``, the paper's analytic gradient) or autodiff of the softmax-smoothed
   market (``estimator="smooth"``, the SM baseline).
4. **Bid-space gradient** of the loss, per sample:

   .. math::
       \\partial L / \\partial b = \\begin{cases} u'/u'' & \\text{aBR gate open} \\\\
       -u' & \\text{otherwise (UG)} \\end{cases}

   The aBR gate is open when ``method == "abr"``, ``step >= init_steps`` (UG warm-up), the
   utility is locally concave ``u'' < -c2`` and nearly stationary ``|u'| < c1``. ``u'/u''`` is the
   gradient of the Best Response Distance ``1/2 (b - sg[b - u'/u''])^2`` (one Newton step).
5. Back-propagate ``mean_i (sg[dL/db_i] * b_i)`` into the network (weighted by the type's share of
   bidders, which matches the official normalisation by the total number of bid samples; with
   ``"all"``, exactly that normalisation) and take an SGD step.

Two options make the every-bidder protocol affordable on a CPU without changing its numbers
beyond float rounding (breakpoints) or a measured ~1e-4 relative error (binning):
``piecewise_market`` evaluates the ReLU networks at the ``n S_j`` market values by interpolating
between their exact breakpoints (:func:`bid_knots`, looked up through a cell table by
:func:`eval_knots`), and ``kde_bins_per_bandwidth`` bins the market on a grid of spacing
``h / r`` before the kernel sums (each bid summing only the grid points within ``6 h`` when
that is at most half the grid: float rounding apart, the same sums).

Bidder types and seeds are vmapped (types inside the step, seeds with ``jax.vmap`` over whole
states); the ante-sample axis can be sharded across a mesh (``mesh=``), the market replicated.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Literal, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from jax.sharding import Mesh

from jaxlab.core import checks
from jaxlab.core.checks import (
    check_bool,
    check_choice,
    check_count,
    check_int,
    check_ints,
    check_positive_scalar,
)
from jaxlab.core.nn import MLP
from jaxlab.core.sharding import check_divisible, constrain_batch
from jaxlab.games.auctions import bne as bne_lib
from jaxlab.games.auctions.market import (
    binned_kde_market_stats,
    kde_market_stats,
    product_market_stats,
    smoothed_derivatives,
)
from jaxlab.games.auctions.mechanisms import check_mechanism, interim_derivatives

__all__ = [
    "AuctionGame",
    "BidNet",
    "GradientEstimate",
    "Learner",
    "LearnerConfig",
    "LearnerState",
    "bid_activation",
    "bid_knots",
    "eval_knots",
    "make_learner",
]


# ----------------------------------------------------------------------------- configuration


@dataclasses.dataclass(frozen=True)
class AuctionGame:
    """A single-item sealed-bid auction with independent uniform private values.

    Attributes:
      mechanism: ``"fp"`` (first price), ``"sp"`` (second price) or ``"allpay"``.
      bidders_per_type: bidders of each type, e.g. ``(10,)`` symmetric, ``(1, 1)`` asymmetric.
      value_ranges: ``(low, high)`` of each type's uniform value prior.
      risk_aversion: CRRA ``rho`` in (0, 1]; 1 is risk neutral (the spec's risk-averse runs: 0.5).
    """

    mechanism: str = "fp"
    bidders_per_type: tuple[int, ...] = (2,)
    value_ranges: tuple[tuple[float, float], ...] = ((0.0, 1.0),)
    risk_aversion: float = 1.0

    def __post_init__(self):
        check_mechanism(self.mechanism, self.risk_aversion)
        counts, ranges = bne_lib.check_types(self.bidders_per_type, self.value_ranges)
        object.__setattr__(self, "bidders_per_type", counts)  # tuples: hashable, jit-static
        object.__setattr__(self, "value_ranges", ranges)

    @property
    def n_bidders(self) -> int:
        return sum(self.bidders_per_type)

    @property
    def n_types(self) -> int:
        return len(self.bidders_per_type)

    def bne(self) -> tuple[Callable, ...]:
        """Per-type analytic BNE (raises ``NotImplementedError`` where there is none here)."""
        return bne_lib.game_bne(
            self.mechanism, self.bidders_per_type, self.value_ranges, self.risk_aversion
        )


@dataclasses.dataclass(frozen=True)
class LearnerConfig:
    """Hyperparameters of the learners (defaults: the official symmetric scripts).

    Attributes:
      method: ``"ug"`` (utility gradient) or ``"abr"`` (approximate best response).
      estimator: ``"kde"`` (closed-form derivatives, KDE of the market price: the paper),
        ``"product_kde"`` (closed form, market CDF as a product of per-opponent KDEs: an
        ablation, not in the paper) or ``"smooth"`` (the SM baseline).
      learning_rate: SGD step size (0.05 symmetric, 0.2 asymmetric in the paper).
      ante_samples: ``S_i`` values per type per step.
      market_samples: ``S_j`` market samples per step.
      bandwidth: KDE bandwidth ``h``.
      temperature: SM softmax temperature.
      chunk_size: market samples per chunk of the ``S_i x S_j`` kernel (memory bound).
      forward_batch: market profiles pushed through the networks at once (``lax.map`` batches:
        cache-friendly on CPU and bounded memory; raise it on accelerators).
      init_steps: UG warm-up steps before the aBR gate may open.
      first_order_tol: ``c1``, the gate needs ``|u'| < c1`` (0.05 for risk-averse/asymmetric).
      curvature_tol: ``c2``, the gate needs ``u'' < -c2``.
      newton_clip: optional bound on ``|u'/u''|`` (not in the paper; ``None`` = unclipped).
      hidden: hidden widths of the bid network.
      output: ``"abs"``, ``"relu"`` or ``"exp"`` output activation (bids >= 0).
      ante_bidders: ``"representative"`` (one bidder per type draws ``S_i`` values against one
        market: the symmetric trick, ``1/n`` of the official samples) or ``"all"`` (every one
        of the ``n`` bidders draws ``S_i`` values and is scored against its own market
        ``max_{j != i} b_j`` over the same ``S_j`` profiles, and the gradient averages all
        ``n S_i`` samples: the official code). ``"all"`` needs ``estimator="kde"``.
      kde_bins_per_bandwidth: ``None`` (exact KDE over the ``S_j`` samples: the paper) or
        ``r``: linearly bin the market onto a grid of spacing ``h / r`` first
        (:func:`~jaxlab.games.auctions.market.binned_kde_market_stats`; relative error about
        ``1 / (8 r^2)``; an option for speed, not the paper).
      piecewise_market: evaluate the networks at the ``S_j n`` market values by interpolating
        between their exact breakpoints (:func:`bid_knots`, :func:`eval_knots`; equal to the
        forward pass up to float rounding; measured 4.8 ms against the forward pass's 65 ms
        for 5 x 10^5 values of five vmapped ``(32, 32)`` networks); needs 1 or 2 hidden
        layers.
    """

    method: Literal["ug", "abr"] = "abr"
    estimator: Literal["kde", "product_kde", "smooth"] = "kde"
    learning_rate: float = 0.05
    ante_samples: int = 256
    market_samples: int = 10_000
    bandwidth: float = 0.05
    temperature: float = 0.05
    chunk_size: int = 2048
    forward_batch: int = 1024
    init_steps: int = 200
    first_order_tol: float = 0.01
    curvature_tol: float = 1e-8
    newton_clip: float | None = None
    hidden: tuple[int, ...] = (32, 32)
    output: Literal["abs", "relu", "exp"] = "abs"
    ante_bidders: Literal["representative", "all"] = "representative"
    kde_bins_per_bandwidth: float | None = None
    piecewise_market: bool = False

    def __post_init__(self):
        check_choice(self.method, "method", ("ug", "abr"))
        check_choice(self.estimator, "estimator", ("kde", "product_kde", "smooth"))
        check_choice(self.ante_bidders, "ante_bidders", ("representative", "all"))
        if self.ante_bidders == "all" and self.estimator != "kde":
            raise ValueError(
                f"`ante_bidders='all'` needs `estimator='kde'`, got estimator={self.estimator!r}."
            )
        if self.kde_bins_per_bandwidth is not None:
            check_positive_scalar(self.kde_bins_per_bandwidth, "kde_bins_per_bandwidth")
            if self.estimator != "kde":
                raise ValueError(
                    "`kde_bins_per_bandwidth` applies to `estimator='kde'`, got "
                    f"estimator={self.estimator!r}."
                )
        check_choice(self.output, "output", ("abs", "relu", "exp"))
        for name in ("learning_rate", "bandwidth", "temperature", "first_order_tol"):
            check_positive_scalar(getattr(self, name), name)
        check_positive_scalar(self.curvature_tol, "curvature_tol", strict=False)
        if self.newton_clip is not None:
            check_positive_scalar(self.newton_clip, "newton_clip")
        for name in ("ante_samples", "market_samples", "chunk_size", "forward_batch"):
            check_int(getattr(self, name), name, minimum=1)
        check_int(self.init_steps, "init_steps", minimum=0)
        check_bool(self.piecewise_market, "piecewise_market")
        hidden = check_ints(self.hidden, "hidden", minimum=1)
        object.__setattr__(self, "hidden", hidden)
        if self.piecewise_market and len(hidden) not in (1, 2):
            raise ValueError(f"`piecewise_market` needs 1 or 2 hidden layers, got hidden={hidden}.")


# ----------------------------------------------------------------------------- network


class BidNet(nn.Module):
    """Bid network ``v -> b``: :class:`jaxlab.core.nn.MLP` ``1 -> hidden -> 1`` and a bid >= 0.

    ReLU hidden layers, PyTorch's default Linear initialisation for kernels and biases
    (``init_scheme="torch"``, as torchvision's ``ops.MLP`` in the official code), then ``abs``,
    ``relu`` or ``exp`` of the scalar output. The MLP's layers sit at this module's level
    (``params["params"]["Dense_0"]``, ...), via ``nn.share_scope``.

    Call: ``net.apply(params, values [...]) -> bids [...]``.
    """

    hidden: tuple[int, ...] = (32, 32)
    output: str = "abs"

    def __post_init__(self):
        hidden = check_ints(self.hidden, "hidden", minimum=1)
        object.__setattr__(self, "hidden", hidden)
        check_choice(self.output, "output", _OUTPUTS)
        super().__post_init__()

    def setup(self):
        self.mlp = MLP((*self.hidden, 1), activation="relu", init_scheme="torch")
        nn.share_scope(self, self.mlp)

    def __call__(self, values: jax.Array) -> jax.Array:
        return _bid_activation(self.output, self.raw(values))

    def raw(self, values: jax.Array) -> jax.Array:
        """The MLP's scalar output before the bid activation (piecewise linear in ``v``)."""
        values = checks.check_array(values, "values", kind="float")
        return self.mlp(values[..., None])[..., 0]


_OUTPUTS = ("abs", "relu", "exp")


def bid_activation(output: str, x: jax.Array) -> jax.Array:
    """``abs``, ``relu`` or ``exp`` of the raw network output (bids >= 0)."""
    check_choice(output, "output", _OUTPUTS)
    return _bid_activation(output, checks.check_array(x, "x", kind="float"))


def _bid_activation(output: str, x: jax.Array) -> jax.Array:
    if output == "abs":
        return jnp.abs(x)
    if output == "relu":
        return nn.relu(x)
    return jnp.exp(x)


def bid_knots(net: BidNet, params: dict, lower: float, upper: float) -> tuple[jax.Array, jax.Array]:
    """Breakpoints of a ReLU bid network on ``[lower, upper]`` and its raw output there.

    A ReLU MLP of a scalar is piecewise linear: the first hidden layer bends at
    ``v = -b_1 / w_1`` (``H_1`` points), and between two such points the second layer's
    pre-activations are linear in ``v``, so each bends at most once there (``(H_1 + 1) H_2``
    points). Between consecutive breakpoints the raw output is exactly linear, so
    :func:`eval_knots` of the returned pair equals ``net.raw`` up to float rounding, at a few
    lookups per value instead of a ``1 x H_1 x H_2 x 1`` forward pass (``K = 1090`` slots for
    ``(32, 32)``; a freshly initialised one has 18 real breakpoints). Unused slots hold ``upper``;
    the array is sorted and starts at ``lower``.

    Args:
      net: the :class:`BidNet` (one or two hidden layers).
      params: one type's parameters (not stacked).
      lower, upper: the value range.

    Returns:
      ``(knots [K], raw [K])``.
    """
    if not isinstance(net, BidNet):
        raise TypeError(f"`net` must be a BidNet, got {type(net).__name__}.")
    if len(net.hidden) not in (1, 2):
        raise ValueError(f"`bid_knots` needs 1 or 2 hidden layers, got hidden={net.hidden}.")
    _check_type_params(net, params)
    bne_lib._check_support(lower, upper)
    layers = params["params"]
    w1, b1 = layers["Dense_0"]["kernel"][0], layers["Dense_0"]["bias"]

    def crossing(slope, intercept, a, b):  # zero of slope v + intercept strictly inside (a, b)
        root = -intercept / jnp.where(slope == 0, 1.0, slope)
        return jnp.where((slope != 0) & (root > a) & (root < b), root, upper)

    bounds = jnp.array([lower, upper], w1.dtype)
    first = jnp.sort(jnp.concatenate([bounds[:1], crossing(w1, b1, lower, upper), bounds[1:]]))
    knots = [first]
    if len(net.hidden) == 2:
        w2, b2 = layers["Dense_1"]["kernel"], layers["Dense_1"]["bias"]
        a, b = first[:-1], first[1:]  # H_1 + 1 intervals with a fixed first-layer pattern
        active = ((0.5 * (a + b))[:, None] * w1[None] + b1[None]) > 0  # [I, H_1]
        knots.append(crossing(
            (active * w1[None]) @ w2, (active * b1[None]) @ w2 + b2[None], a[:, None], b[:, None]
        ).ravel())  # fmt: skip
    knots = jnp.sort(jnp.concatenate(knots))
    return knots, net.apply(params, knots, method=BidNet.raw)


def _check_type_params(net: BidNet, params) -> None:
    """``params`` must be one type's (unstacked) parameters of ``net``."""
    widths = (*net.hidden, 1)
    try:
        layers = params["params"]
        shapes = [np.shape(layers[f"Dense_{i}"]["kernel"]) for i in range(len(widths))]
        biases = [np.shape(layers[f"Dense_{i}"]["bias"]) for i in range(len(widths))]
    except (KeyError, TypeError, IndexError):
        raise ValueError(
            "`params` must be one type's BidNet parameters {'params': {'Dense_0': {'kernel', "
            f"'bias'}}, ...}} for hidden={net.hidden}, got {type(params).__name__}."
        ) from None
    want = [(i, o) for i, o in zip((1, *net.hidden), widths, strict=True)]
    if shapes != want or biases != [(o,) for o in widths]:
        raise ValueError(
            f"`params` must be one type's parameters for hidden={net.hidden} (kernels {want}), "
            f"got kernels {shapes} (stacked over types? pass params of one type)."
        )
    for leaf in jax.tree_util.tree_leaves(params):
        checks.check_array(leaf, "params")


def eval_knots(knots: jax.Array, raw: jax.Array, values: jax.Array, cells: int = 2048) -> jax.Array:
    """Linear interpolation of ``raw`` at ``knots`` (from :func:`bid_knots`): the raw output.

    Exact piecewise-linear evaluation for values in ``[knots[0], knots[-1]]`` without a binary
    search per value: ``[knots[0], knots[-1])`` is cut into ``cells`` equal cells, a table holds
    the last knot at or below each cell's left edge (``cells`` searches, not one per value),
    and each value starts at its cell's entry and steps forward past the knots inside its cell.
    The number of forward steps is the most knots any cell holds (a ``while`` loop, usually 1
    or 2; padding knots at ``knots[-1]`` are never stepped past), so the result is the same
    interval as ``searchsorted`` for any knot spacing; only the time depends on clustering.
    Five gathers per value instead of about 15, which is what the every-bidder market's
    ``n S_j`` evaluations per step spend their time on (measured 5x faster under ``vmap``).

    Args:
      knots: ``[K]`` sorted breakpoints, ``K >= 2``, ``knots[0] < knots[-1]``.
      raw: ``[K]`` the raw output at the knots.
      values: any shape, in ``[knots[0], knots[-1]]`` (checked where concrete).
      cells: static table size (time only, not the result).
    """
    knots = checks.check_array(knots, "knots", ndim=1, dims="[K]", kind="float")
    if knots.shape[0] < 2:
        raise ValueError(f"`knots` must hold K >= 2 breakpoints, got shape {knots.shape}.")
    raw = checks.check_array(raw, "raw", shape=knots.shape, dims="[K]", kind="float")
    values = checks.check_array(values, "values", kind="float")
    check_int(cells, "cells", minimum=1)
    if checks.is_concrete(knots):
        k = np.asarray(jax.device_get(knots))
        if np.any(np.diff(k) < 0) or not k[0] < k[-1]:
            raise ValueError(
                f"`knots` must be sorted ascending with knots[0] < knots[-1], got {k[:6]}..."
            )
        if checks.is_concrete(values):
            v = np.asarray(jax.device_get(values))
            tol = 1e-6 * max(1.0, float(np.abs(k).max()))
            if v.size and (v.min() < k[0] - tol or v.max() > k[-1] + tol):
                raise ValueError(
                    f"`values` must lie in [knots[0], knots[-1]] = [{k[0]:.4g}, {k[-1]:.4g}] "
                    f"(the interpolation is exact there only); got [{v.min():.4g}, "
                    f"{v.max():.4g}]."
                )
    n = knots.shape[0]
    lo, hi = knots[0], knots[-1]
    scale = cells / (hi - lo)
    edges = lo + jnp.arange(cells, dtype=knots.dtype) / scale
    start = jnp.clip(jnp.searchsorted(knots, edges, side="right") - 1, 0, n - 2)
    below_hi = jnp.searchsorted(knots, hi, side="left") - 1  # the last knot strictly below hi
    most_in_a_cell = jnp.max(jnp.diff(jnp.concatenate([start, below_hi[None]])))
    width = knots[1:] - knots[:-1]
    slope = jnp.where(width > 0, (raw[1:] - raw[:-1]) / jnp.where(width > 0, width, 1.0), 0.0)
    table = jnp.stack([knots[:-1], raw[:-1], slope], axis=-1)  # one row gather per value

    cell = jnp.clip(jnp.floor((values - lo) * scale).astype(jnp.int32), 0, cells - 1)
    i = start[cell]
    i = jnp.maximum(i - (knots[i] > values), 0)  # a value rounded into the next cell

    def forward(_, i):
        return jnp.where((i < n - 2) & (knots[jnp.minimum(i + 1, n - 1)] <= values), i + 1, i)

    i = jax.lax.fori_loop(0, most_in_a_cell + 1, forward, i)
    row = table[i]
    return row[..., 1] + row[..., 2] * (values - row[..., 0])


# ----------------------------------------------------------------------------- state


@struct.dataclass
class LearnerState:
    """Training state of :func:`make_learner` (a pytree; ``T`` = number of bidder types).

    Attributes:
      params: bid-network parameters stacked over bidder types: ``{"params": {"Dense_k":
        {"kernel": [T, d_in, d_out], "bias": [T, d_out]}}}`` (``Dense_0`` has ``d_in = 1``, the
        last ``d_out = 1``).
      opt_state: ``optax.sgd``'s state for ``params`` (stateless SGD: empty).
      key: ``[]`` typed PRNG key of the run; step ``t`` draws from ``fold_in(key, t)``.
      step: ``[]`` int32, steps taken.
    """

    params: dict
    opt_state: optax.OptState
    key: jax.Array
    step: jax.Array


class GradientEstimate(NamedTuple):
    """One step's estimate. Arrays are ``[T, S_i]`` (types x ante samples), or ``[N, S_i]``
    (bidders x ante samples) with ``ante_bidders="all"``."""

    values: jax.Array
    bids: jax.Array
    u1: jax.Array
    u2: jax.Array
    gate: jax.Array  # bool: aBR (Newton) gradient used
    bid_grad: jax.Array  # dL/db per sample (before the 1/S_i mean)


class Learner(NamedTuple):
    """The learner's pure functions (see :func:`make_learner`)."""

    init: Callable[[jax.Array], LearnerState]
    step: Callable[..., tuple[LearnerState, dict]]
    estimate: Callable[[dict, jax.Array, jax.Array], GradientEstimate]
    gradient: Callable[[dict, jax.Array, jax.Array], tuple[dict, GradientEstimate]]
    bid_fn: Callable[[dict, int], Callable[[jax.Array], jax.Array]]
    sample_market: Callable[[dict, jax.Array], jax.Array]
    net: BidNet


def _all_finite(*trees) -> jax.Array:
    leaves = jax.tree_util.tree_leaves(trees)
    return functools.reduce(jnp.logical_and, [jnp.all(jnp.isfinite(x)) for x in leaves])


def make_learner(game: AuctionGame, config: LearnerConfig, mesh: Mesh | None = None) -> Learner:
    """Build the pure ``init``/``step`` pair (and helpers) for ``game`` under ``config``.

    Args:
      game: the auction.
      config: learner hyperparameters (``method`` picks UG or aBR).
      mesh: optional 1-D ``"data"`` mesh; the ante-sample axis ``S_i`` is then sharded across it
        (it must be a multiple of the device count) and the market replicated.

    Returns:
      A :class:`Learner`: ``init(key) -> state``; ``step(state, x=None) -> (state, metrics)``
      (``x`` is unused: every step draws its own samples) with metrics ``abr_fraction`` (share of
      samples under the Newton gradient), ``mean_abs_u1``, ``brd`` (mean ``1/2 (u'/u'')^2``
      over gated samples) and ``finite`` (``False`` once a derivative or the new parameters
      hold a NaN / inf: the other metrics of that step are then not valid);
      ``estimate(params, key, step)`` (the bid-space estimate, rows per type or, with
      ``ante_bidders="all"``, per bidder);
      ``gradient(params, key, step) -> (param_grads, estimate)``; ``bid_fn(params, type)``;
      ``sample_market(params, key) -> [T, S_j]``.
    """
    if not isinstance(game, AuctionGame):
        raise TypeError(f"`game` must be an AuctionGame, got {type(game).__name__}.")
    if not isinstance(config, LearnerConfig):
        raise TypeError(f"`config` must be a LearnerConfig, got {type(config).__name__}.")
    if mesh is not None and not isinstance(mesh, Mesh):
        raise TypeError(f"`mesh` must be a jax.sharding.Mesh or None, got {type(mesh).__name__}.")
    if mesh is not None:
        check_divisible(config.ante_samples, mesh, "ante_samples")
    net = BidNet(hidden=config.hidden, output=config.output)
    n_types, counts = game.n_types, game.bidders_per_type
    lows = jnp.array([lo for lo, _ in game.value_ranges], jnp.float32)
    highs = jnp.array([hi for _, hi in game.value_ranges], jnp.float32)
    share = jnp.array([c / game.n_bidders for c in counts], jnp.float32)
    type_of = np.repeat(np.arange(n_types), counts)  # [N] static bidder -> type
    rep = np.array([int(np.argmax(type_of == t)) for t in range(n_types)])  # representative
    # others[t, j]: bidder j is an opponent of type t's representative
    others = jnp.asarray(np.arange(game.n_bidders)[None, :] != rep[:, None])
    # product estimator: for each type t, one opponent column per opponent type and its count
    opp_types = [
        [(int(np.flatnonzero((type_of == s) & (np.arange(game.n_bidders) != rep[t]))[0]),
          counts[s] - (s == t)) for s in range(n_types) if counts[s] - (s == t) > 0]
        for t in range(n_types)
    ]  # fmt: skip
    optimizer = optax.sgd(config.learning_rate)

    def type_params(params, t):
        return jax.tree_util.tree_map(lambda p: p[t], params)

    def bid_fn(params, t):
        check_params(params)
        check_type(t)
        return lambda v: net.apply(type_params(params, t), v)

    def _init(key: jax.Array) -> LearnerState:
        k_init, k_run = jax.random.split(key)
        keys = jax.random.split(k_init, n_types)
        params = jax.vmap(lambda k: net.init(k, jnp.zeros((1,))))(keys)
        return LearnerState(params, optimizer.init(params), k_run, jnp.zeros((), jnp.int32))

    def init(key: jax.Array) -> LearnerState:
        return _init(checks.check_key(key, "key"))

    expected = []  # the state's abstract shapes, built on first use

    def expected_state() -> LearnerState:
        if not expected:
            expected.append(jax.eval_shape(lambda: _init(jax.random.key(0))))
        return expected[0]

    def check_params(params, name: str = "params") -> None:
        """``params`` must be this learner's (stacked over types) parameters."""
        want = expected_state().params
        want_tree, want_leaves = jax.tree_util.tree_structure(want), jax.tree_util.tree_leaves(want)
        try:
            ok = jax.tree_util.tree_structure(params) == want_tree
        except Exception:  # noqa: BLE001  any non-pytree
            ok = False
        shapes = [np.shape(x) for x in jax.tree_util.tree_leaves(params)] if ok else None
        if not ok or shapes != [w.shape for w in want_leaves]:
            kind = type(params).__name__
            got = f"kernels {shapes[1::2]}" if ok else f"another structure ({kind})"
            raise ValueError(
                f"`{name}` must be this learner's parameters ({n_types} type(s), "
                f"hidden={config.hidden}: kernels {[w.shape for w in want_leaves][1::2]}); got "
                f"{got} (built for another game or network?)."
            )
        for leaf in jax.tree_util.tree_leaves(params):
            checks.check_array(leaf, name)

    def check_step(step):
        return check_count(step, "step", 0)

    def check_type(t):
        t = check_count(t, "t", 0)
        if checks.is_concrete(t) and int(t) >= n_types:
            raise ValueError(f"`t` must be a bidder type in [0, {n_types}), got {int(t)}.")
        return t

    def check_state(state):
        if not isinstance(state, LearnerState):
            raise TypeError(
                f"`state` must be a LearnerState (from init), got {type(state).__name__}."
            )
        check_params(state.params, "state.params")
        checks.check_same_tree(state.opt_state, "state.opt_state", expected_state().opt_state,
                               "this learner's optax.sgd state")  # fmt: skip
        checks.check_key(state.key, "state.key")
        check_count(state.step, "state.step", 0)

    def all_bids(params, key, n_samples):
        """Values and bids of all n bidders: ``[S, N]`` each (types via their own network)."""
        u = jax.random.uniform(key, (n_samples, game.n_bidders))
        t = jnp.asarray(type_of)
        values = lows[t][None, :] + (highs[t] - lows[t])[None, :] * u

        if config.piecewise_market:  # exact breakpoints, then interpolation per value
            blocks = []  # the columns are grouped by type, in type order
            for s, (lo, hi) in enumerate(game.value_ranges):
                knots, raw = bid_knots(net, type_params(params, s), lo, hi)
                cols = values[:, type_of == s]
                blocks.append(bid_activation(config.output, eval_knots(knots, raw, cols)))
            return values, jnp.concatenate(blocks, axis=1)

        def profile_bids(row):  # [N] values of one profile -> [N] bids
            return jnp.concatenate(
                [net.apply(type_params(params, s), row[type_of == s]) for s in range(n_types)]
            )

        batch = min(config.forward_batch, n_samples)
        return values, jax.lax.map(profile_bids, values, batch_size=batch)

    def leave_one_out_markets(params, key):
        """Every bidder's market ``max_{j != i} b_j`` over the same profiles: ``[N, S_j]``."""
        _, bids = all_bids(jax.lax.stop_gradient(params), key, config.market_samples)
        first, winner = jnp.max(bids, axis=-1), jnp.argmax(bids, axis=-1)  # [S_j] (faster
        me = jnp.arange(game.n_bidders)  # than lax.top_k on CPU)
        second = jnp.max(jnp.where(winner[:, None] == me[None], -jnp.inf, bids), axis=-1)
        return jnp.where(winner[None, :] == me[:, None], second[None, :], first[None, :])

    def market_bids(params, key):
        """Opponents' bids per type's representative: ``[T, S_j, N]`` (own bid = -inf)."""
        _, bids = all_bids(jax.lax.stop_gradient(params), key, config.market_samples)
        return jnp.where(others[:, None, :], bids[None], -jnp.inf)

    def sample_market(params, key):
        """Market price (highest opposing bid) for each type: ``[T, S_j]``."""
        check_params(params)
        return jnp.max(market_bids(params, checks.check_key(key, "key")), axis=-1)

    grid_size = None
    if config.kde_bins_per_bandwidth is not None:  # spacing h / r over the value span
        span = max(hi for _, hi in game.value_ranges)
        grid_size = int(np.ceil(config.kde_bins_per_bandwidth * span / config.bandwidth)) + 1

    def kde_derivatives(bids, values, market):
        """u', u'' from the (exact or binned) KDE of ``market [S_j]`` at ``bids [S_i]``."""
        if grid_size is None:
            stats = kde_market_stats(bids, market, config.bandwidth, config.chunk_size)
        else:
            stats = binned_kde_market_stats(
                bids, market, config.bandwidth, grid_size, config.kde_bins_per_bandwidth,
                config.chunk_size,
            )  # fmt: skip
        return interim_derivatives(game.mechanism, bids, values, *stats, game.risk_aversion)

    def derivatives(t, bids, values, opp):
        """u', u'' for type ``t``: bids/values ``[S_i]``, opponents' bids ``[S_j, N]``."""
        if config.estimator == "kde":
            return kde_derivatives(bids, values, jnp.max(opp, axis=-1))
        if config.estimator == "product_kde":
            columns = jnp.stack([opp[:, j] for j, _ in opp_types[t]])
            counts_t = tuple(c for _, c in opp_types[t])
            stats = product_market_stats(
                bids, columns, counts_t, config.bandwidth, config.chunk_size
            )
            return interim_derivatives(game.mechanism, bids, values, *stats, game.risk_aversion)
        temp = config.temperature
        soft = temp * jax.nn.logsumexp(opp / temp, axis=-1)
        return smoothed_derivatives(
            game.mechanism, bids, values, soft, jnp.max(opp, axis=-1), temp,
            game.risk_aversion, config.chunk_size,
        )  # fmt: skip

    def gather_bidders(params):  # stacked per type [T, ...] -> per bidder [N, ...]
        return jax.tree_util.tree_map(lambda p: p[jnp.asarray(type_of)], params)

    def ante_values(key):
        """Ante values ``[R, S_i]``: one row per type's representative, or per bidder."""
        t = jnp.arange(n_types) if config.ante_bidders == "representative" else type_of
        u = jax.random.uniform(key, (len(t), config.ante_samples))
        return constrain_batch(lows[t, None] + (highs[t] - lows[t])[:, None] * u, mesh, axis=1)

    def row_params(params):
        return params if config.ante_bidders == "representative" else gather_bidders(params)

    def estimate(params, key, step) -> GradientEstimate:
        check_params(params)
        return _estimate(params, checks.check_key(key, "key"), check_step(step))

    def _estimate(params, key, step) -> GradientEstimate:
        k_market, k_ante = jax.random.split(key)
        values = ante_values(k_ante)
        bids = jax.vmap(net.apply)(row_params(jax.lax.stop_gradient(params)), values)
        if config.ante_bidders == "all":  # every bidder against its own market: [N, S_i]
            markets = leave_one_out_markets(params, k_market)
            # one bidder at a time: its [S_i, chunk] kernel blocks stay in cache (a vmap over
            # bidders is 2-3x slower on CPU)
            u1, u2 = jax.lax.map(lambda a: kde_derivatives(*a), (bids, values, markets))
            return _gated(values, bids, u1, u2, step)
        opp = market_bids(params, k_market)  # [T, S_j, N]
        if config.estimator == "product_kde":
            # opponent types differ per bidder type (static structure): loop over types
            per_type = [derivatives(t, bids[t], values[t], opp[t]) for t in range(n_types)]
            u1, u2 = (jnp.stack(u) for u in zip(*per_type, strict=True))
        else:  # same computation for every type: vmap over the type axis
            u1, u2 = jax.vmap(functools.partial(derivatives, None))(bids, values, opp)
        return _gated(values, bids, u1, u2, step)

    def _gated(values, bids, u1, u2, step) -> GradientEstimate:
        gate = (
            (config.method == "abr")
            & (step >= config.init_steps)
            & (u2 < -config.curvature_tol)
            & (jnp.abs(u1) < config.first_order_tol)
        )
        newton = u1 / jnp.where(gate, u2, -1.0)
        if config.newton_clip is not None:
            newton = jnp.clip(newton, -config.newton_clip, config.newton_clip)
        bid_grad = jnp.where(gate, newton, -u1)
        return GradientEstimate(values, bids, u1, u2, gate, bid_grad)

    def gradient(params, key, step) -> tuple[dict, GradientEstimate]:
        """Parameter gradient: back-propagate ``share_t * mean_i dL/db`` through the network."""
        check_params(params)
        return _gradient(params, checks.check_key(key, "key"), check_step(step))

    def _gradient(params, key, step) -> tuple[dict, GradientEstimate]:
        est = _estimate(params, key, step)
        if config.ante_bidders == "all":  # the mean over all n S_i bid samples (official)
            scale = jnp.full((game.n_bidders, 1), 1.0 / (game.n_bidders * config.ante_samples))
        else:  # the type's share of bidders times its mean: the same expectation
            scale = share[:, None] / config.ante_samples
        weight = jax.lax.stop_gradient(est.bid_grad) * scale

        def surrogate(p):
            return jnp.sum(weight * jax.vmap(net.apply)(row_params(p), est.values))

        return jax.grad(surrogate)(params), est

    def step(state: LearnerState, x=None) -> tuple[LearnerState, dict]:
        del x  # no per-step input: the samples come from fold_in(state.key, state.step)
        check_state(state)
        key = jax.random.fold_in(state.key, state.step)
        grads, est = _gradient(state.params, key, state.step)
        updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        n_gated = jnp.maximum(jnp.sum(est.gate), 1)
        metrics = {
            "abr_fraction": jnp.mean(est.gate),
            "mean_abs_u1": jnp.mean(jnp.abs(est.u1)),
            "brd": jnp.sum(jnp.where(est.gate, 0.5 * est.bid_grad**2, 0.0)) / n_gated,
            # a NaN / inf derivative closes the gate (and zeroes ``brd``): flag it, with the
            # parameters it produced
            "finite": _all_finite(est.u1, est.u2, params),
        }
        return LearnerState(params, opt_state, state.key, state.step + 1), metrics

    return Learner(init, step, estimate, gradient, bid_fn, sample_market, net)

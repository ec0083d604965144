"""jaxlab.games.auctions: every public entry point rejects bad input with a clear error.

One table of ``(entry point, argument, bad value, exception, message fragment)``: each entry point
is called with valid tiny inputs (built once below) except for the one argument. Every error is
raised at the boundary, before anything is traced or compiled (the learner's parameter shapes
come from ``jax.eval_shape``). The last tests check that a NaN inside ``jit`` (where it cannot be
rejected) is flagged: the step's ``finite`` metric, a NaN utility loss, never a finite number.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.sharding import data_mesh
from jaxlab.games import auctions as A

GAME = A.AuctionGame("fp", (2,))
CFG = A.LearnerConfig(ante_samples=4, market_samples=8, chunk_size=8, forward_batch=8,
                      hidden=(4,), init_steps=0)  # fmt: skip
LEARNER = A.make_learner(GAME, CFG)
KEY = jax.random.key(0)
SHAPES = jax.eval_shape(LEARNER.init, KEY).params  # no program runs
PARAMS = jax.tree.map(lambda s: np.full(s.shape, 0.5, s.dtype), SHAPES)
TYPE_PARAMS = jax.tree.map(lambda p: p[0], PARAMS)
OTHER = A.make_learner(GAME, dataclasses.replace(CFG, hidden=(3,)))
OTHER_PARAMS = jax.tree.map(
    lambda s: np.zeros(s.shape, s.dtype), jax.eval_shape(OTHER.init, KEY).params
)
STATE = A.LearnerState(PARAMS, jax.eval_shape(LEARNER.init, KEY).opt_state, KEY, np.int32(0))
BAD_KEYS = [0, np.zeros(2, np.float32), np.zeros(3, np.uint32), None]
B = np.array([0.2, 0.4, 0.6], np.float32)
M = np.array([0.1, 0.3, 0.5, 0.7], np.float32)
NAN3 = np.full(3, np.nan, np.float32)
KNOTS = np.array([0.0, 0.5, 1.0], np.float32)


def call(fn, /, **defaults):
    """``entry(argument, value)``: ``fn(**defaults)`` with ``argument`` set to ``value``."""

    def entry(argument, value):
        return fn(**{**defaults, argument: value})

    entry.__name__ = getattr(fn, "__name__", "entry")
    return entry


def game(argument, value):
    return dataclasses.replace(GAME, **{argument: value})


def config(argument, value):
    return dataclasses.replace(CFG, **{argument: value})


def bidnet(argument, value):
    return A.BidNet(**{argument: value})


def step(argument, value):
    return LEARNER.step(STATE.replace(**{argument: value}))


bid_activation = call(A.bid_activation, output="abs", x=B)
make_learner = call(A.make_learner, game=GAME, config=CFG, mesh=data_mesh())
init = call(LEARNER.init, key=KEY)
estimate = call(LEARNER.estimate, params=PARAMS, key=KEY, step=0)
gradient = call(LEARNER.gradient, params=PARAMS, key=KEY, step=0)
bid_fn = call(LEARNER.bid_fn, params=PARAMS, t=0)
market = call(LEARNER.sample_market, params=PARAMS, key=KEY)
knots = call(A.bid_knots, net=LEARNER.net, params=TYPE_PARAMS, lower=0.0, upper=1.0)
eval_knots = call(A.eval_knots, knots=KNOTS, raw=KNOTS, values=B)
derivs = call(A.interim_derivatives, mechanism="fp", bids=B, values=B, cdf=B, pdf=B, dpdf=B)
utility = call(A.interim_utility, mechanism="sp", bid=0.3, value=0.5, market_cdf=lambda b: b,
               market_pdf=lambda b: jnp.ones_like(b))  # fmt: skip
smoothed = call(A.smoothed_ex_post_utility, mechanism="fp", bid=0.3, value=0.5,
                soft_max_others=M, max_others=M, temperature=0.05)  # fmt: skip
crra = call(A.crra, z=B, rho=0.5)
kde = call(A.kde_market_stats, bids=B, market=M, bandwidth=0.05)
binned = call(A.binned_kde_market_stats, bids=B, market=M, bandwidth=0.05, grid_size=16)
product = call(A.product_market_stats, bids=B, opponent_bids=M[None], counts=(2,),
               bandwidth=0.05)  # fmt: skip
smooth_d = call(A.smoothed_derivatives, mechanism="fp", bids=B, values=B, soft_max_others=M,
                max_others=M, temperature=0.05)  # fmt: skip
chunked = call(A.chunked_sample_mean, fn=lambda chunk, mask: chunk, samples=M, chunk_size=2)
symmetric = call(A.symmetric_bne, mechanism="fp", n_bidders=3)
asymmetric = call(A.asymmetric_fp_bne, weak_upper=0.5, strong_upper=1.0)
game_bne = call(A.game_bne, mechanism="fp", bidders_per_type=(3,), value_ranges=((0.0, 1.0),))
l2 = call(A.l2_distance, bid_fn=lambda v: v, bne_fn=lambda v: v, lower=0.0, upper=1.0)
loss = call(A.grid_utility_loss, mechanism="fp", bid_fn=lambda v: v, market=M, lower=0.0,
            upper=1.0)  # fmt: skip

V, T = ValueError, TypeError
CASES = [
    # AuctionGame.__post_init__ (issue: bidders_per_type=(2.5,) was accepted)
    (game, "mechanism", "dutch", V, "`mechanism` must be one of"),
    (game, "mechanism", None, V, "`mechanism`"),
    (game, "bidders_per_type", (2.5,), V, "`bidders_per_type` must be an int"),
    (game, "bidders_per_type", (1,), V, "`bidders_per_type` needs n >= 2"),
    (game, "bidders_per_type", (0, 2), V, "`bidders_per_type` must be >= 1"),
    (game, "bidders_per_type", 3, T, "`bidders_per_type` must be a tuple"),
    (game, "bidders_per_type", "22", T, "`bidders_per_type`"),
    (game, "bidders_per_type", (True, 2), V, "`bidders_per_type`"),
    (game, "value_ranges", ((0.0, float("inf")),), V, "`value_ranges` must be finite"),
    (game, "value_ranges", ((float("nan"), 1.0),), V, "`value_ranges`"),
    (game, "value_ranges", ((1.0, 0.0),), V, "`value_ranges` needs 0 <= low < high"),
    (game, "value_ranges", ((-0.5, 1.0),), V, "`value_ranges` needs 0 <= low < high"),
    (game, "value_ranges", ((0.0, 0.5, 1.0),), V, "`value_ranges` must be \\(low, high\\)"),
    (game, "value_ranges", ((0.0, "1"),), T, "`value_ranges`"),
    (game, "value_ranges", "01", T, "`value_ranges` must be a tuple"),
    (game, "value_ranges", ((0.0, 1.0), (0.0, 1.0)), V, "`bidders_per_type` has 1 types"),
    (game, "risk_aversion", 0.0, V, "`risk_aversion`"),
    (game, "risk_aversion", 1.5, V, "`risk_aversion`"),
    (game, "risk_aversion", True, T, "`risk_aversion`"),
    (game, "risk_aversion", "0.5", T, "`risk_aversion`"),
    (game, "risk_aversion", float("nan"), V, "`risk_aversion`"),
    # LearnerConfig.__post_init__: every field (issue: a negative learning rate was accepted)
    (config, "method", "newton", V, "`method` must be one of"),
    (config, "estimator", "histogram", V, "`estimator`"),
    (config, "learning_rate", -0.1, V, "`learning_rate` must be > 0"),
    (config, "learning_rate", 0.0, V, "`learning_rate`"),
    (config, "learning_rate", float("nan"), V, "`learning_rate`"),
    (config, "learning_rate", float("inf"), V, "`learning_rate`"),
    (config, "learning_rate", "0.1", T, "`learning_rate`"),
    (config, "learning_rate", True, T, "`learning_rate`"),
    (config, "learning_rate", np.array([0.1, 0.2]), V, "`learning_rate` must be a scalar"),
    (config, "ante_samples", 0, V, "`ante_samples`"),
    (config, "ante_samples", 2.5, V, "`ante_samples` must be an int"),
    (config, "market_samples", -1, V, "`market_samples`"),
    (config, "bandwidth", 0.0, V, "`bandwidth` must be > 0"),
    (config, "temperature", -1.0, V, "`temperature`"),
    (config, "chunk_size", 0, V, "`chunk_size`"),
    (config, "forward_batch", 1.5, V, "`forward_batch`"),
    (config, "init_steps", -1, V, "`init_steps`"),
    (config, "first_order_tol", 0.0, V, "`first_order_tol`"),
    (config, "curvature_tol", -1.0, V, "`curvature_tol`"),
    (config, "newton_clip", 0.0, V, "`newton_clip`"),
    (config, "hidden", (32, 0), V, "`hidden`"),
    (config, "hidden", 32, T, "`hidden` must be a tuple"),
    (config, "hidden", (), V, "`hidden`"),
    (config, "output", "softplus", V, "`output`"),
    (config, "ante_bidders", "some", V, "`ante_bidders`"),
    (config, "kde_bins_per_bandwidth", 0.0, V, "`kde_bins_per_bandwidth`"),
    (config, "piecewise_market", "yes", T, "`piecewise_market` must be a bool"),
    # the network and its activation (an unknown output was silently exp)
    (bidnet, "hidden", (0,), V, "`hidden`"),
    (bidnet, "output", "tanh", V, "`output` must be one of"),
    (bid_activation, "output", "tanh", V, "`output` must be one of"),
    (bid_activation, "x", "a", T, "`x`"),
    # the learner factory and its functions: keys, params / states of another size, steps
    (make_learner, "game", "fp", T, "`game` must be an AuctionGame"),
    (make_learner, "config", None, T, "`config` must be a LearnerConfig"),
    (make_learner, "mesh", "data", T, "`mesh`"),
    (make_learner, "config", dataclasses.replace(CFG, ante_samples=6), V, "`ante_samples` has"),
    *[(init, "key", k, V, "`key` must be a PRNG key") for k in BAD_KEYS],
    (step, "params", OTHER_PARAMS, V, "`state.params` must be this learner's parameters"),
    (step, "key", 3, V, "`state.key`"),
    (step, "step", np.int32(-1), V, "`state.step`"),
    (step, "step", 0.5, V, "`state.step`"),
    (step, "opt_state", (), V, "`state.opt_state` must have the pytree structure"),
    (estimate, "params", OTHER_PARAMS, V, "`params` must be this learner's parameters"),
    (estimate, "params", {"params": 1}, V, "`params`"),
    (estimate, "params", jax.tree.map(lambda p: p * np.nan, PARAMS), V, "`params` must be finite"),
    *[(estimate, "key", k, V, "`key` must be a PRNG key") for k in BAD_KEYS[:3]],
    (estimate, "step", -1, V, "`step`"),
    (estimate, "step", 2.5, V, "`step` must be an int"),
    (estimate, "step", np.float32(1.0), V, "`step` must be an int"),
    (estimate, "step", np.array([1, 2]), T, "`step`"),
    (gradient, "params", TYPE_PARAMS, V, "`params` must be this learner's parameters"),
    (gradient, "key", np.zeros(3, np.uint32), V, "`key`"),
    (gradient, "step", "0", V, "`step`"),
    (bid_fn, "t", 1, V, "`t` must be a bidder type in \\[0, 1\\)"),
    (bid_fn, "t", -1, V, "`t`"),
    (bid_fn, "t", 0.5, V, "`t` must be an int"),
    (bid_fn, "params", OTHER_PARAMS, V, "`params`"),
    (market, "key", 1.5, V, "`key`"),
    (market, "params", None, V, "`params`"),
    (knots, "net", "net", T, "`net` must be a BidNet"),
    (knots, "params", PARAMS, V, "`params` must be one type's parameters"),
    (knots, "params", {}, V, "`params` must be one type's BidNet parameters"),
    (knots, "lower", 1.0, V, "`lower` < `upper`"),
    (knots, "upper", float("nan"), V, "`upper`"),
    (eval_knots, "knots", KNOTS[::-1].copy(), V, "`knots` must be sorted ascending"),
    (eval_knots, "knots", KNOTS[:1], V, "`knots` must hold K >= 2"),
    (eval_knots, "raw", KNOTS[:2], V, "`raw` must have shape"),
    (eval_knots, "knots", np.array([0.0, np.nan, 1.0], np.float32), V, "`knots` must be finite"),
    (eval_knots, "cells", 0, V, "`cells`"),
    (eval_knots, "values", "a", T, "`values`"),
    (eval_knots, "values", B + 1.0, V, r"`values` must lie in \[knots\[0\], knots\[-1\]\]"),
    # mechanisms: closed forms, exact and smoothed utilities
    (derivs, "mechanism", "dutch", V, "`mechanism`"),
    (derivs, "risk_aversion", 0.0, V, "`risk_aversion`"),
    (derivs, "values", B[:2], V, "`values` must have shape"),
    (derivs, "cdf", 1.5 + B, V, "`cdf` must lie in"),
    (derivs, "pdf", -B, V, "`pdf` must be nonnegative"),
    (derivs, "bids", NAN3, V, "`bids` must be finite"),
    (derivs, "bids", -B, V, "`bids` must be nonnegative"),
    (derivs, "values", B.astype(str), T, "`values`"),
    (derivs, "values", -B, V, "`values` must be nonnegative"),
    (utility, "bid", B, V, "`bid` must have rank 0"),
    (utility, "market_cdf", None, T, "`market_cdf` must be callable"),
    (utility, "value", float("nan"), V, "`value` must be finite"),
    (utility, "value", -0.5, V, "`value` must be nonnegative"),
    (utility, "risk_aversion", 2.0, V, "`risk_aversion`"),
    (smoothed, "mechanism", "dutch", V, "`mechanism`"),
    (smoothed, "temperature", 0.0, V, "`temperature`"),
    (smoothed, "max_others", M[:3], V, "`max_others` must have shape"),
    (smoothed, "bid", -0.1, V, "`bid` must be nonnegative"),
    (crra, "rho", 0.0, V, "`rho`"),
    (crra, "rho", 1.5, V, "`rho`"),
    (crra, "z", "a", T, "`z`"),
    # market estimates
    (kde, "bids", B[None], V, "`bids` must have rank 1"),
    (kde, "market", M[:0], V, "`market` must hold at least one sample"),
    (kde, "market", np.full(4, np.nan, np.float32), V, "`market` must be finite"),
    (kde, "bandwidth", -0.1, V, "`bandwidth` must be > 0"),
    (kde, "bandwidth", float("nan"), V, "`bandwidth`"),
    (kde, "bandwidth", "0.1", T, "`bandwidth`"),
    (kde, "chunk_size", 0, V, "`chunk_size`"),
    (kde, "chunk_size", 2.5, V, "`chunk_size`"),
    (kde, "bids", ["a", "b"], T, "`bids`"),
    (binned, "grid_size", 1, V, "`grid_size`"),
    (binned, "grid_size", 2.5, V, "`grid_size`"),
    (binned, "bins_per_bandwidth", 0.0, V, "`bins_per_bandwidth`"),
    (binned, "reach", 0.0, V, "`reach`"),
    (binned, "reach", float("nan"), V, "`reach`"),
    (product, "counts", (2.5,), V, "`counts` must be an int"),
    (product, "counts", (0,), V, "`counts`"),
    (product, "counts", 2, T, "`counts` must be a tuple"),
    (product, "opponent_bids", M, V, "`opponent_bids` must be"),
    (product, "opponent_bids", np.stack([M, M]), V, "`opponent_bids` must be"),
    (smooth_d, "temperature", 0.0, V, "`temperature`"),
    (smooth_d, "values", B[:2], V, "`values` must have shape"),
    (smooth_d, "max_others", M[:2], V, "`max_others` must have shape"),
    (smooth_d, "soft_max_others", M[:0], V, "`soft_max_others` must hold at least one"),
    (smooth_d, "chunk_size", 0, V, "`chunk_size`"),
    (smooth_d, "mechanism", "x", V, "`mechanism`"),
    (chunked, "fn", None, T, "`fn` must be callable"),
    (chunked, "chunk_size", 0, V, "`chunk_size`"),
    (chunked, "samples", M[:0], V, "`samples` must be arrays sharing a leading sample axis"),
    (chunked, "samples", (M, B), V, "`samples` must be arrays sharing"),
    (chunked, "samples", {}, V, "`samples` must hold at least one array"),
    (chunked, "samples", M * np.inf, V, "`samples` must be finite"),
    # equilibria and evaluation
    (symmetric, "n_bidders", 1, V, "`n_bidders` must be >= 2"),
    (symmetric, "n_bidders", 2.5, V, "`n_bidders` must be an int"),
    (symmetric, "n_bidders", "3", V, "`n_bidders`"),
    (symmetric, "upper", 0.0, V, "`upper`"),
    (symmetric, "risk_aversion", 1.5, V, "`risk_aversion`"),
    (symmetric, "mechanism", "dutch", V, "`mechanism`"),
    (
        call(A.symmetric_bne, mechanism="allpay", n_bidders=3),
        "risk_aversion",
        0.5,
        NotImplementedError,
        "`risk_aversion` must be 1.0 for an all-pay closed form",
    ),
    (game_bne, "value_ranges", ((0.5, 1.0),), V, "`value_ranges` must start at 0"),
    (
        call(A.game_bne, mechanism="fp", value_ranges=((0.0, 1.0), (0.0, 1.0))),
        "bidders_per_type",
        (2, 1),
        NotImplementedError,
        "no closed-form BNE",
    ),
    (asymmetric, "weak_upper", 1.0, V, "`weak_upper` must be < `strong_upper`"),
    (asymmetric, "weak_upper", 0.0, V, "`weak_upper`"),
    (asymmetric, "strong_upper", float("nan"), V, "`strong_upper`"),
    (game_bne, "bidders_per_type", (2.5,), V, "`bidders_per_type`"),
    (game_bne, "value_ranges", ((0.0, 1.0), (0.0, 1.0)), V, "`bidders_per_type` has 1 types"),
    (l2, "lower", -1.0, V, "`lower`"),
    (l2, "bid_fn", lambda v: v * jnp.nan, V, r"`bid_fn\(values\)` must be finite"),
    (l2, "lower", float("nan"), V, "`lower`"),
    (l2, "upper", 0.0, V, "`lower` < `upper`"),
    (l2, "n_grid", 0, V, "`n_grid`"),
    (l2, "n_grid", 1, V, "`n_grid`"),
    (l2, "bid_fn", None, T, "`bid_fn` must be callable"),
    (loss, "market", M[:0], V, "`market` must hold at least one sample"),
    (loss, "market", M[None], V, "`market` must have rank 1"),
    (loss, "market", np.full(4, np.inf, np.float32), V, "`market` must be finite"),
    (loss, "n_values", 0, V, "`n_values`"),
    (loss, "n_bid_levels", 2.5, V, "`n_bid_levels`"),
    (loss, "max_bid", -1.0, V, "`max_bid`"),
    (loss, "lower", 2.0, V, "`lower` < `upper`"),
    (loss, "mechanism", "dutch", V, "`mechanism`"),
]


@pytest.mark.parametrize(
    ("entry", "argument", "value", "error", "fragment"),
    CASES,
    ids=[f"{c[0].__name__}-{c[1]}-{i}" for i, c in enumerate(CASES)],
)
def test_bad_input_is_a_clear_error(entry, argument, value, error, fragment):
    with pytest.raises(error, match=fragment) as raised:
        entry(argument, value)
    assert isinstance(raised.value, ValueError | TypeError)  # NoClosedFormError is both


def test_valid_inputs_are_accepted_and_lists_become_tuples():
    g = A.AuctionGame("fp", [1, 1], [[0, 0.5], [0, 1]])
    assert g.bidders_per_type == (1, 1) and g.value_ranges == ((0.0, 0.5), (0.0, 1.0))
    # 1 vs 1 with the same prior is the symmetric game (it raised before)
    assert len(A.AuctionGame("fp", (1, 1), ((0, 1), (0, 1))).bne()) == 2
    assert A.LearnerConfig(hidden=[8]).hidden == (8,)
    assert len(CASES) >= 100


@jax.jit
def _steps(params):
    state = LEARNER.init(KEY).replace(params=params)
    _, metrics = LEARNER.step(state)
    return metrics


def test_a_non_finite_step_is_flagged_not_silent():
    """NaN parameters inside jit: the gate closes and ``brd`` is 0, but ``finite`` says so."""
    ok = _steps(jax.tree.map(jnp.asarray, PARAMS))
    assert bool(ok["finite"])
    bad = _steps(jax.tree.map(lambda p: jnp.asarray(p * np.nan), PARAMS))
    assert not bool(bad["finite"])
    assert float(bad["brd"]) == 0.0  # the number that would have read as "converged"


def test_a_non_finite_market_gives_a_nan_utility_loss():
    fn = jax.jit(lambda m: A.grid_utility_loss("fp", lambda v: 0.5 * v, m, 0.0, 1.0, n_values=8,
                                               n_bid_levels=8))  # fmt: skip
    assert np.isfinite(float(fn(jnp.asarray(M))))
    assert np.isnan(float(fn(jnp.asarray(M).at[1].set(jnp.nan))))

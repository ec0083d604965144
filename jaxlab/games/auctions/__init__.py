"""Approximate Best Response Gradient for Bayesian Nash equilibria in auctions (ICML 2025).

Huang et al., "Learning Bayesian Nash Equilibrium in Auction Games via Approximate Best
Response". Official code: https://github.com/Hesse73/Approx-BR-Grad (PyTorch).

- :mod:`.mechanisms`: FP/SP/all-pay (with CRRA risk aversion) interim utilities and closed-form
  ``u'``, ``u''``;
- :mod:`.market`: chunked Gaussian-KDE market estimates and the softmax-smoothed (SM) market;
- :mod:`.learner`: the bid network, UG and aBR learners as ``init``/``step`` pairs;
- :mod:`.bne`: analytic equilibria, L2 distance and the grid epsilon-BNE estimate.

Example::

    import jax
    from jaxlab.core.training import scan_steps
    from jaxlab.games.auctions import AuctionGame, LearnerConfig, l2_distance, make_learner

    game = AuctionGame("fp", bidders_per_type=(3,))
    config = LearnerConfig(method="abr", ante_samples=64, market_samples=512, init_steps=10)
    learner = make_learner(game, config)
    state = jax.jit(learner.init)(jax.random.key(0))
    run = jax.jit(lambda s: scan_steps(learner.step, s, 20))  # 20 x step(state, None)
    state, metrics = run(state)  # {"abr_fraction", "mean_abs_u1", "brd", "finite"}, each [20]
    l2 = l2_distance(learner.bid_fn(state.params, 0), game.bne()[0], 0.0, 1.0)
"""

from jaxlab.games.auctions.bne import (
    asymmetric_fp_bne,
    game_bne,
    grid_utility_loss,
    l2_distance,
    symmetric_bne,
)
from jaxlab.games.auctions.learner import (
    AuctionGame,
    BidNet,
    GradientEstimate,
    Learner,
    LearnerConfig,
    LearnerState,
    bid_activation,
    bid_knots,
    eval_knots,
    make_learner,
)
from jaxlab.games.auctions.market import (
    binned_kde_market_stats,
    chunked_sample_mean,
    kde_market_stats,
    product_market_stats,
    smoothed_derivatives,
)
from jaxlab.games.auctions.mechanisms import (
    MECHANISMS,
    crra,
    interim_derivatives,
    interim_utility,
    smoothed_ex_post_utility,
)

__all__ = [
    "MECHANISMS",
    "AuctionGame",
    "BidNet",
    "GradientEstimate",
    "Learner",
    "LearnerConfig",
    "LearnerState",
    "asymmetric_fp_bne",
    "bid_activation",
    "bid_knots",
    "binned_kde_market_stats",
    "chunked_sample_mean",
    "crra",
    "eval_knots",
    "game_bne",
    "grid_utility_loss",
    "interim_derivatives",
    "interim_utility",
    "kde_market_stats",
    "l2_distance",
    "make_learner",
    "product_market_stats",
    "smoothed_derivatives",
    "smoothed_ex_post_utility",
    "symmetric_bne",
]

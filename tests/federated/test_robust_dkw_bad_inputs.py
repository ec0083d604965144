"""robust_dkw: bad input at every public entry point gives a clear error naming the argument.

One table: (entry point, argument, bad value, exception type, message fragment). Each case starts
from a tiny valid call of its entry point (``VALID``) and replaces one argument, so the error must
come from that argument; every error is raised before anything compiles.
"""

import re

import jax
import numpy as np
import pytest

from jaxlab.federated import robust_dkw as R

NAN = float("nan")
R_HAT = np.array([0.1, 0.5, 0.2, 0.9], np.float32)  # K = 4 clients
LAM = np.linspace(0.0, 1.0, 5, dtype=np.float32)
GAMMAS = np.array([0.0, 1.0], np.float32)  # G = 2
ADV = np.array([[1.0, 0.1], [1.0, 0.5], [1.0, 0.2], [1.0, 0.9]], np.float32)  # [K, G]
W_LIN = np.array([[1.0, -0.5, 0.2], [0.3, 0.8, -0.6]], np.float32)  # [d = 2, C = 3]
B_LIN = np.array([0.1, -0.2, 0.0], np.float32)
X3 = np.ones((2, 3, 2), np.float32)  # [K, n, d]
Y3 = np.zeros((2, 3), np.int32)
MASK = np.ones((2, 3), bool)
MODEL = R.DigitsModel(
    np.zeros((64, 10), np.float32),
    np.zeros(10, np.float32),
    np.zeros(64, np.float32),
    np.ones(64, np.float32),
)
RAW_KEYS = np.zeros((2, 2), np.uint32)  # legacy uint32[2] keys, one per client
POOL_X, POOL_Y = np.zeros((10, 8, 8), np.float32), np.arange(10, dtype=np.int32)


def _loss(x, y):
    return jax.nn.sigmoid(x[0] * y)


VALID = {
    R.check_losses: dict(r=R_HAT),
    R.dkw_band: dict(r_hat=R_HAT, lam=LAM, n_min=10, delta=0.05),
    R.quantile_interval: dict(r_hat=R_HAT, q=0.5, n_min=10, delta=0.05),
    R.average_loss_interval: dict(r_hat=R_HAT, n_min=10, delta=0.05),
    R.dkw_epsilon: dict(num_clients=10, delta=0.05),
    R.hoeffding_shift: dict(n_min=10, num_clients=10, delta=0.05),
    R.count_below: dict(r=R_HAT, x=LAM),
    R.ecdf: dict(r=R_HAT, lam=LAM),
    R.tail_fraction: dict(r=R_HAT, lam=LAM),
    R.robust_tail_bound: dict(r_hat=R_HAT, lam=LAM, eps=0.1, n=10),
    R.divergence_constants: dict(eps=0.1, delta=0.05, divergence="kl"),
    R.two_level_weights: dict(p=0.5, budget=0.1, tau1=0.0, lam_max=2.0, divergence="chi2"),
    R.population_worst_tail: dict(p=0.5, eps=0.1, divergence="kl"),
    R.chi2_worst_tail: dict(p=0.5, eps=0.1),
    R.kl_worst_tail: dict(p=0.5, eps=0.1),
    R.kl_bernoulli: dict(q=0.5, p=0.4),
    R.f_div: dict(t=np.array([0.5, 2.0]), divergence="kl"),
    R.dirichlet_kl: dict(alpha_p=np.full(3, 0.5), alpha_q=np.full(3, 0.4)),
    R.wasserstein_average_bound: dict(adv=ADV, gammas=GAMMAS, eps=0.1, n_min=10),
    R.wasserstein_tail_bound: dict(r_hat=R_HAT, adv=ADV, gammas=GAMMAS, lam=LAM, eps=0.1, n_min=10),
    R.wasserstein_terms: dict(num_clients=4, num_gammas=2, n_min=10),
    R.transport_costs: dict(r_hat=R_HAT, adv_upper=ADV, gammas=GAMMAS, lam=0.5, t=0.1),
    R.knapsack_fraction: dict(costs=np.array([0.0, 0.5, 1.0]), eps=0.1),
    R.linear_margins: dict(weights=W_LIN, bias=B_LIN, x=X3[0], y=Y3[0]),
    R.phi_zero_one: dict(gammas=GAMMAS, d2=np.array([0.5, 1.0]), correct=np.array([1, 0]) > 0),
    R.local_adversarial_risks: dict(
        weights=W_LIN, bias=B_LIN, x=X3, y=Y3, mask=MASK, gammas=GAMMAS
    ),
    R.adversarial_risk_ascent: dict(loss_fn=_loss, x=X3[0], y=Y3[0], gamma=1.0),
    R.sample_gaussian_clients: dict(key=RAW_KEYS[0], dim=2, spread=0.5, clients=3, samples=4),
    R.fit_lda: dict(x=np.random.default_rng(0).normal(size=(8, 2)), y=np.arange(8) % 2),
    R.class_margin_means: dict(weights=np.eye(2), bias=np.zeros(2), means=np.zeros((3, 2))),
    R.gaussian_piece: dict(mu=0.5, sigma=1.0, r=np.array([1.0, np.inf])),
    R.gaussian_client_risks: dict(margin_means=np.ones((3, 2)), gammas=GAMMAS),
    R.beta_quadrature: dict(beta=(2.0, 8.0), points=100),
    R.tilt_divergence: dict(theta=1.0, divergence="kl", points=100),
    R.tilt_theta: dict(eps=0.1, divergence="kl", points=100, iters=2),
    R.tilt_tail: dict(theta=1.0, lam=LAM, points=100),
    R.two_level_target: dict(eps=0.1, divergence="chi2", lam=LAM),
    R.fit_digits_model: dict(x_train=np.zeros((3, 8, 8)), y_train=np.arange(3), steps=1),
    R.shifted_client_risks: dict(
        model=MODEL, keys=RAW_KEYS, x_pool=POOL_X, y_pool=POOL_Y, alpha=0.4
    ),
}

V, T = ValueError, TypeError
CASES = [
    # ---- dkw: same-network certificates
    (R.check_losses, "r", "abc", T, "`r_hat`"),
    (R.check_losses, "min_clients", 0, V, "`min_clients`"),
    (R.check_losses, "axis", 3, V, "`axis`"),
    (R.dkw_band, "r_hat", "abc", T, "`r_hat`"),
    (R.dkw_band, "r_hat", None, T, "`r_hat`"),
    (R.dkw_band, "r_hat", True, T, "`r_hat`"),
    (R.dkw_band, "r_hat", np.array([True, False, True]), T, "`r_hat`"),
    (R.dkw_band, "r_hat", [0.1, 1.3], V, "`r_hat` must hold losses in [0, 1]"),
    (R.dkw_band, "r_hat", np.array([0.1, NAN, 0.3]), V, "`r_hat` must hold finite losses"),
    (R.dkw_band, "r_hat", np.array([0.5]), V, "`r_hat` needs at least 2 clients"),
    (R.dkw_band, "r_hat", np.array([]), V, "`r_hat` needs at least 2 clients"),
    (R.dkw_band, "r_hat", np.full((2, 3), 0.5), V, "`r_hat` must be [K]"),
    (R.dkw_band, "lam", "abc", T, "`lam`"),
    (R.dkw_band, "lam", np.array([0.1, NAN]), V, "`lam` must be finite"),
    (R.dkw_band, "lam", np.zeros((2, 2)), V, "`lam` must have rank 1"),
    (R.dkw_band, "lam", np.array([]), V, "`lam` must not be empty"),
    (R.dkw_band, "n_min", 0, V, "`n_min`"),
    (R.dkw_band, "n_min", -5, V, "`n_min`"),
    (R.dkw_band, "n_min", 2.5, V, "`n_min` must be a whole number"),
    (R.dkw_band, "n_min", "10", T, "`n_min`"),
    (R.dkw_band, "n_min", True, T, "`n_min`"),
    (R.dkw_band, "n_min", NAN, V, "`n_min`"),
    (R.dkw_band, "n_min", [10, 20], V, "`n_min` must be a scalar"),
    (R.dkw_band, "delta", 0.0, V, "`delta` must lie in (0.0, 1.0)"),
    (R.dkw_band, "delta", 1.5, V, "`delta`"),
    (R.dkw_band, "delta", NAN, V, "`delta`"),
    (R.dkw_band, "delta", "0.05", T, "`delta`"),
    (R.dkw_band, "delta", [0.05], V, "`delta` must be a scalar"),
    (R.dkw_band, "client_term", "yes", T, "`client_term`"),
    (R.quantile_interval, "q", 1.5, V, "`q` must lie in [0.0, 1.0]"),
    (R.quantile_interval, "q", -0.1, V, "`q`"),
    (R.quantile_interval, "q", NAN, V, "`q`"),
    (R.quantile_interval, "q", "a", T, "`q`"),
    (R.quantile_interval, "n_min", -1, V, "`n_min`"),
    (R.quantile_interval, "r_hat", np.full((2, 3), 0.5), V, "`r_hat` must be [K]"),
    (R.average_loss_interval, "n_min", -1, V, "`n_min`"),
    (R.average_loss_interval, "n_min", 0, V, "`n_min`"),
    (R.average_loss_interval, "delta", 2.0, V, "`delta`"),
    (R.average_loss_interval, "r_hat", np.array([0.1, -0.2]), V, "`r_hat` must hold losses"),
    (R.dkw_epsilon, "num_clients", 0, V, "`num_clients`"),
    (R.dkw_epsilon, "num_clients", 2.5, V, "`num_clients`"),
    (R.dkw_epsilon, "delta", 0.0, V, "`delta`"),
    (R.hoeffding_shift, "n_min", -3, V, "`n_min`"),
    (R.hoeffding_shift, "num_clients", 0, V, "`num_clients`"),
    (R.hoeffding_shift, "delta", 1.0, V, "`delta`"),
    (R.count_below, "r", np.zeros((2, 2)), V, "`r` must have rank 1"),
    (R.count_below, "x", np.array([NAN, 0.5]), V, "`x` must be finite"),
    (R.count_below, "strict", "no", T, "`strict`"),
    (R.ecdf, "r", np.array([]), V, "`r` must not be empty"),
    (R.ecdf, "lam", np.array([NAN]), V, "`lam` must be finite"),
    (R.tail_fraction, "r", "abc", T, "`r`"),
    (R.tail_fraction, "lam", np.zeros((2, 2)), V, "`lam` must have rank 1"),
    # ---- f-divergence certificates
    (R.robust_tail_bound, "eps", -0.1, V, "`eps`"),
    (R.robust_tail_bound, "eps", NAN, V, "`eps`"),
    (R.robust_tail_bound, "eps", [0.1, 0.2], V, "`eps` must be a scalar"),
    (R.robust_tail_bound, "eps", "a", T, "`eps`"),
    (R.robust_tail_bound, "n", 0, V, "`n`"),
    (R.robust_tail_bound, "n", 2.5, V, "`n` must be a whole number"),
    (R.robust_tail_bound, "divergence", "tv", V, "`divergence`"),
    (R.robust_tail_bound, "iters", 0, V, "`iters`"),
    (R.robust_tail_bound, "lam", np.array([NAN]), V, "`lam` must be finite"),
    (R.robust_tail_bound, "delta", 1.0, V, "`delta`"),
    (R.robust_tail_bound, "r_hat", np.array([0.3]), V, "`r_hat` needs at least 2 clients"),
    (R.divergence_constants, "eps", -1.0, V, "`eps`"),
    (R.divergence_constants, "delta", 0.0, V, "`delta`"),
    (R.divergence_constants, "divergence", "tv", V, "`divergence`"),
    (R.divergence_constants, "iters", 2.5, V, "`iters`"),
    (R.two_level_weights, "p", 1.5, V, "`p` must lie in [0.0, 1.0]"),
    (R.two_level_weights, "budget", -1.0, V, "`budget`"),
    (R.two_level_weights, "tau1", -0.1, V, "`tau1`"),
    (R.two_level_weights, "lam_max", 0.5, V, "`lam_max`"),
    (R.two_level_weights, "lam_max", NAN, V, "`lam_max`"),
    (R.two_level_weights, "divergence", "x", V, "`divergence`"),
    (R.two_level_weights, "iters", 0, V, "`iters`"),
    (R.two_level_weights, ("p", "budget"), (np.full(3, 0.5), np.full(2, 0.1)), V, "broadcast"),
    (R.population_worst_tail, "p", -0.1, V, "`p`"),
    (R.population_worst_tail, "eps", NAN, V, "`eps`"),
    (R.chi2_worst_tail, "p", 1.5, V, "`p`"),
    (R.chi2_worst_tail, "eps", -1.0, V, "`eps`"),
    (R.kl_worst_tail, "p", 2.0, V, "`p`"),
    (R.kl_worst_tail, "eps", -1.0, V, "`eps`"),
    (R.kl_worst_tail, "iters", 0, V, "`iters`"),
    (R.kl_worst_tail, ("p", "eps"), (np.full(3, 0.5), np.full(2, 0.1)), V, "broadcast"),
    (R.kl_bernoulli, "q", 1.5, V, "`q`"),
    (R.kl_bernoulli, "p", -0.2, V, "`p`"),
    (R.f_div, "t", np.array([-1.0]), V, "`t`"),
    (R.f_div, "t", "a", T, "`t`"),
    (R.f_div, "divergence", "tv", V, "`divergence`"),
    (R.dirichlet_kl, "alpha_p", np.array([0.5, -1.0, 0.5]), V, "`alpha_p`"),
    (R.dirichlet_kl, "alpha_q", np.zeros(3), V, "`alpha_q`"),
    (R.dirichlet_kl, "alpha_q", np.full(4, 0.4), V, "same number of classes"),
    (R.dirichlet_kl, "alpha_p", 0.5, V, "`alpha_p` must be a concentration vector"),
    (R.dirichlet_kl, "alpha_p", np.array([0.5, NAN, 0.5]), V, "`alpha_p`"),
    # ---- Wasserstein certificates
    (R.wasserstein_average_bound, "adv", ADV * 1.5, V, "`adv` must hold losses"),
    (R.wasserstein_average_bound, "adv", R_HAT, V, "`adv` must be [K, G]"),
    (R.wasserstein_average_bound, "gammas", GAMMAS[::-1], V, "`adv` must be non-increasing"),
    (R.wasserstein_average_bound, "adv", ADV[:, :1], V, "`adv` must be [K, G]"),  # other G
    (R.wasserstein_average_bound, "gammas", np.array([-1.0, 1.0]), V, "`gammas`"),
    (R.wasserstein_average_bound, "gammas", np.array([0.0, NAN]), V, "`gammas`"),
    (R.wasserstein_average_bound, "gammas", "ab", T, "`gammas`"),
    (R.wasserstein_average_bound, "eps", -1.0, V, "`eps`"),
    (R.wasserstein_average_bound, "n_min", 0, V, "`n_min`"),
    (R.wasserstein_average_bound, "n_min", -3, V, "`n_min`"),
    (R.wasserstein_average_bound, "delta", 0.0, V, "`delta`"),
    (R.wasserstein_tail_bound, "r_hat", R_HAT[:3], V, "same clients"),  # another K
    (R.wasserstein_tail_bound, "lam", np.array([NAN, 0.5]), V, "`lam` must be finite"),
    (R.wasserstein_tail_bound, "lam", np.zeros((2, 2)), V, "`lam`"),
    (R.wasserstein_tail_bound, "n_min", 0, V, "`n_min`"),
    (R.wasserstein_tail_bound, "eps", -0.1, V, "`eps`"),
    (R.wasserstein_terms, "num_clients", 0, V, "`num_clients`"),
    (R.wasserstein_terms, "num_gammas", 0, V, "`num_gammas`"),
    (R.wasserstein_terms, "n_min", -1, V, "`n_min`"),
    (R.wasserstein_terms, "delta", 1.5, V, "`delta`"),
    (R.transport_costs, "r_hat", R_HAT + 1.0, V, "`r_hat`"),
    (R.transport_costs, "adv_upper", ADV[:, :1], V, "`adv_upper` must be [K, G]"),
    (R.transport_costs, "adv_upper", ADV[:3], V, "same clients"),
    (R.transport_costs, "gammas", np.array([-1.0, 1.0]), V, "`gammas`"),
    (R.transport_costs, "lam", NAN, V, "`lam`"),
    (R.transport_costs, "t", -1.0, V, "`t`"),
    (R.knapsack_fraction, "costs", np.array([-1.0, 0.5]), V, "`costs`"),
    (R.knapsack_fraction, "costs", np.zeros((2, 2)), V, "`costs` must have rank 1"),
    (R.knapsack_fraction, "costs", np.array([]), V, "`costs` must not be empty"),
    (R.knapsack_fraction, "costs", np.array([NAN, 0.5]), V, "`costs` must be finite"),
    (R.knapsack_fraction, "eps", -0.1, V, "`eps`"),
    (R.linear_margins, "weights", W_LIN[0], V, "`weights` must have rank 2"),
    (R.linear_margins, "weights", W_LIN[:, :1], V, "`weights` must be [d, C] with C >= 2"),
    (R.linear_margins, "bias", B_LIN[:2], V, "`bias` must have shape (3,)"),
    (R.linear_margins, "x", np.ones((3, 5)), V, "`x` must be [..., 2]"),
    (R.linear_margins, "x", np.full((3, 2), NAN), V, "`x` must be finite"),
    (R.linear_margins, "y", np.zeros(3, np.float32), T, "`y` must hold integer class labels"),
    (R.linear_margins, "y", np.array([0, 5, 1]), V, "`y` must hold labels in 0..2"),
    (R.linear_margins, "y", np.zeros(4, np.int32), V, "`y` must have shape (3,)"),
    (R.phi_zero_one, "gammas", np.array([-1.0, 1.0]), V, "`gammas`"),
    (R.phi_zero_one, "d2", np.array([-0.5, 1.0]), V, "`d2`"),
    (R.phi_zero_one, "correct", np.array([1, 0]), T, "`correct` must be a bool array"),
    (R.phi_zero_one, "correct", np.array([True]), V, "`correct` must have the shape of `d2`"),
    (R.local_adversarial_risks, "x", X3[0], V, "`x` must be [K, n, d]"),
    (R.local_adversarial_risks, "x", np.full_like(X3, NAN), V, "`x` must be finite"),
    (R.local_adversarial_risks, "y", Y3 + 3, V, "`y` must hold labels in 0..2"),
    (R.local_adversarial_risks, "y", Y3.astype(np.float32), T, "`y`"),
    (R.local_adversarial_risks, "mask", np.array([[0, 0, 0], [1, 1, 1]]), V, "at least one sample"),
    (R.local_adversarial_risks, "mask", np.full((2, 3), 2.0), V, "`mask` must hold 0/1"),
    (R.local_adversarial_risks, "gammas", np.array([-1.0]), V, "`gammas`"),
    (R.local_adversarial_risks, "mesh", "data", T, "`mesh`"),
    (R.adversarial_risk_ascent, "loss_fn", "f", T, "`loss_fn`"),
    (R.adversarial_risk_ascent, "gamma", -1.0, V, "`gamma`"),
    (R.adversarial_risk_ascent, "steps", -1, V, "`steps`"),
    (R.adversarial_risk_ascent, "steps", 2.5, V, "`steps`"),
    (R.adversarial_risk_ascent, "step_size", 0.0, V, "`step_size`"),
    (R.adversarial_risk_ascent, "bounds", (1.0, 0.0), V, "`bounds` must have low <= high"),
    (R.adversarial_risk_ascent, "bounds", (0.0,), V, "`bounds` must be None or a pair"),
    (R.adversarial_risk_ascent, "y", np.zeros(5), V, "`y` must have shape (3,)"),
    (R.adversarial_risk_ascent, "x", np.full((3, 2), NAN), V, "`x` must be finite"),
    # ---- reference truths: Gaussian clients, LDA, tilted and two-level targets, digits
    (R.sample_gaussian_clients, "key", 0, V, "`key` must be a PRNG key"),
    (R.sample_gaussian_clients, "key", np.zeros(2, np.float32), V, "`key` must be a PRNG key"),
    (R.sample_gaussian_clients, "key", np.zeros(3, np.uint32), V, "`key` must be a PRNG key"),
    (R.sample_gaussian_clients, "dim", 0, V, "`dim`"),
    (R.sample_gaussian_clients, "spread", -1.0, V, "`spread`"),
    (R.sample_gaussian_clients, "spread", NAN, V, "`spread`"),
    (R.sample_gaussian_clients, "clients", 2.5, V, "`clients`"),
    (R.sample_gaussian_clients, "samples", 0, V, "`samples`"),
    (R.fit_lda, "y", np.arange(8) % 2 * 1.0, T, "`y` must hold integer class labels"),
    (R.fit_lda, "y", np.arange(8) % 3, V, "`y` must hold labels in 0..1"),
    (R.fit_lda, "y", np.zeros(8, int), V, "`y` must contain both classes"),
    (R.fit_lda, "y", np.arange(7) % 2, V, "`y` must have shape (8,)"),
    (R.fit_lda, "x", np.full((8, 2), NAN), V, "`x` must be finite"),
    (R.fit_lda, "x", np.ones((8, 2)), V, "singular"),
    (R.fit_lda, "x", "abc", T, "`x`"),
    (R.class_margin_means, "weights", np.ones((2, 3)), V, "`weights` must be [d, 2]"),
    (R.class_margin_means, "weights", np.ones((2, 2)), V, "`weights` must separate the classes"),
    (R.class_margin_means, "bias", np.zeros(3), V, "`bias` must have shape (2,)"),
    (R.class_margin_means, "means", np.zeros((3, 4)), V, "`means` must be [K, 2]"),
    (R.gaussian_piece, "sigma", 0.0, V, "`sigma`"),
    (R.gaussian_piece, "r", np.array([-1.0]), V, "`r`"),
    (R.gaussian_piece, "r", np.array([NAN]), V, "`r`"),
    (R.gaussian_piece, "mu", NAN, V, "`mu`"),
    (R.gaussian_client_risks, "margin_means", np.ones((3, 3)), V, "`margin_means` must be [K, 2]"),
    (R.gaussian_client_risks, "margin_means", np.full((3, 2), NAN), V, "`margin_means`"),
    (R.gaussian_client_risks, "gammas", np.array([-1.0]), V, "`gammas`"),
    (R.beta_quadrature, "beta", (2.0,), V, "`beta` must be a pair"),
    (R.beta_quadrature, "beta", (-1.0, 2.0), V, "`beta`"),
    (R.beta_quadrature, "beta", "ab", V, "`beta`"),
    (R.beta_quadrature, "points", 0, V, "`points`"),
    (R.beta_quadrature, "points", 2.5, V, "`points`"),
    (R.tilt_divergence, "theta", NAN, V, "`theta`"),
    (R.tilt_divergence, "theta", 1000.0, V, "`theta`"),
    (R.tilt_divergence, "divergence", "tv", V, "`divergence`"),
    (R.tilt_divergence, "beta", (0.0, 1.0), V, "`beta`"),
    (R.tilt_theta, "eps", -1.0, V, "`eps`"),
    (R.tilt_theta, "upper", 0.0, V, "`upper`"),
    (R.tilt_theta, "upper", 1e4, V, "`upper`"),
    (R.tilt_theta, "iters", 0, V, "`iters`"),
    (R.tilt_theta, "divergence", "x", V, "`divergence`"),
    (R.tilt_tail, "theta", NAN, V, "`theta`"),
    (R.tilt_tail, "lam", np.array([NAN]), V, "`lam`"),
    (R.tilt_tail, "lam", "a", T, "`lam`"),
    (R.two_level_target, "eps", -0.1, V, "`eps`"),
    (R.two_level_target, "divergence", "x", V, "`divergence`"),
    (R.two_level_target, "lam", np.array([NAN]), V, "`lam`"),
    (R.two_level_target, "beta", (1.0,), V, "`beta`"),
    (R.fit_digits_model, "x_train", np.zeros((3, 8, 7)), V, "`x_train` must have shape"),
    (R.fit_digits_model, "x_train", np.full((3, 8, 8), NAN), V, "`x_train` must be finite"),
    (R.fit_digits_model, "x_train", np.zeros((0, 8, 8)), V, "`x_train` must hold at least one"),
    (R.fit_digits_model, "y_train", np.arange(3) * 1.0, T, "`y_train` must hold integer"),
    (R.fit_digits_model, "y_train", np.array([0, 1, 10]), V, "`y_train` must hold labels in 0..9"),
    (R.fit_digits_model, "y_train", np.arange(4), V, "`y_train` must have shape"),
    (R.fit_digits_model, "steps", -1, V, "`steps`"),
    (R.fit_digits_model, "steps", 2.5, V, "`steps`"),
    (R.fit_digits_model, "lr", -1.0, V, "`lr`"),
    (R.fit_digits_model, "l2", -1.0, V, "`l2`"),
    (R.fit_digits_model, "sd_floor", 0.0, V, "`sd_floor`"),
    (R.shifted_client_risks, "model", (1, 2), T, "`model` must be a DigitsModel"),
    (R.shifted_client_risks, "model", MODEL.replace(w=np.zeros((32, 10))), V, "`model.w`"),
    (R.shifted_client_risks, "model", MODEL.replace(sd=np.zeros(64)), V, "`model.sd`"),
    (R.shifted_client_risks, "keys", 3, V, "`keys` must be a PRNG key"),
    (R.shifted_client_risks, "keys", np.zeros((2, 3), np.uint32), V, "`keys`"),
    (R.shifted_client_risks, "keys", RAW_KEYS[0], V, "`keys` must be [C] keys"),
    (R.shifted_client_risks, "x_pool", np.zeros((10, 8)), V, "`x_pool` must have shape"),
    (R.shifted_client_risks, "y_pool", np.zeros(10, np.int32), V, "`y_pool` must hold every class"),
    (R.shifted_client_risks, "y_pool", np.arange(10) * 1.0, T, "`y_pool` must hold integer"),
    (R.shifted_client_risks, "y_pool", np.arange(9), V, "`y_pool` must have shape (10,)"),
    (R.shifted_client_risks, "alpha", 0.0, V, "`alpha`"),
    (R.shifted_client_risks, "alpha", NAN, V, "`alpha`"),
    (R.shifted_client_risks, "shift_sd", -1.0, V, "`shift_sd`"),
]


def _case_id(case) -> str:
    fn, arg = case[0], case[1]
    arg = "+".join(arg) if isinstance(arg, tuple) else arg
    return f"{fn.__name__}-{arg}"


def test_every_public_entry_point_is_covered():
    public = {getattr(R, name) for name in R.__all__ if callable(getattr(R, name))}
    data_classes = {R.CDFBand, R.DigitsModel}  # result / parameter containers, no entry point
    assert public - data_classes == set(VALID)
    assert {case[0] for case in CASES} == set(VALID)


@pytest.mark.parametrize("case", CASES, ids=[f"{_case_id(c)}-{i}" for i, c in enumerate(CASES)])
def test_bad_input_gives_a_clear_error(case):
    fn, arg, bad, exc, fragment = case
    names, values = (arg, bad) if isinstance(arg, tuple) else ((arg,), (bad,))
    kwargs = {**VALID[fn], **dict(zip(names, values, strict=True))}
    with pytest.raises(exc, match=re.escape(fragment)):
        fn(**kwargs)

"""Robust DKW certificates: closed forms, a generic solver, duality identities, invariants; the
studies' reference truths (Gaussian closed-form risks, tilted and two-level targets, the digits
network)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

from benchmarks import dkw_bounds as bench
from jaxlab.core.data import digits_split
from jaxlab.federated import robust_dkw as R
from jaxlab.federated.robust_dkw import dkw as D
from jaxlab.federated.robust_dkw import fdiv as F
from jaxlab.federated.robust_dkw import wasserstein as W
from tests.helpers import assert_compiles_once


def test_dkw_band_terms_and_shape():
    rng = np.random.default_rng(0)
    r = jnp.asarray(rng.uniform(size=500), jnp.float32)
    lam = jnp.linspace(-0.1, 1.1, 97)
    band = R.dkw_band(r, lam, n_min=200, delta=0.05)
    # eps_K and t by hand (delta split 0.025 / 0.025); the spec's eps_K ~ 0.066 at K = 500
    np.testing.assert_allclose(band.eps_k, math.sqrt(math.log(80.0) / 1000.0), rtol=1e-6)
    np.testing.assert_allclose(band.eps_k, 0.0662, atol=1e-4)
    np.testing.assert_allclose(band.t, math.sqrt(math.log(2 * 500 / 0.025) / 400.0), rtol=1e-6)
    # the band is the shifted empirical CDF -/+ eps_K, clipped
    s = np.sort(np.asarray(r))
    lo = np.clip(np.searchsorted(s, np.asarray(lam) - band.t, "right") / 500 - band.eps_k, 0, 1)
    np.testing.assert_allclose(band.lower, lo, atol=1e-6)
    lower, upper = np.asarray(band.lower), np.asarray(band.upper)
    assert np.all((0 <= lower) & (lower <= upper) & (upper <= 1))
    assert np.all(np.diff(lower) >= 0) and np.all(np.diff(upper) >= 0)
    tight = R.dkw_band(r, lam, n_min=200, delta=0.01)
    assert np.all(tight.lower <= lower) and np.all(tight.upper >= upper)
    control = R.dkw_band(r, lam, 200, 0.05, client_term=False)
    assert control.t == 0 and np.all(control.upper <= upper)
    # the band's program: new risks, n_min and delta of the same shapes do not retrace
    r2 = jnp.asarray(rng.uniform(size=500), jnp.float32)
    assert_compiles_once(D._band, [(r, lam, 200, 0.05, True), (r2, lam, 300, 0.01, True)])


def test_bucket_counts_equal_brute_force_with_ties():
    r = jnp.array([0.3, 0.1, 0.5, 0.3, 0.0, 1.0, 0.3])
    x = jnp.array([0.3, -1.0, 0.31, 0.0, 1.0, 0.3, 0.05])  # unsorted, repeated, on the values
    counts = jax.jit(lambda r, x: (R.count_below(r, x), R.count_below(r, x, strict=True),
                                   R.tail_fraction(r, x)))  # fmt: skip
    below, strictly_below, tail = counts(r, x)
    r, x = np.asarray(r), np.asarray(x)
    np.testing.assert_array_equal(below, (r[None, :] <= x[:, None]).sum(-1))
    np.testing.assert_array_equal(strictly_below, (r[None, :] < x[:, None]).sum(-1))
    above = (r[None, :] >= x[:, None]).sum(-1)
    np.testing.assert_allclose(tail, above / len(r), rtol=2e-7)  # k / 7 within a float32 ulp


def test_quantile_and_average_intervals():
    r = jnp.arange(1, 101) / 100.0  # F_hat(x) = floor(100 x) / 100
    lo, hi = jax.jit(lambda r: R.quantile_interval(r, 0.5, n_min=10**8, delta=0.05))(r)
    eps = float(R.dkw_epsilon(100, 0.025))
    t = float(R.hoeffding_shift(10**8, 100, 0.025))
    np.testing.assert_allclose(lo, math.ceil((0.5 - eps) * 100) / 100 - t, atol=1e-6)
    np.testing.assert_allclose(hi, math.ceil((0.5 + eps) * 100) / 100 + t, atol=1e-6)
    lo, hi = jax.jit(lambda r: R.average_loss_interval(r, n_min=100, delta=0.05))(r)
    w = float(R.hoeffding_shift(100, 100, 0.025)) + math.sqrt(math.log(4 / 0.05) / 200)
    np.testing.assert_allclose([lo, hi], [0.505 - w, 0.505 + w], atol=1e-6)


def test_population_closed_forms_reproduced_by_the_reduction():
    @jax.jit
    def forms(p, eps, caps, slack):
        out = {}
        for div, closed in (("chi2", R.chi2_worst_tail), ("kl", R.kl_worst_tail)):
            out[div] = (
                R.population_worst_tail(p, eps, div),
                closed(p, eps),
                p * R.two_level_weights(p, 0.2, 0.05, caps, div)[0],
                p * R.two_level_weights(p, 0.2, slack, 3.0, div)[0],
            )
        a, _ = R.two_level_weights(p, 0.0, 0.0, 5.0, "kl")
        return out, jnp.where(p > 0, p * a, 0.0)

    with jax.enable_x64(True):
        p = jnp.linspace(0.0, 1.0, 41)[:, None]
        eps = jnp.array([0.0, 0.01, 0.05, 0.2, 1.0, 3.0])[None, :]
        caps = jnp.array([1.2, 1.5, 2.0, 4.0, jnp.inf])[None, :]
        out, no_shift = forms(p, eps, caps, jnp.array([0.0, 0.1, 0.3])[None, :])
        for div, (got, closed, v_caps, v_slack) in out.items():
            np.testing.assert_allclose(got, closed, atol=1e-10, err_msg=div)
            # V is non-decreasing in the box Lam and in the mean-constraint slack
            assert np.all(np.diff(v_caps, axis=1) >= -1e-12), div
            assert np.all(np.diff(v_slack, axis=1) >= -1e-12), div
        # eps = 0, tau = 0: no reweighting, V = m / K
        np.testing.assert_allclose(no_shift, p, atol=1e-10)


@pytest.mark.parametrize("divergence", ["chi2", "kl"])
def test_reduction_matches_a_generic_solver(divergence):
    rng = np.random.default_rng(7 if divergence == "kl" else 3)
    for _ in range(3):
        k = int(rng.integers(5, 13))
        ind = rng.random(k) < rng.uniform(0.2, 0.8)
        ind[0] = True
        budget, tau1 = rng.uniform(0.05, 0.5), rng.uniform(0.0, 0.2)
        lam_max = float(rng.uniform(1.5, 4.0))
        slsqp = bench.slsqp_two_level(ind, budget, tau1, lam_max, divergence, starts=3)
        with jax.enable_x64(True):
            p = ind.mean()
            a, _ = R.two_level_weights(p, budget, tau1, lam_max, divergence)
            v = float(p * a)
        assert abs(v - slsqp) < 1e-5, (divergence, k, v, slsqp)
        assert abs(bench.numpy_two_level(p, budget, tau1, lam_max, divergence) - slsqp) < 1e-5


def test_kl_argmin_matters():
    """b* must be clipped towards argmin t log t = 1/e; towards 1 the value is lower."""
    with jax.enable_x64(True):
        p, budget, tau1, lam_max = 0.4, 0.3, 0.15, 3.0
        a, b = R.two_level_weights(p, budget, tau1, lam_max, "kl")
        assert b < 1.0  # the optimum uses the slack of the mean constraint below 1
        ind = np.arange(20) < 8
        assert abs(float(p * a) - bench.slsqp_two_level(ind, budget, tau1, lam_max, "kl")) < 1e-5
        wrong = bench.numpy_two_level(p, budget, tau1, lam_max, "kl", t_f=1.0)
        assert wrong < float(p * a) - 1e-3


def test_divergence_constants():
    with jax.enable_x64(True):
        for eps, delta in ((0.2, 0.05), (0.01, 0.05), (0.001, 0.5)):  # the last two: eps/delta < e
            lam, c1, c2 = R.divergence_constants(eps, delta, "kl")
            assert lam > 1.0 and np.isfinite(lam)
            np.testing.assert_allclose(lam * np.log(lam), eps / delta, rtol=1e-10)
            np.testing.assert_allclose(c2, (lam * np.log(lam) + np.log(lam) / lam) / 2, rtol=1e-10)
        lam, c1, c2 = R.divergence_constants(0.2, 0.05, "chi2")
        np.testing.assert_allclose([lam, c1, c2], [3.0, 2.0, 2.0])


def test_robust_tail_bound_monotone_and_jit():
    r = jnp.asarray(np.random.default_rng(1).beta(2.0, 8.0, 300), jnp.float32)
    lam = jnp.linspace(0.0, 0.8, 25)
    for div in R.DIVERGENCES:
        b = [R.robust_tail_bound(r, lam, e, n=500, delta=d, divergence=div)
             for e, d in ((0.05, 0.05), (0.2, 0.05), (0.2, 0.01))]  # fmt: skip
        assert np.all(np.diff(b[0]) <= 1e-6), div  # non-increasing in lam
        assert np.all(b[1] >= b[0] - 1e-6) and np.all(b[2] >= b[1] - 1e-6), div
        assert np.all((0.0 <= b[0]) & (b[0] <= 1.0))
        jit = jax.jit(lambda r, e, d=div: R.robust_tail_bound(r, lam, e, n=500, divergence=d))
        np.testing.assert_allclose(jit(r, 0.2), b[1], atol=1e-6)
    ref = bench.numpy_tail_bound(np.asarray(r, np.float64), np.asarray(lam), 0.2, 500)
    np.testing.assert_allclose(b[1], ref, atol=1e-5)
    eps = jnp.array([0.05, 0.2])
    vm = jax.vmap(lambda e: R.robust_tail_bound(r, lam, e, n=500, divergence="kl"))(eps)
    np.testing.assert_allclose(vm[1], R.robust_tail_bound(r, lam, 0.2, n=500, divergence="kl"),
                               atol=1e-6)  # fmt: skip
    # the certificate's program (as robust_tail_bound calls it): new risks, eps, n and delta of
    # the same shapes do not retrace
    calls = [(r, lam, 0.05, 500, 0.05, "kl", 60), (r**2, lam, 0.3, 200, 0.01, "kl", 60)]
    assert_compiles_once(F._tail_bound, calls)


def test_dirichlet_kl_values():
    alphas = jnp.array([[0.35], [0.3], [0.4]]) * jnp.ones((1, 10))
    kl = jax.vmap(R.dirichlet_kl)(alphas, jnp.full((3, 10), 0.4))
    np.testing.assert_allclose(kl, [0.0673, 0.3355, 0.0], atol=1e-4)


# ---- Wasserstein -------------------------------------------------------------------------------


def _linear():
    return jnp.array([[1.0, -0.5, 0.2], [0.3, 0.8, -0.6]]), jnp.array([0.1, -0.2, 0.0])


def test_phi_closed_form_matches_brute_force_grid():
    w, b = _linear()
    x = jnp.array([[0.5, 0.2], [-0.4, 0.9], [0.1, -1.0]])
    y = jnp.array([0, 1, 2])
    gammas = jnp.array([0.0, 0.3, 1.0, 4.0, 1e6])

    @jax.jit
    def closed_and_brute(x, y):
        d2, correct = R.linear_margins(w, b, x, y)
        g = jnp.linspace(-3.0, 3.0, 601)
        grid = jnp.stack(jnp.meshgrid(g, g), -1).reshape(-1, 2)
        pred = jnp.argmax(grid @ w + b[None, :], -1)

        def brute(xi, yi):
            cost = jnp.sum((grid - xi[None, :]) ** 2, -1)
            return jnp.max((pred != yi)[None, :] - gammas[:, None] * cost[None, :], -1)

        return R.phi_zero_one(gammas, d2, correct), correct, jax.vmap(brute)(x, y)

    phi, correct, brute = closed_and_brute(x, y)
    for i in range(3):
        np.testing.assert_allclose(phi[i, :4], brute[i, :4], atol=0.03)
        loss = float(~correct[i])
        np.testing.assert_allclose(phi[i, 0], 1.0)  # gamma = 0: the loss's supremum
        np.testing.assert_allclose(phi[i, -1], loss, atol=1e-6)  # gamma -> inf: the loss


def test_knapsack_greedy_equals_dual_and_cost_dual_equals_primal():
    rng = np.random.default_rng(2)
    c = jnp.asarray(rng.uniform(size=30) * (rng.uniform(size=30) > 0.3), jnp.float32)

    @jax.jit
    def greedy_and_dual(c, eps):
        gam = jnp.concatenate([jnp.zeros(1), 1.0 / jnp.where(c > 0, c, 1.0)])
        dual = jnp.min(gam * eps + jnp.maximum(0.0, 1.0 - gam[:, None] * c[None, :]).mean(-1))
        return R.knapsack_fraction(c, eps), dual

    for eps in (0.0, 0.02, 0.1, 0.4, 5.0):
        greedy, dual = greedy_and_dual(c, eps)
        np.testing.assert_allclose(greedy, dual, atol=1e-5)
    # one client of a linear classifier: the dual cost sup_gamma (lam - R_adv) / gamma equals the
    # greedy primal (move the cheapest correctly classified mass across the boundary)
    w, b = _linear()
    x = jnp.asarray(rng.normal(size=(40, 2)), jnp.float32)
    y = np.array(jnp.argmax(x @ w + b[None, :], -1))
    y[:5] = 0
    d2, correct = (np.asarray(v) for v in jax.jit(R.linear_margins)(w, b, x, jnp.asarray(y)))
    risk = float(1.0 - correct.mean())
    pos = np.sort(d2[correct])
    gammas = jnp.asarray(np.concatenate([[0.0], 1.0 / pos]), jnp.float32)
    dual_cost = jax.jit(
        lambda lam: R.transport_costs(
            jnp.asarray(risk), R.phi_zero_one(gammas, d2, correct).mean(0)[None, :], gammas, lam,
            0.0,
        )
    )  # fmt: skip
    for lam in (risk + 0.05, risk + 0.33, 0.9):
        mass = 40 * (lam - risk)
        j = int(mass)
        primal = (pos[:j].sum() + (mass - j) * pos[j]) / 40
        np.testing.assert_allclose(dual_cost(lam), primal, rtol=1e-5)


def test_average_bound_dominates_explicit_perturbations():
    w, b = _linear()
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.normal(size=(6, 25, 2)), jnp.float32)
    y = jnp.argmax(x @ w + b[None, None, :], -1)
    y = y.at[:, :3].set(1)
    mask = jnp.ones(y.shape, bool)
    gammas = jnp.concatenate([jnp.zeros(1), jnp.logspace(-2, 3, 40)])
    risk, adv = R.local_adversarial_risks(w, b, x, y, mask, gammas)
    assert np.all(adv >= risk[:, None] - 1e-6) and np.all(np.diff(adv, axis=-1) <= 1e-6)
    adv_mean, gammas_np = np.asarray(adv).mean(0), np.asarray(gammas)
    for _ in range(5):
        v = 0.3 * rng.normal(size=x.shape).astype(np.float32)
        eps = float(np.sum(v**2, -1).mean())  # meta cost <= mean per-point transport
        moved, _ = R.local_adversarial_risks(w, b, x + v, y, mask, gammas[:1])
        dual = np.min(gammas_np * eps + adv_mean)
        assert float(moved.mean()) <= float(dual) + 1e-6
    # at eps = 0 the bound is the mean risk plus the finite-sample terms (gamma -> inf in grid)
    big = jnp.concatenate([gammas, jnp.array([1e9])])
    risk, adv = R.local_adversarial_risks(w, b, x, y, mask, big)
    terms = sum(R.wasserstein_terms(6, big.shape[0], 25, 0.05))
    bound = R.wasserstein_average_bound(adv, big, 0.0, 25, 0.05)
    np.testing.assert_allclose(bound, min(1.0, float(risk.mean() + terms)), atol=1e-5)


def test_wasserstein_bounds_monotone(key):
    w, b = _linear()
    x = jax.random.normal(key, (8, 30, 2))
    y = jnp.argmax(x @ w + b[None, None, :], -1)
    gammas = jnp.concatenate([jnp.zeros(1), jnp.logspace(-2, 3, 20), jnp.array([1e6])])
    risk, adv = R.local_adversarial_risks(w, b, x, y, jnp.ones(y.shape, bool), gammas)
    lam = jnp.linspace(0.0, 1.0, 11)
    prev_avg, prev_tail = -1.0, None
    for eps, delta in ((0.0, 0.5), (0.01, 0.5), (0.1, 0.5), (0.1, 0.1)):
        # large delta keeps the bounds below their clip at 1 for this tiny network
        avg = float(R.wasserstein_average_bound(adv, gammas, eps, 1000, delta))
        tail = np.asarray(R.wasserstein_tail_bound(risk, adv, gammas, lam, eps, 1000, delta))
        assert avg >= prev_avg - 1e-7
        assert np.all(np.diff(tail) <= 1e-7)
        if prev_tail is not None:
            assert np.all(tail >= prev_tail - 1e-7)
        prev_avg, prev_tail = avg, tail
    # the bounds' programs (as the public functions call them): new values, no retrace
    lam_in, risk2, adv2 = jnp.asarray(lam), risk * 0.5, adv * 0.5
    assert_compiles_once(W._average_bound, [(adv, gammas, 0.1, 1000, 0.5),
                                            (adv2, gammas, 0.3, 500, 0.1)])  # fmt: skip
    assert_compiles_once(W._tail_bound, [(risk, adv, gammas, lam_in, 0.1, 1000, 0.5),
                                         (risk2, adv2, gammas, lam_in, 0.3, 500, 0.1)])  # fmt: skip


def test_gradient_ascent_matches_grid_for_a_smooth_loss():
    w = 2.0

    def loss(x, y):  # a logistic loss squashed into [0, 1]; curvature <= w^2 / 8 along w
        return jax.nn.sigmoid(-w * (2 * y - 1) * x[0])

    x = jnp.array([[0.3], [-0.2], [1.0]])
    y = jnp.array([1, 1, 0])
    gamma = 1.0  # 2 gamma > w^2 / 8: concave objective

    @jax.jit
    def ascent_and_grid(x, y):
        phi = R.adversarial_risk_ascent(loss, x, y, gamma, steps=300, step_size=0.1)
        g = jnp.linspace(-4.0, 4.0, 8001)

        def brute(xi, yi):
            return jnp.max(jax.vmap(lambda z: loss(z[None], yi))(g) - gamma * (g - xi[0]) ** 2)

        return phi, jax.vmap(brute)(x, y)

    phi, brute = ascent_and_grid(x, y)
    np.testing.assert_allclose(phi, brute, atol=1e-4)
    # the supremum is above the loss at the point itself (the perturbation pays off)
    assert np.all(np.asarray(phi) > np.asarray(jax.vmap(loss)(x, y)) + 1e-3)


def test_sharded_clients_equal_unsharded(mesh, key):
    w, b = _linear()
    x = jax.random.normal(key, (8, 12, 2))
    y = jnp.argmax(x @ w + b[None, None, :], -1).at[:, 0].set(2)
    mask = jnp.ones(y.shape, bool).at[:, -3:].set(False)
    gammas = jnp.logspace(-2, 2, 7)
    plain = R.local_adversarial_risks(w, b, x, y, mask, gammas)
    sharded = R.local_adversarial_risks(w, b, x, y, mask, gammas, mesh=mesh)
    for p, s in zip(plain, sharded, strict=True):
        np.testing.assert_allclose(p, s, atol=1e-6)
    assert len(sharded[1].sharding.device_set) == 4
    # the clients' program: new samples and multipliers of the same shapes do not retrace
    calls = [(w, b, x, y, mask, gammas), (w, b, 2.0 * x, y, mask, gammas * 3.0)]
    assert_compiles_once(R.local_adversarial_risks, calls)


def test_clear_errors():
    r = jnp.array([0.1, 0.5, 0.2])
    lam = jnp.linspace(0, 1, 5)
    with pytest.raises(ValueError, match=r"r_hat.*\[0, 1\]"):
        R.dkw_band(jnp.array([0.1, 1.3]), lam, 10)
    with pytest.raises(ValueError, match="at least 2 clients"):
        R.robust_tail_bound(jnp.array([0.1]), lam, 0.1, n=10)
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match="delta"):
            R.dkw_band(r, lam, 10, delta=bad)
        with pytest.raises(ValueError, match="delta"):
            R.robust_tail_bound(r, lam, 0.1, n=10, delta=bad)
    with pytest.raises(ValueError, match="divergence"):
        R.robust_tail_bound(r, lam, 0.1, n=10, divergence="tv")
    with pytest.raises(ValueError, match="eps"):
        R.robust_tail_bound(r, lam, -0.1, n=10)
    adv = jnp.ones((3, 2))
    with pytest.raises(ValueError, match="adv"):
        R.wasserstein_average_bound(adv * 2.0, jnp.array([0.0, 1.0]), 0.1, 10)
    with pytest.raises(ValueError, match="gammas"):
        R.wasserstein_average_bound(adv, jnp.array([0.0, 1.0, 2.0]), 0.1, 10)
    with pytest.raises(ValueError, match="delta"):
        R.wasserstein_tail_bound(r, adv, jnp.array([0.0, 1.0]), lam, 0.1, 10, delta=1.5)
    with pytest.raises(ValueError, match="n_min"):
        R.dkw_band(r, lam, 0)
    with pytest.raises(ValueError, match="`n`"):
        R.robust_tail_bound(r, lam, 0.1, n=-3)
    with pytest.raises(ValueError, match="same clients"):
        R.wasserstein_tail_bound(r[:2], adv, jnp.array([0.0, 1.0]), lam, 0.1, 10)
    with pytest.raises(ValueError, match=r"\[K, n, d\]"):
        w, b = _linear()
        R.local_adversarial_risks(w, b, jnp.ones((3, 2)), jnp.zeros((3,), int), r > 0, lam)


# ---- reference truths of the studies ---------------------------------------------------------


def test_gaussian_piece_matches_quadrature():
    piece = jax.jit(lambda mu, r: R.gaussian_piece(mu, 1.0, r))
    for mu in (-1.0, 0.0, 0.7, 2.5):
        for r in (0.3, 1.0, 4.0, np.inf):
            dens = lambda u, mu=mu, r=r: (1.0 - (u / r) ** 2) * stats.norm.pdf(u, mu)  # noqa: E731
            want = integrate.quad(dens, 0.0, r)[0]
            got = float(piece(jnp.asarray(mu, jnp.float32), jnp.asarray(r, jnp.float32)))
            assert got == pytest.approx(want, abs=2e-6), (mu, r)


def test_gaussian_client_risks_match_sampled_clients(key):
    # spread 0: every client has mean 0, so the exact risks are one value per gamma, and the
    # library's empirical adversarial risks of sampled clients must agree within sampling error
    x, y = R.sample_gaussian_clients(key, 2, 0.0, 4, 5000)
    assert x.shape == (4, 5000, 2) and y.shape == (4, 5000)
    weights, bias = R.fit_lda(x, y)
    w = np.asarray(weights[:, 1] - weights[:, 0])
    np.testing.assert_allclose(w, [2.0, 0.0], atol=0.1)  # Sigma = I, mu_1 - mu_0 = 2 e_1
    assert abs(float(bias[1] - bias[0])) < 0.1
    gammas = jnp.array([0.0, 0.5, 2.0, 100.0])
    exact = jax.jit(lambda w, b, g: R.gaussian_client_risks(R.class_margin_means(w, b, g), gammas))
    risk, adv = exact(weights, bias, jnp.zeros((1, 2)))
    emp_risk, emp_adv = R.local_adversarial_risks(weights, bias, x, y, jnp.ones(y.shape, bool),
                                                  gammas)  # fmt: skip
    se = np.sqrt(0.25 / 20000)
    assert abs(float(emp_risk.mean()) - float(risk[0])) < 4 * se
    np.testing.assert_allclose(emp_adv.mean(0), adv[0], atol=4 * se)
    assert float(adv[0, 0]) == 1.0  # gamma = 0: phi = 1
    assert np.all(np.diff(np.asarray(adv[0])) <= 0.0)
    # gamma -> inf: the plain risk (float64: in float32 the truncated moments cancel there)
    with jax.enable_x64(True):
        mu = jnp.array([[0.4, 1.5]], jnp.float64)
        risk, adv = jax.jit(R.gaussian_client_risks)(mu, jnp.array([1e2, 1e4, 1e6], jnp.float64))
        assert np.all(np.diff(np.asarray(adv[0])) <= 0.0)
        assert 0.0 <= float(adv[0, -1]) - float(risk[0]) < 1e-3


def test_class_margin_means_known_answer():
    weights, bias = jnp.array([[-0.5, 0.5], [0.0, 0.0]]), jnp.zeros(2)  # w = e_1, b = 0
    means = jnp.array([[0.3, -1.0], [-2.0, 5.0]])
    # class 0 at m - e_1 has margin -(m_1 - 1); class 1 at m + e_1 has margin m_1 + 1
    np.testing.assert_allclose(R.class_margin_means(weights, bias, means),
                               [[0.7, 1.3], [3.0, -1.0]], atol=1e-6)  # fmt: skip
    scaled = R.class_margin_means(3.0 * weights, 3.0 * bias, means)  # scale-free distances
    np.testing.assert_allclose(scaled, R.class_margin_means(weights, bias, means), atol=1e-6)


@pytest.mark.parametrize("divergence", R.DIVERGENCES)
def test_tilted_target_known_answers(divergence):
    var = 2.0 * 8.0 / (10.0**2 * 11.0)  # Var Beta(2, 8)
    assert R.tilt_divergence(0.0, divergence) == pytest.approx(0.0, abs=1e-8)  # quadrature
    # second order in theta: chi2 = theta^2 Var R, KL = theta^2 Var R / 2
    small = R.tilt_divergence(0.05, divergence)
    assert small == pytest.approx(0.05**2 * var * (1.0 if divergence == "chi2" else 0.5), rel=0.05)
    theta = R.tilt_theta(0.2, divergence)
    assert R.tilt_divergence(theta, divergence) == pytest.approx(0.2, rel=1e-6)
    lam = np.linspace(0.0, 0.8, 33)
    np.testing.assert_allclose(R.tilt_tail(0.0, lam), stats.beta.sf(lam, 2.0, 8.0), atol=2e-4)
    tail = R.tilt_tail(theta, lam)
    assert tail[0] == 1.0 and np.all(np.diff(tail) <= 0.0)
    assert np.all(tail >= stats.beta.sf(lam, 2.0, 8.0) - 2e-4)  # tilting up moves mass up
    # a target within the budget never exceeds the population worst case
    worst = R.chi2_worst_tail if divergence == "chi2" else R.kl_worst_tail
    assert np.all(tail <= np.asarray(worst(stats.beta.sf(lam, 2.0, 8.0), 0.2)) + 2e-4)


@pytest.mark.parametrize("divergence", R.DIVERGENCES)
def test_two_level_target_known_answers(divergence):
    eps = 0.2
    median = stats.beta.median(2.0, 8.0)
    with jax.enable_x64(True):
        a, b = (float(v) for v in R.two_level_weights(0.5, eps, 0.0, jnp.inf, divergence))
    f = lambda t: t * np.log(t) if divergence == "kl" else (t - 1.0) ** 2  # noqa: E731
    assert 0.5 * a + 0.5 * b == pytest.approx(1.0, abs=1e-6)  # a probability reweighting
    assert 0.5 * f(a) + 0.5 * f(b) == pytest.approx(eps, abs=1e-5)  # spends the whole budget
    lam = np.array([0.0, 0.1, median, 0.4, 0.8])
    tail = R.two_level_target(eps, divergence, lam)
    assert tail[0] == pytest.approx(1.0, abs=1e-6)
    worst = R.chi2_worst_tail if divergence == "chi2" else R.kl_worst_tail
    assert tail[2] == pytest.approx(float(worst(0.5, eps)), abs=1e-5)  # worst case at the median
    assert np.all(tail <= np.asarray(worst(stats.beta.sf(lam, 2.0, 8.0), eps)) + 1e-5)
    if divergence == "chi2":
        assert tail[2] == pytest.approx(0.5 + np.sqrt(eps) / 2, abs=1e-5)


def test_target_errors_name_the_argument():
    with pytest.raises(ValueError, match="divergence"):
        R.tilt_divergence(1.0, "tv")
    with pytest.raises(ValueError, match="eps"):
        R.two_level_target(-0.1, "kl", np.zeros(3))
    with pytest.raises(ValueError, match="points"):
        R.beta_quadrature(points=0)


def test_digits_model_and_client_risks():
    x_tr, x_te, y_tr, y_te = digits_split(layout="image")
    model = R.fit_digits_model(x_tr, y_tr, 60)
    assert model.w.shape == (64, 10) and model.b.shape == (10,)
    np.testing.assert_allclose(model.mean, x_tr.reshape(-1, 64).mean(0), rtol=1e-6)
    assert float(model.sd.min()) >= 0.1  # constant border pixels get the floor
    acc = float((model.predict(jnp.asarray(x_te)) == y_te).mean())
    assert acc > 0.9, acc
    keys = jax.random.split(jax.random.key(0), 8)
    pool_x, pool_y = jnp.asarray(x_te), jnp.asarray(y_te)
    # without a shift (one compiled program; the shifted clients run in the experiment's test):
    # a model whose predictions are the labels has risk 0, and a constant model (always class 0)
    # errs on every other class, risk = 1 - pi_0, which is 0.9 for near-uniform proportions
    labels = model.predict(pool_x)
    zero = R.shifted_client_risks(model, keys, pool_x, labels, 0.4, shift_sd=0.0)
    np.testing.assert_array_equal(zero, 0.0)
    const = model.replace(w=jnp.zeros_like(model.w), b=jnp.eye(10)[0])
    risk = R.shifted_client_risks(const, keys, pool_x, pool_y, 1e6, shift_sd=0.0)
    np.testing.assert_allclose(risk, 0.9, atol=2e-3)
    with pytest.raises(ValueError, match="x_train"):
        R.fit_digits_model(x_tr.reshape(-1, 64), y_tr, 5)
    with pytest.raises(ValueError, match="steps"):
        R.fit_digits_model(x_tr, y_tr, -1)

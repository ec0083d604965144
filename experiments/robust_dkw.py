"""Certified federated evaluation: coverage of the DKW, f-divergence and Wasserstein certificates
against analytic or population truths, tightness along the K/n ladder, and a digits network.

Run: ``python -m experiments run robust_dkw --preset quick`` or ``--preset full``.

Studies (spec section 5; every bound from :mod:`jaxlab.federated.robust_dkw`, ``delta = 0.05``):

- **E1, same network.** True client risks ``R ~ Beta(2, 8)``; client ``k`` reports ``R_hat_k =
  Binomial(n, R_k) / n``. Coverage = fraction of replicates whose band contains the Beta CDF at
  1024 points. Negative control: the band without the per-client term at ``n = 20, K = 2000``.
- **E2, f-divergence shift.** Targets: the exponential tilt ``mu'(r) ~ mu(r) e^{theta r}`` with
  ``D_f(mu' || mu) = eps`` (quadrature) and the worst two-level reweighting at the median. Coverage
  = fraction of replicates where the certificate is ``>=`` the target tail at every threshold.
  Tightness: mean over replicates of ``sup_lam (G_hat - G*)`` against the chi-square population
  worst case ``G*`` at ``eps_tight``.
- **E3, Wasserstein shift.** Binary class-conditional Gaussians ``x | y ~ N(m_k + (2y - 1) e_1,
  I_d)``, client means ``m_k ~ N(0, s^2 I)``, an LDA classifier fitted on a pooled source; the
  0-1 loss's closed-form ``phi_gamma``. Targets (population, from ``e3_reference`` clients with
  Gaussian closed forms): (a) the exact worst case at meta budget ``eps`` (the dual on a dense
  ``gamma`` grid, i.e. the optimal flipping of the cheapest correct mass, and its knapsack tail);
  (b) random per-client translations ``v_k ~ N(0, eps / d I)`` (``E ||v||^2 = eps``).
- **E4, digits network.** A multinomial logistic regression (Adam) on 1437 standardised training
  images; clients = Dirichlet(0.4) label proportions, an affine image shift ``X -> A X + B``
  (``A = I + N(0, 0.05^2)``, ``B ~ N(0, 0.05^2)``, 8 x 8, on pixels scaled to ``[0, 1]``) and
  ``e4_draws`` test-pool draws with replacement (the 360-image pool is the limitation: the
  meta-distribution is over resampled clients). True client risks are exact on the pool; the
  reference CDF comes from ``e4_reference`` extra clients. Unseen coverage: the band from the seen
  half contains the reference CDF (fresh network per replicate). Shift coverage: a target network
  with Dirichlet(alpha') proportions, certified ``eps = KL(Dir(alpha') || Dir(0.4))`` (data
  processing), the KL certificate against the target's reference tail. The official 10-bin
  histogram estimate of the divergence is reported beside the certified value; it is not a bound.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from jax.scipy.special import betainc
from scipy import stats

from experiments import _common
from experiments._config import COUNT, NONNEG, Range
from jaxlab.core.data import digits_split
from jaxlab.core.training import map_in_chunks
from jaxlab.federated import robust_dkw as R

NAME = "robust_dkw"
PAPER = "Najafi, Mahdizadeh Sani, Farnia, Certifiably Robust Model Evaluation in Federated Learning under Meta-Distributional Shifts (ICML 2025)"  # noqa: E501
CLAIM = (
    "Clients' scalar risks certify the risk distribution of unseen clients (DKW + per-client "
    "Hoeffding) and of f-divergence / Wasserstein-shifted networks, with vanishing gap as K grows"
)
DELTA = 0.05
BETA = R.targets.BETA  # the source risk law Beta(2, 8) of E1 and E2


@dataclasses.dataclass(frozen=True)
class Config:
    """Grid sizes, replicates and budgets of the four studies.

    Attributes:
      seed: PRNG seed.
      e1_cells: ``(K, n)`` cells of E1; e1_replicates; e1_points: CDF grid size; e1_control:
        ``(K, n)`` of the negative control.
      e2_ladder: ``(K, n)`` rungs of E2; e2_eps: budgets; e2_replicates; e2_points: thresholds;
        e2_eps_tight: the budget of the tightness curve (chi-square).
      e3_dims, e3_eps, e3_clients, e3_samples, e3_replicates, e3_spread, e3_reference: E3's
        dimensions, budgets, K, n, replicates, client-mean SD ``s``, reference clients.
      e4_clients: clients per network (half seen); e4_draws: samples per client; e4_replicates;
        e4_reference: reference clients; e4_alphas: target Dirichlet parameters; e4_steps:
        logistic-regression Adam steps.
      chunk: replicates ``vmap``ped together.
    """

    seed: int = 0
    e1_cells: tuple[tuple[int, int], ...] = ((500, 200), (2000, 1000))
    e1_replicates: int = 200
    e1_points: int = 1024
    e1_control: tuple[int, int] = (2000, 20)
    e2_ladder: tuple[tuple[int, int], ...] = ((500, 1000), (2000, 4000), (8000, 16000))
    e2_eps: tuple[float, ...] = (0.05, 0.2)
    e2_replicates: int = 100
    e2_points: int = 60
    e2_eps_tight: float = 0.2
    e3_dims: tuple[int, ...] = (2, 10)
    e3_eps: tuple[float, ...] = (0.05, 0.2)
    e3_clients: int = 500
    e3_samples: int = 200
    e3_replicates: int = 100
    e3_spread: float = 0.5
    e3_reference: int = 20000
    e4_clients: int = 300
    e4_draws: int = 300
    e4_replicates: int = 50
    e4_reference: int = 5000
    e4_alphas: tuple[float, ...] = (0.35, 0.3)
    e4_steps: int = 300
    chunk: int = 50


CELLS = Range(2, min_items=2)  # (K, n) pairs, at least one: K >= 2 clients (n >= 2 as well)
LIMITS = {
    "e1_cells": CELLS,
    "e1_replicates": COUNT,
    "e1_points": COUNT,
    "e1_control": Range(2),
    "e2_ladder": CELLS,
    "e2_eps": NONNEG,
    "e2_replicates": COUNT,
    "e2_points": COUNT,
    "e2_eps_tight": NONNEG,
    "e3_dims": Range(1, min_items=1),
    "e3_eps": Range(0, min_items=1),
    "e3_clients": Range(2),
    "e3_samples": COUNT,
    "e3_replicates": COUNT,
    "e3_spread": NONNEG,
    "e3_reference": COUNT,
    "e4_clients": Range(4),  # half are seen: the certificates need >= 2 seen clients
    "e4_draws": COUNT,
    "e4_replicates": COUNT,
    "e4_reference": COUNT,
    "e4_alphas": Range(0, low_open=True, min_items=1),  # target Dirichlet concentrations
    "e4_steps": NONNEG,
    "chunk": COUNT,
}


PRESETS = {
    "quick": Config(),
    "full": Config(
        e1_cells=tuple((k, n) for k in (100, 500, 2000) for n in (50, 200, 1000)),
        e1_replicates=1000,
        e2_replicates=500,
        e3_replicates=200,
        e4_clients=1000,
        e4_replicates=100,
        e4_reference=20000,
    ),
}


def _cell(k: int, n: int) -> str:
    return f"K={k},n={n}"


def chunked_replicates(fn, keys: jax.Array, chunk: int, *args):
    """``fn(keys_chunk, *args)`` over ``keys`` in chunks of ``chunk`` replicates
    (:func:`jaxlab.core.training.map_in_chunks`: one compiled shape), as NumPy arrays."""
    out = map_in_chunks(lambda k: fn(k, *args), (keys,), chunk)
    return jax.tree_util.tree_map(np.asarray, out)


def _covers(bound: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Per replicate: ``bound [..., L] >= target [L]`` at every threshold (1e-9 float slack)."""
    return np.all(bound >= target - 1e-9, axis=-1)


# ---- E1: same-network coverage -------------------------------------------------------------------


@functools.partial(jax.jit, static_argnames=("k", "n", "points"))
def e1_covered(keys, k: int, n: int, points: int):
    """Per replicate: the band contains the Beta CDF, with and without the per-client term;
    and the band's two terms."""
    grid = jnp.linspace(0.0, 1.0, points)
    truth = betainc(BETA[0], BETA[1], grid)

    def one(key):
        kr, kb = jax.random.split(key)
        r = jax.random.beta(kr, BETA[0], BETA[1], (k,))
        r_hat = jax.random.binomial(kb, float(n), r) / n
        inside = []
        for client_term in (True, False):
            band = R.dkw_band(r_hat, grid, n, DELTA, client_term=client_term)
            inside.append(jnp.all((band.lower <= truth) & (truth <= band.upper)))
        return inside[0], inside[1], band.eps_k, band.t

    return jax.vmap(one)(keys)


def run_e1(config: Config, key) -> dict:
    cov, widths = {}, {}
    for i, (k, n) in enumerate(config.e1_cells):
        keys = jax.random.split(jax.random.fold_in(key, i), config.e1_replicates)
        inside, _, eps_k, _ = chunked_replicates(
            e1_covered, keys, config.chunk, k, n, config.e1_points
        )
        t = R.hoeffding_shift(n, k, DELTA / 2)
        cov[_cell(k, n)] = float(inside.mean())
        widths[_cell(k, n)] = {"eps_K": float(eps_k[0]), "t": float(t)}
    k, n = config.e1_control
    keys = jax.random.split(jax.random.fold_in(key, 99), config.e1_replicates)
    with_t, control, _, _ = chunked_replicates(
        e1_covered, keys, config.chunk, k, n, config.e1_points
    )
    return {
        "coverage": cov,
        "half_widths": widths,
        "negative_control": float(control.mean()),
        "control_with_client_term": float(with_t.mean()),
    }


# ---- E2: f-divergence coverage and tightness -----------------------------------------------------


@functools.partial(jax.jit, static_argnames=("k", "n"))
def _e2_bounds(keys, lam, eps_grid, k: int, n: int):
    """``{divergence: [R, E, L]}`` certificates for replicates ``keys``, and the plug-in
    control ``{"plugin_" + divergence: [R, E, L]}``: the population worst case evaluated at the
    empirical tail fraction, without any finite-sample term."""

    def one(key):
        kr, kb = jax.random.split(key)
        r = jax.random.beta(kr, BETA[0], BETA[1], (k,))
        r_hat = jax.random.binomial(kb, float(n), r) / n
        out = {
            div: jax.vmap(lambda e, d=div: R.robust_tail_bound(r_hat, lam, e, n=n, delta=DELTA,
                                                               divergence=d))(eps_grid)
            for div in R.DIVERGENCES
        }  # fmt: skip
        p_hat = R.tail_fraction(r_hat, lam)
        for div in R.DIVERGENCES:
            plug = lambda e, d=div: R.population_worst_tail(p_hat, e, d)  # noqa: E731
            out["plugin_" + div] = jax.vmap(plug)(eps_grid)
        return out

    return jax.vmap(one)(keys)


def run_e2(config: Config, key) -> dict:
    lam = np.linspace(0.0, 0.8, config.e2_points)
    eps_grid = np.array(sorted(set(config.e2_eps) | {config.e2_eps_tight}))
    targets = {
        div: {
            float(e): {
                "tilt": R.tilt_tail(R.tilt_theta(float(e), div), lam),
                "two_level": R.two_level_target(float(e), div, lam),
            }
            for e in eps_grid
        }
        for div in R.DIVERGENCES
    }
    p_mu = stats.beta.sf(lam, *BETA)
    g_star = np.asarray(R.chi2_worst_tail(p_mu, config.e2_eps_tight))
    coverage = {div: {} for div in R.DIVERGENCES}
    plugin = {div: {} for div in R.DIVERGENCES}
    detail, gaps, curves = {}, [], {}
    for i, (k, n) in enumerate(config.e2_ladder):
        keys = jax.random.split(jax.random.fold_in(key, i), config.e2_replicates)
        bounds = chunked_replicates(_e2_bounds, keys, config.chunk, jnp.asarray(lam),
                                    jnp.asarray(eps_grid), k, n)  # fmt: skip
        for div in R.DIVERGENCES:
            cells = {}
            for j, e in enumerate(eps_grid):
                for name, tgt in targets[div][float(e)].items():
                    ok = _covers(bounds[div][:, j, :], tgt)
                    cells[f"eps={e:g},{name}"] = float(ok.mean())
            coverage[div][_cell(k, n)] = min(cells.values())
            detail[f"{div},{_cell(k, n)}"] = cells
            plug = [
                _covers(bounds["plugin_" + div][:, j, :], tgt).mean()
                for j, e in enumerate(eps_grid)
                for tgt in targets[div][float(e)].values()
            ]
            plugin[div][_cell(k, n)] = float(min(plug))
        j = int(np.flatnonzero(eps_grid == config.e2_eps_tight)[0])
        chi2 = bounds["chi2"][:, j, :]
        gaps.append(float(np.mean(np.max(chi2 - g_star[None, :], axis=-1))))
        curves[_cell(k, n)] = chi2.mean(0)
    return {
        "coverage": coverage,
        "plugin_coverage": plugin,
        "detail": detail,
        "tightness_sup_gap": gaps,
        "lam": lam,
        "g_star": g_star,
        "curves": curves,
        "targets": targets,
    }


# ---- E3: Wasserstein coverage --------------------------------------------------------------------


def lda_classifier(key, dim: int, spread: float, clients: int = 50, samples: int = 200):
    """LDA on a pooled source network: ``(weights [d, 2], bias [2])``, ``s_1 - s_0 = w.x + b``."""
    return R.fit_lda(*R.sample_gaussian_clients(key, dim, spread, clients, samples))


def run_e3(config: Config, key) -> dict:
    gammas = jnp.concatenate([jnp.zeros(1), jnp.logspace(-2, 4, 64), jnp.array([1e6])])
    dense = jnp.concatenate([jnp.zeros(1), jnp.logspace(-3, 5, 400)])
    lam = jnp.linspace(0.05, 0.95, 19)
    avg_ok, tail_ok, plugin_ok, detail, gap_a = [], [], [], {}, {}
    for i, dim in enumerate(config.e3_dims):
        kc, kr, kv, kd = jax.random.split(jax.random.fold_in(key, i), 4)
        weights, bias = lda_classifier(kc, dim, config.e3_spread)
        ref = _e3_targets(weights, bias, kr, kv, dense, lam, jnp.asarray(config.e3_eps),
                          dim, config.e3_spread, config.e3_reference)  # fmt: skip
        ref = jax.tree_util.tree_map(np.asarray, ref)

        keys = jax.random.split(kd, config.e3_replicates)
        eps = jnp.asarray(config.e3_eps)
        avg, tail, plugin = chunked_replicates(_e3_bounds, keys, max(config.chunk // 5, 1), weights,
                                               bias, gammas, lam, eps, dim, config.e3_spread,
                                               config.e3_clients, config.e3_samples)  # fmt: skip
        terms = sum(R.wasserstein_terms(config.e3_clients, len(gammas), config.e3_samples, DELTA))
        for j, e in enumerate(config.e3_eps):
            a_only, b_only = float(ref["avg_a"][j]), float(ref["avg_b"][j])
            t_avg = max(a_only, b_only)
            t_tail = np.maximum(ref["tail_a"][j], ref["tail_b"][j])
            a_ok = avg[:, j] >= t_avg
            tl_ok = _covers(tail[:, j, :], t_tail)
            avg_ok.append(a_ok.mean())
            plugin_ok.append((plugin[:, j] >= a_only).mean())
            tail_ok.append(tl_ok.mean())
            detail[f"d={dim},eps={e:g}"] = {
                "avg_coverage": float(a_ok.mean()),
                "tail_coverage": float(tl_ok.mean()),
                "target_avg_worst_case": a_only,
                "target_avg_translation": b_only,
                "bound_avg_mean": float(avg[:, j].mean()),
            }
            gap_a[f"d={dim},eps={e:g}"] = float(avg[:, j].mean() - float(terms) - a_only)
    return {
        "avg": float(min(avg_ok)),
        "tail": float(min(tail_ok)),
        "plugin_avg": float(min(plugin_ok)),
        "detail": detail,
        "avg_gap_vs_worst_case": gap_a,
    }


@functools.partial(jax.jit, static_argnames=("dim", "spread", "clients", "samples"))
def _e3_bounds(keys, weights, bias, gammas, lam, eps, dim, spread, clients, samples):
    """Average-loss ``[R, E]`` and tail ``[R, E, L]`` certificates for replicates ``keys``, and
    the plug-in dual ``min_gamma [gamma eps + mean_k R_adv_k]`` without finite-sample terms."""

    def one(key):
        x, y = R.sample_gaussian_clients(key, dim, spread, clients, samples)
        mask = jnp.ones(y.shape, bool)
        risk, adv = R.local_adversarial_risks(weights, bias, x, y, mask, gammas)
        avg = jax.vmap(lambda e: R.wasserstein_average_bound(adv, gammas, e, samples, DELTA))(eps)
        plugin = jax.vmap(lambda e: jnp.min(gammas * e + adv.mean(0)))(eps)
        tail = jax.vmap(lambda e: R.wasserstein_tail_bound(risk, adv, gammas, lam, e, samples,
                                                           DELTA))(eps)  # fmt: skip
        return avg, tail, plugin

    return jax.vmap(one)(keys)


@functools.partial(jax.jit, static_argnames=("dim", "spread", "clients"))
def _e3_targets(weights, bias, k_ref, k_shift, dense, lam, eps, dim, spread, clients):
    """Population targets per budget ``eps [E]`` from ``clients`` reference clients.

    (a) the exact worst case: ``min_gamma [gamma eps + E_mu R_adv(gamma)]`` and its knapsack tail
    (costs from the dense ``gamma`` grid: a grid supremum under-estimates each cost, so the
    target tail is if anything too high); (b) per-client translations ``N(0, eps / d I)``.
    """
    means = spread * jax.random.normal(k_ref, (clients, dim))
    risk, adv = R.gaussian_client_risks(R.class_margin_means(weights, bias, means), dense)
    costs = jax.vmap(lambda t: R.transport_costs(risk, adv, dense, t, 0.0))(lam)  # [L, N]
    noise = jax.random.normal(k_shift, means.shape)

    def per_eps(e):
        avg_a = jnp.min(dense * e + adv.mean(0))
        tail_a = jax.vmap(lambda c: R.knapsack_fraction(c, e))(costs)
        moved_means = means + jnp.sqrt(e / dim) * noise
        moved, _ = R.gaussian_client_risks(R.class_margin_means(weights, bias, moved_means),
                                           dense[:1])  # fmt: skip
        tail_b = R.tail_fraction(moved, lam)
        return {"avg_a": avg_a, "tail_a": tail_a, "avg_b": moved.mean(), "tail_b": tail_b}

    return jax.lax.map(per_eps, eps)


# ---- E4: digits network --------------------------------------------------------------------------


def digits_model(steps: int):
    """The fixed 1437 / 360 digits split and a logistic regression fitted by Adam on the 1437
    (:func:`jaxlab.federated.robust_dkw.fit_digits_model`).

    Returns ``(model, x_pool [360, 8, 8] in [0, 1], y_pool [360], test accuracy)``.
    """
    x_tr, x_te, y_tr, y_te = digits_split(layout="image")
    model = R.fit_digits_model(x_tr, y_tr, steps)
    x_te, y_te = jnp.asarray(x_te), jnp.asarray(y_te)
    return model, x_te, y_te, float((model.predict(x_te) == y_te).mean())


def digits_clients(key, model, x_pool, y_pool, clients: int, alpha: float, chunk: int = 500):
    """Exact risks ``[clients]`` of clients with Dirichlet(alpha) label proportions and affine
    image shifts (:func:`jaxlab.federated.robust_dkw.shifted_client_risks`), ``chunk`` clients
    per call; the keys are split for whole chunks, so one compiled shape serves every call."""
    keys = jax.random.split(key, -(-clients // chunk) * chunk)
    risks = map_in_chunks(
        lambda k: R.shifted_client_risks(model, k, x_pool, y_pool, alpha), (keys,), chunk
    )
    return np.asarray(risks)[:clients]


@functools.partial(jax.jit, static_argnames=("n",))
def _e4_certificates(seen, grid, lam, eps_vec, n: int):
    """The DKW band on ``grid`` and the KL certificates ``[A, L]`` for budgets ``eps_vec [A]``."""
    band = R.dkw_band(seen, grid, n, DELTA)
    tails = jax.vmap(lambda e: R.robust_tail_bound(seen, lam, e, n=n, delta=DELTA,
                                                   divergence="kl"))(eps_vec)  # fmt: skip
    return band.lower, band.upper, tails


def histogram_kl(source: np.ndarray, target: np.ndarray, bins: int = 10) -> float:
    """The official estimate of ``KL(target || source)`` from 10-bin histograms, empty bins
    floored at the smallest non-zero density. Biased and not an upper bound: never a certified
    ``eps``."""
    edges = np.linspace(min(source.min(), target.min()), max(source.max(), target.max()), bins + 1)
    ps = np.histogram(source, edges)[0] / len(source)
    pt = np.histogram(target, edges)[0] / len(target)
    floor = min(ps[ps > 0].min(), pt[pt > 0].min())
    ps, pt = np.maximum(ps, floor), np.maximum(pt, floor)
    return float(np.sum(pt * np.log(pt / ps)))


def run_e4(config: Config, key) -> dict:
    model, x_pool, y_pool, acc = digits_model(config.e4_steps)
    k_ref, k_tgt, k_rep = jax.random.split(key, 3)
    ref = digits_clients(k_ref, model, x_pool, y_pool, config.e4_reference, 0.4)
    grid = np.linspace(0.0, 1.0, 1024)
    ref_cdf = np.searchsorted(np.sort(ref), grid, side="right") / len(ref)
    lam = np.linspace(0.0, 0.5, 51)
    eps_cert = {a: float(R.dirichlet_kl(jnp.full((10,), a), jnp.full((10,), 0.4)))
                for a in config.e4_alphas}  # fmt: skip
    tgt_tail = {}
    for i, a in enumerate(config.e4_alphas):
        tr = digits_clients(jax.random.fold_in(k_tgt, i), model, x_pool, y_pool,
                            config.e4_reference, a)  # fmt: skip
        tgt_tail[a] = (tr[None, :] >= lam[:, None]).mean(1)
    eps_vec = [eps_cert[a] for a in config.e4_alphas]
    seen_k = config.e4_clients // 2
    n = config.e4_draws
    unseen_ok, shift_ok = [], {a: [] for a in config.e4_alphas}
    hist = {a: [] for a in config.e4_alphas}
    example = {}
    for r in range(config.e4_replicates):
        kr = jax.random.fold_in(k_rep, r)
        true = digits_clients(kr, model, x_pool, y_pool, config.e4_clients, 0.4)
        r_hat = np.asarray(jax.random.binomial(jax.random.fold_in(kr, 1), float(n),
                                               jnp.asarray(true)) / n)  # fmt: skip
        seen = r_hat[:seen_k]
        lo, hi, bounds = _e4_certificates(jnp.asarray(seen), jnp.asarray(grid), jnp.asarray(lam),
                                          jnp.asarray(eps_vec), n)  # fmt: skip
        lo, hi, bounds = np.asarray(lo), np.asarray(hi), np.asarray(bounds)
        unseen_ok.append(bool(np.all((lo <= ref_cdf) & (ref_cdf <= hi))))
        for i, a in enumerate(config.e4_alphas):
            bound = bounds[i]
            shift_ok[a].append(bool(_covers(bound, tgt_tail[a])))
            if r < 10:  # the histogram estimate on a same-size target network
                kt = jax.random.fold_in(jax.random.fold_in(kr, 2), i)
                t_true = digits_clients(kt, model, x_pool, y_pool, seen_k, a)
                t_hat = np.asarray(jax.random.binomial(jax.random.fold_in(kt, 1), float(n),
                                                       jnp.asarray(t_true)) / n)  # fmt: skip
                hist[a].append(histogram_kl(seen, t_hat))
            if r == 0:
                example[a] = bound
        if r == 0:
            example["band"] = (lo, hi)
            example["seen"] = seen
            example["unseen"] = r_hat[seen_k:]
    return {
        "test_accuracy": acc,
        "unseen_coverage": float(np.mean(unseen_ok)),
        "shift_coverage": float(min(np.mean(v) for v in shift_ok.values())),
        "shift_coverage_by_alpha": {str(a): float(np.mean(v)) for a, v in shift_ok.items()},
        "certified_eps": {str(a): e for a, e in eps_cert.items()},
        "histogram_eps": {str(a): float(np.mean(v)) for a, v in hist.items()},
        "reference_risk_mean": float(ref.mean()),
        "grid": grid,
        "ref_cdf": ref_cdf,
        "lam": lam,
        "target_tail": tgt_tail,
        "source_tail": (ref[None, :] >= lam[:, None]).mean(1),
        "example": example,
    }


# ---- run -----------------------------------------------------------------------------------------


def _figures(out: Path, config: Config, e2: dict, e4: dict) -> None:
    ex = e4["example"]
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    grid = e4["grid"]
    ax.fill_between(grid, ex["band"][0], ex["band"][1], step="post", alpha=0.3,
                    label="certified band (seen clients)")  # fmt: skip
    for name, vals, style in (("seen", ex["seen"], "-"), ("unseen", ex["unseen"], "--")):
        s = np.sort(vals)
        ax.step(s, np.arange(1, len(s) + 1) / len(s), style, where="post", label=f"{name} ECDF")
    ax.plot(grid, e4["ref_cdf"], "k", lw=1, label="reference CDF (true risks)")
    ax.set(xlim=(0, 0.5), xlabel="client risk (0-1 loss)", ylabel="CDF",
           title="Digits network: unseen-client certificate")  # fmt: skip
    ax.legend(fontsize=7)
    _common.save_figure(fig, out, "cdf_band_digits")

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    lam = e2["lam"]
    last = _cell(*config.e2_ladder[-1])
    ax = axes[0]
    ax.plot(lam, e2["curves"][last], label=f"chi2 certificate ({last})")
    ax.plot(lam, e2["g_star"], "k--", label="population worst case G*")
    ax.plot(lam, e2["targets"]["chi2"][config.e2_eps_tight]["tilt"], label="tilted target")
    ax.plot(lam, e2["targets"]["chi2"][config.e2_eps_tight]["two_level"], label="two-level target")
    ax.plot(lam, stats.beta.sf(lam, *BETA), ":", label="source tail")
    ax.set(xlabel="risk threshold lam", ylabel="P[R >= lam]",
           title=f"Beta(2, 8), eps = {config.e2_eps_tight}")  # fmt: skip
    ax.legend(fontsize=7)
    ax = axes[1]
    lam4 = e4["lam"]
    for a in config.e4_alphas:
        ax.plot(lam4, ex[a], label=f"KL certificate, eps={e4['certified_eps'][str(a)]:.3f}")
        ax.plot(lam4, e4["target_tail"][a], "--", label=f"target Dir({a}) tail")
    ax.plot(lam4, e4["source_tail"], "k:", label="source Dir(0.4) tail")
    ax.set(xlabel="risk threshold lam", title="Digits: Dirichlet meta-shift")
    ax.legend(fontsize=7)
    _common.save_figure(fig, out, "robust_tail_bounds")

    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    labels = [_cell(*c) for c in config.e2_ladder]
    ax.plot(range(len(labels)), e2["tightness_sup_gap"], "o-")
    ax.set_xticks(range(len(labels)), labels, fontsize=7)
    ax.set(ylabel="mean sup_lam (G_hat - G*)", title=f"chi2 tightness, eps = {config.e2_eps_tight}")
    _common.save_figure(fig, out, "tightness_ladder")


def run(config: Config, out_dir: Path) -> dict:
    out = Path(out_dir)
    key = jax.random.key(config.seed)
    k1, k2, k3, k4 = jax.random.split(key, 4)
    e1 = run_e1(config, k1)
    e2 = run_e2(config, k2)
    e3 = run_e3(config, k3)
    e4 = run_e4(config, k4)
    _figures(out, config, e2, e4)
    coverage = {
        "dkw": e1["coverage"],
        "kl": e2["coverage"]["kl"],
        "chi2": e2["coverage"]["chi2"],
        "wasserstein_avg": e3["avg"],
        "wasserstein_tail": e3["tail"],
    }
    digits = {k: e4[k] for k in ("unseen_coverage", "shift_coverage", "shift_coverage_by_alpha",
                                 "certified_eps", "histogram_eps", "test_accuracy",
                                 "reference_risk_mean")}  # fmt: skip
    metrics = {
        "coverage": coverage,
        "negative_control_coverage": e1["negative_control"],
        "plugin_control_coverage": {
            **e2["plugin_coverage"],
            "wasserstein_avg_vs_worst_case": e3["plugin_avg"],
        },
        "control_with_client_term": e1["control_with_client_term"],
        "half_widths": e1["half_widths"],
        "tightness_sup_gap": e2["tightness_sup_gap"],
        "f_divergence_detail": e2["detail"],
        "wasserstein_detail": e3["detail"],
        "wasserstein_avg_gap_vs_worst_case": e3["avg_gap_vs_worst_case"],
        "digits": digits,
    }
    rows = [[f"DKW {c}", r] for c, r in e1["coverage"].items()]
    rows += [[f"{d} {c}", r] for d in R.DIVERGENCES for c, r in e2["coverage"][d].items()]
    rows += [["Wasserstein average", e3["avg"]], ["Wasserstein tail", e3["tail"]],
             ["digits unseen", e4["unseen_coverage"]], ["digits shift (KL)", e4["shift_coverage"]],
             [f"negative control {_cell(*config.e1_control)}", e1["negative_control"]]]  # fmt: skip
    rows += [[f"plug-in {d} {c} (no finite-sample terms)", r]
             for d in R.DIVERGENCES for c, r in e2["plugin_coverage"][d].items()]  # fmt: skip
    rows += [["plug-in Wasserstein average vs worst case", e3["plugin_avg"]]]
    ladder = [
        [_cell(*c), g] for c, g in zip(config.e2_ladder, e2["tightness_sup_gap"], strict=True)
    ]
    _common.write_report(
        out,
        "Robust DKW: certified federated evaluation",
        f"{PAPER}\n\nClaim: {CLAIM}.",
        "## Coverage (fraction of replicates certified; target >= 0.95, control < 0.90)\n\n"
        + _common.markdown_table(["certificate / cell", "coverage"], rows),
        f"## chi2 tightness (eps = {config.e2_eps_tight})\n\n"
        + _common.markdown_table(["rung", "mean sup gap"], ladder),
        "## Digits\n\n"
        + _common.markdown_table(
            [
                "alpha'",
                "certified eps (Dirichlet KL)",
                "histogram estimate (official)",
                "shift coverage",
            ],
            [
                [
                    a,
                    e4["certified_eps"][str(a)],
                    e4["histogram_eps"][str(a)],
                    e4["shift_coverage_by_alpha"][str(a)],
                ]
                for a in config.e4_alphas
            ],
        )  # fmt: skip
        + f"\n\nLogistic regression test accuracy {e4['test_accuracy']:.3f}.",
        "Figures: `cdf_band_digits.png`, `robust_tail_bounds.png`, `tightness_ladder.png`.",
    )
    return metrics

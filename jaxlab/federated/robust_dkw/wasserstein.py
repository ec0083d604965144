"""Wasserstein meta-shift: local adversarial risks, the average-loss bound and the
fractional-knapsack tail bound (spec section 2.4; reconstructed from DRO duality, since the
official repository has no Wasserstein path).

Ground cost ``c(z, z') = ||x - x'||^2`` (``+inf`` if the labels differ); client-level cost
``W_c(P, P')``; meta-level ``W(mu, mu') = inf_pi E_pi W_c(P, P') <= eps``. Each client computes,
privately and for each multiplier ``gamma`` of a grid ``Gamma``, its local adversarial risk
``R_adv_k(gamma) = (1/n_k) sum_i phi_gamma(z_ki)`` with
``phi_gamma(z) = sup_z' [l(z') - gamma c(z', z)]``,
and sends only these ``|Gamma|`` scalars (and its risk). The server combines them:

- **average loss** (two nested dualities sharing ``gamma``)::

    sup_{W(mu, mu') <= eps} E_mu' R <= min_gamma [gamma eps + mean_k R_adv_k(gamma)] + t_G + m_G,

  ``t_G = sqrt(log((|Gamma| + 1) K / delta_1) / (2 n_min))`` (one-sided Hoeffding, union over
  clients, the grid and the plain risk) and ``m_G = sqrt(log(|Gamma| / delta_2) / (2 K))``
  (Hoeffding over clients, union over the grid: the minimising ``gamma`` is data-dependent, so a
  per-``gamma`` term alone would not be valid; the spec writes ``log(1 / delta)``).
- **risk tail**: the cost for client ``k`` to reach risk ``lam`` is at least ``c_k(lam) =
  sup_gamma (lam - R_adv_k(gamma)) / gamma`` (weak duality; 0 if ``R_k >= lam``), and the worst
  fraction of target clients at risk ``>= lam`` is the fractional knapsack ``inf_gamma [gamma eps
  + mean_k max(1{c_k = 0}, 1 - gamma c_k)]`` = (clients already above ``lam``, then the cheapest
  until ``K eps`` is spent, the last one fractionally) / K. Finite-sample version: ``1{R_hat_k >=
  lam - t_G}``, ``c_k`` from ``min(1, R_adv_hat + t_G)`` (an upper bound on ``R_adv`` gives a
  lower bound on the cost; the spec's "R_adv - t" has the sign the other way round), plus
  ``sqrt(log(2 L / delta_2) / (2 K))`` for uniformity over the ``L`` thresholds (DKW on the
  costs' distribution at each threshold, union over the grid).

``delta`` is split equally between the client-level and meta-level events. Include ``gamma = 0``
and a very large ``gamma`` (e.g. ``1e6``) in the grid: the first makes the bound at most 1 + terms,
the second recovers the plain risk at ``eps = 0``.

**Linear models, 0-1 loss (closed form).** Scores ``s_c = x . w_c + b_c``; a correctly classified
``(x, y)`` is at squared distance ``d2 = min_{c != y} (s_y - s_c)^2 / ||w_y - w_c||^2`` from
misclassification, so ``phi_gamma = max(1{misclassified}, 1 - gamma d2)``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from jaxlab.core import sharding
from jaxlab.core.checks import check_positive, check_probability
from jaxlab.federated.robust_dkw.dkw import check_losses

__all__ = [
    "adversarial_risk_ascent",
    "knapsack_fraction",
    "linear_margins",
    "local_adversarial_risks",
    "phi_zero_one",
    "transport_costs",
    "wasserstein_average_bound",
    "wasserstein_tail_bound",
    "wasserstein_terms",
]


def linear_margins(weights: jax.Array, bias: jax.Array, x: jax.Array, y: jax.Array):
    """Squared distance to misclassification of a linear classifier.

    Args:
      weights: ``[d, C]``; bias: ``[C]``; x: ``[..., d]``; y: ``[...]`` integer labels.

    Returns:
      ``(d2, correct)``, both ``[...]``: ``correct`` is ``s_y > s_c`` for every ``c != y``;
      ``d2 = min_{c != y} (s_y - s_c)^2 / ||w_y - w_c||^2`` where correct, else 0.
    """
    lead = (1,) * (x.ndim - 1)
    s = x @ weights + bias.reshape(lead + (-1,))  # [..., C]
    num_classes = weights.shape[-1]
    s_y = jnp.take_along_axis(s, y[..., None], axis=-1)
    gap = s_y - s  # [..., C]
    gram = weights.T @ weights
    sq = jnp.diag(gram)
    pair = sq[:, None] + sq[None, :] - 2.0 * gram  # ||w_a - w_b||^2, [C, C]
    other = jnp.arange(num_classes).reshape(lead + (-1,)) != y[..., None]  # [..., C]
    norms = jnp.where(other, pair[y], 1.0)
    correct = jnp.all(jnp.where(other, gap > 0.0, True), axis=-1)
    d2 = jnp.min(jnp.where(other, gap**2 / jnp.maximum(norms, 1e-30), jnp.inf), axis=-1)
    return jnp.where(correct, d2, 0.0), correct


def phi_zero_one(gammas: jax.Array, d2: jax.Array, correct: jax.Array) -> jax.Array:
    """``phi_gamma = max(1{misclassified}, 1 - gamma d2)`` for the 0-1 loss: ``[..., G]``."""
    g = gammas.reshape((1,) * d2.ndim + (-1,))
    return jnp.where(correct[..., None], jnp.maximum(0.0, 1.0 - g * d2[..., None]), 1.0)


@functools.partial(jax.jit, static_argnames=("mesh",))
def local_adversarial_risks(
    weights: jax.Array,
    bias: jax.Array,
    x: jax.Array,
    y: jax.Array,
    mask: jax.Array,
    gammas: jax.Array,
    mesh: Mesh | None = None,
):
    """Every client's empirical risk and local adversarial risks (0-1 loss, linear model).

    Args:
      weights, bias: the linear classifier ``[d, C]``, ``[C]``.
      x: ``[K, n, d]`` client samples (padded to a common ``n``); y: ``[K, n]`` labels.
      mask: ``[K, n]`` real samples (each client needs at least one).
      gammas: ``[G]`` multipliers ``>= 0``.
      mesh: shard the client axis over this mesh's ``"data"`` axis (``K`` a multiple of the
        device count); each device computes its clients' scalars, as the clients would.

    Returns:
      ``(risk [K], adv [K, G])``, both in ``[0, 1]``; ``adv[:, g] >= risk`` and non-increasing in
      ``gamma``.
    """
    if x.ndim != 3 or y.shape != x.shape[:2] or mask.shape != y.shape:
        raise ValueError(
            f"`x` must be [K, n, d] with `y` and `mask` [K, n]; got {x.shape}, {y.shape}, "
            f"{mask.shape}."
        )
    x, y, mask = sharding.constrain_batch((x, y, mask), mesh)
    d2, correct = linear_margins(weights, bias, x, y)
    w = mask.astype(x.dtype)
    count = w.sum(-1)
    risk = (w * (~correct)).sum(-1) / count
    adv = (w[..., None] * phi_zero_one(gammas, d2, correct)).sum(-2) / count[:, None]
    return sharding.constrain_batch((risk, adv), mesh)


def adversarial_risk_ascent(
    loss_fn: Callable[[jax.Array, jax.Array], jax.Array],
    x: jax.Array,
    y: jax.Array,
    gamma,
    *,
    steps: int = 100,
    step_size: float = 0.05,
    bounds: tuple[float, float] | None = None,
) -> jax.Array:
    """``phi_gamma(x, y) = sup_x' [l(x', y) - gamma ||x' - x||^2]`` by projected gradient ascent.

    For smooth losses in ``[0, 1]`` (e.g. a clipped or sigmoid loss). Starts at ``x' = x`` and
    returns the best objective along a ``lax.scan`` of ``steps`` steps (so ``>= l(x, y)``); it is
    the supremum when the objective is concave (``2 gamma`` above the loss's curvature bound, e.g.
    ``gamma > ||w||^2 / 8`` for a logistic loss along ``w``), otherwise a lower estimate.

    Args:
      loss_fn: ``(x [d], y []) -> loss []``; x: ``[..., d]``; y: ``[...]``.
      bounds: optional box the perturbed input is projected onto.
    """

    def one(x0, y0):
        obj = lambda z: loss_fn(z, y0) - gamma * jnp.sum((z - x0) ** 2)  # noqa: E731
        grad = jax.grad(obj)

        def step(carry, _):
            z, best = carry
            z = z + step_size * grad(z)
            if bounds is not None:
                z = jnp.clip(z, *bounds)
            return (z, jnp.maximum(best, obj(z))), None

        (_, best), _ = jax.lax.scan(step, (x0, obj(x0)), None, length=steps)
        return best

    flat_x = x.reshape(-1, x.shape[-1])
    return jax.vmap(one)(flat_x, y.reshape(-1)).reshape(y.shape)


def wasserstein_terms(num_clients: int, num_gammas: int, n_min, delta=0.05):
    """The average-loss bound's finite-sample terms ``(t_G, m_G)`` (module docstring):
    ``t_G = sqrt(log((G + 1) K / (delta / 2)) / (2 n_min))``, ``m_G = sqrt(log(G / (delta / 2)) /
    (2 K))``. The tail bound uses the same ``t_G``."""
    t = jnp.sqrt(jnp.log((num_gammas + 1.0) * num_clients / (delta / 2)) / (2.0 * n_min))
    return t, jnp.sqrt(jnp.log(num_gammas / (delta / 2)) / (2.0 * num_clients))


def _check_gammas(adv: jax.Array, gammas: jax.Array):
    if adv.ndim != 2 or gammas.ndim != 1 or adv.shape[1] != gammas.shape[0]:
        raise ValueError(
            f"`adv` must be [K, G] and `gammas` [G]; got {adv.shape} and {gammas.shape}."
        )
    check_positive(gammas, "gammas", strict=False)


def wasserstein_average_bound(adv: jax.Array, gammas: jax.Array, eps, n_min, delta=0.05):
    """Certified upper bound on the average risk of any target network within meta-Wasserstein
    ``eps`` (module docstring).

    Args:
      adv: ``[K, G]`` local adversarial risks; gammas: ``[G]``; eps: budget ``>= 0`` (scalar);
      n_min: the smallest client sample size; delta: failure probability in ``(0, 1)``.

    Returns:
      Scalar bound in ``[0, 1]``, non-decreasing in ``eps`` and as ``delta`` shrinks.
    """
    adv = check_losses(adv, "adv", axis=0)
    _check_gammas(adv, gammas)
    check_probability(delta, "delta")
    check_positive(eps, "eps", strict=False)
    return _average_bound(adv, gammas, eps, n_min, delta)


@jax.jit
def _average_bound(adv, gammas, eps, n_min, delta):
    k, g = adv.shape
    t, meta = wasserstein_terms(k, g, n_min, delta)
    dual = jnp.min(gammas * eps + adv.mean(0))
    return jnp.minimum(1.0, dual + t + meta)


def transport_costs(r_hat: jax.Array, adv_upper: jax.Array, gammas: jax.Array, lam, t):
    """Lower bounds on each client's cost to reach risk ``lam``: ``[K]``.

    ``0`` if ``r_hat_k >= lam - t``, else ``max(0, max_{gamma > 0} (lam - adv_upper_k(gamma)) /
    gamma)`` (weak duality with an upper confidence value ``adv_upper`` of the adversarial risk).
    """
    g = gammas.reshape((1,) * (adv_upper.ndim - 1) + (-1,))
    ratio = jnp.where(g > 0.0, (lam - adv_upper) / jnp.where(g > 0.0, g, 1.0), 0.0)
    cost = jnp.maximum(0.0, ratio.max(-1))
    return jnp.where(r_hat >= lam - t, 0.0, cost)


def knapsack_fraction(costs: jax.Array, eps) -> jax.Array:
    """Fractional knapsack ``max mean(x) s.t. mean(x c) <= eps, 0 <= x <= 1`` by the greedy.

    Takes the zero-cost clients, then the cheapest until ``K eps`` is spent, the last one
    fractionally; equals ``inf_gamma [gamma eps + mean(max(0, 1 - gamma c))]`` (LP duality).
    """
    k = costs.shape[-1]
    c = jnp.sort(costs)
    spent = jnp.cumsum(c)
    budget = k * eps
    full = jnp.sum(spent <= budget)
    prev = jnp.where(full > 0, spent[jnp.maximum(full - 1, 0)], 0.0)
    nxt = c[jnp.minimum(full, k - 1)]
    frac = jnp.where(full < k, jnp.clip((budget - prev) / jnp.maximum(nxt, 1e-30), 0.0, 1.0), 0.0)
    return (full + frac) / k


def wasserstein_tail_bound(
    r_hat: jax.Array, adv: jax.Array, gammas: jax.Array, lam: jax.Array, eps, n_min, delta=0.05
) -> jax.Array:
    """Certified upper bound on ``P_{mu'}[R >= lam]`` over target networks within meta-Wasserstein
    ``eps`` (module docstring): ``[L]`` for thresholds ``lam [L]``, non-increasing in ``lam``."""
    r_hat = check_losses(r_hat)
    adv = check_losses(adv, "adv", axis=0)
    _check_gammas(adv, gammas)
    if r_hat.shape != adv.shape[:1]:
        raise ValueError(
            f"`r_hat` [K] and `adv` [K, G] must have the same clients; got {r_hat.shape} and "
            f"{adv.shape}."
        )
    check_probability(delta, "delta")
    check_positive(eps, "eps", strict=False)
    return _tail_bound(r_hat, adv, gammas, jnp.asarray(lam), eps, n_min, delta)


@jax.jit
def _tail_bound(r_hat, adv, gammas, lam, eps, n_min, delta):
    k, g = adv.shape
    t, _ = wasserstein_terms(k, g, n_min, delta)
    meta = jnp.sqrt(jnp.log(2.0 * lam.shape[-1] / (delta / 2)) / (2.0 * k))
    upper = jnp.minimum(1.0, adv + t)

    def at(threshold):
        return knapsack_fraction(transport_costs(r_hat, upper, gammas, threshold, t), eps)

    return jnp.minimum(1.0, jax.vmap(at)(lam) + meta)

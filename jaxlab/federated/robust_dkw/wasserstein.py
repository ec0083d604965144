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
import numpy as np
from jax.sharding import Mesh

from jaxlab.core import sharding
from jaxlab.core.checks import check_int, check_real, check_scalar, is_concrete
from jaxlab.federated.robust_dkw._checks import (
    as_jax,
    check_count,
    check_labels,
    check_result,
    check_values,
)
from jaxlab.federated.robust_dkw.dkw import (
    _check_clients,
    _check_delta,
    _check_points,
    check_losses,
)

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


def _dtype(x):
    """``x``'s dtype without converting a tracer (``object`` when ``x`` is not array-like)."""
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        try:
            dtype = np.asarray(x).dtype
        except (TypeError, ValueError):
            dtype = np.dtype(object)
    return dtype


def _check_linear(weights, bias, x, y) -> None:
    """A linear classifier ``weights [d, C]`` (``C >= 2``), ``bias [C]`` and samples ``x [..., d]``
    with integer labels ``y [...]`` in ``0..C-1``."""
    check_values(weights, "weights", ndim=2)
    d, c = np.shape(weights)
    if c < 2:
        raise ValueError(f"`weights` must be [d, C] with C >= 2 classes, got {np.shape(weights)}.")
    check_values(bias, "bias")
    if tuple(np.shape(bias)) != (c,):
        raise ValueError(f"`bias` must have shape ({c},) (one per class), got {np.shape(bias)}.")
    check_values(x, "x")
    if np.ndim(x) < 1 or np.shape(x)[-1] != d:
        raise ValueError(f"`x` must be [..., {d}] (the weights' d), got shape {np.shape(x)}.")
    check_labels(y, "y", c, shape=np.shape(x)[:-1])


def linear_margins(weights: jax.Array, bias: jax.Array, x: jax.Array, y: jax.Array):
    """Squared distance to misclassification of a linear classifier.

    Args:
      weights: ``[d, C]``; bias: ``[C]``; x: ``[..., d]``; y: ``[...]`` integer labels.

    Returns:
      ``(d2, correct)``, both ``[...]``: ``correct`` is ``s_y > s_c`` for every ``c != y``;
      ``d2 = min_{c != y} (s_y - s_c)^2 / ||w_y - w_c||^2`` where correct, else 0.
    """
    _check_linear(weights, bias, x, y)
    weights, bias, x, y = (as_jax(a) for a in (weights, bias, x, y))
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
    _check_gamma_grid(gammas)
    check_values(d2, "d2", 0.0)
    if _dtype(correct) != np.bool_:
        raise TypeError(f"`correct` must be a bool array, got dtype {_dtype(correct)}.")
    if np.shape(correct) != np.shape(d2):
        raise ValueError(
            f"`correct` must have the shape of `d2`, {np.shape(d2)}; got {np.shape(correct)}."
        )
    gammas, d2, correct = (as_jax(a) for a in (gammas, d2, correct))
    g = gammas.reshape((1,) * d2.ndim + (-1,))
    return jnp.where(correct[..., None], jnp.maximum(0.0, 1.0 - g * d2[..., None]), 1.0)


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
    shapes = tuple(np.shape(a) for a in (x, y, mask))
    if len(shapes[0]) != 3 or shapes[1] != shapes[0][:2] or shapes[2] != shapes[1]:
        raise ValueError(
            f"`x` must be [K, n, d] with `y` and `mask` [K, n]; got {shapes[0]}, {shapes[1]}, "
            f"{shapes[2]}."
        )
    _check_linear(weights, bias, x, y)
    _check_mask(mask)
    _check_gamma_grid(gammas)
    if mesh is not None:
        if not isinstance(mesh, Mesh):
            raise TypeError(
                f"`mesh` must be a jax.sharding.Mesh or None, got {type(mesh).__name__}."
            )
        sharding.check_divisible(shapes[0][0], mesh, "x")
    return _local_risks(weights, bias, x, y, mask, gammas, mesh)


def _check_mask(mask) -> None:
    """A ``[K, n]`` 0/1 (or bool) mask of real samples, at least one per client where concrete."""
    if _dtype(mask) != np.bool_:
        check_real(mask, "mask")
    if is_concrete(mask):
        m = np.asarray(jax.device_get(mask))
        if not np.all((m == 0) | (m == 1)):
            raise ValueError("`mask` must hold 0/1 (or bool) entries marking the real samples.")
        empty = np.flatnonzero(m.sum(-1) == 0)
        if empty.size:
            raise ValueError(
                f"`mask` must mark at least one sample per client; clients {empty[:5].tolist()} "
                f"have none (their risks would be 0 / 0)."
            )


@functools.partial(jax.jit, static_argnames=("mesh",))
def _local_risks(weights, bias, x, y, mask, gammas, mesh):
    x, y, mask = sharding.constrain_batch((x, y, mask), mesh)
    d2, correct = linear_margins(weights, bias, x, y)
    w = mask.astype(x.dtype)
    count = w.sum(-1)
    risk = (w * (~correct)).sum(-1) / count
    adv = (w[..., None] * phi_zero_one(gammas, d2, correct)).sum(-2) / count[:, None]
    return sharding.constrain_batch((risk, adv), mesh)


# the compiled program's cache, so a test can count retraces through the public entry point
local_adversarial_risks._cache_size = _local_risks._cache_size


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
    if not callable(loss_fn):
        raise TypeError(f"`loss_fn` must be a callable (x [d], y []) -> loss, got {loss_fn!r:.60}.")
    check_values(x, "x")
    if np.ndim(x) < 1 or np.shape(x)[-1] < 1:
        raise ValueError(f"`x` must be [..., d] with d >= 1, got shape {np.shape(x)}.")
    check_real(y, "y")
    if np.shape(y) != np.shape(x)[:-1]:
        raise ValueError(
            f"`y` must have shape {np.shape(x)[:-1]} (x's leading axes), got {np.shape(y)}."
        )
    check_scalar(gamma, "gamma", 0.0)
    check_int(steps, "steps", minimum=0)
    check_scalar(step_size, "step_size", 0.0, low_open=True)
    if bounds is not None:
        if not isinstance(bounds, tuple | list) or len(bounds) != 2:
            raise ValueError(f"`bounds` must be None or a pair (low, high), got {bounds!r:.60}.")
        check_values(bounds[0], "bounds[0]", finite=False)
        check_values(bounds[1], "bounds[1]", finite=False)
        if is_concrete(bounds) and np.any(np.asarray(bounds[0]) > np.asarray(bounds[1])):
            raise ValueError(f"`bounds` must have low <= high, got {bounds!r:.60}.")
    x, y = as_jax(x), as_jax(y)

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
    check_count(num_clients, "num_clients")
    check_count(num_gammas, "num_gammas")
    check_count(n_min, "n_min")
    _check_delta(delta)
    t = jnp.sqrt(jnp.log((num_gammas + 1.0) * num_clients / (delta / 2)) / (2.0 * n_min))
    out = t, jnp.sqrt(jnp.log(num_gammas / (delta / 2)) / (2.0 * num_clients))
    return check_result(out, "wasserstein_terms: log((`num_gammas` + 1) `num_clients` / `delta`)")


def _check_gamma_grid(gammas) -> None:
    """Multipliers ``[G]``, finite and ``>= 0``."""
    check_values(gammas, "gammas", 0.0, ndim=1, nonempty=True)


def _check_gammas(adv: jax.Array, gammas: jax.Array) -> jax.Array:
    check_real(gammas, "gammas")
    if adv.ndim != 2 or np.ndim(gammas) != 1 or adv.shape[1] != np.shape(gammas)[0]:
        raise ValueError(
            f"`adv` must be [K, G] and `gammas` [G]; got {adv.shape} and {np.shape(gammas)}."
        )
    _check_gamma_grid(gammas)
    if is_concrete((adv, gammas)):  # adversarial risks fall as the multiplier grows
        a = np.asarray(jax.device_get(adv), np.float64)[:, np.argsort(np.asarray(gammas))]
        rise = float(np.max(np.diff(a, axis=1), initial=0.0))
        if rise > 1e-5:
            raise ValueError(
                "`adv` must be non-increasing in `gammas` (adv[k, g] is client k's adversarial "
                f"risk at gammas[g]); it rises by {rise:.3g}: are `adv` and `gammas` paired in "
                "the same order?"
            )
    return jnp.asarray(gammas)


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
    gammas = _check_gammas(adv, gammas)
    check_scalar(eps, "eps", 0.0)
    check_count(n_min, "n_min")
    _check_delta(delta)
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
    check_values(r_hat, "r_hat", 0.0, 1.0)
    check_values(adv_upper, "adv_upper", 0.0, 1.0)
    _check_gamma_grid(gammas)
    if np.ndim(adv_upper) < 1 or np.shape(adv_upper)[-1] != np.shape(gammas)[0]:
        raise ValueError(
            f"`adv_upper` must be [K, G] with G = len(gammas) = {np.shape(gammas)[0]}, got shape "
            f"{np.shape(adv_upper)}."
        )
    try:
        np.broadcast_shapes(np.shape(r_hat), np.shape(adv_upper)[:-1])
    except ValueError:
        raise ValueError(
            f"`r_hat` {np.shape(r_hat)} and `adv_upper` {np.shape(adv_upper)} must have the same "
            f"clients ([K] and [K, G])."
        ) from None
    check_values(lam, "lam", ndim=0)
    check_values(t, "t", 0.0, ndim=0)
    r_hat, adv_upper, gammas = (as_jax(a) for a in (r_hat, adv_upper, gammas))
    g = gammas.reshape((1,) * (adv_upper.ndim - 1) + (-1,))
    ratio = jnp.where(g > 0.0, (lam - adv_upper) / jnp.where(g > 0.0, g, 1.0), 0.0)
    cost = jnp.maximum(0.0, ratio.max(-1))
    return jnp.where(r_hat >= lam - t, 0.0, cost)


def knapsack_fraction(costs: jax.Array, eps) -> jax.Array:
    """Fractional knapsack ``max mean(x) s.t. mean(x c) <= eps, 0 <= x <= 1`` by the greedy.

    Takes the zero-cost clients, then the cheapest until ``K eps`` is spent, the last one
    fractionally; equals ``inf_gamma [gamma eps + mean(max(0, 1 - gamma c))]`` (LP duality).
    """
    check_values(costs, "costs", 0.0, ndim=1, nonempty=True)
    check_values(eps, "eps", 0.0, ndim=0)
    costs = as_jax(costs)
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
    r_hat = _check_clients(r_hat)
    adv = check_losses(adv, "adv", axis=0)
    gammas = _check_gammas(adv, gammas)
    if r_hat.shape != adv.shape[:1]:
        raise ValueError(
            f"`r_hat` [K] and `adv` [K, G] must have the same clients; got {r_hat.shape} and "
            f"{adv.shape}."
        )
    lam = _check_points(lam)
    check_scalar(eps, "eps", 0.0)
    check_count(n_min, "n_min")
    _check_delta(delta)
    return _tail_bound(r_hat, adv, gammas, lam, eps, n_min, delta)


@jax.jit
def _tail_bound(r_hat, adv, gammas, lam, eps, n_min, delta):
    k, g = adv.shape
    t, _ = wasserstein_terms(k, g, n_min, delta)
    meta = jnp.sqrt(jnp.log(2.0 * lam.shape[-1] / (delta / 2)) / (2.0 * k))
    upper = jnp.minimum(1.0, adv + t)

    def at(threshold):
        return knapsack_fraction(transport_costs(r_hat, upper, gammas, threshold, t), eps)

    return jnp.minimum(1.0, jax.vmap(at)(lam) + meta)

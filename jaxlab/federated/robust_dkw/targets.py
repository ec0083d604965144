"""Shifted target meta-distributions of a Beta risk law with known divergence: the exponential
tilt and the worst two-level reweighting (the f-divergence study's truths).

The source meta-distribution ``mu`` is ``R ~ Beta(a, b)``. Two families of targets ``mu'`` with
``D_f(mu' || mu) = eps`` exactly:

- **exponential tilt**: ``d mu' / d mu (r) = e^{theta r} / E_mu e^{theta R}``;
  :func:`tilt_divergence` is ``D_f`` as a function of ``theta`` (increasing for ``theta > 0``),
  :func:`tilt_theta` inverts it by bisection and :func:`tilt_tail` is ``P_{mu'}[R >= lam]``;
- **two-level reweighting at the median**: weight ``a*`` on ``{R >= median}`` and ``b*`` below,
  with ``(a*, b*)`` the population optimum of the reduction
  (:func:`~jaxlab.federated.robust_dkw.two_level_weights` with ``p = 1/2``); its tail is the worst
  case ``G*`` at ``lam = median`` (:func:`two_level_target`).

These are host NumPy (float64) references: integrals by the midpoint rule on ``points`` cells of
``[0, 1]`` (``40000`` by default: errors far below the certificates' finite-sample terms).
"""

from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np
from scipy import stats

from jaxlab.core.checks import check_choice, check_int, check_positive
from jaxlab.federated.robust_dkw.fdiv import DIVERGENCES, two_level_weights

__all__ = [
    "beta_quadrature",
    "tilt_divergence",
    "tilt_tail",
    "tilt_theta",
    "two_level_target",
]

BETA = (2.0, 8.0)
POINTS = 40000


@functools.cache
def _quadrature(a: float, b: float, points: int) -> tuple[np.ndarray, np.ndarray]:
    grid = (np.arange(points) + 0.5) / points  # midpoints on [0, 1]
    pdf = stats.beta.pdf(grid, a, b)
    grid.setflags(write=False)
    pdf.setflags(write=False)
    return grid, pdf


def beta_quadrature(beta=BETA, points: int = POINTS) -> tuple[np.ndarray, np.ndarray]:
    """``(grid [points], pdf [points])``: the midpoints of ``[0, 1]`` and the Beta density there
    (cached, read-only). ``mean(pdf * h)`` is the midpoint rule for ``E h(R)``."""
    a, b = (float(v) for v in beta)
    check_positive(np.array([a, b]), "beta")
    return _quadrature(a, b, check_int(points, "points", minimum=1))


def tilt_divergence(theta: float, divergence: str, beta=BETA, points: int = POINTS) -> float:
    """``D_f(mu_theta || Beta(a, b))`` of the exponential tilt, by quadrature.

    KL: ``E_mu[w log w]``; chi2: ``E_mu[(w - 1)^2]``, with ``w = e^{theta R} / E_mu e^{theta R}``.
    """
    check_choice(divergence, "divergence", DIVERGENCES)
    grid, pdf = beta_quadrature(beta, points)
    w = np.exp(theta * grid)
    z = np.mean(pdf * w)
    ratio = w / z
    if divergence == "kl":
        return float(np.mean(pdf * ratio * np.log(ratio)))
    return float(np.mean(pdf * (ratio - 1.0) ** 2))


def tilt_theta(
    eps: float,
    divergence: str,
    beta=BETA,
    points: int = POINTS,
    *,
    upper: float = 50.0,
    iters: int = 80,
) -> float:
    """``theta`` in ``[0, upper]`` with ``D_f(mu_theta || Beta(a, b)) = eps``, by ``iters``
    bisection steps (``upper`` if even ``theta = upper`` stays below ``eps``)."""
    check_positive(eps, "eps", strict=False)
    lo, hi = 0.0, float(upper)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if tilt_divergence(mid, divergence, beta, points) < eps else (lo, mid)
    return 0.5 * (lo + hi)


def tilt_tail(theta: float, lam, beta=BETA, points: int = POINTS) -> np.ndarray:
    """``P_{mu_theta}[R >= lam]`` at thresholds ``lam [L]``, by quadrature (``1`` for
    ``lam <= 0``; the mass of the cells whose midpoint is ``>= lam``)."""
    grid, pdf = beta_quadrature(beta, points)
    lam = np.asarray(lam)
    dens = pdf * np.exp(theta * grid)
    tail = np.cumsum(dens[::-1])[::-1] / dens.sum()
    idx = np.clip(np.searchsorted(grid, lam), 0, len(grid) - 1)
    return np.where(lam <= 0.0, 1.0, tail[idx])


def two_level_target(eps: float, divergence: str, lam, beta=BETA) -> np.ndarray:
    """Tail ``P_{mu'}[R >= lam]`` of the worst two-level reweighting at the median of
    ``Beta(a, b)`` (weights ``a*`` above, ``b*`` below; ``p = 1/2``): ``a* G(lam)`` at or above
    the median and ``a* / 2 + b* (G(lam) - 1/2)`` below it, ``G`` the source tail."""
    check_choice(divergence, "divergence", DIVERGENCES)
    check_positive(eps, "eps", strict=False)
    a, b = two_level_weights(0.5, eps, 0.0, jnp.inf, divergence)
    a, b = float(a), float(b)
    lam = np.asarray(lam)
    g = stats.beta.sf(lam, *beta)
    return np.where(lam >= stats.beta.median(*beta), a * g, 0.5 * a + b * (g - 0.5))

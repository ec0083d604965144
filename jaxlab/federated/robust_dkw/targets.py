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

from jaxlab.core.checks import check_int, check_scalar
from jaxlab.federated.robust_dkw._checks import check_values
from jaxlab.federated.robust_dkw.fdiv import _check_divergence, two_level_weights

__all__ = [
    "beta_quadrature",
    "tilt_divergence",
    "tilt_tail",
    "tilt_theta",
    "two_level_target",
]

BETA = (2.0, 8.0)
POINTS = 40000
THETA_MAX = 700.0  # e^{theta r} overflows float64 just above theta = 709 (r <= 1)


def _check_beta(beta) -> tuple[float, float]:
    """``(a, b)``: the Beta law's two shape parameters, finite and ``> 0``."""
    if isinstance(beta, str) or np.shape(beta) != (2,):
        raise ValueError(f"`beta` must be a pair (a, b) of Beta parameters, got {beta!r:.60}.")
    check_values(beta, "beta", 0.0, low_open=True)
    a, b = (float(v) for v in beta)
    return a, b


def _check_theta(theta) -> None:
    check_scalar(theta, "theta", -THETA_MAX, THETA_MAX)


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
    a, b = _check_beta(beta)
    return _quadrature(a, b, check_int(points, "points", minimum=1))


def tilt_divergence(theta: float, divergence: str, beta=BETA, points: int = POINTS) -> float:
    """``D_f(mu_theta || Beta(a, b))`` of the exponential tilt, by quadrature.

    KL: ``E_mu[w log w]``; chi2: ``E_mu[(w - 1)^2]``, with ``w = e^{theta R} / E_mu e^{theta R}``.
    """
    _check_divergence(divergence)
    _check_theta(theta)
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
    _check_divergence(divergence)
    check_scalar(eps, "eps", 0.0)
    check_scalar(upper, "upper", 0.0, THETA_MAX, low_open=True)
    check_int(iters, "iters", minimum=1)
    _check_beta(beta)
    lo, hi = 0.0, float(upper)
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if tilt_divergence(mid, divergence, beta, points) < eps else (lo, mid)
    return 0.5 * (lo + hi)


def tilt_tail(theta: float, lam, beta=BETA, points: int = POINTS) -> np.ndarray:
    """``P_{mu_theta}[R >= lam]`` at thresholds ``lam [L]``, by quadrature (``1`` for
    ``lam <= 0``, ``0`` for ``lam > 1``, else the mass of the cells with midpoint ``>= lam``)."""
    _check_theta(theta)
    lam = np.asarray(check_values(lam, "lam"))
    grid, pdf = beta_quadrature(beta, points)
    dens = pdf * np.exp(theta * grid)
    tail = np.cumsum(dens[::-1])[::-1] / dens.sum()
    idx = np.clip(np.searchsorted(grid, lam), 0, len(grid) - 1)
    return np.where(lam <= 0.0, 1.0, np.where(lam > 1.0, 0.0, tail[idx]))


def two_level_target(eps: float, divergence: str, lam, beta=BETA) -> np.ndarray:
    """Tail ``P_{mu'}[R >= lam]`` of the worst two-level reweighting at the median of
    ``Beta(a, b)`` (weights ``a*`` above, ``b*`` below; ``p = 1/2``): ``a* G(lam)`` at or above
    the median and ``a* / 2 + b* (G(lam) - 1/2)`` below it, ``G`` the source tail."""
    _check_divergence(divergence)
    check_scalar(eps, "eps", 0.0)
    lam = check_values(lam, "lam")
    beta = _check_beta(beta)
    a, b = two_level_weights(0.5, eps, 0.0, jnp.inf, divergence)
    a, b = float(a), float(b)
    lam = np.asarray(lam)
    g = stats.beta.sf(lam, *beta)
    return np.where(lam >= stats.beta.median(*beta), a * g, 0.5 * a + b * (g - 0.5))

"""Binary Gaussian clients under a linear classifier: the sampler, LDA, and the closed-form
population risk and 0-1 local adversarial risks of each client (the Wasserstein study's truths).

Client ``k`` of a network has a mean ``m_k ~ N(0, s^2 I_d)``; its samples are ``y ~
Bernoulli(1/2)`` and ``x | y ~ N(m_k + (2 y - 1) e_1, I_d)`` (:func:`sample_gaussian_clients`).
A linear classifier with scores ``s_c = x . w_c + b_c`` (two classes) predicts class 1 where
``u = x . w + b > 0``, with ``w = w_1 - w_0`` and ``b = b_1 - b_0``. The signed margin of a sample
(distance to the decision boundary, positive when correct) is ``u / ||w||`` for class 1 and
``-u / ||w||`` for class 0; it is Gaussian with SD 1 and the means of
:func:`class_margin_means`.

For a margin ``u ~ N(mu, 1)``, the 0-1 loss's ``phi_gamma = max(1{u <= 0}, 1 - gamma u^2)``
(:func:`~jaxlab.federated.robust_dkw.phi_zero_one`) has the closed-form mean
``Phi(-mu) + E[(1 - u^2 / r^2) 1{0 < u < r}]`` with ``r = 1 / sqrt(gamma)``
(:func:`gaussian_piece`, truncated-normal moments), so every client's population risk and
adversarial risks are exact (:func:`gaussian_client_risks`), with no sampling error.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtr

from jaxlab.core.checks import check_int, check_key, is_concrete
from jaxlab.federated.robust_dkw._checks import (
    as_array,
    as_jax,
    check_labels,
    check_result,
    check_static_float,
    check_values,
)

__all__ = [
    "class_margin_means",
    "fit_lda",
    "gaussian_client_risks",
    "gaussian_piece",
    "sample_gaussian_clients",
]


def sample_gaussian_clients(
    key: jax.Array, dim: int, spread: float, clients: int, samples: int
) -> tuple[jax.Array, jax.Array]:
    """``(x [clients, samples, dim], y [clients, samples])`` of the module docstring's design.

    ``spread`` is the SD ``s`` of the client means; labels are int32 in ``{0, 1}``.
    """
    key = check_key(key, "key")
    dim = check_int(dim, "dim", minimum=1)
    spread = check_static_float(spread, "spread", 0.0)
    clients = check_int(clients, "clients", minimum=1)
    samples = check_int(samples, "samples", minimum=1)
    return _sample_clients(key, dim, spread, clients, samples)


@functools.partial(jax.jit, static_argnames=("dim", "spread", "clients", "samples"))
def _sample_clients(key, dim: int, spread: float, clients: int, samples: int):
    km, ky, kx = jax.random.split(key, 3)
    means = spread * jax.random.normal(km, (clients, dim))
    y = jax.random.bernoulli(ky, 0.5, (clients, samples)).astype(jnp.int32)
    sign = (2 * y - 1).astype(means.dtype)
    centre = means[:, None, :] + sign[..., None] * jnp.eye(dim)[0][None, None, :]
    return centre + jax.random.normal(kx, (clients, samples, dim)), y


def fit_lda(x, y) -> tuple[jax.Array, jax.Array]:
    """Two-class linear discriminant analysis on pooled samples (host NumPy, float64).

    Args:
      x: ``[..., d]`` samples; y: ``[...]`` labels in ``{0, 1}`` (both classes present).

    Returns:
      ``(weights [d, 2], bias [2])`` with ``s_1 - s_0 = w . x + b``, ``w = Sigma^-1 (mu_1 -
      mu_0)`` (pooled within-class covariance) and ``b = -w . (mu_0 + mu_1) / 2``; split
      symmetrically between the two classes' scores.
    """
    check_values(x, "x")
    if np.ndim(x) < 1 or np.shape(x)[-1] < 1:
        raise ValueError(f"`x` must be [..., d] samples with d >= 1, got shape {np.shape(x)}.")
    check_labels(y, "y", 2, shape=np.shape(x)[:-1])
    dim = np.shape(x)[-1]
    x, y = np.asarray(x, np.float64).reshape(-1, dim), np.asarray(y).reshape(-1)
    if not (np.any(y == 0) and np.any(y == 1)):
        raise ValueError("fit_lda: `y` must contain both classes 0 and 1.")
    if len(y) < dim + 2:
        raise ValueError(
            f"fit_lda: `x` needs at least d + 2 = {dim + 2} samples for a pooled covariance of "
            f"full rank, got {len(y)}."
        )
    mu0 = x[y == 0].mean(0)
    mu1 = x[y == 1].mean(0)
    cov = np.cov(np.concatenate([x[y == 0] - mu0, x[y == 1] - mu1]).T).reshape(dim, dim)
    if np.linalg.matrix_rank(cov) < dim:
        raise ValueError(
            "fit_lda: the pooled within-class covariance of `x` is singular (a constant or "
            "collinear coordinate); drop the redundant coordinates."
        )
    w = np.linalg.solve(cov, mu1 - mu0)
    b = -w @ (mu0 + mu1) / 2
    return jnp.stack([-w / 2, w / 2], 1), jnp.array([-b / 2, b / 2])


def class_margin_means(weights: jax.Array, bias: jax.Array, means: jax.Array) -> jax.Array:
    """Mean signed margins ``[K, 2]`` (class 0, class 1) of clients with means ``[K, d]``.

    With ``w = w_1 - w_0``, ``b = b_1 - b_0``: class 1 (centre ``m + e_1``) has mean margin
    ``(m . w + b + w_1st) / ||w||`` and class 0 (centre ``m - e_1``) ``-(m . w + b - w_1st) /
    ||w||``, where ``w_1st`` is the first coordinate of ``w``.
    """
    check_values(weights, "weights", ndim=2)
    if np.shape(weights)[1] != 2:
        raise ValueError(f"`weights` must be [d, 2] (two classes), got {np.shape(weights)}.")
    check_values(bias, "bias", ndim=1)
    if np.shape(bias) != (2,):
        raise ValueError(f"`bias` must have shape (2,), got {np.shape(bias)}.")
    check_values(means, "means", ndim=2)
    if np.shape(means)[1] != np.shape(weights)[0]:
        raise ValueError(
            f"`means` must be [K, {np.shape(weights)[0]}] (the weights' d), got {np.shape(means)}."
        )
    if is_concrete(weights) and not np.any(np.diff(np.asarray(weights), axis=1)):
        raise ValueError("`weights` must separate the classes: w_1 - w_0 is zero (no margin).")
    weights, bias, means = (as_jax(a) for a in (weights, bias, means))
    w = weights[:, 1] - weights[:, 0]
    b = bias[1] - bias[0]
    norm = jnp.linalg.norm(w)
    base = (means @ w + b) / norm  # [K]
    along = w[0] / norm  # class offset +-e_1
    return jnp.stack([-(base - along), base + along], 1)


def gaussian_piece(mu, sigma, r) -> jax.Array:
    """``E[(1 - u^2 / r^2) 1{0 < u < r}]`` for ``u ~ N(mu, sigma^2)`` (elementwise).

    ``r = 1 / sqrt(gamma)``; ``r = inf`` (``gamma = 0``) gives ``P(u > 0)``. From the first two
    moments of the normal truncated to ``(0, r)``.
    """
    check_values(mu, "mu")
    check_values(sigma, "sigma", 0.0, low_open=True)
    check_values(r, "r", 0.0, low_open=True, finite=False)
    try:
        np.broadcast_shapes(np.shape(mu), np.shape(sigma), np.shape(r))
    except ValueError:
        raise ValueError(
            f"`mu` {np.shape(mu)}, `sigma` {np.shape(sigma)} and `r` {np.shape(r)} must broadcast "
            f"together (elementwise)."
        ) from None
    out = _piece(as_array(mu), as_array(sigma), as_array(r))
    return check_result(out, "gaussian_piece (truncated moments of `mu`, `sigma`)")


def _piece(mu, sigma, r):
    a, b = -mu / sigma, (r - mu) / sigma
    pa, pb = (
        jnp.exp(-0.5 * a**2) / jnp.sqrt(2 * jnp.pi),
        jnp.exp(-0.5 * b**2) / jnp.sqrt(2 * jnp.pi),
    )
    b_fin = jnp.where(jnp.isfinite(b), b, 0.0)
    prob = ndtr(b) - ndtr(a)
    m2 = mu**2 * prob + 2 * mu * sigma * (pa - pb) + sigma**2 * (prob + a * pa - b_fin * pb)
    inv_r2 = jnp.where(jnp.isfinite(r), 1.0 / r**2, 0.0)
    return prob - inv_r2 * m2


def gaussian_client_risks(margin_means: jax.Array, gammas: jax.Array):
    """Population risk ``[K]`` and 0-1 adversarial risks ``[K, G]`` of binary Gaussian clients.

    Args:
      margin_means: ``[K, 2]`` mean signed margin of each class (distance units, SD 1), e.g. from
        :func:`class_margin_means`; the classes are equally likely.
      gammas: ``[G]`` multipliers ``>= 0``; ``gamma = 0`` gives ``phi = 1``.

    Returns:
      ``(risk [K], adv [K, G])``: ``risk = mean_c Phi(-mu_c)`` and ``adv = mean_c E phi_gamma``.

    Precision: the truncated moments cancel as ``r = gamma^-1/2`` shrinks; in float32 ``adv`` is
    within about ``1e-4`` of the float64 value up to ``gamma = 1e4`` and off by up to ``1e-2`` at
    ``gamma = 1e6`` (measured at margins 0.3 to 2). Use float64 (``jax.enable_x64``) where large
    ``gamma`` matter; in a dual ``min_gamma gamma eps + ...`` or a cost ``(lam - adv) / gamma``
    those errors are divided or dominated by ``gamma``.
    """
    check_values(margin_means, "margin_means", ndim=2)
    if np.shape(margin_means)[1] != 2:
        raise ValueError(
            f"`margin_means` must be [K, 2] (one mean margin per class), got "
            f"{np.shape(margin_means)}."
        )
    check_values(gammas, "gammas", 0.0, ndim=1)
    margin_means, gammas = as_jax(margin_means), as_jax(gammas)
    mis = ndtr(-margin_means)  # [K, 2]
    g = gammas[None, None, :]
    r = jnp.where(g > 0.0, 1.0 / jnp.sqrt(jnp.where(g > 0.0, g, 1.0)), jnp.inf)
    piece = _piece(margin_means[..., None], 1.0, r)
    adv = (mis[..., None] + piece).mean(1)
    out = mis.mean(1), jnp.where(gammas[None, :] > 0.0, adv, 1.0)
    return check_result(out, "gaussian_client_risks (truncated moments of `margin_means`)")

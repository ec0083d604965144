"""Basis functions of the additive GP prior: Hilbert-space SE bases, binary and one-hot features.

A component ``r`` of the latent GP is a finite basis expansion

    ``f_r(x) = sum_m phi_m(x) a_m``,  ``a_m ~ N(0, S_m)``,
    so  ``k_r(x, x') = sum_m S_m phi_m(x) phi_m(x')``.

- Squared exponential (Solin and Sarkka's Hilbert-space approximation on ``[-J, J]``):
  ``phi_m(x) = J^{-1/2} sin(pi m (x + J) / (2J))``, ``sqrt(lambda_m) = pi m / (2J)`` and
  ``S_m = alpha^2 l sqrt(2 pi) exp(-l^2 lambda_m / 2)`` (the SE spectral density), ``m = 1..M``.
  The official code uses ``m = 0..M-1``, whose first function is identically zero, and a fixed
  ``J = 2.55``, which is far too small for lengthscales near 1 (kernel error about 0.24 whatever
  ``M``); here ``m`` starts at 1 and ``J`` is an argument (see :func:`default_boundary`).
- Binary: ``[2(1 - x) - 1, 2x - 1]`` with ``S = 1``.
- Categorical with ``C`` levels (and the subject id): one-hot with ``S = 1``, i.e. the delta
  kernel ``1[c = c']``; evaluated as a row gather of the weight matrix, never as a dense matmul.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

__all__ = [
    "binary_features",
    "default_boundary",
    "hs_basis",
    "hs_kernel",
    "hs_sqrt_eigenvalues",
    "se_spectral_density",
]


def hs_sqrt_eigenvalues(num_basis: int, boundary: float) -> jax.Array:
    """``sqrt(lambda_m) = pi m / (2 J)`` for ``m = 1..M``: ``[M]``."""
    if num_basis < 1:
        raise ValueError(f"`num_basis` must be >= 1, got {num_basis}.")
    if boundary <= 0:
        raise ValueError(f"`boundary` must be > 0, got {boundary}.")
    return jnp.pi * jnp.arange(1, num_basis + 1) / (2.0 * boundary)


def hs_basis(x: jax.Array, num_basis: int, boundary: float) -> jax.Array:
    """Laplacian eigenfunctions on ``[-J, J]`` (Dirichlet): ``[...] -> [..., M]``.

    Orthonormal on ``[-J, J]``; inputs must lie inside the domain (checked by the callers that see
    concrete data, see :func:`check_inside`).
    """
    x = jnp.asarray(x)
    omega = hs_sqrt_eigenvalues(num_basis, boundary).astype(jnp.result_type(x, float))
    omega = omega.reshape((1,) * x.ndim + (num_basis,))
    return jnp.sin(omega * (x[..., None] + boundary)) / math.sqrt(boundary)


def se_spectral_density(omega: jax.Array, alpha: jax.Array, lengthscale: jax.Array) -> jax.Array:
    """1-D SE spectral density ``S(w) = alpha^2 l sqrt(2 pi) exp(-(l w)^2 / 2)``.

    ``k(r) = alpha^2 exp(-r^2 / (2 l^2))`` has ``int S(w) dw / (2 pi) = alpha^2``.
    """
    return (
        alpha**2 * lengthscale * math.sqrt(2 * math.pi) * jnp.exp(-0.5 * (lengthscale * omega) ** 2)
    )


def hs_kernel(x, x2, num_basis: int, boundary: float, alpha=1.0, lengthscale=1.0) -> jax.Array:
    """The approximate SE kernel ``sum_m S_m phi_m(x) phi_m(x')``: ``[N], [K] -> [N, K]``."""
    s = se_spectral_density(hs_sqrt_eigenvalues(num_basis, boundary), alpha, lengthscale)
    return (hs_basis(x, num_basis, boundary) * s[None, :]) @ hs_basis(x2, num_basis, boundary).T


def binary_features(x: jax.Array) -> jax.Array:
    """``[...] -> [..., 2]``: ``[2(1 - x) - 1, 2x - 1]`` (``+-1`` codes of a 0/1 covariate)."""
    x = jnp.asarray(x, jnp.result_type(float))
    return jnp.stack([1.0 - 2.0 * x, 2.0 * x - 1.0], axis=-1)


def default_boundary(max_abs_x: float, max_lengthscale: float) -> float:
    """``J = max(1.5 max|x|, 3 l_max)``: the approximation is only good well inside ``[-J, J]``."""
    return max(1.5 * float(max_abs_x), 3.0 * float(max_lengthscale))

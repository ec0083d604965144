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
import numpy as np

from jaxlab.core.checks import check_array, check_int, check_scalar, is_concrete

__all__ = [
    "binary_features",
    "default_boundary",
    "hs_basis",
    "hs_kernel",
    "hs_sqrt_eigenvalues",
    "se_spectral_density",
]


def _positive(x, name: str, *, scalar: bool = True) -> None:
    """Real, finite and ``> 0`` where concrete (a scalar if ``scalar``); tracers pass the value
    check (``alpha`` / ``lengthscale`` are traced samples inside the model)."""
    if isinstance(x, bool | np.bool_):
        raise TypeError(f"`{name}` must be a real number, got the bool {x!r}.")
    check_array(x, name, ndim=0 if scalar else None)
    if is_concrete(x):
        a = np.asarray(jax.device_get(x))
        if not (a > 0).all():
            raise ValueError(f"`{name}` must be > 0; got {a if a.size < 6 else a.ravel()[:6]}.")


def hs_sqrt_eigenvalues(num_basis: int, boundary: float) -> jax.Array:
    """``sqrt(lambda_m) = pi m / (2 J)`` for ``m = 1..M``: ``[M]``."""
    check_int(num_basis, "num_basis", minimum=1)
    _positive(boundary, "boundary")
    return jnp.pi * jnp.arange(1, num_basis + 1) / (2.0 * boundary)


def hs_basis(x: jax.Array, num_basis: int, boundary: float) -> jax.Array:
    """Laplacian eigenfunctions on ``[-J, J]`` (Dirichlet): ``[...] -> [..., M]``.

    Orthonormal on ``[-J, J]``; inputs must lie inside the domain (checked by the callers that see
    concrete data, see :func:`check_inside`); concrete ``x`` is checked to be finite and in
    ``[-J, J]``.
    """
    check_array(x, "x")
    _positive(boundary, "boundary")
    if is_concrete((x, boundary)):
        a = np.asarray(jax.device_get(x))
        if a.size and np.abs(a).max() > float(boundary):
            raise ValueError(f"`x` must lie inside the basis domain [-{float(boundary)}, "
                             f"{float(boundary)}] (`boundary`); got values up to "
                             f"{np.abs(a).max():.4g} in magnitude.")  # fmt: skip
    x = jnp.asarray(x)
    omega = hs_sqrt_eigenvalues(num_basis, boundary).astype(jnp.result_type(x, float))
    omega = omega.reshape((1,) * x.ndim + (num_basis,))
    return jnp.sin(omega * (x[..., None] + boundary)) / math.sqrt(boundary)


def se_spectral_density(omega: jax.Array, alpha: jax.Array, lengthscale: jax.Array) -> jax.Array:
    """1-D SE spectral density ``S(w) = alpha^2 l sqrt(2 pi) exp(-(l w)^2 / 2)``.

    ``k(r) = alpha^2 exp(-r^2 / (2 l^2))`` has ``int S(w) dw / (2 pi) = alpha^2``.
    """
    check_array(omega, "omega")
    _positive(alpha, "alpha", scalar=False)
    _positive(lengthscale, "lengthscale", scalar=False)
    omega, alpha, lengthscale = (
        a if isinstance(a, np.ndarray | jax.Array | int | float | np.number) else jnp.asarray(a)
        for a in (omega, alpha, lengthscale)
    )
    return (
        alpha**2 * lengthscale * math.sqrt(2 * math.pi) * jnp.exp(-0.5 * (lengthscale * omega) ** 2)
    )


def hs_kernel(x, x2, num_basis: int, boundary: float, alpha=1.0, lengthscale=1.0) -> jax.Array:
    """The approximate SE kernel ``sum_m S_m phi_m(x) phi_m(x')``: ``[N], [K] -> [N, K]``."""
    check_array(x, "x", ndim=1, dims="[N]")
    check_array(x2, "x2", ndim=1, dims="[K]")
    _positive(alpha, "alpha")
    _positive(lengthscale, "lengthscale")
    s = se_spectral_density(hs_sqrt_eigenvalues(num_basis, boundary), alpha, lengthscale)
    return (hs_basis(x, num_basis, boundary) * s[None, :]) @ hs_basis(x2, num_basis, boundary).T


def binary_features(x: jax.Array) -> jax.Array:
    """``[...] -> [..., 2]``: ``[2(1 - x) - 1, 2x - 1]`` (``+-1`` codes of a 0/1 covariate)."""
    check_array(x, "x")
    if is_concrete(x):
        a = np.asarray(jax.device_get(x))
        if not np.isin(a, (0, 1)).all():
            raise ValueError(f"`x` must be a 0/1 covariate; got values {np.unique(a)[:6]}.")
    x = jnp.asarray(x, jnp.result_type(float))
    return jnp.stack([1.0 - 2.0 * x, 2.0 * x - 1.0], axis=-1)


def default_boundary(max_abs_x: float, max_lengthscale: float) -> float:
    """``J = max(1.5 max|x|, 3 l_max)``: the approximation is only good well inside ``[-J, J]``."""
    check_scalar(max_abs_x, "max_abs_x", 0.0)
    check_scalar(max_lengthscale, "max_lengthscale", 0.0, low_open=True)
    return max(1.5 * float(max_abs_x), 3.0 * float(max_lengthscale))

"""Masked standardisation, pairwise distances, median bandwidths and the two kernels of the test.

Every function takes a 0/1 ``mask`` over the sample axis so that folds of unequal size can share one
static shape (padded rows carry ``mask = 0`` and never enter a mean, a median or a kernel sum).

Kernels (``sigma`` from :func:`median_bandwidth` on the same distances):

- Laplace: ``k(a, b) = exp(-||a - b||_1 / sigma)``, ``sigma`` = median off-diagonal L1 distance;
- Gaussian: ``k(a, b) = exp(-||a - b||_2^2 / sigma2)``, ``sigma2`` = 2 x the median off-diagonal
  squared L2 distance (the bandwidth of the paper's generator loss ``D_G``).
"""

from __future__ import annotations

from typing import Literal

import jax
import jax.numpy as jnp

from jaxlab.core.checks import check_choice

__all__ = [
    "Kernel",
    "kernel_from_distance",
    "l1_distance",
    "masked_median",
    "masked_moments",
    "median_bandwidth",
    "pairwise_distance",
    "standardise",
]

Kernel = Literal["laplace", "gaussian"]
KERNEL_NAMES = ("laplace", "gaussian")


def _check_kernel(kernel) -> None:
    if not isinstance(kernel, str):
        raise ValueError(f"`kernel` must be one of {KERNEL_NAMES}, got {kernel!r:.60}.")
    check_choice(kernel, "kernel", KERNEL_NAMES)


def masked_moments(a: jax.Array, mask: jax.Array, eps: float = 1e-12):
    """Per-column mean and SD (``n - 1`` denominator, ``eps`` under the root) of ``a [n, d]`` over
    the rows where ``mask`` (0/1 or bool, ``[n]``) is set; ``([d], [d])``."""
    w = mask[:, None].astype(a.dtype)
    count = jnp.maximum(w.sum(), 1.0)
    mean = (w * a).sum(0) / count
    var = (w * (a - mean[None, :]) ** 2).sum(0) / jnp.maximum(count - 1.0, 1.0)
    return mean, jnp.sqrt(var + eps)


def standardise(a: jax.Array, mask: jax.Array, eps: float = 1e-12) -> jax.Array:
    """Centre and scale each column of ``a [n, d]`` by its mean and SD over the rows with ``mask``.

    Padded rows are standardised with the same statistics (their values are never used).
    """
    mean, sd = masked_moments(a, mask, eps)
    return (a - mean[None, :]) / sd[None, :]


_PLANES_MAX_DIM = 32  # up to this width the L1 sum runs coordinate by coordinate on [n, m] planes


def _l1_forward(a, b):
    if a.shape[-1] <= _PLANES_MAX_DIM:  # one fused sum of d planes, vectorised along m
        out = jnp.abs(a[:, None, 0] - b[None, :, 0])
        for k in range(1, a.shape[-1]):
            out = out + jnp.abs(a[:, None, k] - b[None, :, k])
        return out
    return jnp.abs(a[:, None, :] - b[None, :, :]).sum(-1)


@jax.custom_vjp
def l1_distance(a: jax.Array, b: jax.Array) -> jax.Array:
    """``D[i, j] = ||a_i - b_j||_1`` for ``a [n, d]``, ``b [m, d]``, with a hand-written VJP.

    The backward recomputes the signs, ``dD/da_i = sum_j g_ij sign(a_i - b_j)`` (and minus the
    same over ``i`` for ``b``), so only ``a`` and ``b`` are saved for it, never the ``[n, m, d]``
    differences autodiff would store (in the GMMN loss they dominated a training step). At a
    tie ``a_ik = b_jk`` the subgradient is 0 (autodiff of ``abs`` uses 1).
    """
    return _l1_forward(a, b)


def _l1_fwd(a, b):
    return _l1_forward(a, b), (a, b)


def _l1_bwd(res, g):
    a, b = res
    s = jnp.sign(a[:, None, :] - b[None, :, :]) * g[:, :, None]
    return s.sum(1), -s.sum(0)


l1_distance.defvjp(_l1_fwd, _l1_bwd)


def pairwise_distance(a: jax.Array, b: jax.Array, kernel: Kernel) -> jax.Array:
    """``D[i, j] = ||a_i - b_j||_1`` (Laplace, :func:`l1_distance`) or ``||a_i - b_j||_2^2``
    (Gaussian, through one matmul); ``[n, m]``."""
    _check_kernel(kernel)
    if kernel == "laplace":
        return l1_distance(a, b)
    sq = jnp.sum(a * a, -1)[:, None] + jnp.sum(b * b, -1)[None, :] - 2.0 * a @ b.T
    return jnp.maximum(sq, 0.0)


def masked_median(values: jax.Array, mask: jax.Array) -> jax.Array:
    """Median of ``values`` over the entries where ``mask`` is true (any shape)."""
    return jnp.nanmedian(jnp.where(mask, values, jnp.nan))


def median_bandwidth(dist: jax.Array, mask: jax.Array, kernel: Kernel) -> jax.Array:
    """The bandwidth of ``kernel`` from a square distance matrix ``dist [n, n]``.

    Only off-diagonal pairs of rows with ``mask`` count: the zeros on the diagonal would pull the
    median down. Laplace: the median L1 distance; Gaussian: 2 x the median squared distance.
    """
    _check_kernel(kernel)
    n = dist.shape[0]
    pair = mask[:, None] & mask[None, :] & ~jnp.eye(n, dtype=bool)
    med = masked_median(dist, pair)
    scale = 1.0 if kernel == "laplace" else 2.0
    return jnp.maximum(scale * med, jnp.finfo(dist.dtype).tiny)


def kernel_from_distance(dist: jax.Array, bandwidth: jax.Array) -> jax.Array:
    """``exp(-dist / bandwidth)``: Laplace on L1 distances, Gaussian on squared L2 distances."""
    return jnp.exp(-dist / bandwidth)

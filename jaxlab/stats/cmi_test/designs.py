"""The paper's Gaussian simulation designs (H0, A1 linear, A2 quadratic) with oracle nuisances.

``(Z, X)`` in ``R^{dz + dx}`` is jointly ``N(0, Sigma)`` with ``Sigma_ij = rho^{|i - j|}`` (Z the
first ``dz`` coordinates, X the last ``dx``), and ``Y = Z beta_z + g(X) + 0.5 eps`` with
``beta_z = (1, 1, 0, ...)``:

- ``"h0"``: ``g = 0`` (the null holds exactly);
- ``"a1_sparse"`` / ``"a1_dense"``: ``g = X beta_x`` with ``a = 0.2``; sparse ``beta_x = (a /
  sqrt 2)(1, 1, 0, ...)``, dense ``beta_x = (a / sqrt dx) 1``;
- ``"a2_sparse"`` / ``"a2_dense"``: ``g = (X beta_x)^2`` with ``a = 0.5``; sparse ``beta_x = a /
  sqrt 5`` on 5 coordinates, dense ``a / sqrt q`` on ``q = min(12, dx)`` coordinates (the paper's
  12 of 25; with ``dx < 12`` every coordinate: our choice for the quick preset's ``dx = 10``).

Oracle nuisances: ``X | Z = z ~ N(A z, S)`` with ``A = Sigma_XZ Sigma_ZZ^{-1}`` and ``S = Sigma_XX -
A Sigma_ZX``; ``E[Y | Z = z] = z beta_z + beta_x^T A z`` (A1) or ``z beta_z + (beta_x^T A z)^2 +
beta_x^T S beta_x`` (A2; forgetting the variance term shifts the residuals and inflates size).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxlab.core.checks import check_choice, check_float_dtype, check_int, check_key, check_scalar
from jaxlab.stats.cmi_test.nuisance import GaussianGenerator

__all__ = ["SETTINGS", "GaussianDesign", "OracleMean", "gaussian_design"]

SETTINGS = ("h0", "a1_sparse", "a1_dense", "a2_sparse", "a2_dense")


@struct.dataclass
class OracleMean:
    """The exact ``E[Y | Z]`` of a :class:`GaussianDesign` (a :class:`Regressor`; no fitting)."""

    beta_z: jax.Array
    beta_x: jax.Array
    coef: jax.Array  # A = Sigma_XZ Sigma_ZZ^{-1}, [dx, dz]
    cond_cov: jax.Array  # S, [dx, dx]
    quadratic: bool = struct.field(pytree_node=False, default=False)

    def fit(self, key, y, z, w):
        del key, y, z, w
        return ()

    def predict(self, params, z):
        del params
        proj = (z @ self.coef.T) @ self.beta_x  # beta_x^T E[X | z]
        if self.quadratic:
            proj = proj**2 + self.beta_x @ self.cond_cov @ self.beta_x
        return (z @ self.beta_z + proj)[:, None]


@struct.dataclass
class GaussianDesign:
    """One simulation setting: ``sample`` data, and its oracle generator and mean."""

    chol: jax.Array  # Cholesky factor of Sigma, [dz + dx, dz + dx]
    beta_z: jax.Array
    beta_x: jax.Array
    coef: jax.Array
    cond_cov: jax.Array
    dz: int = struct.field(pytree_node=False, default=25)
    quadratic: bool = struct.field(pytree_node=False, default=False)
    noise: float = struct.field(pytree_node=False, default=0.5)

    def sample(self, key: jax.Array, n: int) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``(x [n, dx], y [n, 1], z [n, dz])``."""
        key = check_key(key, "key")
        n = check_int(n, "n", minimum=1)
        k_zx, k_eps = jax.random.split(key)
        dtype = self.chol.dtype
        zx = jax.random.normal(k_zx, (n, self.chol.shape[0]), dtype) @ self.chol.T
        z, x = zx[:, : self.dz], zx[:, self.dz :]
        g = x @ self.beta_x
        if self.quadratic:
            g = g**2
        y = z @ self.beta_z + g + self.noise * jax.random.normal(k_eps, (n,), dtype)
        return x, y[:, None], z

    def oracle_generator(self) -> GaussianGenerator:
        dx = self.coef.shape[0]
        return GaussianGenerator(
            jnp.zeros((dx,), self.coef.dtype), self.coef, jnp.linalg.cholesky(self.cond_cov)
        )

    def oracle_mean(self) -> OracleMean:
        return OracleMean(self.beta_z, self.beta_x, self.coef, self.cond_cov, self.quadratic)


def gaussian_design(
    setting: str, dz: int = 25, dx: int = 25, rho: float = 0.3, dtype=jnp.float32
) -> GaussianDesign:
    """Build a setting of :data:`SETTINGS` (see the module docstring), arrays in ``dtype``."""
    check_choice(setting, "setting", SETTINGS)
    dz = check_int(dz, "dz", minimum=2)  # beta_z has two non-zero coordinates
    dx = check_int(dx, "dx", minimum=5)  # a2_sparse's beta_x has five
    check_scalar(rho, "rho", -1.0, 1.0, low_open=True, high_open=True)  # Sigma positive definite
    check_float_dtype(dtype, "dtype", allow_none=False)
    d = dz + dx
    idx = np.arange(d)
    sigma = rho ** np.abs(idx[:, None] - idx[None, :])
    s_zz, s_zx, s_xx = sigma[:dz, :dz], sigma[:dz, dz:], sigma[dz:, dz:]
    coef = np.linalg.solve(s_zz, s_zx).T  # [dx, dz]
    cond_cov = s_xx - coef @ s_zx
    beta_z = np.zeros(dz)
    beta_z[:2] = 1.0
    beta_x = np.zeros(dx)
    if setting == "a1_sparse":
        beta_x[:2] = 0.2 / np.sqrt(2)
    elif setting == "a1_dense":
        beta_x[:] = 0.2 / np.sqrt(dx)
    elif setting == "a2_sparse":
        beta_x[:5] = 0.5 / np.sqrt(5)
    elif setting == "a2_dense":
        q = min(12, dx)
        beta_x[:q] = 0.5 / np.sqrt(q)
    f = dtype
    return GaussianDesign(
        chol=jnp.asarray(np.linalg.cholesky(sigma), f),
        beta_z=jnp.asarray(beta_z, f),
        beta_x=jnp.asarray(beta_x, f),
        coef=jnp.asarray(coef, f),
        cond_cov=jnp.asarray(cond_cov, f),
        dz=dz,
        quadratic=setting.startswith("a2"),
    )

"""EDM diffusion pieces: preconditioning (plain and D2O-shifted), the training loss, the Karras
noise grid and the Heun ODE sampler.

Notation (Karras et al. 2022, "Elucidating the design space of diffusion models"): data
``x ~ p_data`` with per-pixel std ``sigma_d``; a denoiser ``D(x; sigma)`` estimates
``E[x_0 | x_0 + sigma n = x]``. It wraps an inner network ``F`` as

    D(x; sigma) = c_skip(sigma) x + c_out(sigma) F(c_in(sigma) x, c_noise(sigma)),

with, for a boundary shift ``eps >= 0`` (``eps = 0`` is EDM, ``eps = 0.002`` is D2O's
consistency-style wrapper, for which ``D(x; eps) = x`` exactly):

    c_skip = sigma_d^2 / ((sigma - eps)^2 + sigma_d^2)
    c_out  = (sigma - eps) sigma_d / sqrt(sigma^2 + sigma_d^2)
    c_in   = 1 / sqrt(sigma^2 + sigma_d^2)
    c_noise = ln(sigma) / 4.

The probability-flow ODE is ``dx/dsigma = (x - D(x; sigma)) / sigma``; :func:`heun_sample`
integrates it on the Karras grid from ``sigma_max`` to 0 with diffrax (``diffrax.Heun`` stepping
to the grid with ``diffrax.StepTo``, then one Euler step to ``sigma = 0``, where the drift is not
defined, as EDM does), so ``n`` steps cost ``2n - 1`` network evaluations: 18 steps = 35 NFE.

Images are NHWC throughout; ``sigma`` broadcasts as ``[B, 1, 1, 1]`` inside :func:`denoise`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core import checks
from jaxlab.generative.gan_onestep import _checks

PyTree = Any
# F(params, x_in [B, H, W, C], c_noise [B]) -> [B, H, W, C]
InnerFn = Callable[[PyTree, jax.Array, jax.Array], jax.Array]
# D(x [B, H, W, C], sigma [B]) -> [B, H, W, C]
DenoiseFn = Callable[[jax.Array, jax.Array], jax.Array]

__all__ = [
    "D2O_EPS",
    "EDMConfig",
    "check_images",
    "check_sigma",
    "denoise",
    "edm_loss",
    "gaussian_denoiser",
    "heun_sample",
    "karras_sigma",
    "karras_steps",
    "precond",
]

D2O_EPS = 0.002


@dataclasses.dataclass(frozen=True)
class EDMConfig:
    """EDM hyperparameters.

    Attributes:
      sigma_data: per-pixel data std ``sigma_d`` (measure it on the data; 0.5 is EDM's default).
      sigma_min, sigma_max: ends of the sampling grid (EDM: 0.002, 80).
      rho: Karras grid curvature (7).
      p_mean, p_std: training noise ``ln sigma ~ N(p_mean, p_std^2)`` (EDM: -1.2, 1.2).
    """

    sigma_data: float = 0.5
    sigma_min: float = 0.002
    sigma_max: float = 80.0
    rho: float = 7.0
    p_mean: float = -1.2
    p_std: float = 1.2

    def __post_init__(self):
        for name in ("sigma_data", "sigma_min", "sigma_max", "rho", "p_std"):
            checks.check_scalar(getattr(self, name), name, 0.0, low_open=True)
        checks.check_scalar(self.p_mean, "p_mean")
        if (
            checks.is_concrete((self.sigma_min, self.sigma_max))
            and not self.sigma_max > self.sigma_min
        ):
            raise ValueError(
                f"EDMConfig: `sigma_max` ({self.sigma_max}) must exceed `sigma_min` "
                f"({self.sigma_min})."
            )


def _check_edm_config(config: Any, name: str = "config") -> EDMConfig:
    return _checks.check_instance(config, name, EDMConfig)


def check_images(x: Any, name: str = "x") -> None:
    """Raise unless ``x`` is a floating ``[B, H, W, C]`` batch with every size >= 1 (shape and
    dtype are static, so tracers are checked too) and, where concrete, free of NaN / inf:
    ``TypeError`` for a non-array or a non-float dtype, ``ValueError`` for the shape or values."""
    _checks.check_images(x, name)


def check_sigma(sigma: Any, name: str = "sigma") -> None:
    """Raise ``ValueError`` if a concrete ``sigma`` has an entry ``<= 0`` or not finite (NaN
    included; traced values pass: :func:`jaxlab.core.checks.check_positive`), ``TypeError`` if it
    is not real numbers."""
    checks.check_positive(sigma, name)


def _check_sigma_data(sigma_data: Any, name: str = "sigma_data") -> None:
    checks.check_scalar(sigma_data, name, 0.0, low_open=True)


def _check_eps(eps: Any, name: str = "eps") -> None:
    checks.check_scalar(eps, name, 0.0)


def precond(sigma: jax.Array, sigma_data: float, eps: float = 0.0):
    """The preconditioning coefficients ``(c_skip, c_out, c_in, c_noise)`` at ``sigma``.

    ``eps = 0`` gives EDM's; ``eps = D2O_EPS`` gives the D2O generator's, with ``c_skip(eps) = 1``
    and ``c_out(eps) = 0``. Every output has ``sigma``'s shape.

    Raises:
      ValueError / TypeError: a concrete ``sigma`` has an entry <= 0 or not finite, or
        ``sigma_data`` is not a number > 0, or ``eps`` not a number >= 0.
    """
    check_sigma(sigma)
    _check_sigma_data(sigma_data)
    _check_eps(eps)
    sigma = jnp.asarray(sigma)
    s2 = jnp.square(sigma_data)
    c_skip = s2 / (jnp.square(sigma - eps) + s2)
    c_out = (sigma - eps) * sigma_data / jnp.sqrt(jnp.square(sigma) + s2)
    c_in = 1.0 / jnp.sqrt(jnp.square(sigma) + s2)
    c_noise = jnp.log(sigma) / 4.0
    return c_skip, c_out, c_in, c_noise


def denoise(
    inner: InnerFn, params: PyTree, x: jax.Array, sigma: jax.Array, sigma_data: float,
    eps: float = 0.0,
) -> jax.Array:  # fmt: skip
    """``D(x; sigma) = c_skip x + c_out F(c_in x, c_noise)``.

    Args:
      inner: ``F(params, x_in, c_noise)``.
      params: ``F``'s parameters.
      x: ``[B, H, W, C]`` noisy images.
      sigma: ``[B]`` or scalar noise levels (> 0).
      sigma_data: data std.
      eps: boundary shift (0: EDM; ``D2O_EPS``: the D2O generator).

    Returns:
      ``[B, H, W, C]`` denoised images.

    Raises:
      ValueError: ``x`` is not an image batch, ``sigma`` is neither a scalar nor ``[B]``, or a
        concrete ``sigma`` has an entry <= 0; ``TypeError``: ``inner`` is not callable or an
        argument has the wrong type.
    """
    _checks.check_callable(inner, "inner")
    check_images(x, "x")
    check_sigma(sigma)
    if np.ndim(sigma) not in (0, 1) or (np.ndim(sigma) == 1 and np.shape(sigma) != x.shape[:1]):
        raise ValueError(
            f"`sigma` must be a scalar or [B] = {x.shape[:1]} noise levels, got shape "
            f"{np.shape(sigma)}."
        )
    _check_sigma_data(sigma_data)
    _check_eps(eps)
    sigma = jnp.broadcast_to(jnp.asarray(sigma, x.dtype), x.shape[:1])
    c_skip, c_out, c_in, c_noise = precond(sigma, sigma_data, eps)
    b = lambda c: c[:, None, None, None]  # noqa: E731
    return b(c_skip) * x + b(c_out) * inner(params, b(c_in) * x, c_noise)


def edm_loss(
    inner: InnerFn, params: PyTree, x0: jax.Array, key: jax.Array, config: EDMConfig
) -> jax.Array:
    """EDM training loss, mean over the batch.

    ``ln sigma ~ N(p_mean, p_std^2)``, ``n ~ N(0, I)``; per example
    ``lambda(sigma) ||D(x0 + sigma n; sigma) - x0||^2 / (H W C)`` with
    ``lambda = (sigma^2 + sigma_d^2) / (sigma sigma_d)^2`` (which makes the effective target of
    ``F`` unit-variance at every ``sigma``).
    """
    _checks.check_callable(inner, "inner")
    check_images(x0, "x0")
    key = checks.check_key(key)
    _check_edm_config(config)
    k_sigma, k_noise = jax.random.split(key)
    b = x0.shape[0]
    sigma = jnp.exp(config.p_mean + config.p_std * jax.random.normal(k_sigma, (b,), x0.dtype))
    noise = jax.random.normal(k_noise, x0.shape, x0.dtype)
    x = x0 + sigma[:, None, None, None] * noise
    d = denoise(inner, params, x, sigma, config.sigma_data)
    sd2 = config.sigma_data**2
    weight = (jnp.square(sigma) + sd2) / (jnp.square(sigma) * sd2)
    per_example = jnp.mean(jnp.square(d - x0), axis=(1, 2, 3))
    return jnp.mean(weight * per_example)


def karras_sigma(r: jax.Array, sigma_min: float, sigma_max: float, rho: float) -> jax.Array:
    """The Karras grid as a function of ``r`` in [0, 1]:
    ``sigma(r) = (sigma_max^(1/rho) + (1 - r)(sigma_min^(1/rho) - sigma_max^(1/rho)))^rho``,
    so ``sigma(0) = sigma_min``, ``sigma(1) = sigma_max``, increasing in ``r``."""
    checks.check_in_range(r, "r", 0.0, 1.0)
    for name, v in (("sigma_min", sigma_min), ("sigma_max", sigma_max), ("rho", rho)):
        checks.check_scalar(v, name, 0.0, low_open=True)
    if checks.is_concrete((sigma_min, sigma_max)) and not sigma_max > sigma_min:
        raise ValueError(f"`sigma_max` ({sigma_max}) must exceed `sigma_min` ({sigma_min}).")
    a, b = sigma_max ** (1.0 / rho), sigma_min ** (1.0 / rho)
    return (a + (1.0 - jnp.asarray(r)) * (b - a)) ** rho


def karras_steps(n_steps: int, config: EDMConfig, final_sigma_min: bool = True) -> jax.Array:
    """``n_steps + 1`` sampling levels ending in 0, ``[n_steps + 1]`` float32.

    ``final_sigma_min=True`` (EDM's sampler grid): ``n_steps`` Karras levels from ``sigma_max``
    down to ``sigma_min``, then 0. With few steps this grid wastes its last Heun step on the jump
    to ``sigma_min``: for 2 steps, the Heun correction at ``sigma_min`` is multiplied by a step of
    ~80 and the sample blows up. ``final_sigma_min=False`` (few-step sampling): the first
    ``n_steps`` levels of the ``n_steps + 1``-level Karras grid (``sigma_min`` dropped), then 0, so
    the last (Euler) step is a clean jump from ``sigma_{n-1}`` to the denoiser's output.
    """
    n_steps = checks.check_int(n_steps, "n_steps", minimum=1)
    _check_edm_config(config)
    _checks.check_bool(final_sigma_min, "final_sigma_min")
    n_levels = n_steps if final_sigma_min else n_steps + 1
    if n_levels == 1:
        levels = jnp.array([config.sigma_max], jnp.float32)
    else:
        r = jnp.linspace(1.0, 0.0, n_levels, dtype=jnp.float32)
        levels = karras_sigma(r, config.sigma_min, config.sigma_max, config.rho)[:n_steps]
    return jnp.concatenate([levels, jnp.zeros((1,), levels.dtype)])


def heun_sample(denoiser: DenoiseFn, x_init: jax.Array, sigmas: jax.Array) -> jax.Array:
    """Integrate the probability-flow ODE along ``sigmas`` (strictly decreasing, last entry 0).

    ``x_init`` is ``[B, ...]`` noise already scaled by ``sigmas[0]``. The intervals down to
    ``sigmas[-2]`` are Heun (trapezoidal) steps, ``diffrax.diffeqsolve`` with ``diffrax.Heun`` and
    ``diffrax.StepTo(ts=sigmas[:-1])``; the last interval, ending at ``sigma = 0`` where the drift
    ``(x - D) / sigma`` is undefined, is one Euler step (EDM's sampler), i.e. ``x`` becomes
    ``D(x; sigmas[-2])``. ``n + 1`` levels cost ``2n - 1`` denoiser calls.

    Measured against the hand-written ``lax.scan`` Heun it replaced (the experiment's U-Net,
    channels 16/32, jitted, 18 steps = 35 NFE, median of 7 interleaved runs after warm-up, 2 CPU
    cores): 327 vs 303 ms for 64 images and 1.17 vs 1.24 s for 256 (the same speed within the
    machine's noise), compiling 2.5 vs 1.6 s; outputs equal to 1e-6 at 18 steps and 1.6e-5 at 2
    (500 images; float32 rounding of ``sigma_max |z| ~ 300``, the size of the state), and the
    experiment's quick-preset figures (seed 0) came out bit-identical.

    Args:
      denoiser: ``D(x, sigma[B]) -> x0_hat``.
      x_init: ``[B, H, W, C]`` initial state at ``sigmas[0]``.
      sigmas: ``[n + 1]`` levels, ``n >= 1``.

    Returns:
      ``[B, H, W, C]`` the state at ``sigma = 0``.

    Raises:
      ValueError: ``sigmas`` is not 1-D with at least two levels, or (when concrete) is not
        strictly decreasing with a last entry of 0.
    """
    _checks.check_callable(denoiser, "denoiser")
    checks.check_real(sigmas, "sigmas")
    sigmas = jnp.asarray(sigmas)
    if sigmas.ndim != 1 or sigmas.shape[0] < 2:
        raise ValueError(f"`sigmas` must be [n + 1] levels with n >= 1, got shape {sigmas.shape}.")
    dtype = getattr(x_init, "dtype", None)
    if dtype is None or not jnp.issubdtype(dtype, jnp.floating) or np.ndim(x_init) < 1:
        raise TypeError(
            f"`x_init` must be a float array [B, ...], got {type(x_init).__name__} with dtype "
            f"{dtype} and shape {np.shape(x_init)}."
        )
    if x_init.shape[0] < 1:
        raise ValueError(f"`x_init` must have a batch of >= 1, got shape {x_init.shape}.")
    checks.check_finite(x_init, "x_init")
    checks.check_finite(sigmas, "sigmas")
    if jnp.issubdtype(sigmas.dtype, jnp.integer):  # integer levels are fine: the state's floats
        sigmas = sigmas.astype(x_init.dtype)
    if checks.is_concrete(sigmas):
        levels = jax.device_get(sigmas)
        if levels[-1] != 0 or not (levels[1:] < levels[:-1]).all():
            raise ValueError(f"`sigmas` must decrease strictly to a last entry of 0, got {levels}.")
    b = x_init.shape[0]

    def drift(s, x, args):
        return (x - denoiser(x, jnp.full((b,), s, x.dtype))) / s

    x = x_init
    if sigmas.shape[0] > 2:  # Heun steps between the positive levels
        ts = sigmas[:-1]
        solution = diffrax.diffeqsolve(
            diffrax.ODETerm(drift), diffrax.Heun(), t0=ts[0], t1=ts[-1], dt0=None, y0=x,
            stepsize_controller=diffrax.StepTo(ts=ts), max_steps=ts.shape[0] - 1,
            saveat=diffrax.SaveAt(t1=True),
        )  # fmt: skip
        x = solution.ys[0]
    s = sigmas[-2]
    return x + (sigmas[-1] - s) * drift(s, x, None)  # the Euler step to sigma = 0


def gaussian_denoiser(mean: jax.Array, std: float) -> DenoiseFn:
    """The exact denoiser of ``p_data = N(mean, std^2 I)``:
    ``D(x; sigma) = (std^2 x + sigma^2 mean) / (std^2 + sigma^2)`` (tests and sanity checks)."""
    checks.check_finite(mean, "mean")
    checks.check_scalar(std, "std", 0.0, low_open=True)

    def d(x, sigma):
        s2 = jnp.square(sigma)[:, None, None, None]
        return (std**2 * x + s2 * mean) / (std**2 + s2)

    return d

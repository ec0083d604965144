"""Networks of Neural ETC: ICNN Lyapunov function, spectrally normalised controller, class-K alpha.

- :class:`ICNNLyapunov`: input-convex network ``p`` and
  ``V(x) = s(p(x) - p(0)) + eps ||x||^2`` with the smoothed ReLU ``s`` (``d = 0.1``):
  ``s(z) = 0`` (z <= 0), ``z^2/(2d)`` (0 < z < d), ``z - d/2`` (z >= d). So ``V(0) = 0``,
  ``V >= eps ||x||^2`` and ``V`` is convex.
- :class:`Controller`: ``u(x) = x * NN(x)`` (state-sized control) or ``NN(x) - NN(0)``, with every
  weight divided by its exact largest singular value (spectral normalisation by SVD rather than
  torch's one-step power iteration; deterministic and equally faithful), so ``u(0) = 0``.
- :class:`ClassK`: ``alpha(r) = int_0^r q(s) ds`` with ``q = ELU(MLP(s)) + 1 > 0``, integrated by
  Clenshaw-Curtis quadrature (weights computed in float64): ``alpha(0) = 0``, strictly increasing.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.control.neural_etc import _checks
from jaxlab.core.checks import check_choice, check_finite, check_int, check_real, check_scalar
from jaxlab.core.nn import INIT_SCHEMES, dense_init

__all__ = [
    "ClassK",
    "Controller",
    "ICNNLyapunov",
    "SpectralDense",
    "clenshaw_curtis",
    "smooth_relu",
    "spectral_norm",
    "with_spectral_norms",
]


def smooth_relu(z: jax.Array, d: float = 0.1) -> jax.Array:
    """C^1 smoothed ReLU: 0, then ``z^2/(2d)`` on (0, d), then ``z - d/2`` (``d > 0``)."""
    check_real(z, "z")
    check_scalar(d, "d", 0.0, low_open=True)
    return jnp.where(z <= 0, 0.0, jnp.where(z < d, z * z / (2 * d), z - d / 2))


_xavier = nn.initializers.xavier_normal()


def _xavier_bias(key, shape, dtype=jnp.float32):
    # the official biases are [h, 1] tensors, Xavier-initialised as such
    return _xavier(key, (shape[0], 1), dtype)[:, 0]


class ICNNLyapunov(nn.Module):
    """``V: [n] -> []`` (vmap for batches). ``hidden=(64, 1)`` is the paper's ICNN(3, 64, 1)."""

    hidden: tuple[int, ...] = (64, 1)
    eps: float = 1e-3
    smooth: float = 0.1

    def setup(self):
        hidden = _checks.check_widths(self.hidden, "hidden")
        if hidden[-1] != 1:
            raise ValueError(
                f"`hidden` of the ICNN must end in its output width 1, got {self.hidden!r}."
            )
        check_scalar(self.eps, "eps", 0.0)
        check_scalar(self.smooth, "smooth", 0.0, low_open=True)
        self.w = [nn.Dense(h, kernel_init=_xavier, bias_init=_xavier_bias) for h in self.hidden]
        self.u = [
            self.param(f"U_{i}", _xavier, (self.hidden[i - 1], self.hidden[i]))
            for i in range(1, len(self.hidden))
        ]

    def convex_part(self, x: jax.Array) -> jax.Array:
        """``p(x)``: ``z1 = s(W0 x + b0)``, ``z_{i+1} = s(softplus(U_i) z_i + W_i x + b_i)``."""
        _check_input(x, "x")
        z = smooth_relu(self.w[0](x), self.smooth)
        for i in range(1, len(self.hidden)):
            z = smooth_relu(z @ nn.softplus(self.u[i - 1]) + self.w[i](x), self.smooth)
        return z[..., 0]

    def __call__(self, x: jax.Array) -> jax.Array:
        shifted = self.convex_part(x) - self.convex_part(jnp.zeros_like(x))
        return smooth_relu(shifted, self.smooth) + self.eps * jnp.sum(x * x, axis=-1)


class SpectralDense(nn.Module):
    """Dense layer whose kernel is divided by its largest singular value (exact, by SVD).

    ``init_scheme``: ``"lecun"`` (LeCun-normal kernel, zero bias) or ``"torch"`` (PyTorch's
    default ``nn.Linear`` init, ``U(+-1/sqrt(fan_in))`` for kernel and bias: the official code);
    any of :data:`jaxlab.core.nn.INIT_SCHEMES`.

    The singular value is computed on every call unless the variables carry it in a
    ``"spectral"`` collection (``{"sigma": []}``, from :func:`with_spectral_norms`): a vector
    field called thousands of times per ODE solve then does one SVD per layer, not one per call.
    The value is the same, and gradients flow through it to the kernel either way.
    """

    features: int
    init_scheme: str = "lecun"

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        check_int(self.features, "features", minimum=1)
        check_choice(self.init_scheme, "init_scheme", INIT_SCHEMES)
        _check_input(x, "x")
        inits = dense_init(self.init_scheme, x.shape[-1])
        kernel = self.param("kernel", inits["kernel_init"], (x.shape[-1], self.features))
        bias = self.param("bias", inits["bias_init"], (self.features,))
        if self.has_variable("spectral", "sigma"):
            sigma = self.get_variable("spectral", "sigma")
        else:
            sigma = spectral_norm(kernel)
        bias = bias.astype(x.dtype).reshape((1,) * (x.ndim - 1) + (-1,))
        return x @ (kernel / sigma).astype(x.dtype) + bias


def _check_input(x, name):
    check_real(x, name)
    if np.ndim(x) < 1 or np.shape(x)[-1] < 1:
        raise ValueError(f"`{name}` must be a [..., n] array with n >= 1, got shape {np.shape(x)}.")


def spectral_norm(kernel: jax.Array) -> jax.Array:
    """The largest singular value of ``kernel`` (exact, by SVD; differentiable)."""
    check_real(kernel, "kernel")
    if np.ndim(kernel) != 2 or min(np.shape(kernel)) < 1:
        raise ValueError(f"`kernel` must be a [in, out] matrix, got shape {np.shape(kernel)}.")
    check_finite(kernel, "kernel")
    return jnp.linalg.svd(kernel, compute_uv=False)[0]


def with_spectral_norms(variables: dict) -> dict:
    """``variables`` of a :class:`Controller` plus each layer's ``sigma`` in ``"spectral"``.

    Apply the controller to the result wherever it is called many times with the same
    parameters (ODE solves): the values are those of ``variables``, each SVD runs once.
    """
    layers = variables.get("params") if isinstance(variables, dict) else None
    if not isinstance(layers, dict) or not all(
        isinstance(v, dict) and "kernel" in v for v in layers.values()
    ):
        raise TypeError(
            "`variables` must be a Controller's variables {'params': {layer: {'kernel', "
            f"'bias'}}}}}}, got {type(variables).__name__}: {variables!r:.80}."
        )
    sigmas = {name: {"sigma": spectral_norm(layer["kernel"])}
              for name, layer in variables["params"].items()}  # fmt: skip
    return {**variables, "spectral": sigmas}


class Controller(nn.Module):
    """``u: [n] -> [m]``, ``u(0) = 0``; ReLU MLP of :class:`SpectralDense` layers.

    ``u(x) = x * NN(x)`` when ``m == n`` (the paper's form), else ``NN(x) - NN(0)``.
    """

    control_dim: int
    hidden: tuple[int, ...] = (64, 64)
    init_scheme: str = "lecun"

    def setup(self):
        check_int(self.control_dim, "control_dim", minimum=1)
        _checks.check_widths(self.hidden, "hidden")
        check_choice(self.init_scheme, "init_scheme", INIT_SCHEMES)
        widths = (*self.hidden, self.control_dim)
        self.layers = [SpectralDense(h, self.init_scheme) for h in widths]

    def mlp(self, x: jax.Array) -> jax.Array:
        """The normalised ReLU MLP (1-Lipschitz: every layer has spectral norm 1)."""
        for layer in self.layers[:-1]:
            x = nn.relu(layer(x))
        return self.layers[-1](x)

    def __call__(self, x: jax.Array) -> jax.Array:
        _check_input(x, "x")
        if self.control_dim == x.shape[-1]:
            return x * self.mlp(x)
        both = self.mlp(jnp.stack([x, jnp.zeros_like(x)]))  # shared weights for x and 0
        return both[0] - both[1]


def clenshaw_curtis(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Clenshaw-Curtis nodes and weights on [-1, 1] with ``n + 1`` points, in float64."""
    n = check_int(n, "n", minimum=1)
    theta = np.pi * np.arange(n + 1) / n
    nodes = np.cos(theta)
    weights = np.zeros(n + 1)
    for k in range(n + 1):
        total = 1.0
        for j in range(1, n // 2 + 1):
            b = 1.0 if 2 * j == n else 2.0
            total -= b * np.cos(2 * j * theta[k]) / (4 * j * j - 1)
        c = 1.0 if k in (0, n) else 2.0
        weights[k] = c * total / n
    return nodes, weights


_CC_NODES, _CC_WEIGHTS = clenshaw_curtis(50)


class ClassK(nn.Module):
    """``alpha: [] -> []`` (vmap for batches), ``alpha(r) = int_0^r q``; :meth:`slope` is ``q``."""

    hidden: tuple[int, ...] = (10, 10)

    @nn.compact
    def slope(self, r: jax.Array) -> jax.Array:
        _checks.check_widths(self.hidden, "hidden")
        check_real(r, "r")
        x = jnp.asarray(r)[..., None]
        for h in self.hidden:
            x = nn.relu(nn.Dense(h)(x))
        return nn.elu(nn.Dense(1)(x)[..., 0]) + 1.0

    def __call__(self, r: jax.Array) -> jax.Array:
        check_real(r, "r")
        if np.ndim(r) != 0:
            raise ValueError(f"`r` must be a scalar radius (vmap for batches), got {np.shape(r)}.")
        r = jnp.asarray(r)
        if not jnp.issubdtype(r.dtype, jnp.floating):
            r = r.astype(jnp.result_type(float))
        nodes = jnp.asarray(_CC_NODES, dtype=r.dtype)
        weights = jnp.asarray(_CC_WEIGHTS, dtype=r.dtype)
        s = 0.5 * r * (nodes + 1.0)  # map [-1, 1] -> [0, r]
        return 0.5 * r * jnp.sum(weights * self.slope(s))

"""Nuisance fitters of the CMI test: generators of ``X | Z`` and regressions of ``Y`` on ``Z``.

Two small protocols; every fitter is a ``flax.struct`` dataclass, so a fitter is a pytree whose
hyperparameters are static and whose arrays (an oracle's truth) are traced. Fitters go into jitted,
vmapped code as ordinary arguments, and ``fit`` is a pure function, so the cross-fitting loop
``vmap``s it over folds (and over replicates, outside).

- :class:`Generator`: ``fit(key, x [n, dx], z [n, dz], w [n]) -> params`` and
  ``sample(params, key, z [m, dz], num_samples) -> x_tilde [m, num_samples, dx]``;
- :class:`Regressor`: ``fit(key, y [n, dy], z [n, dz], w [n]) -> params`` and
  ``predict(params, z [m, dz]) -> m_hat [m, dy]``.

``w`` is a 0/1 weight per training row: folds of unequal size are padded to one static shape and
the padded rows get ``w = 0`` (a fitter must ignore them; all fitters here do).

Fitters: :class:`GaussianGenerator` (known ``E[X|Z] = c + A z`` and ``Cov[X|Z] = L L^T``, the
oracle for Gaussian designs), :class:`LinearGaussianGenerator` (weighted OLS + residual Cholesky),
:class:`GMMNGenerator` (the paper's generative moment-matching network), :class:`LinearMean` and
:class:`SoftmaxMean` (known linear and softmax-linear means), :class:`RidgeRegressor`,
:class:`MLPRegressor` (the paper's regression net), :class:`SoftmaxRegressor` (class probabilities
for one-hot or probability-vector responses, the role of the paper's image classifier),
:class:`ColumnBlocks` (one regressor per block of ``y``'s columns), and the error-injection
wrappers :class:`PerturbedGenerator` / :class:`PerturbedRegressor` of the robustness study.

The networks are :class:`jaxlab.core.nn.MLP` (one hidden layer, leaky ReLU, dropout) and every
optimiser loop is :func:`jaxlab.core.training.fit` (one ``lax.scan``). Fitters are frozen
(``flax.struct``) and validate their hyperparameters on construction, naming the field.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from jaxlab.core.checks import check_array, check_choice, check_int, check_key, check_scalar
from jaxlab.core.nn import MLP
from jaxlab.core.training import fit
from jaxlab.stats.cmi_test import kernels as K

__all__ = [
    "ColumnBlocks",
    "GMMNGenerator",
    "GaussianConditional",
    "GaussianGenerator",
    "Generator",
    "LinearGaussianGenerator",
    "LinearMean",
    "MLPRegressor",
    "PerturbedGenerator",
    "PerturbedRegressor",
    "Regressor",
    "RidgeRegressor",
    "ScaledNet",
    "SoftmaxMean",
    "SoftmaxParams",
    "SoftmaxRegressor",
    "centred_gram",
    "conditional_mmd",
    "weighted_lstsq",
]

Params = Any


# ---- hyperparameter checks (static fields only: ``__post_init__`` also runs on unflattening) ----


def _check_finite_scalar(value, name: str) -> None:
    check_scalar(value, name)


def _is_placeholder(value) -> bool:
    """What JAX may put in a pytree child's place when it unflattens (``None``, a sentinel
    ``object()``, an axis number, an array, a tracer, a shape): not checked as a fitter."""
    return (
        value is None
        or type(value) is object
        or (isinstance(value, int) and not isinstance(value, bool))
        or isinstance(value, jax.Array | jax.ShapeDtypeStruct)
    )


def _check_methods(fitter, name: str, method: str) -> None:
    """``fitter`` has callable ``fit`` and ``method`` (``"sample"`` or ``"predict"``); skipped for
    the placeholders of unflattening (``__post_init__`` runs then too); :func:`cmi_test` checks
    its fitters again at the call."""
    if _is_placeholder(fitter):
        return
    if not (callable(getattr(fitter, "fit", None)) and callable(getattr(fitter, method, None))):
        raise TypeError(
            f"`{name}` must be a fitter with `fit` and `{method}` methods (see "
            f"jaxlab.stats.cmi_test.nuisance), got {type(fitter).__name__}: {fitter!r:.60}."
        )


def _check_bool(value, name: str) -> None:
    if not isinstance(value, bool | np.bool_):
        raise ValueError(f"`{name}` must be a bool, got {value!r}.")


def _check_adamw(fitter) -> None:
    """The shared optimiser fields ``lr``, ``b1``, ``b2``, ``weight_decay``, ``decay``, ``clip``."""
    check_choice(fitter.decay, "decay", ("coupled", "decoupled"))
    check_scalar(fitter.lr, "lr", 0.0, low_open=True)
    check_scalar(fitter.b1, "b1", 0.0, 1.0, high_open=True)
    check_scalar(fitter.b2, "b2", 0.0, 1.0, high_open=True)
    check_scalar(fitter.weight_decay, "weight_decay", 0.0)
    check_scalar(fitter.clip, "clip", 0.0, low_open=True)


def _check_network(fitter) -> None:
    """The shared network fields ``hidden``, ``slope``, ``dropout`` and the ``steps``."""
    check_int(fitter.hidden, "hidden", minimum=1)
    _check_finite_scalar(fitter.slope, "slope")
    check_scalar(fitter.dropout, "dropout", 0.0, 1.0, high_open=True)
    check_int(fitter.steps, "steps", minimum=0)


class Generator(Protocol):
    """A conditional sampler of ``X | Z`` fitted on weighted rows (see the module docstring)."""

    def fit(self, key: jax.Array, x: jax.Array, z: jax.Array, w: jax.Array) -> Params: ...

    def sample(
        self, params: Params, key: jax.Array, z: jax.Array, num_samples: int
    ) -> jax.Array: ...


class Regressor(Protocol):
    """An estimate of ``m(z) = E[Y | Z = z]`` fitted on weighted rows."""

    def fit(self, key: jax.Array, y: jax.Array, z: jax.Array, w: jax.Array) -> Params: ...

    def predict(self, params: Params, z: jax.Array) -> jax.Array: ...


# ---- linear-Gaussian pieces ----------------------------------------------------------------------


class GaussianConditional(NamedTuple):
    """``X | Z = z ~ N(intercept + coef z, chol chol^T)``: ``[dx]``, ``[dx, dz]``, ``[dx, dx]``."""

    intercept: jax.Array
    coef: jax.Array
    chol: jax.Array


def _check_fit_data(t, z, w, t_name: str) -> None:
    """Training data of a fitter: ``t [n, d]``, ``z [n, dz]``, weights ``w [n]`` (static shapes;
    finite where concrete)."""
    check_array(t, t_name, ndim=2)
    n = np.shape(t)[0]
    check_array(z, "z", ndim=2)
    check_array(z, "z", shape=(n, None), dims="[n, dz]")
    check_array(w, "w", shape=(n,), dims="[n]")


def _check_inputs(z, dz: int) -> None:
    """Evaluation rows ``z [m, dz]`` of a fitted nuisance whose parameters expect ``dz`` columns."""
    check_array(z, "z", ndim=2)
    check_array(z, "z", shape=(None, dz), dims=f"[m, dz = {dz} (the fitted width)]")


def _gaussian_sample(p: GaussianConditional, key, z, num_samples):
    _check_inputs(z, np.shape(p.coef)[1])
    key = check_key(key, "key")
    num_samples = check_int(num_samples, "num_samples", minimum=1)
    mean = p.intercept[None, :] + z @ p.coef.T  # [m, dx]
    eta = jax.random.normal(key, (z.shape[0], num_samples, p.chol.shape[0]), z.dtype)
    return mean[:, None, :] + eta @ p.chol.T


def weighted_lstsq(z: jax.Array, t: jax.Array, w: jax.Array, alpha: float = 0.0):
    """Weighted ridge regression of ``t [n, d]`` on ``[1, z]``; the intercept is not penalised.

    Solves ``min sum_i w_i ||t_i - c - B z_i||^2 + alpha ||B||_F^2``.

    Returns:
      ``(c [d], B [d, dz], residuals [n, d])``.
    """
    wsum = jnp.maximum(w.sum(), 1.0)
    zbar = (w[:, None] * z).sum(0) / wsum
    tbar = (w[:, None] * t).sum(0) / wsum
    zc, tc = z - zbar[None, :], t - tbar[None, :]
    gram = (zc * w[:, None]).T @ zc + alpha * jnp.eye(z.shape[1], dtype=z.dtype)
    # a tiny jitter keeps the solve finite when dz exceeds the number of rows
    gram = gram + 1e-8 * jnp.trace(gram) / z.shape[1] * jnp.eye(z.shape[1], dtype=z.dtype)
    coef = jnp.linalg.solve(gram, (zc * w[:, None]).T @ tc).T  # [d, dz]
    intercept = tbar - coef @ zbar
    resid = t - intercept[None, :] - z @ coef.T
    return intercept, coef, resid


@struct.dataclass
class GaussianGenerator:
    """A known Gaussian conditional (the oracle of Gaussian designs); ``fit`` ignores the data.

    Attributes:
      intercept, coef, chol: ``E[X|Z=z] = intercept + coef z``, ``Cov[X|Z] = chol chol^T``.
    """

    intercept: jax.Array
    coef: jax.Array
    chol: jax.Array

    def fit(self, key, x, z, w) -> GaussianConditional:
        del key, x, z, w
        return GaussianConditional(self.intercept, self.coef, self.chol)

    def sample(self, params, key, z, num_samples):
        return _gaussian_sample(params, key, z, num_samples)


@struct.dataclass
class LinearGaussianGenerator:
    """``X | Z`` as a Gaussian with a linear mean (weighted OLS) and the residual covariance.

    Exact (up to estimation error) for jointly Gaussian ``(X, Z)``; a cheap generator elsewhere.

    Attributes:
      ridge: ridge penalty on the slope (0 = OLS; the solve carries a 1e-8 relative jitter).
      jitter: added to the residual covariance's diagonal before the Cholesky factor.
    """

    ridge: float = struct.field(pytree_node=False, default=0.0)
    jitter: float = struct.field(pytree_node=False, default=1e-6)

    def __post_init__(self):
        check_scalar(self.ridge, "ridge", 0.0)
        check_scalar(self.jitter, "jitter", 0.0)

    def fit(self, key, x, z, w) -> GaussianConditional:
        del key
        _check_fit_data(x, z, w, "x")
        intercept, coef, resid = weighted_lstsq(z, x, w, self.ridge)
        dof = jnp.maximum(w.sum() - z.shape[1] - 1.0, 1.0)
        cov = (resid * w[:, None]).T @ resid / dof
        cov = cov + self.jitter * jnp.eye(x.shape[1], dtype=x.dtype)
        return GaussianConditional(intercept, coef, jnp.linalg.cholesky(cov))

    def sample(self, params, key, z, num_samples):
        return _gaussian_sample(params, key, z, num_samples)


@struct.dataclass
class LinearMean:
    """A known linear mean ``m(z) = intercept + coef z`` (``[dy]``, ``[dy, dz]``); no fitting."""

    intercept: jax.Array
    coef: jax.Array

    def fit(self, key, y, z, w):
        del key, y, z, w
        return (self.intercept, self.coef)

    def predict(self, params, z):
        intercept, coef = params
        _check_inputs(z, np.shape(coef)[1])
        return intercept[None, :] + z @ coef.T


@struct.dataclass
class SoftmaxMean:
    """A known softmax-linear mean ``m(z) = softmax(z W + b)`` (``W [dz, dy]``, ``b [dy]``); no
    fitting. The exact ``E[Y | Z]`` when ``Y`` is drawn from (or is the probability vector of, plus
    centred noise) a multinomial logistic model of ``Z``, e.g. a fitted sklearn
    ``LogisticRegression`` (``W = coef_.T``, ``b = intercept_``)."""

    weight: jax.Array
    bias: jax.Array

    def fit(self, key, y, z, w):
        del key, y, z, w
        return ()

    def predict(self, params, z):
        del params
        _check_inputs(z, np.shape(self.weight)[0])
        return jax.nn.softmax(z @ self.weight + self.bias[None, :], -1)


@struct.dataclass
class RidgeRegressor:
    """Weighted ridge regression of ``Y`` on ``[1, Z]`` (intercept unpenalised).

    Attributes:
      alpha: ridge penalty on the slope.
    """

    alpha: float = struct.field(pytree_node=False, default=1.0)

    def __post_init__(self):
        check_scalar(self.alpha, "alpha", 0.0)

    def fit(self, key, y, z, w):
        del key
        _check_fit_data(y, z, w, "y")
        intercept, coef, _ = weighted_lstsq(z, y, w, self.alpha)
        return (intercept, coef)

    def predict(self, params, z):
        intercept, coef = params
        _check_inputs(z, np.shape(coef)[1])
        return intercept[None, :] + z @ coef.T


# ---- error injection (the robustness study) ------------------------------------------------------


@struct.dataclass
class PerturbedRegressor:
    """``m_hat(z) + amplitude * g(z)`` on every output: a slowly decaying regression error.

    ``g(z) = sin(3 z_1)`` by default, or the linear ``g(z) = z_{1..k} . direction`` when
    ``direction`` (``k`` weights) is given. With ``amplitude = c n^{-1/4}`` this is the spec's
    injected nuisance error. The naive (uncentred) test's bias grows with how much the Z kernel
    sees of ``g``, ``kappa = E[g(Z) g(Z') k_Z] / (E[g^2] E[k_Z])``: about 0.003 for ``sin(3 z_1)``
    in d = 25, against 0.025 (d = 25) and 0.064 (d = 10) for ``g`` along the designs' ``beta_z``
    (``direction = (1, 1) / sqrt(2.6)``: unit variance at rho = 0.3).
    """

    base: Any
    amplitude: float = struct.field(pytree_node=False, default=0.0)
    direction: tuple[float, ...] | None = struct.field(pytree_node=False, default=None)

    def __post_init__(self):
        _check_methods(self.base, "base", "predict")
        _check_finite_scalar(self.amplitude, "amplitude")
        if self.direction is not None:
            if not isinstance(self.direction, tuple) or not self.direction:
                raise ValueError(
                    f"`direction` must be None or a non-empty tuple of floats, got "
                    f"{self.direction!r}."
                )
            for i, v in enumerate(self.direction):
                _check_finite_scalar(v, f"direction[{i}]")

    def fit(self, key, y, z, w):
        return self.base.fit(key, y, z, w)

    def error(self, z):
        """``g(z) [m, 1]`` (see the class docstring)."""
        if self.direction is None:
            return jnp.sin(3.0 * z[:, :1])
        k = len(self.direction)
        if z.shape[1] < k:
            raise ValueError(f"`direction` has {k} weights but z has {z.shape[1]} columns.")
        return z[:, :k] @ jnp.asarray(self.direction, z.dtype)[:, None]

    def predict(self, params, z):
        m = self.base.predict(params, z)
        return m + self.amplitude * self.error(z)


@struct.dataclass
class PerturbedGenerator:
    """Samples of ``base`` shifted by ``amplitude * cos(z_1)`` on every coordinate."""

    base: Any
    amplitude: float = struct.field(pytree_node=False, default=0.0)

    def __post_init__(self):
        _check_methods(self.base, "base", "sample")
        _check_finite_scalar(self.amplitude, "amplitude")

    def fit(self, key, x, z, w):
        return self.base.fit(key, x, z, w)

    def sample(self, params, key, z, num_samples):
        xt = self.base.sample(params, key, z, num_samples)
        return xt + self.amplitude * jnp.cos(z[:, None, :1])


# ---- the centred kernel form shared by the statistic and the GMMN loss ---------------------------


def _is_bool(a) -> bool:
    dtype = getattr(a, "dtype", None)
    return dtype is not None and dtype == np.bool_


def _check_kernel_inputs(x, xt, kernel, *, bandwidth, bandwidth_name: str = "bandwidth") -> None:
    """``x [n, dx]`` and ``xt [n, M, dx]`` (finite where concrete), a kernel, a bandwidth > 0."""
    check_choice(kernel, "kernel", ("laplace", "gaussian"))
    check_array(x, "x", ndim=2)
    n, dx = np.shape(x)
    if n < 1 or dx < 1:
        raise ValueError(f"`x` must be [n, dx] with n, dx >= 1, got shape {np.shape(x)}.")
    check_array(xt, "xt", ndim=3)
    check_array(xt, "xt", shape=(n, None, dx), dims="[n, M, dx]")
    if np.shape(xt)[1] < 1:
        raise ValueError(f"`xt` must hold at least one draw per row, got shape {np.shape(xt)}.")
    check_scalar(bandwidth, bandwidth_name, 0.0, low_open=True)


def centred_gram(
    x: jax.Array,
    xt: jax.Array,
    bandwidth: jax.Array,
    kernel: K.Kernel,
    *,
    kxx: jax.Array | None = None,
    standardise_mask: jax.Array | None = None,
) -> jax.Array:
    """The conditionally centred kernel matrix ``U [n, n]`` from ``x [n, dx]``, ``xt [n, M, dx]``.

    ``U_ij = k(x_i, x_j) - A_ij - A_ji + C_ij`` with ``A_ij = (1/M) sum_m k(x_i, xt_j^m)`` and
    ``C_ij = (1/M) sum_m k(xt_i^m, xt_j^m)`` (the m index paired: draws for ``i != j`` are
    independent, so ``C_ij`` is unbiased for ``E k(X~_i, X~_j)``). The sum over m is a
    ``lax.scan``, so memory is ``O(n^2 dx)``, never ``O(n^2 M dx)``. The diagonal is not meaningful.

    Args:
      x: the observed block (already standardised).
      xt: ``M`` conditional draws per row.
      bandwidth: of ``kernel`` (see :mod:`.kernels`).
      kxx: ``k(x, x)`` if already computed.
      standardise_mask: if given, each draw ``xt[:, m]`` is standardised over these rows first
        (the statistic's per-fold, per-m standardisation).
    """
    _check_kernel_inputs(x, xt, kernel, bandwidth=bandwidth)
    n = np.shape(x)[0]
    if kxx is not None:
        check_array(kxx, "kxx", shape=(n, n), dims="[n, n]", finite=False)
    if standardise_mask is not None:
        check_array(standardise_mask, "standardise_mask", shape=(n,), dims="[n]",
                    kind="bool" if _is_bool(standardise_mask) else "real")  # fmt: skip
    if kxx is None:
        kxx = K.kernel_from_distance(K.pairwise_distance(x, x, kernel), bandwidth)

    def body(carry, xt_m):
        a, c = carry
        if standardise_mask is not None:
            xt_m = K.standardise(xt_m, standardise_mask)
        a = a + K.kernel_from_distance(K.pairwise_distance(x, xt_m, kernel), bandwidth)
        c = c + K.kernel_from_distance(K.pairwise_distance(xt_m, xt_m, kernel), bandwidth)
        return (a, c), None

    zero = jnp.zeros_like(kxx)
    (a, c), _ = jax.lax.scan(body, (zero, zero), jnp.swapaxes(xt, 0, 1))
    m = xt.shape[1]
    return kxx - (a + a.T) / m + c / m


def conditional_mmd(
    x: jax.Array,
    xt: jax.Array,
    z: jax.Array,
    w: jax.Array,
    bandwidth_x: jax.Array,
    bandwidth_z: jax.Array,
    kernel: K.Kernel,
) -> jax.Array:
    """The generator criterion ``D = (1/n_w) sum_{a != b} w_a w_b k_Z(z_a, z_b) U_ab``.

    ``U`` is :func:`centred_gram` of ``(x, xt)``: ``D`` estimates the squared MMD between the joint
    laws of ``(X, Z)`` and ``(X~, Z)`` under the product kernel ``k_X k_Z``, and is minimised (in
    expectation, up to the constant ``k(x, x)`` term) by the true conditional law.
    """
    _check_kernel_inputs(x, xt, kernel, bandwidth=bandwidth_x, bandwidth_name="bandwidth_x")
    n = np.shape(x)[0]
    check_array(z, "z", ndim=2)
    check_array(z, "z", shape=(n, None), dims="[n, dz]")
    check_array(w, "w", shape=(n,), dims="[n]")
    check_scalar(bandwidth_z, "bandwidth_z", 0.0, low_open=True)
    u = centred_gram(x, xt, bandwidth_x, kernel)
    wz = K.kernel_from_distance(K.pairwise_distance(z, z, kernel), bandwidth_z)
    n = x.shape[0]
    pair = w[:, None] * w[None, :] * (1.0 - jnp.eye(n, dtype=x.dtype))
    return jnp.sum(pair * wz * u) / jnp.maximum(w.sum(), 1.0)


# ---- neural nuisances ----------------------------------------------------------------------------


def _hidden_mlp(out_dim: int, hidden: int, slope: float, dropout: float) -> MLP:
    """One hidden layer: Dense(hidden) -> LeakyReLU(slope) -> Dropout -> Dense(out_dim).

    A :class:`jaxlab.core.nn.MLP` (layers ``Dense_0``, ``Dropout_0``, ``Dense_1``). The paper's
    generator (applied to ``[z, eta]``; official 128, 0.8, 0.05) and regression net (applied to
    ``z``; official 256, 0.696, 0.15) both have this shape.
    """
    return MLP(
        features=(hidden, out_dim),
        activation="leaky_relu",
        negative_slope=slope,
        dropout=dropout,
    )


def _l1(tree) -> jax.Array:
    return sum(jnp.sum(jnp.abs(leaf)) for leaf in jax.tree_util.tree_leaves(tree))


def _optimiser(fitter) -> optax.GradientTransformation:
    """Clip the gradient's global norm, then Adam with the weight decay ``fitter.decay`` names:

    - ``"coupled"``: torch's ``Adam(weight_decay=wd)`` (the official code): ``wd * theta`` is added
      to the clipped gradient before the moment estimates, so the decay is rescaled by Adam;
    - ``"decoupled"``: AdamW, ``-lr * wd * theta`` applied beside the Adam step.
    """
    if fitter.decay == "coupled":
        adam = optax.chain(
            optax.add_decayed_weights(fitter.weight_decay),
            optax.adam(fitter.lr, b1=fitter.b1, b2=fitter.b2),
        )
    else:
        adam = optax.adamw(fitter.lr, b1=fitter.b1, b2=fitter.b2, weight_decay=fitter.weight_decay)
    return optax.chain(optax.clip_by_global_norm(fitter.clip), adam)


class ScaledNet(NamedTuple):
    """Trained network parameters and the (masked) training moments its inputs/outputs use."""

    net: Any
    in_mean: jax.Array
    in_sd: jax.Array
    out_mean: jax.Array
    out_sd: jax.Array


@struct.dataclass
class GMMNGenerator:
    """The paper's conditional generator ``x~ = G(z, eta)``, trained by conditional MMD.

    Loss (spec section 2): ``lambda_1 D_G + lambda_2 D_L + lambda_3 ||theta||_1``, with ``D`` the
    :func:`conditional_mmd` under Gaussian (``D_G``) and Laplace (``D_L``) kernels (each divided
    by the batch's row count, as the official loss is by ``b``), ``M_train`` draws per training row,
    bandwidths computed once on the (weighted) training sample. The defaults are the official
    training budget and optimiser (``Ours_Pratical.ipynb``): 2000 steps = 1000 epochs of a
    shuffled loader with batch 128 and no ``drop_last`` (200 training rows: batches of 128 and
    72), gradient clipping at 0.5, then torch ``Adam(weight_decay=1e-5)``, whose decay is coupled
    (added to the clipped gradient; ``decay="decoupled"`` gives AdamW). Our choices where the
    official code differs: ``z`` and ``x`` are standardised with the training moments (the network
    works in standard units; ``sample`` maps back; the official code trains on the raw values,
    which are already standard in the Gaussian designs), the bandwidths come from the training
    rows only and off the diagonal (official: all ``n`` rows of the replicate, both folds,
    diagonal zeros included), and the L1 penalty covers the parameters the network uses (the
    official one also sums three unused layers). Dropout is on during training and off in
    ``sample``. Training is one ``lax.scan``; ``fit`` is pure, so ``vmap`` trains the generators of
    all folds (and replicates) in one call.

    Attributes:
      hidden, noise_dim, noise_std, slope, dropout: the network and its noise ``eta ~ N(0,
        noise_std^2 I)`` (official: 128, 50, ``1/sqrt(3)``, 0.8, 0.05).
      steps, train_samples: optimiser steps and draws per row in the loss (official 2000, 10).
      batch_size: rows per step (``None`` = full batch). The Laplace term costs ``O(b^2 M d)`` per
        step; the official code uses 128.
      batching: ``"epoch"`` (the official loader: each epoch one shuffle of the weighted rows cut
        into batches of ``batch_size`` and a last smaller one; ``steps`` must be a whole number of
        epochs) or ``"draw"`` (every step a fresh uniform subset of ``batch_size`` rows).
      lr, b1, b2, weight_decay, clip: the optimiser (official: 4.95e-3, 0.5, 0.999, 1e-5, 0.5).
      decay: ``"coupled"`` (torch ``Adam(weight_decay)``, official) or ``"decoupled"`` (AdamW).
      lambda_gaussian, lambda_laplace, lambda_l1: loss weights (official: 1, 0.25, 1e-3).
      standardise: standardise ``z`` and ``x`` with the training moments (off: raw values, as the
        official code; use it for inputs on a common scale such as pixels, where a rarely lit
        pixel's tiny training SD would blow its test values far out of the training range).
    """

    hidden: int = struct.field(pytree_node=False, default=128)
    noise_dim: int = struct.field(pytree_node=False, default=50)
    noise_std: float = struct.field(pytree_node=False, default=3.0**-0.5)
    slope: float = struct.field(pytree_node=False, default=0.8)
    dropout: float = struct.field(pytree_node=False, default=0.05)
    steps: int = struct.field(pytree_node=False, default=2000)
    train_samples: int = struct.field(pytree_node=False, default=10)
    batch_size: int | None = struct.field(pytree_node=False, default=128)
    batching: str = struct.field(pytree_node=False, default="epoch")
    lr: float = struct.field(pytree_node=False, default=4.95e-3)
    b1: float = struct.field(pytree_node=False, default=0.5)
    b2: float = struct.field(pytree_node=False, default=0.999)
    weight_decay: float = struct.field(pytree_node=False, default=1e-5)
    decay: str = struct.field(pytree_node=False, default="coupled")
    clip: float = struct.field(pytree_node=False, default=0.5)
    lambda_gaussian: float = struct.field(pytree_node=False, default=1.0)
    lambda_laplace: float = struct.field(pytree_node=False, default=0.25)
    lambda_l1: float = struct.field(pytree_node=False, default=1e-3)
    standardise: bool = struct.field(pytree_node=False, default=True)

    def __post_init__(self):
        _check_network(self)
        _check_bool(self.standardise, "standardise")
        check_int(self.noise_dim, "noise_dim", minimum=1)
        check_scalar(self.noise_std, "noise_std", 0.0, low_open=True)
        check_int(self.train_samples, "train_samples", minimum=1)
        if self.batch_size is not None:
            check_int(self.batch_size, "batch_size", minimum=1)
        check_choice(self.batching, "batching", ("epoch", "draw"))
        _check_adamw(self)
        for name in ("lambda_gaussian", "lambda_laplace", "lambda_l1"):
            check_scalar(getattr(self, name), name, 0.0)

    def network(self, out_dim: int) -> MLP:
        return _hidden_mlp(out_dim, self.hidden, self.slope, self.dropout)

    def loss(self, net_params, key, xs, zs, w, bandwidths, out_dim):
        """The training loss on standardised ``xs [n, dx]``, ``zs [n, dz]`` (dropout on)."""
        k_eta, k_drop = jax.random.split(key)
        n = zs.shape[0]
        eta = self.noise_std * jax.random.normal(
            k_eta, (n, self.train_samples, self.noise_dim), zs.dtype
        )
        zrep = jnp.broadcast_to(zs[:, None, :], (n, self.train_samples, zs.shape[1]))
        xt = self.network(out_dim).apply(
            {"params": net_params},
            jnp.concatenate([zrep, eta], -1),
            deterministic=False,
            rngs={"dropout": k_drop},
        )
        bxg, bzg, bxl, bzl = bandwidths
        d_g = conditional_mmd(xs, xt, zs, w, bxg, bzg, "gaussian")
        d_l = conditional_mmd(xs, xt, zs, w, bxl, bzl, "laplace")
        return (
            self.lambda_gaussian * d_g
            + self.lambda_laplace * d_l
            + self.lambda_l1 * _l1(net_params)
        )

    def fit(self, key, x, z, w) -> ScaledNet:
        _check_fit_data(x, z, w, "x")
        key = check_key(key, "key")
        out_dim = x.shape[1]
        z_mean, z_sd = K.masked_moments(z, w)
        x_mean, x_sd = K.masked_moments(x, w)
        if not self.standardise:
            z_mean, x_mean = jnp.zeros_like(z_mean), jnp.zeros_like(x_mean)
            z_sd, x_sd = jnp.ones_like(z_sd), jnp.ones_like(x_sd)
        zs, xs = (z - z_mean[None, :]) / z_sd[None, :], (x - x_mean[None, :]) / x_sd[None, :]
        mask = w > 0
        # (Gaussian x, Gaussian z, Laplace x, Laplace z), as `loss` unpacks them
        bandwidths = tuple(
            K.median_bandwidth(K.pairwise_distance(a, a, kind), mask, kind)
            for kind in ("gaussian", "laplace")
            for a in (xs, zs)
        )
        k_init, k_train = jax.random.split(key)
        net = self.network(out_dim)
        params = net.init(k_init, jnp.zeros((1, z.shape[1] + self.noise_dim), z.dtype))["params"]
        opt = _optimiser(self)
        n = w.shape[0]
        b = self._batch(n)
        if self.batching == "epoch" and b < n:
            params = self._fit_epochs(params, opt, k_train, xs, zs, w, bandwidths)
            return ScaledNet(params, z_mean, z_sd, x_mean, x_sd)

        def loss(p, k):  # step t's key: split(k_train, steps)[t], as `fit` hands it out
            k, k_batch = jax.random.split(k)
            if b >= n:
                xb, zb, wb = xs, zs, w
            else:  # a uniform subset of the weighted rows (padding only if too few)
                score = jnp.where(w > 0, jax.random.uniform(k_batch, w.shape), -1.0)
                idx = jax.lax.top_k(score, b)[1]
                xb, zb, wb = xs[idx], zs[idx], w[idx]
            return self.loss(p, k, xb, zb, wb, bandwidths, out_dim)

        params, _ = fit(loss, params, opt, self.steps, key=k_train)
        return ScaledNet(params, z_mean, z_sd, x_mean, x_sd)

    def _batch(self, n: int) -> int:
        """Rows per step over ``n`` training rows (``batch_size``, at most ``n``)."""
        return n if self.batch_size is None else min(self.batch_size, n)

    def epoch_batches(self, n: int) -> tuple[int, ...]:
        """The batch sizes of one epoch over ``n`` rows: full batches, then the remainder."""
        b = self._batch(n)
        return (b,) * (n // b) + ((n % b,) if n % b else ())

    def _fit_epochs(self, params, opt, key, xs, zs, w, bandwidths):
        """``steps / len(epoch_batches)`` epochs; each shuffles the weighted rows (padding last) and
        takes one step per batch, in order (batch shapes are static: the last one is smaller)."""
        sizes = self.epoch_batches(w.shape[0])
        if self.steps % len(sizes):
            raise ValueError(
                f"GMMNGenerator: `steps`={self.steps} is not a whole number of epochs of "
                f"{len(sizes)} batches ({w.shape[0]} rows, batch_size={sizes[0]}) under "
                f'batching="epoch".'
            )
        value_and_grad = jax.value_and_grad(self.loss)
        starts = np.cumsum((0, *sizes))

        def epoch(carry, k):
            p, s = carry
            k_perm, *k_steps = jax.random.split(k, len(sizes) + 1)
            order = jnp.argsort(jnp.where(w > 0, jax.random.uniform(k_perm, w.shape), 2.0))
            for start, size, k_t in zip(starts[:-1], sizes, k_steps, strict=True):
                idx = order[start : start + size]
                _, g = value_and_grad(p, k_t, xs[idx], zs[idx], w[idx], bandwidths, xs.shape[1])
                updates, s = opt.update(g, s, p)
                p = optax.apply_updates(p, updates)
            return (p, s), None

        epochs = self.steps // len(sizes)
        keys = jax.random.split(key, epochs)
        (params, _), _ = jax.lax.scan(epoch, (params, opt.init(params)), keys)
        return params

    def sample(self, params: ScaledNet, key, z, num_samples):
        _check_inputs(z, np.shape(params.in_mean)[0])
        key = check_key(key, "key")
        num_samples = check_int(num_samples, "num_samples", minimum=1)
        zs = (z - params.in_mean[None, :]) / params.in_sd[None, :]
        eta = self.noise_std * jax.random.normal(
            key, (z.shape[0], num_samples, self.noise_dim), z.dtype
        )
        zrep = jnp.broadcast_to(zs[:, None, :], (z.shape[0], num_samples, z.shape[1]))
        out_dim = params.out_mean.shape[0]
        inputs = jnp.concatenate([zrep, eta], -1)
        xt = self.network(out_dim).apply({"params": params.net}, inputs, deterministic=True)
        return params.out_mean[None, None, :] + params.out_sd[None, None, :] * xt


@struct.dataclass
class MLPRegressor:
    """The paper's regression net ``m_hat``: MLP, loss ``MSE + l1 ||theta||_1``, full-batch Adam.

    Official settings: hidden 256, LeakyReLU(0.696), dropout 0.15, ``l1 = 0.02``, clip 0.5, then
    torch ``Adam`` (lr 2.2e-4, betas (0.5, 0.999), weight decay 1.05e-4 coupled: ``decay``), 1000
    full-batch steps. ``z`` and ``y`` are standardised with the weighted training moments (our
    choice; predictions map back; the official code fits the raw values).
    """

    hidden: int = struct.field(pytree_node=False, default=256)
    slope: float = struct.field(pytree_node=False, default=0.696)
    dropout: float = struct.field(pytree_node=False, default=0.15)
    steps: int = struct.field(pytree_node=False, default=1000)
    l1: float = struct.field(pytree_node=False, default=0.02)
    lr: float = struct.field(pytree_node=False, default=2.2e-4)
    b1: float = struct.field(pytree_node=False, default=0.5)
    b2: float = struct.field(pytree_node=False, default=0.999)
    weight_decay: float = struct.field(pytree_node=False, default=1.05e-4)
    decay: str = struct.field(pytree_node=False, default="coupled")
    clip: float = struct.field(pytree_node=False, default=0.5)

    def __post_init__(self):
        _check_network(self)
        check_scalar(self.l1, "l1", 0.0)
        _check_adamw(self)

    def network(self, out_dim: int) -> MLP:
        return _hidden_mlp(out_dim, self.hidden, self.slope, self.dropout)

    def fit(self, key, y, z, w) -> ScaledNet:
        _check_fit_data(y, z, w, "y")
        key = check_key(key, "key")
        z_mean, z_sd = K.masked_moments(z, w)
        y_mean, y_sd = K.masked_moments(y, w)
        zs, ys = (z - z_mean[None, :]) / z_sd[None, :], (y - y_mean[None, :]) / y_sd[None, :]
        net = self.network(y.shape[1])
        k_init, k_train = jax.random.split(key)
        params = net.init(k_init, zs[:1])["params"]
        opt = _optimiser(self)
        wsum = jnp.maximum(w.sum(), 1.0)

        def loss(p, k):
            pred = net.apply({"params": p}, zs, deterministic=False, rngs={"dropout": k})
            mse = jnp.sum(w[:, None] * (pred - ys) ** 2) / (wsum * y.shape[1])
            return mse + self.l1 * _l1(p)

        params, _ = fit(loss, params, opt, self.steps, key=k_train)
        return ScaledNet(params, z_mean, z_sd, y_mean, y_sd)

    def predict(self, params: ScaledNet, z):
        _check_inputs(z, np.shape(params.in_mean)[0])
        zs = (z - params.in_mean[None, :]) / params.in_sd[None, :]
        out = self.network(params.out_mean.shape[0]).apply({"params": params.net}, zs)
        return params.out_mean[None, :] + params.out_sd[None, :] * out


class SoftmaxParams(NamedTuple):
    """``W [dz, dy]``, ``b [dy]`` and the (masked) training moments of ``z``."""

    weight: jax.Array
    bias: jax.Array
    z_mean: jax.Array
    z_sd: jax.Array


@struct.dataclass
class SoftmaxRegressor:
    """``m(z) = softmax(W z_std + b)`` for responses on the simplex (one-hot labels, probabilities).

    Fitted by the soft-label cross-entropy
    ``-(1/n_w) sum_i w_i sum_c y_ic log m_c(z_i) + l2 ||W||^2``
    (its population minimiser is ``E[Y | Z]`` whenever that lies in the model), full-batch Adam in
    one ``lax.scan``; ``z`` is standardised with the weighted training moments. In the imaging study
    it plays the paper's classifier trained on the masked images.

    Attributes:
      l2, steps, lr: penalty on ``W``, Adam steps and learning rate.
      standardise: standardise ``z`` first (off for inputs on a common scale such as pixels, where
        standardising blows up rarely-lit pixels: on the digits study the test-set MSE to the true
        probabilities was 0.0038 raw vs 0.0044 at the best penalty standardised).
    """

    l2: float = struct.field(pytree_node=False, default=1e-3)
    steps: int = struct.field(pytree_node=False, default=1000)
    lr: float = struct.field(pytree_node=False, default=0.05)
    standardise: bool = struct.field(pytree_node=False, default=True)

    def __post_init__(self):
        check_scalar(self.l2, "l2", 0.0)
        check_int(self.steps, "steps", minimum=0)
        check_scalar(self.lr, "lr", 0.0, low_open=True)
        _check_bool(self.standardise, "standardise")

    def fit(self, key, y, z, w) -> SoftmaxParams:
        del key
        _check_fit_data(y, z, w, "y")
        z_mean, z_sd = K.masked_moments(z, w)
        if not self.standardise:
            z_mean, z_sd = jnp.zeros_like(z_mean), jnp.ones_like(z_sd)
        zs = (z - z_mean[None, :]) / z_sd[None, :]
        wsum = jnp.maximum(w.sum(), 1.0)
        params = (jnp.zeros((z.shape[1], y.shape[1]), z.dtype), jnp.zeros((y.shape[1],), z.dtype))
        opt = optax.adam(self.lr)

        def loss(p):
            logp = jax.nn.log_softmax(zs @ p[0] + p[1][None, :], -1)
            return -jnp.sum(w[:, None] * y * logp) / wsum + self.l2 * jnp.sum(p[0] ** 2)

        params, _ = fit(loss, params, opt, self.steps)
        return SoftmaxParams(*params, z_mean, z_sd)

    def predict(self, params: SoftmaxParams, z):
        _check_inputs(z, np.shape(params.weight)[0])
        zs = (z - params.z_mean[None, :]) / params.z_sd[None, :]
        return jax.nn.softmax(zs @ params.weight + params.bias[None, :], -1)


# ---- combinators ---------------------------------------------------------------------------------


@struct.dataclass
class ColumnBlocks:
    """One regressor per block of ``y``'s columns, predictions concatenated.

    ``regressors[i]`` is fitted on columns ``[e_i, e_{i+1})`` of ``y`` with ``e = cumsum((0,
    *sizes))`` (``sum(sizes)`` must be ``y``'s width), with key ``split(key, len(sizes))[i]``.
    Several responses then share one cross-fit (one generator per fold) while each gets its own
    regression, e.g. a fitted and an exact regression of the same response side by side.

    Attributes:
      regressors: a tuple of regressors (pytree children), one per block.
      sizes: the blocks' widths (static), one per regressor.
    """

    regressors: tuple
    sizes: tuple[int, ...] = struct.field(pytree_node=False)

    def __post_init__(self):
        if not isinstance(self.sizes, tuple) or not self.sizes:
            raise ValueError(f"`sizes` must be a non-empty tuple of ints, got {self.sizes!r}.")
        for i, size in enumerate(self.sizes):
            check_int(size, f"sizes[{i}]", minimum=1)
        # `regressors` is a pytree child: on unflattening it may hold placeholders, not a tuple
        if isinstance(self.regressors, tuple | list):
            if len(self.regressors) != len(self.sizes):
                raise ValueError(
                    f"`regressors` and `sizes` must have the same length, got "
                    f"{len(self.regressors)} and {len(self.sizes)}."
                )
            for i, reg in enumerate(self.regressors):
                _check_methods(reg, f"regressors[{i}]", "predict")
        elif isinstance(self.regressors, str | float | np.ndarray):
            raise TypeError(f"`regressors` must be a tuple of regressors, got {self.regressors!r}.")

    def _split(self, y):
        edges = np.cumsum((0, *self.sizes))
        if y.shape[1] != edges[-1]:
            raise ValueError(
                f"ColumnBlocks: `y` has {y.shape[1]} columns but `sizes` {self.sizes} sum to "
                f"{edges[-1]}."
            )
        return [y[:, a:b] for a, b in zip(edges[:-1], edges[1:], strict=True)]

    def fit(self, key, y, z, w):
        keys = jax.random.split(key, len(self.sizes))
        return tuple(
            r.fit(k, yb, z, w)
            for r, k, yb in zip(self.regressors, keys, self._split(y), strict=True)
        )

    def predict(self, params, z):
        return jnp.concatenate(
            [r.predict(p, z) for r, p in zip(self.regressors, params, strict=True)], -1
        )

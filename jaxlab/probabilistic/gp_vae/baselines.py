"""Baselines for DGBFGP: covariate MLP regression, an amortised CVAE and an exact GP-prior VAE.

All three share the DGBFGP decoder architecture (:meth:`~.model.GPVAEConfig.decoder`: a
:class:`jaxlab.core.nn.MLP`, ReLU, dropout after each hidden layer; the encoders are ReLU MLPs
too) and are trained with Adam inside ``jit`` through :mod:`jaxlab.core.training`
(:func:`~jaxlab.core.training.minibatch_epochs` for the MLP and the CVAE;
:func:`~jaxlab.core.training.fit`, one full-batch step per epoch, for the exact GP-prior VAE,
whose prior couples all ``N`` training points).

- :func:`covariate_features`: ``[t, age, ..., one-hot(subject)]`` inputs for the MLP and the CVAE;
  the subject one-hot is zero for new subjects (population-level prediction).
- MLP regression ``y = h(x)`` (squared error): the honesty baseline.
- CVAE: encoder ``q(z | y, x)``, learned prior ``p(z | x)``, Gaussian decoder; predictions decode
  the prior mean.
- Exact GP-prior VAE (LVAE-style): amortised encoder ``q(z_i | y_i)`` and an additive GP prior on
  each latent dimension with the *exact* kernel of the same components over all training points.
  Its KL needs a Cholesky of the ``N x N`` kernel, so an epoch costs ``O(N^3)``: the scaling the
  basis-function model removes. Prediction: the GP posterior mean of ``z`` at new covariates
  given the encoder means (noise: their variances), decoded.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlab.core.checks import (
    check_array,
    check_bool,
    check_int,
    check_key,
    check_scalar,
    is_concrete,
)
from jaxlab.core.nn import MLP
from jaxlab.core.training import fit, minibatch_epochs
from jaxlab.probabilistic.gp_vae.model import (
    Component,
    Covariates,
    _check_components,
    check_covariates,
)

VY_FLOOR = math.exp(-8)

__all__ = [
    "CVAE",
    "ExactGPVAE",
    "covariate_features",
    "exact_kernel",
    "fit_cvae",
    "fit_exact_gpvae",
    "fit_regression",
    "gp_prior_kl",
]


def covariate_features(cov: Covariates, n_subjects: int, subject_column: int, new_subjects=False):
    """``[N, Kc + Kd - 1 + P]``: continuous and non-subject categorical covariates, one-hot id."""
    if not isinstance(cov, Covariates):
        raise TypeError(f"`cov` must be a Covariates, got {type(cov).__name__}.")
    n_subjects = check_int(n_subjects, "n_subjects", minimum=1)
    check_array(cov.continuous, "cov.continuous", ndim=2)
    check_array(cov.categorical, "cov.categorical", ndim=2, kind="int")
    subject_column = check_int(
        subject_column, "subject_column", minimum=0, maximum=np.shape(cov.categorical)[1] - 1
    )
    check_bool(new_subjects, "new_subjects")
    ids = cov.categorical[:, subject_column]
    if not isinstance(ids, jax.core.Tracer) and np.size(ids):
        a = np.asarray(ids)
        if a.min() < 0 or a.max() >= n_subjects:
            raise ValueError(
                f"`cov.categorical` column {subject_column} (the subject id) must lie in "
                f"[0, n_subjects={n_subjects}); got [{a.min()}, {a.max()}]."
            )
    others = [j for j in range(cov.categorical.shape[1]) if j != subject_column]
    onehot = jax.nn.one_hot(cov.categorical[:, subject_column], n_subjects)
    if new_subjects:
        onehot = jnp.zeros_like(onehot)
    cats = cov.categorical[:, others].astype(jnp.float32)
    return jnp.concatenate([cov.continuous.astype(jnp.float32), cats, onehot], axis=1)


def _gaussian_nll(y, mean, vy):
    vy = jnp.broadcast_to(vy, y.shape)
    return 0.5 * jnp.sum((y - mean) ** 2 / vy + jnp.log(2 * jnp.pi * vy), axis=-1)


def _minibatch_adam(loss_fn, params, data, key, epochs, batch_size, learning_rate):
    """Adam over shuffled minibatches of ``data`` (a tuple of ``[N, ...]`` arrays), all in jit.

    :func:`jaxlab.core.training.minibatch_epochs`: epoch ``e`` shuffles with
    ``split(key, epochs)[e]`` and batch ``i`` gets ``fold_in(k_e, i)``.
    """
    run = jax.jit(
        lambda p, d, k: minibatch_epochs(
            loss_fn, p, optax.adam(learning_rate), d, k, epochs=epochs, batch_size=batch_size
        )
    )
    return run(params, tuple(data), key)


class Regression(NamedTuple):
    """A trained covariate -> image MLP; :meth:`predict` maps features ``[N, F]`` to ``[N, D]``."""

    net: MLP
    params: dict

    def predict(self, feats):
        return self.net.apply(self.params, feats)


def _check_fit(key, feats, y, hidden, epochs, batch_size, learning_rate):
    """The shared checks of the baselines' ``fit_*``; returns the typed key."""
    key = check_key(key)
    check_array(y, "y", ndim=2, dims="[N, D]")
    n = np.shape(y)[0]
    if n < 1 or np.shape(y)[1] < 1:
        raise ValueError(f"`y` must be [N, D] with N, D >= 1, got shape {np.shape(y)}.")
    if feats is not None:
        check_array(feats, "feats", ndim=2, dims="[N, F]")
        if np.shape(feats)[0] != n:
            raise ValueError(f"`feats` must have the N = {n} rows of `y`, got shape "
                             f"{np.shape(feats)}.")  # fmt: skip
    if isinstance(hidden, int) or not isinstance(hidden, list | tuple):
        raise ValueError(f"`hidden` must be a tuple of ints >= 1, got {hidden!r}.")
    for h in hidden:
        check_int(h, "hidden", minimum=1)
    check_int(epochs, "epochs", minimum=0)
    if batch_size is not None:
        check_int(batch_size, "batch_size", minimum=1)  # above N: one batch of all rows
    check_scalar(learning_rate, "learning_rate", 0.0, low_open=True)
    return key


def fit_regression(key, feats, y, hidden=(64, 64), epochs=60, batch_size=128, learning_rate=5e-3):
    """Covariate -> image MLP with squared error. Returns ``(Regression, losses)``."""
    key = _check_fit(key, feats, y, hidden, epochs, batch_size, learning_rate)
    net = MLP((*hidden, y.shape[1]))
    k_init, k_run = jax.random.split(key)
    params = net.init(k_init, feats[:1])
    loss = lambda p, b, k: jnp.mean(jnp.sum((net.apply(p, b[0]) - b[1]) ** 2, axis=-1))  # noqa: E731
    params, losses = _minibatch_adam(
        loss, params, (feats, y), k_run, epochs, batch_size, learning_rate
    )
    return Regression(net, params), losses


class CVAE(nn.Module):
    """Conditional VAE: ``q(z | y, x)``, ``p(z | x)``, ``p(y | z)`` with ``v_y >= floor``."""

    latent_dim: int
    output_dim: int
    hidden: tuple[int, ...] = (64, 64)
    dropout: float = 0.1
    vy_floor: float = VY_FLOOR

    def setup(self):
        self.encoder = MLP((*self.hidden, 2 * self.latent_dim))
        self.prior = MLP((*self.hidden, 2 * self.latent_dim))
        self.decoder = MLP((*self.hidden, self.output_dim), dropout=self.dropout)
        self.vy_raw = self.param("vy_raw", nn.initializers.zeros, (self.output_dim,))

    def _gauss(self, net, inp):
        mu, log_sd = jnp.split(net(inp), 2, axis=-1)
        return mu, jnp.exp(log_sd)

    def __call__(self, y, x, key, deterministic=False):
        """Negative ELBO per datum ``[b]`` (one reparameterised sample)."""
        mu_q, sd_q = self._gauss(self.encoder, jnp.concatenate([y, x], axis=-1))
        mu_p, sd_p = self._gauss(self.prior, x)
        z = mu_q + sd_q * jax.random.normal(key, mu_q.shape)
        vy = jax.nn.softplus(self.vy_raw) + self.vy_floor
        rec = _gaussian_nll(y, self.decoder(z, deterministic=deterministic), vy[None, :])
        kl = jnp.sum(
            jnp.log(sd_p / sd_q) + (sd_q**2 + (mu_q - mu_p) ** 2) / (2 * sd_p**2) - 0.5, axis=-1
        )
        return rec + kl

    def predict(self, x):
        mu_p, _ = self._gauss(self.prior, x)
        return self.decoder(mu_p, deterministic=True)


def fit_cvae(
    key, feats, y, latent_dim=8, hidden=(64, 64), dropout=0.1, epochs=60, batch_size=128,
    learning_rate=5e-3,
):  # fmt: skip
    """Train a :class:`CVAE`. Returns ``(predict(feats) -> [N, D], losses)``."""
    key = _check_fit(key, feats, y, hidden, epochs, batch_size, learning_rate)
    check_int(latent_dim, "latent_dim", minimum=1)
    check_scalar(dropout, "dropout", 0.0, 1.0, high_open=True)
    model = CVAE(latent_dim, y.shape[1], tuple(hidden), dropout)
    k_init, k_run = jax.random.split(key)
    params = model.init({"params": k_init, "dropout": k_init}, y[:1], feats[:1], k_init)

    def loss(p, b, k):
        k1, k2 = jax.random.split(k)
        return jnp.mean(model.apply(p, b[1], b[0], k1, rngs={"dropout": k2}))

    params, losses = _minibatch_adam(
        loss, params, (feats, y), k_run, epochs, batch_size, learning_rate
    )
    return (lambda x: model.apply(params, x, method=CVAE.predict)), losses


def _se(a, b, alpha, lengthscale):
    return alpha**2 * jnp.exp(-0.5 * ((a[:, None] - b[None, :]) / lengthscale) ** 2)


def exact_kernel(
    components: Sequence[Component], cov1: Covariates, cov2: Covariates, hyper: dict
) -> jax.Array:
    """The exact additive kernel ``sum_r k_r(x, x')`` that the basis model approximates:
    ``[N1, N2]``. ``hyper[name] = (log alpha, log l)`` for the SE kinds."""
    components = _check_components(components)
    check_covariates(cov1, components)
    check_covariates(cov2, components)
    if not isinstance(hyper, dict):
        raise TypeError(f"`hyper` must be a dict {{name: (log alpha, log l)}}, got "
                        f"{type(hyper).__name__}.")  # fmt: skip
    for c in components:
        if c.has_hyperparameters:
            if c.name not in hyper or len(hyper[c.name]) != 2:
                raise ValueError(f"`hyper` needs (log alpha, log l) for component {c.name!r}.")
            for h in hyper[c.name]:
                check_array(h, f"hyper[{c.name!r}]", ndim=0)
    k = 0.0
    for c in components:
        if c.kind == "binary":
            a = 1.0 - 2.0 * cov1.categorical[:, c.categorical].astype(jnp.float32)
            b = 1.0 - 2.0 * cov2.categorical[:, c.categorical].astype(jnp.float32)
            k = k + 2.0 * a[:, None] * b[None, :]
            continue
        if c.kind in ("categorical", "se_x_categorical"):
            same = (
                cov1.categorical[:, c.categorical][:, None]
                == cov2.categorical[:, c.categorical][None, :]
            )
            delta = same.astype(jnp.float32)
        else:
            delta = 1.0
        if c.kind == "categorical":
            k = k + delta
        else:
            la, ll = hyper[c.name]
            t1, t2 = cov1.continuous[:, c.continuous], cov2.continuous[:, c.continuous]
            k = k + _se(t1, t2, jnp.exp(la), jnp.exp(ll)) * delta
    return k


class ExactGPVAE(NamedTuple):
    """Trained exact GP-prior VAE; :meth:`predict` is the GP posterior mean decoded."""

    components: tuple[Component, ...]
    params: dict
    decoder: MLP
    encoder: MLP
    train_cov: Covariates
    train_y: jax.Array
    jitter: float

    def predict(self, cov: Covariates) -> jax.Array:
        p = self.params
        mu, log_sd = jnp.split(self.encoder.apply(p["encoder"], self.train_y), 2, axis=-1)
        k = exact_kernel(self.components, self.train_cov, self.train_cov, p["hyper"])
        k_star = exact_kernel(self.components, cov, self.train_cov, p["hyper"])

        def one_dim(m, var):
            a = k + jnp.diag(var + self.jitter)
            return k_star @ jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(a), m)

        z = jax.vmap(one_dim, in_axes=(1, 1), out_axes=1)(mu, jnp.exp(2 * log_sd))
        return self.decoder.apply(p["decoder"], z, deterministic=True)


def gp_prior_kl(kern: jax.Array, mu: jax.Array, log_sd: jax.Array) -> jax.Array:
    """``sum_l KL(N(mu_l, diag e^(2 log_sd_l)) || N(0, K))``, ``mu, log_sd: [N, L]``, ``K: [N, N]``.

    ``KL_l = (tr(K^-1 S_l) + mu_l^T K^-1 mu_l - N + log|K| - log|S_l|) / 2``, through the Cholesky
    factor ``K = C C^T`` and its triangular inverse: ``diag(K^-1) = colsum(C^-1 ** 2)``,
    ``mu^T K^-1 mu = ||C^-1 mu||^2``. ``O(N^3)``.
    """
    check_array(mu, "mu", ndim=2, dims="[N, L]")
    check_array(log_sd, "log_sd", shape=np.shape(mu), dims="[N, L] like `mu`")
    n = np.shape(mu)[0]
    check_array(kern, "kern", shape=(n, n), dims="[N, N]")
    n, latent_dim = mu.shape
    chol = jnp.linalg.cholesky(kern)
    if is_concrete(chol) and not bool(jnp.all(jnp.isfinite(chol))):
        raise ValueError("`kern` must be symmetric positive definite (its Cholesky factor failed).")
    chol_inv = jax.scipy.linalg.solve_triangular(chol, jnp.eye(n, dtype=kern.dtype), lower=True)
    logdet = 2.0 * jnp.sum(jnp.log(jnp.diag(chol)))
    trace = jnp.sum(jnp.sum(chol_inv**2, axis=0)[:, None] * jnp.exp(2 * log_sd))
    return 0.5 * (
        trace + jnp.sum((chol_inv @ mu) ** 2) - n * latent_dim + latent_dim * logdet
        - jnp.sum(2 * log_sd)
    )  # fmt: skip


def fit_exact_gpvae(
    key, components, cov: Covariates, y, latent_dim=8, hidden=(64, 64), epochs=300,
    learning_rate=5e-3, jitter=1e-3, vy_floor=VY_FLOOR,
):  # fmt: skip
    """Train the exact GP-prior VAE, one full-batch step per epoch (the prior couples all ``N``).

    Negative ELBO per datum: ``[sum_i E_q -log p(y_i | z_i) + sum_l KL(q(z_l) || N(0, K))] / N``
    with ``q(z_l) = N(mu_l, diag sd_l^2)`` from the encoder and the KL of :func:`gp_prior_kl`;
    ``K`` is the exact additive kernel (+ ``jitter I``).
    Training is :func:`jaxlab.core.training.fit` with Adam: step ``t`` draws its latent sample with
    ``split(k_run, epochs)[t]``.
    Returns ``(ExactGPVAE, losses [epochs], epoch)`` where ``epoch(params, key) -> (params,
    loss [1])`` is one jitted full-batch epoch (the same ``fit``, one step from a fresh Adam
    state), for timing; ``epochs=0`` only builds it (the model then holds the initial parameters).
    """
    key = _check_fit(key, None, y, hidden, epochs, None, learning_rate)
    components = _check_components(components)
    check_covariates(cov, components)
    if cov.num_rows != np.shape(y)[0]:
        raise ValueError(f"`cov` has {cov.num_rows} rows, `y` {np.shape(y)[0]}.")
    check_int(latent_dim, "latent_dim", minimum=1)
    check_scalar(jitter, "jitter", 0.0, low_open=True)
    check_scalar(vy_floor, "vy_floor", 0.0, low_open=True)
    n, d = y.shape
    encoder = MLP((*hidden, 2 * latent_dim))
    decoder = MLP((*hidden, d))
    k1, k2, k_run = jax.random.split(key, 3)
    hyper = {
        c.name: (jnp.zeros((), jnp.float32), jnp.log(jnp.asarray(0.5, jnp.float32)))
        for c in components
        if c.has_hyperparameters
    }
    params = {
        "encoder": encoder.init(k1, y[:1]),
        "decoder": decoder.init(k2, jnp.zeros((1, latent_dim))),
        "hyper": hyper,
        "vy_raw": jnp.zeros(d),
    }
    opt = optax.adam(learning_rate)
    eye = jnp.eye(n)

    def loss_fn(p, k):
        mu, log_sd = jnp.split(encoder.apply(p["encoder"], y), 2, axis=-1)  # [N, L]
        z = mu + jnp.exp(log_sd) * jax.random.normal(k, mu.shape)
        vy = jax.nn.softplus(p["vy_raw"]) + vy_floor
        rec = jnp.sum(_gaussian_nll(y, decoder.apply(p["decoder"], z), vy[None, :]))
        kl = gp_prior_kl(exact_kernel(components, cov, cov, p["hyper"]) + jitter * eye, mu, log_sd)
        return (rec + kl) / n

    epoch = jax.jit(lambda p, k: fit(loss_fn, p, opt, 1, key=k))
    losses = jnp.zeros((0,))
    if epochs > 0:
        params, losses = jax.jit(lambda p, k: fit(loss_fn, p, opt, epochs, key=k))(params, k_run)
    model = ExactGPVAE(tuple(components), params, decoder, encoder, cov, y, jitter)
    return model, losses, epoch

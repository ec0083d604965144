"""DGBFGP: a deep generative model with an additive basis-function GP prior, in NumPyro.

Generative model for ``N`` observations ``y_i in R^D`` with covariates ``x_i``::

    log alpha_r, log l_r ~ N(0, 1)                          (SE and SE x categorical components)
    A_r ~ N(0, S_r(alpha_r, l_r))                            (basis weights, [M_r, L] or [C, M, L])
    z_i = sum_r Phi_r(x_i) A_r                               ([L]; gathers for one-hot components)
    y_i ~ N(g_psi(z_i), diag(v_y))                           (Flax MLP decoder, v_y >= exp(-8))

There is no encoder: ``q(A_r) = N(mu, softplus(rho)^2)`` and ``q(log alpha_r), q(log l_r)`` are
global mean-field Gaussians, the decoder and ``v_y`` are point estimates. ``z`` for any covariate
vector is a function of the global weights, which is what makes conditional generation for new
covariates (future times, new subjects) direct.

Objective (``objective="elbo"``, the default) is the exact ELBO with minibatches scaled by
``N / |b|``: ``sum_i E_q log p(y_i | z_i) - sum_r E_q(theta) KL(q(A_r) || p(A_r | theta_r)) -
sum_r KL(q(theta_r) || p(theta_r))``, the KL of ``A`` in closed form given reparameterised
samples of ``theta`` (``numpyro.infer.TraceMeanField_ELBO``). ``objective="official"`` reproduces
the official code's tempered loss up to its MSE-vs-NLL choice: the mean (not the sum) of the
batch log-likelihood plus ``kl_weight * KL_r / #weights_r`` for the weights and the
hyperparameter KLs unscaled.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.contrib.module import flax_module

from jaxlab.core.checks import (
    check_array,
    check_bool,
    check_choice,
    check_int,
    check_rank,
    check_scalar,
    is_concrete,
)
from jaxlab.core.nn import MLP
from jaxlab.probabilistic.gp_vae.bases import (
    binary_features,
    hs_basis,
    hs_sqrt_eigenvalues,
    se_spectral_density,
)

__all__ = [
    "Component",
    "Covariates",
    "GPVAEConfig",
    "GPVAEModel",
    "binary",
    "categorical",
    "check_covariates",
    "component_latents",
    "latent",
    "latent_dense",
    "make_model",
    "prior_scales",
    "se",
    "se_x_categorical",
]

Kind = Literal["se", "binary", "categorical", "se_x_categorical"]
KINDS = ("se", "binary", "categorical", "se_x_categorical")


@dataclasses.dataclass(frozen=True)
class Component:
    """One additive component of the latent GP.

    Attributes:
      name: unique name (parameter and site prefix).
      kind: ``"se"`` (continuous covariate), ``"binary"``, ``"categorical"`` (one-hot, also the
        subject id) or ``"se_x_categorical"`` (SE of a continuous covariate times the delta kernel
        of a categorical one: ``k = k_SE(t, t') 1[c = c']``; with the subject id as ``c`` these are
        subject-specific smooth trajectories).
      continuous: column of ``Covariates.continuous`` used (SE kinds).
      categorical: column of ``Covariates.categorical`` used (the other kinds).
      levels: number of categories ``C`` (categorical kinds).
      num_basis: ``M``, Hilbert-space basis size (SE kinds).
      boundary: ``J``, the basis domain is ``[-J, J]`` (SE kinds).
      subject: the component is a subject effect; it is set to its prior mean 0 for new subjects.
    """

    name: str
    kind: Kind
    continuous: int | None = None
    categorical: int | None = None
    levels: int = 0
    num_basis: int = 24
    boundary: float = 4.0
    subject: bool = False

    def __post_init__(self):
        where = f"component {self.name!r}"
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"`name` must be a non-empty str, got {self.name!r}.")
        if not isinstance(self.kind, str) or self.kind not in KINDS:
            raise ValueError(f"{where}: `kind` must be one of {KINDS}, got {self.kind!r}.")
        uses_continuous = self.kind in ("se", "se_x_categorical")
        uses_categorical = self.kind != "se"
        for field, needed in (("continuous", uses_continuous), ("categorical", uses_categorical)):
            column = getattr(self, field)
            ok = isinstance(column, int | np.integer) and not isinstance(column, bool)
            if needed and not (ok and column >= 0):
                raise ValueError(
                    f"{where}: kind {self.kind!r} needs a column index `{field}` >= 0 (an int), "
                    f"got {column!r}."
                )
            if not needed and column is not None and not (ok and column >= 0):
                raise ValueError(f"{where}: `{field}` must be None or an int column index >= 0, "
                                 f"got {column!r}.")  # fmt: skip
        if isinstance(self.levels, bool) or not isinstance(self.levels, int | np.integer):
            raise ValueError(f"{where}: `levels` must be an int, got {self.levels!r}.")
        if self.kind in ("categorical", "se_x_categorical") and self.levels < 1:
            raise ValueError(f"{where}: `levels` must be >= 1, got {self.levels}.")
        if self.kind == "binary" and self.levels not in (0, 2):
            raise ValueError(f"{where}: a binary component has `levels` 2, got {self.levels}.")
        if not isinstance(self.subject, bool):
            raise ValueError(f"{where}: `subject` must be a bool, got {self.subject!r}.")
        if self.subject and self.kind not in ("categorical", "se_x_categorical"):
            raise ValueError(f"{where}: `subject` needs a one-hot kind, got kind {self.kind!r}.")
        if self.has_hyperparameters:
            if isinstance(self.num_basis, bool) or not isinstance(self.num_basis, int | np.integer):
                raise ValueError(f"{where}: `num_basis` must be an int, got {self.num_basis!r}.")
            if self.num_basis < 1:
                raise ValueError(f"{where}: `num_basis` must be >= 1, got {self.num_basis}.")
            b = self.boundary
            if isinstance(b, bool) or not isinstance(b, int | float | np.number):
                raise ValueError(f"{where}: `boundary` must be a number > 0, got {b!r}.")
            if not (math.isfinite(b) and b > 0):
                raise ValueError(f"{where}: `boundary` must be > 0 (finite), got {b}.")

    @property
    def has_hyperparameters(self) -> bool:
        return self.kind in ("se", "se_x_categorical")

    def weight_shape(self, latent_dim: int) -> tuple[int, ...]:
        if self.kind == "se":
            return (self.num_basis, latent_dim)
        if self.kind == "binary":
            return (2, latent_dim)
        if self.kind == "categorical":
            return (self.levels, latent_dim)
        return (self.levels, self.num_basis, latent_dim)


def se(name: str, column: int, num_basis: int = 24, boundary: float = 4.0) -> Component:
    """SE component on continuous covariate ``column``."""
    return Component(name, "se", continuous=column, num_basis=num_basis, boundary=boundary)


def binary(name: str, column: int) -> Component:
    """Binary component on categorical covariate ``column`` (values 0/1)."""
    return Component(name, "binary", categorical=column, levels=2)


def categorical(name: str, column: int, levels: int, subject: bool = False) -> Component:
    """Delta-kernel component on categorical covariate ``column`` with ``levels`` levels."""
    return Component(name, "categorical", categorical=column, levels=levels, subject=subject)


def se_x_categorical(
    name: str,
    continuous_column: int,
    categorical_column: int,
    levels: int,
    num_basis: int = 24,
    boundary: float = 4.0,
    subject: bool = False,
) -> Component:
    """Interaction ``k_SE(t, t') 1[c = c']`` of a continuous and a categorical covariate."""
    return Component(
        name, "se_x_categorical", continuous=continuous_column, categorical=categorical_column,
        levels=levels, num_basis=num_basis, boundary=boundary, subject=subject,
    )  # fmt: skip


class Covariates(NamedTuple):
    """Covariates of ``N`` observations.

    Attributes:
      continuous: ``[N, Kc]`` float (standardised continuous covariates, e.g. time, age).
      categorical: ``[N, Kd]`` int codes in ``[0, levels)`` (binary, categorical, subject id).
      continuous_mask, categorical_mask: optional ``[N, Kc]``, ``[N, Kd]`` 0/1 masks of observed
        covariates; a component is multiplied by the masks of the covariates it uses.
    """

    continuous: jax.Array
    categorical: jax.Array
    continuous_mask: jax.Array | None = None
    categorical_mask: jax.Array | None = None

    @property
    def num_rows(self) -> int:
        """Number of observations ``N``."""
        return int(np.shape(self.continuous)[0])

    def take(self, idx) -> Covariates:
        """Rows ``idx`` of every field."""
        return Covariates(*(None if f is None else f[idx] for f in self))


@dataclasses.dataclass(frozen=True)
class GPVAEConfig:
    """DGBFGP hyperparameters (defaults: the spec's CPU reproduction). Frozen and hashable.

    Every field is validated on construction; an invalid one raises ``ValueError`` naming it.

    Attributes:
      components: the additive components (a tuple, unique names; see :class:`Component`).
      latent_dim: ``L``.
      output_dim: ``D``.
      decoder_hidden: widths of the ReLU decoder MLP (dropout after each hidden layer).
      dropout: decoder dropout rate.
      alpha_init, lengthscale_init: initial posterior means of ``alpha``, ``l`` (log-normal q).
      hyper_scale_init: initial posterior std of ``log alpha`` and ``log l``. The official code
        uses 1; with it the exact ELBO blows up: ``KL(q(A) || p(A | l))`` grows like
        ``exp(l^2 lambda_M / 2)``, so its expectation over a log-normal ``q(l)`` is infinite and
        single draws of a long lengthscale give astronomically large losses (we saw NaN within a
        few epochs). 0.1 keeps those draws in the far tail.
      spectral_jitter: added to every prior variance ``S_m`` (keeps the KL finite when ``S_m``
        underflows for long lengthscales; negligible against the retained ``S_m``).
      vy_floor: lower bound of the observation variance.
      objective: ``"elbo"`` (exact) or ``"official"`` (tempered, see the module docstring).
      kl_weight: ``B`` of the official objective (0.01 there); ignored for ``"elbo"``.
      num_particles: Monte Carlo samples of ``(A, theta)`` per step (``k``).
      fused: compute ``z`` with :func:`latent` (one GEMM + gathers); ``False`` uses the naive
        :func:`latent_dense` (per-component dense one-hot matmuls), for benchmarks.
      local_subject_samples: estimate the ELBO terms of subject components (``subject=True``)
        from the minibatch only: each observation ``i`` draws its own sample of its subject's row
        ``A_r[p_i]`` and carries ``1 / n_{p_i}`` of that row's KL (``n_p``: the subject's training
        observations, passed to the model as ``level_counts``). Same ELBO in expectation (each
        likelihood term depends on one row's marginal; ``E sum_{i in b} (N / |b|) KL_{p_i} / n_{p_i}
        = sum_p KL_p``), but a step costs ``O(|b| M L)`` instead of ``O(P M L)`` for these
        components, which keeps the epoch linear in ``N`` when subjects grow with ``N``. Off by
        default (the official code samples and scores every row each step).
    """

    components: tuple[Component, ...]
    latent_dim: int = 8
    output_dim: int = 64
    decoder_hidden: tuple[int, ...] = (64, 64)
    dropout: float = 0.1
    alpha_init: float = 1.0
    lengthscale_init: float = 0.5
    hyper_scale_init: float = 0.1
    spectral_jitter: float = 1e-6
    vy_floor: float = math.exp(-8)
    objective: Literal["elbo", "official"] = "elbo"
    kl_weight: float = 0.01
    num_particles: int = 3
    fused: bool = True
    local_subject_samples: bool = False

    def __post_init__(self):
        if isinstance(self.components, Component) or not isinstance(self.components, list | tuple):
            raise ValueError(
                f"`components` must be a tuple of Component, got "
                f"{type(self.components).__name__}: {self.components!r:.60}."
            )
        components = tuple(self.components)
        object.__setattr__(self, "components", components)  # a tuple: hashable, jit-static
        if not components:
            raise ValueError("`components` must not be empty.")
        if not all(isinstance(c, Component) for c in components):
            raise ValueError(f"`components` must be Component instances, got {components}.")
        names = [c.name for c in components]
        if len(set(names)) != len(names):
            raise ValueError(f"`components` need unique names, got {names}.")
        check_int(self.latent_dim, "latent_dim", minimum=1)
        check_int(self.output_dim, "output_dim", minimum=1)
        if not isinstance(self.decoder_hidden, list | tuple):
            raise ValueError(f"`decoder_hidden` must be a tuple of ints >= 1, got "
                             f"{self.decoder_hidden!r}.")  # fmt: skip
        hidden = tuple(check_int(h, "decoder_hidden", minimum=1) for h in self.decoder_hidden)
        object.__setattr__(self, "decoder_hidden", hidden)
        check_scalar(self.dropout, "dropout", 0.0, 1.0, high_open=True)
        for name in ("alpha_init", "lengthscale_init", "hyper_scale_init", "vy_floor"):
            check_scalar(getattr(self, name), name, 0.0, low_open=True)
        check_scalar(self.spectral_jitter, "spectral_jitter", 0.0)
        if not isinstance(self.objective, str):
            raise ValueError(f"`objective` must be 'elbo' or 'official', got {self.objective!r}.")
        check_choice(self.objective, "objective", ("elbo", "official"))
        check_scalar(self.kl_weight, "kl_weight", 0.0)
        check_int(self.num_particles, "num_particles", minimum=1)
        for name in ("fused", "local_subject_samples"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"`{name}` must be a bool, got {getattr(self, name)!r}.")

    def decoder(self) -> MLP:
        """The decoder ``g_psi: [..., L] -> [..., D]``: :class:`jaxlab.core.nn.MLP` with widths
        ``(*decoder_hidden, output_dim)``, ReLU and ``Dropout(dropout)`` after each hidden layer
        and a linear output (parameters ``Dense_0``, ``Dense_1``, ...; call it with
        ``deterministic=False`` and a ``"dropout"`` rng to train with dropout)."""
        return MLP((*self.decoder_hidden, self.output_dim), activation="relu", dropout=self.dropout)


def check_covariates(cov: Covariates, components: Sequence[Component]) -> None:
    """Raise ``ValueError`` for unknown categories, times outside ``[-J, J]`` or missing columns.

    Shapes are always checked; values only where the arrays are concrete (not traced), so call
    this at the API boundary. Also: ``cov`` a :class:`Covariates` of ``N >= 1`` rows, finite
    real ``continuous``, int ``categorical``, 0/1 masks, and ``components`` a non-empty sequence
    of :class:`Component`.
    """
    if not isinstance(cov, Covariates):
        raise TypeError(f"`cov` must be a Covariates, got {type(cov).__name__}: {cov!r:.60}.")
    _check_components(components)
    for name, field in (("cov.continuous", cov.continuous), ("cov.categorical", cov.categorical)):
        if not hasattr(field, "shape"):
            raise TypeError(f"`{name}` must be an array (jax or numpy), got "
                            f"{type(field).__name__}.")  # fmt: skip
    check_array(cov.continuous, "cov.continuous")
    check_array(cov.categorical, "cov.categorical", kind="int")
    check_rank(cov.continuous, "cov.continuous", 2)
    check_rank(cov.categorical, "cov.categorical", 2)
    n, n_cont = np.shape(cov.continuous)
    n_rows, n_cat = np.shape(cov.categorical)
    if n != n_rows:
        raise ValueError(
            f"`cov.continuous` and `cov.categorical` must be [N, K] with the same N; got "
            f"{np.shape(cov.continuous)} and {np.shape(cov.categorical)}."
        )
    if n < 1:
        raise ValueError(f"`cov` must have at least one row (N >= 1), got N = {n}.")
    for name, mask, width in (
        ("cov.continuous_mask", cov.continuous_mask, n_cont),
        ("cov.categorical_mask", cov.categorical_mask, n_cat),
    ):
        if mask is not None and np.shape(mask) != (n, width):
            raise ValueError(f"`{name}` must have shape {(n, width)}, got {np.shape(mask)}.")
        if mask is not None:
            _check_mask(mask, name)
    concrete = is_concrete((cov.continuous, cov.categorical))
    cont = np.asarray(cov.continuous) if concrete else None
    cat = np.asarray(cov.categorical) if concrete else None
    for c in components:
        if c.continuous is not None:
            if c.continuous >= n_cont:
                raise ValueError(f"`cov.continuous` has {n_cont} column(s); component {c.name!r} "
                                 f"needs continuous column {c.continuous}.")  # fmt: skip
            col = None if cont is None else cont[:, c.continuous]
            if col is not None and np.any(np.abs(col) >= c.boundary):
                raise ValueError(
                    f"`cov.continuous` column {c.continuous} (component {c.name!r}) has values up "
                    f"to {np.abs(col).max():.3g}, outside the basis domain (-{c.boundary}, "
                    f"{c.boundary}); increase `boundary`."
                )
        if c.categorical is not None:
            if c.categorical >= n_cat:
                raise ValueError(f"`cov.categorical` has {n_cat} column(s); component {c.name!r} "
                                 f"needs categorical column {c.categorical}.")  # fmt: skip
            col = None if cat is None else cat[:, c.categorical]
            if col is not None and (np.any(col < 0) or np.any(col >= c.levels)):
                bad = col[(col < 0) | (col >= c.levels)][0]
                raise ValueError(
                    f"`cov.categorical` column {c.categorical} (component {c.name!r}) has the "
                    f"unknown level {bad}; expected codes in [0, {c.levels})."
                )


def _check_components(components) -> tuple[Component, ...]:
    if isinstance(components, Component | str) or not isinstance(components, Sequence):
        raise TypeError(f"`components` must be a sequence of Component, got "
                        f"{type(components).__name__}.")  # fmt: skip
    if not components or not all(isinstance(c, Component) for c in components):
        raise ValueError(f"`components` must be a non-empty sequence of Component, got "
                         f"{components!r:.80}.")  # fmt: skip
    return tuple(components)


def _check_mask(mask, name: str) -> None:
    """A real or bool 0/1 mask (values checked where concrete)."""
    dtype = getattr(mask, "dtype", None)
    if dtype is None:
        dtype = np.asarray(mask).dtype
    check_array(mask, name, kind="bool" if np.dtype(dtype) == np.bool_ else "real")
    if is_concrete(mask):
        a = np.asarray(jax.device_get(mask))
        if not np.isin(a, (0, 1)).all():
            raise ValueError(f"`{name}` must hold 0/1 values, got {np.unique(a)[:6]}.")


def _check_weights(weights, components, latent_dim: int | None = None) -> int:
    """``weights[name]`` of shape ``c.weight_shape(L)`` for every component; returns ``L``."""
    if not isinstance(weights, dict):
        raise TypeError(f"`weights` must be a dict {{component name: array}}, got "
                        f"{type(weights).__name__}.")  # fmt: skip
    for c in components:
        if c.name not in weights:
            raise ValueError(f"`weights` has no entry for component {c.name!r}; it has "
                             f"{sorted(weights)}.")  # fmt: skip
        w = weights[c.name]
        check_array(w, f"weights[{c.name!r}]", kind="float")
        if latent_dim is None:
            latent_dim = int(np.shape(w)[-1]) if np.ndim(w) else 0
        if tuple(np.shape(w)) != c.weight_shape(latent_dim):
            raise ValueError(f"`weights[{c.name!r}]` must have shape "
                             f"{c.weight_shape(latent_dim)} (component {c.kind!r}, L = "
                             f"{latent_dim}), got {tuple(np.shape(w))}.")  # fmt: skip
    return latent_dim


def _check_latent_args(weights, cov, components, new_subjects) -> None:
    """The checks of :func:`latent` / :func:`latent_dense` / :func:`component_latents`."""
    components = _check_components(components)
    check_covariates(cov, components)
    _check_weights(weights, components)
    check_bool(new_subjects, "new_subjects")


def _mask(cov: Covariates, c: Component, dtype) -> jax.Array | float:
    m = 1.0
    if c.continuous is not None and cov.continuous_mask is not None:
        m = m * cov.continuous_mask[:, c.continuous].astype(dtype)
    if c.categorical is not None and cov.categorical_mask is not None:
        m = m * cov.categorical_mask[:, c.categorical].astype(dtype)
    return m if isinstance(m, float) else m[:, None]


def _features(cov: Covariates, c: Component, dtype) -> jax.Array:
    if c.kind == "binary":
        return binary_features(cov.categorical[:, c.categorical]).astype(dtype)
    return hs_basis(cov.continuous[:, c.continuous].astype(dtype), c.num_basis, c.boundary)


def component_latents(
    weights: dict[str, jax.Array],
    cov: Covariates,
    components: Sequence[Component],
    new_subjects: bool = False,
) -> dict[str, jax.Array]:
    """Each component's contribution ``Phi_r(x) A_r``: ``{name: [N, L]}``.

    ``new_subjects`` zeroes the subject components (their prior mean), for subjects not seen in
    training. One-hot components are row gathers ``A_r[c_i]``.
    """
    _check_latent_args(weights, cov, components, new_subjects)
    return _component_latents(weights, cov, components, new_subjects)


def _component_latents(weights, cov, components, new_subjects):
    out = {}
    for c in components:
        w = weights[c.name]
        if c.kind in ("se", "binary"):
            z = _features(cov, c, w.dtype) @ w
        elif c.kind == "categorical":
            z = w[cov.categorical[:, c.categorical]]
        else:
            phi = _features(cov, c, w.dtype)
            z = jnp.einsum("bm,bml->bl", phi, w[cov.categorical[:, c.categorical]])
        z = z * _mask(cov, c, w.dtype)
        out[c.name] = jnp.zeros_like(z) if (new_subjects and c.subject) else z
    return out


def _row_contribution(c: Component, rows: jax.Array, cov: Covariates) -> jax.Array:
    """``[N, L]`` from per-observation rows of a one-hot component (``[N, L]`` or ``[N, M, L]``)."""
    if c.kind == "categorical":
        z = rows
    elif c.kind == "se_x_categorical":
        z = jnp.einsum("bm,bml->bl", _features(cov, c, rows.dtype), rows)
    else:
        raise ValueError(f"component {c.name!r}: only one-hot kinds have per-subject rows.")
    return z * _mask(cov, c, rows.dtype)


def latent(
    weights: dict[str, jax.Array],
    cov: Covariates,
    components: Sequence[Component],
    new_subjects: bool = False,
) -> jax.Array:
    """``z = sum_r Phi_r(x) A_r``: ``[N, L]``, the fused form.

    The dense components (SE and binary features) are concatenated into one ``[N, sum M_r]``
    feature matrix and contracted with the stacked weights in a single GEMM; categorical
    components are gathers and SE x categorical ones a gather plus a batched contraction.
    """
    _check_latent_args(weights, cov, components, new_subjects)
    dense = [c for c in components if c.kind in ("se", "binary")]
    rest = [c for c in components if c.kind not in ("se", "binary")]
    some = weights[components[0].name]
    z = jnp.zeros((cov.continuous.shape[0], some.shape[-1]), some.dtype)
    if dense:
        feats = [
            _features(cov, c, some.dtype)
            * _mask(cov, c, some.dtype)
            * (0.0 if (new_subjects and c.subject) else 1.0)
            for c in dense
        ]
        z = z + jnp.concatenate(feats, axis=1) @ jnp.concatenate([weights[c.name] for c in dense])
    for part in _component_latents(weights, cov, rest, new_subjects).values():
        z = z + part
    return z


def latent_dense(
    weights: dict[str, jax.Array],
    cov: Covariates,
    components: Sequence[Component],
    new_subjects: bool = False,
) -> jax.Array:
    """The naive form of :func:`latent`: a loop over components with dense one-hot matmuls.

    Same result; kept as the reference for tests and the benchmark baseline.
    """
    _check_latent_args(weights, cov, components, new_subjects)
    z = 0.0
    for c in components:
        w = weights[c.name]
        if c.kind in ("se", "binary"):
            part = _features(cov, c, w.dtype) @ w
        elif c.kind == "categorical":
            part = jax.nn.one_hot(cov.categorical[:, c.categorical], c.levels, dtype=w.dtype) @ w
        else:
            onehot = jax.nn.one_hot(cov.categorical[:, c.categorical], c.levels, dtype=w.dtype)
            phi = _features(cov, c, w.dtype)
            # [N, C] x [N, M] outer product against [C * M, L]
            feats = (onehot[:, :, None] * phi[:, None, :]).reshape(phi.shape[0], -1)
            part = feats @ w.reshape(-1, w.shape[-1])
        part = part * _mask(cov, c, w.dtype)
        z = z + (0.0 * part if (new_subjects and c.subject) else part)
    return z


def prior_scales(
    c: Component, alpha, lengthscale, latent_dim: int, jitter: float = 0.0
) -> jax.Array:
    """Prior standard deviations of ``A_r``: ``sqrt(S_m + jitter)`` broadcast to the weight shape
    (ones for binary and categorical components)."""
    if not isinstance(c, Component):
        raise TypeError(f"`c` must be a Component, got {type(c).__name__}.")
    latent_dim = check_int(latent_dim, "latent_dim", minimum=1)
    check_scalar(jitter, "jitter", 0.0)
    if c.has_hyperparameters:
        for name, v in (("alpha", alpha), ("lengthscale", lengthscale)):
            if v is None or isinstance(v, bool | str):
                raise TypeError(f"`{name}` must be a positive number, got {v!r}.")
            check_array(v, name, ndim=0)
            if is_concrete(v) and not float(v) > 0:
                raise ValueError(f"`{name}` must be > 0, got {float(v)}.")
    shape = c.weight_shape(latent_dim)
    if not c.has_hyperparameters:
        return jnp.ones(shape)
    omega = hs_sqrt_eigenvalues(c.num_basis, c.boundary)
    s = jnp.sqrt(se_spectral_density(omega, alpha, lengthscale) + jitter)
    return jnp.broadcast_to(s[:, None], shape)


class GPVAEModel(NamedTuple):
    """``model`` and ``guide`` for ``numpyro.infer.SVI`` plus helpers on trained parameters.

    ``decoder`` is the Flax decoder (:meth:`GPVAEConfig.decoder`); its trained parameters are
    ``params["decoder$params"]`` of the SVI parameters.

    Both take ``(cov, y, y_mask, n_total, train, level_counts=None)``: a (mini)batch ``cov`` with
    ``[b, D]`` targets ``y`` (``None`` to sample), a ``[b, D]`` 0/1 mask or ``None``, the dataset
    size ``N``, whether decoder dropout is on, and (for ``local_subject_samples``) the training
    observations per level of each subject component, ``{name: [levels]}``.
    """

    config: GPVAEConfig
    decoder: MLP
    model: object
    guide: object


def make_model(cfg: GPVAEConfig) -> GPVAEModel:
    """The NumPyro model and hand-written mean-field guide of DGBFGP for ``cfg``."""
    if not isinstance(cfg, GPVAEConfig):
        raise TypeError(f"`cfg` must be a GPVAEConfig, got {type(cfg).__name__}.")
    decoder = cfg.decoder()
    L = cfg.latent_dim

    def kl_scale(c: Component) -> float:
        if cfg.objective == "elbo":
            return 1.0
        return cfg.kl_weight / math.prod(c.weight_shape(L))

    local = tuple(c for c in cfg.components if c.subject and cfg.local_subject_samples)
    shared = tuple(c for c in cfg.components if c not in local)

    def row_shape(c: Component) -> tuple[int, ...]:
        return c.weight_shape(L)[1:]

    def per_observation_scale(c, cov, level_counts):
        if level_counts is None or c.name not in level_counts:
            raise ValueError(
                f"local_subject_samples needs `level_counts[{c.name!r}]` (training observations "
                "per level); make_trainer passes it."
            )
        codes = cov.categorical[:, c.categorical]
        return kl_scale(c) / jnp.maximum(level_counts[c.name][codes], 1)

    def model(cov, y=None, y_mask=None, n_total=None, train=True, level_counts=None):
        weights, rows = {}, {}
        for c in cfg.components:
            alpha = lengthscale = None
            if c.has_hyperparameters:
                alpha = jnp.exp(numpyro.sample(f"{c.name}/log_alpha", dist.Normal(0.0, 1.0)))
                lengthscale = jnp.exp(
                    numpyro.sample(f"{c.name}/log_lengthscale", dist.Normal(0.0, 1.0))
                )
            scales = prior_scales(c, alpha, lengthscale, L, cfg.spectral_jitter)
            if c in local:
                rows[c.name] = scales[0]  # every row has the same prior
                continue
            with numpyro.handlers.scale(scale=kl_scale(c)):
                weights[c.name] = numpyro.sample(
                    f"{c.name}/w", dist.Normal(0.0, scales).to_event(len(scales.shape))
                )
        net = flax_module("decoder", decoder, input_shape=(1, L))
        raw = numpyro.param("vy_raw", jnp.zeros(cfg.output_dim))
        vy = jax.nn.softplus(raw) + cfg.vy_floor
        n = cov.continuous.shape[0]
        n_total = n if n_total is None else n_total
        z = (latent if cfg.fused else latent_dense)(weights, cov, shared)
        for c in local:  # one draw of the subject's row per observation
            with numpyro.plate("obs", n_total, subsample_size=n):
                with numpyro.handlers.scale(scale=per_observation_scale(c, cov, level_counts)):
                    prior_sd = jnp.broadcast_to(rows[c.name], (n, *row_shape(c)))
                    w = numpyro.sample(
                        f"{c.name}/w",
                        dist.Normal(jnp.zeros_like(prior_sd), prior_sd).to_event(len(row_shape(c))),
                    )
            z = z + _row_contribution(c, w, cov)
        if train and cfg.dropout > 0:
            mean = net(z, deterministic=False, rngs={"dropout": numpyro.prng_key()})
        else:
            mean = net(z, deterministic=True)
        lik_scale = 1.0 if cfg.objective == "elbo" else 1.0 / n_total
        obs = dist.Normal(mean, jnp.broadcast_to(jnp.sqrt(vy), mean.shape))
        if y_mask is not None:
            obs = obs.mask(y_mask.astype(bool))
        with numpyro.handlers.scale(scale=lik_scale):
            with numpyro.plate("obs", n_total, subsample_size=n):
                numpyro.sample("y", obs.to_event(1), obs=y)

    def guide(cov, y=None, y_mask=None, n_total=None, train=True, level_counts=None):
        n = cov.continuous.shape[0]
        n_total = n if n_total is None else n_total
        rows = {}
        for c in cfg.components:
            if c.has_hyperparameters:
                for hyper, init in (
                    ("alpha", cfg.alpha_init),
                    ("lengthscale", cfg.lengthscale_init),
                ):
                    loc = numpyro.param(f"{c.name}/log_{hyper}_loc", jnp.asarray(math.log(init)))
                    scale = numpyro.param(
                        f"{c.name}/log_{hyper}_scale", jnp.asarray(cfg.hyper_scale_init),
                        constraint=dist.constraints.positive,
                    )  # fmt: skip
                    numpyro.sample(f"{c.name}/log_{hyper}", dist.Normal(loc, scale))
            shape = c.weight_shape(L)
            loc = numpyro.param(f"{c.name}/w_loc", jnp.zeros(shape))
            rho = numpyro.param(
                f"{c.name}/w_rho",
                lambda key, shape=shape: jax.random.uniform(key, shape, minval=-4.0, maxval=-2.0),
            )
            if c in local:
                rows[c.name] = (loc, rho)
                continue
            with numpyro.handlers.scale(scale=kl_scale(c)):
                numpyro.sample(
                    f"{c.name}/w", dist.Normal(loc, jax.nn.softplus(rho)).to_event(len(shape))
                )
        for c in local:  # after the shared sites, in the model's order
            loc, rho = rows[c.name]
            codes = cov.categorical[:, c.categorical]
            with numpyro.plate("obs", n_total, subsample_size=n):
                with numpyro.handlers.scale(scale=per_observation_scale(c, cov, level_counts)):
                    numpyro.sample(
                        f"{c.name}/w",
                        dist.Normal(loc[codes], jax.nn.softplus(rho[codes])).to_event(
                            len(row_shape(c))
                        ),
                    )

    return GPVAEModel(cfg, decoder, model, guide)

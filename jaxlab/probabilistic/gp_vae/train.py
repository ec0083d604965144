"""Training and prediction for DGBFGP: NumPyro SVI epochs inside ``jit`` as ``lax.scan``.

One :func:`make_trainer` step is one epoch: a random permutation of the ``N`` observations cut into
``N // batch_size`` minibatches (the remainder is dropped for that epoch; a fresh permutation every
epoch), each one ``SVI.update`` with the data term scaled by ``N / |b|``. ``init``/``step`` are
pure, so :func:`jaxlab.core.training.scan_steps` or :func:`~jaxlab.core.training.run_chunked` run
many epochs in one ``jit``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from numpyro.infer import SVI, TraceMeanField_ELBO

from jaxlab.core.checks import check_int, check_key, check_positive, check_shape
from jaxlab.probabilistic.gp_vae.model import Covariates, GPVAEModel, check_covariates, latent

__all__ = ["GPVAEState", "GPVAETrainer", "make_trainer", "posterior_mean_weights", "predict"]


@struct.dataclass
class GPVAEState:
    """State of :func:`make_trainer` (a pytree): SVI state, the training data and the epoch.

    ``N`` training observations, ``D`` outputs, ``Kc`` / ``Kd`` continuous / categorical covariates.

    Attributes:
      svi_state: NumPyro's ``SVIState``: ``optim_state`` (the step count and optax Adam state of
        the unconstrained variational and decoder parameters, see :meth:`GPVAETrainer.params`),
        ``mutable_state`` (``None``) and ``rng_key`` (``[]`` PRNG key that NumPyro splits at
        every SVI update for the Monte Carlo draws and decoder dropout).
      cov: the training :class:`~.model.Covariates`, ``continuous [N, Kc]``, ``categorical
        [N, Kd]`` (and optional masks of the same shapes).
      y: ``[N, D]`` training targets.
      y_mask: ``[N, D]`` 0/1 mask of observed targets, or ``None`` (all observed).
      level_counts: ``{name: [levels]}`` int, training observations per level of each subject
        component (used with ``local_subject_samples``).
      key: ``[]`` PRNG key of the data order: epoch ``e`` shuffles with ``fold_in(key, e)``.
      step: ``[]`` int32, epochs done.
    """

    svi_state: Any
    cov: Covariates
    y: jax.Array
    y_mask: jax.Array | None
    level_counts: dict[str, jax.Array]
    key: jax.Array
    step: jax.Array


class GPVAETrainer(NamedTuple):
    """The pure functions of :func:`make_trainer` and the NumPyro ``SVI`` object.

    Attributes:
      init: ``init(key, cov, y, y_mask=None) -> GPVAEState``.
      step: ``step(state, x=None) -> (state, {"loss": []})``: one epoch; ``loss`` is the epoch's
        mean minibatch negative ELBO divided by ``N``.
      svi: the ``numpyro.infer.SVI`` (``svi.update`` is one minibatch step).
      n_batches: minibatches per epoch.
    """

    init: Callable[..., GPVAEState]
    step: Callable[..., tuple[GPVAEState, dict]]
    svi: SVI
    n_batches: int

    def params(self, state: GPVAEState) -> dict:
        """Constrained variational and decoder parameters."""
        return self.svi.get_params(state.svi_state)


def make_trainer(
    model: GPVAEModel,
    n_total: int,
    batch_size: int = 128,
    learning_rate: float = 5e-3,
) -> GPVAETrainer:
    """SVI with Adam (optax) and ``TraceMeanField_ELBO(num_particles=k)`` for ``model``.

    Args:
      model: from :func:`~.model.make_model`.
      n_total: ``N``, the number of training observations (``init`` checks it).
      batch_size: minibatch size, ``1 <= batch_size <= n_total``.
      learning_rate: Adam's step size.

    Returns:
      A :class:`GPVAETrainer`: ``init(key, cov, y, y_mask=None)`` checks the data and builds the
      state; ``step(state, x=None)`` runs one epoch (``x`` must be ``None``: the minibatches come
      from the data in the state).
    """
    n_total = check_int(n_total, "n_total", minimum=1)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    if batch_size > n_total:
        raise ValueError(f"`batch_size` must be in [1, n_total={n_total}], got {batch_size}.")
    check_positive(learning_rate, "learning_rate")
    elbo = TraceMeanField_ELBO(num_particles=model.config.num_particles)
    svi = SVI(model.model, model.guide, optax.adam(learning_rate), elbo)
    n_batches = n_total // batch_size
    d = model.config.output_dim
    svi_init = jax.jit(svi.init, static_argnums=(4, 5))  # eager tracing of the sites is slow

    def init(
        key: jax.Array, cov: Covariates, y: jax.Array, y_mask: jax.Array | None = None
    ) -> GPVAEState:
        key = check_key(key)
        check_covariates(cov, model.config.components)
        if y.shape != (cov.num_rows, d):
            raise ValueError(f"`y` must have shape ({cov.num_rows}, {d}), got {y.shape}.")
        if y_mask is not None:
            check_shape(y_mask, "y_mask", (cov.num_rows, d), "[N, D]")
        if cov.num_rows != n_total:
            raise ValueError(
                f"the trainer was made for n_total={n_total}, got {cov.num_rows} rows in `cov`."
            )
        counts = {
            c.name: jnp.asarray(
                np.bincount(np.asarray(cov.categorical[:, c.categorical]), minlength=c.levels)
            )
            for c in model.config.components
            if c.subject
        }
        k_svi, k_data = jax.random.split(key)
        first = jnp.arange(batch_size)
        mask_b = None if y_mask is None else y_mask[first]
        svi_state = svi_init(
            k_svi, cov.take(first), y[first], mask_b, n_total, True, level_counts=counts
        )
        return GPVAEState(svi_state, cov, y, y_mask, counts, k_data, jnp.zeros((), jnp.int32))

    def step(state: GPVAEState, x=None) -> tuple[GPVAEState, dict]:
        if x is not None:
            raise ValueError("GPVAETrainer.step: `x` must be None (the data live in the state).")
        order = jax.random.permutation(jax.random.fold_in(state.key, state.step), n_total)
        batches = order[: n_batches * batch_size].reshape(n_batches, batch_size)

        def body(svi_state, idx):
            mask_b = None if state.y_mask is None else state.y_mask[idx]
            return svi.update(
                svi_state, state.cov.take(idx), state.y[idx], mask_b, n_total, True,
                level_counts=state.level_counts,
            )  # fmt: skip

        svi_state, losses = jax.lax.scan(body, state.svi_state, batches)
        new = state.replace(svi_state=svi_state, step=state.step + 1)
        return new, {"loss": jnp.mean(losses) / n_total}

    return GPVAETrainer(init, step, svi, n_batches)


def posterior_mean_weights(model: GPVAEModel, params: dict) -> dict[str, jax.Array]:
    """``E_q[A_r]`` per component."""
    return {c.name: params[f"{c.name}/w_loc"] for c in model.config.components}


def predict(
    model: GPVAEModel, params: dict, cov: Covariates, new_subjects: bool = False
) -> jax.Array:
    """Conditional generation ``g_psi(sum_r Phi_r(x) E_q[A_r])``: ``[N, D]``.

    ``new_subjects`` sets subject components to their prior mean (0): population-level predictions
    for subjects not seen in training.
    """
    check_covariates(cov, model.config.components)
    z = latent(posterior_mean_weights(model, params), cov, model.config.components, new_subjects)
    return model.decoder.apply({"params": params["decoder$params"]}, z, deterministic=True)

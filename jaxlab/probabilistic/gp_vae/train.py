"""Training and prediction for DGBFGP: NumPyro SVI epochs inside ``jit`` as ``lax.scan``.

An epoch is a random permutation of the ``N`` observations cut into ``N // batch_size`` minibatches
(the remainder is dropped for that epoch; a fresh permutation every epoch), each one
``SVI.update`` with the data term scaled by ``N / |b|``. Epochs are ``init``/``epoch`` pure
functions, so :func:`jaxlab.core.training.run_chunked` runs chunks of epochs in one ``jit``.
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

from jaxlab.probabilistic.gp_vae.model import Covariates, GPVAEModel, check_covariates, latent

__all__ = ["GPVAETrainer", "TrainState", "make_trainer", "posterior_mean_weights", "predict"]


@struct.dataclass
class TrainState:
    """SVI state, the training data ``(cov, y, y_mask, level_counts)``, a data-order key and the
    epoch (``level_counts``: training observations per level of each subject component, used
    with ``local_subject_samples``)."""

    svi_state: Any
    data: tuple
    key: jax.Array
    epoch: jax.Array


class GPVAETrainer(NamedTuple):
    init: Callable[..., TrainState]
    epoch: Callable[[TrainState, Any], tuple[TrainState, dict]]
    svi: SVI
    n_batches: int

    def params(self, state: TrainState) -> dict:
        """Constrained variational and decoder parameters."""
        return self.svi.get_params(state.svi_state)


def make_trainer(
    model: GPVAEModel,
    n_total: int,
    batch_size: int = 128,
    learning_rate: float = 5e-3,
) -> GPVAETrainer:
    """SVI with Adam (optax) and ``TraceMeanField_ELBO(num_particles=k)`` for ``model``."""
    if not 1 <= batch_size <= n_total:
        raise ValueError(f"`batch_size` must be in [1, n_total={n_total}], got {batch_size}.")
    elbo = TraceMeanField_ELBO(num_particles=model.config.num_particles)
    svi = SVI(model.model, model.guide, optax.adam(learning_rate), elbo)
    n_batches = n_total // batch_size

    def init(key, cov: Covariates, y: jax.Array, y_mask: jax.Array | None = None) -> TrainState:
        check_covariates(cov, model.config.components)
        if y.shape != (cov.num_rows, model.config.output_dim):
            raise ValueError(
                f"`y` must have shape ({cov.num_rows}, {model.config.output_dim}), got {y.shape}."
            )
        if cov.num_rows != n_total:
            raise ValueError(
                f"the trainer was made for n_total={n_total}, got {cov.num_rows} rows."
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
        svi_state = svi.init(
            k_svi, cov.take(first), y[first], mask_b, n_total, True, level_counts=counts
        )
        return TrainState(svi_state, (cov, y, y_mask, counts), k_data, jnp.zeros((), jnp.int32))

    def epoch(state: TrainState, _=None) -> tuple[TrainState, dict]:
        cov, y, y_mask, counts = state.data
        order = jax.random.permutation(jax.random.fold_in(state.key, state.epoch), n_total)
        batches = order[: n_batches * batch_size].reshape(n_batches, batch_size)

        def body(svi_state, idx):
            mask_b = None if y_mask is None else y_mask[idx]
            return svi.update(
                svi_state, cov.take(idx), y[idx], mask_b, n_total, True, level_counts=counts
            )

        svi_state, losses = jax.lax.scan(body, state.svi_state, batches)
        new = state.replace(svi_state=svi_state, epoch=state.epoch + 1)
        return new, {"loss": jnp.mean(losses) / n_total}

    return GPVAETrainer(init, epoch, svi, n_batches)


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

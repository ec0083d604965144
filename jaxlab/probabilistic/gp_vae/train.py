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

from jaxlab.core.checks import (
    check_abstract_call,
    check_array,
    check_bool,
    check_int,
    check_key,
    check_same_tree,
    check_scalar,
    check_shape,
)
from jaxlab.probabilistic.gp_vae.model import (
    Covariates,
    GPVAEModel,
    _check_mask,
    check_covariates,
    latent,
)

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
      step: ``step(state, x=None) -> (state, {"loss": [], "finite": []})``: one epoch; ``loss``
        is the epoch's mean minibatch negative ELBO divided by ``N``; ``finite`` is False when
        some minibatch loss of the epoch was NaN / inf (the fit diverged: do not read ``loss``
        or the parameters as a result).
      svi: the ``numpyro.infer.SVI`` (``svi.update`` is one minibatch step).
      n_batches: minibatches per epoch.
    """

    init: Callable[..., GPVAEState]
    step: Callable[..., tuple[GPVAEState, dict]]
    svi: SVI
    n_batches: int

    def params(self, state: GPVAEState) -> dict:
        """Constrained variational and decoder parameters."""
        if not isinstance(state, GPVAEState):
            raise TypeError(f"`state` must be a GPVAEState (from init), got "
                            f"{type(state).__name__}.")  # fmt: skip
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
    if not isinstance(model, GPVAEModel):
        raise TypeError(f"`model` must be a GPVAEModel (from make_model), got "
                        f"{type(model).__name__}.")  # fmt: skip
    n_total = check_int(n_total, "n_total", minimum=1)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    if batch_size > n_total:
        raise ValueError(f"`batch_size` must be in [1, n_total={n_total}], got {batch_size}.")
    check_scalar(learning_rate, "learning_rate", 0.0, low_open=True)
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
        check_array(y, "y", finite=False)
        if np.shape(y) != (cov.num_rows, d):
            raise ValueError(f"`y` must have shape ({cov.num_rows}, {d}), got {np.shape(y)}.")
        if y_mask is not None:
            check_shape(y_mask, "y_mask", (cov.num_rows, d), "[N, D]")
            _check_mask(y_mask, "y_mask")
        _check_finite_observed(y, y_mask)
        y = y if isinstance(y, np.ndarray | jax.Array) else jnp.asarray(y)
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

    templates: dict = {}

    def _svi_template(state: GPVAEState):
        """The shapes ``init`` gives the SVI state (parameters of this model's sizes), traced
        once per trainer without running anything."""
        if "svi" not in templates:
            first = jnp.arange(batch_size)

            def build(key, cov, y, y_mask, counts):
                mask_b = None if y_mask is None else y_mask[first]
                return svi.init(key, cov.take(first), y[first], mask_b, n_total, True,
                                level_counts=counts)  # fmt: skip

            templates["svi"] = jax.eval_shape(
                build, state.key, state.cov, state.y, state.y_mask, state.level_counts
            )
        return templates["svi"]

    def step(state: GPVAEState, x=None) -> tuple[GPVAEState, dict]:
        if x is not None:
            raise ValueError("GPVAETrainer.step: `x` must be None (the data live in the state).")
        if not isinstance(state, GPVAEState):
            raise TypeError(f"`state` must be a GPVAEState (from init), got "
                            f"{type(state).__name__}.")  # fmt: skip
        if np.shape(state.y) != (n_total, d):
            raise ValueError(
                f"`state` was built for another trainer: its `y` has shape "
                f"{np.shape(state.y)}, this trainer needs ({n_total}, {d})."
            )
        check_same_tree(state.svi_state, "state.svi_state", _svi_template(state), "this trainer")
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
        return new, {"loss": jnp.mean(losses) / n_total, "finite": jnp.all(jnp.isfinite(losses))}

    return GPVAETrainer(init, step, svi, n_batches)


def _check_finite_observed(y, y_mask) -> None:
    """``y`` finite where observed (``y_mask`` 1 or no mask), where concrete."""
    if not isinstance(y, jax.core.Tracer):
        a = np.asarray(jax.device_get(y))
        observed = np.ones(a.shape, bool) if y_mask is None else np.asarray(y_mask).astype(bool)
        if np.issubdtype(a.dtype, np.floating) and not np.isfinite(a[observed]).all():
            bad = int((~np.isfinite(a) & observed).sum())
            raise ValueError(f"`y` must be finite where observed; it has {bad} NaN/inf entries.")


def _check_params(model: GPVAEModel, params) -> None:
    """``params`` (``GPVAETrainer.params(state)``) hold every component's ``w_loc`` of the right
    shape and the decoder's parameters."""
    if not isinstance(model, GPVAEModel):
        raise TypeError(f"`model` must be a GPVAEModel, got {type(model).__name__}.")
    if not isinstance(params, dict):
        raise TypeError(f"`params` must be the dict of `GPVAETrainer.params(state)`, got "
                        f"{type(params).__name__}.")  # fmt: skip
    cfg = model.config
    for c in cfg.components:
        name = f"{c.name}/w_loc"
        if name not in params:
            raise ValueError(f"`params` has no {name!r}: not the parameters of this model.")
        check_array(params[name], f"params[{name!r}]")
        want = c.weight_shape(cfg.latent_dim)
        if tuple(np.shape(params[name])) != want:
            raise ValueError(
                f"`params[{name!r}]` must have shape {want}, got "
                f"{tuple(np.shape(params[name]))} (a model of another size)."
            )
    if "decoder$params" not in params:
        raise ValueError("`params` has no 'decoder$params': not the parameters of this model.")
    for leaf in jax.tree_util.tree_leaves(params["decoder$params"]):
        check_array(leaf, "params['decoder$params']")
    z = jax.ShapeDtypeStruct((1, cfg.latent_dim), jnp.float32)
    out = check_abstract_call(
        lambda p, z: model.decoder.apply({"params": p}, z, deterministic=True),
        (params["decoder$params"], z),
        f"`params['decoder$params']` do not fit this model's decoder (L = {cfg.latent_dim} -> "
        f"{cfg.decoder_hidden} -> D = {cfg.output_dim})",
    )
    if tuple(out.shape) != (1, cfg.output_dim):
        raise ValueError(f"`params['decoder$params']` give outputs of shape {out.shape[1:]}, this "
                         f"model needs D = {cfg.output_dim}.")  # fmt: skip


def posterior_mean_weights(model: GPVAEModel, params: dict) -> dict[str, jax.Array]:
    """``E_q[A_r]`` per component."""
    _check_params(model, params)
    return {c.name: params[f"{c.name}/w_loc"] for c in model.config.components}


def predict(
    model: GPVAEModel, params: dict, cov: Covariates, new_subjects: bool = False
) -> jax.Array:
    """Conditional generation ``g_psi(sum_r Phi_r(x) E_q[A_r])``: ``[N, D]``.

    ``new_subjects`` sets subject components to their prior mean (0): population-level predictions
    for subjects not seen in training.
    """
    _check_params(model, params)
    check_covariates(cov, model.config.components)
    check_bool(new_subjects, "new_subjects")
    z = latent(posterior_mean_weights(model, params), cov, model.config.components, new_subjects)
    return model.decoder.apply({"params": params["decoder$params"]}, z, deterministic=True)

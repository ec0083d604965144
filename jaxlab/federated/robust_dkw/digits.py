"""The digits network of the certificates' end-to-end check: a multinomial logistic regression on
standardised 8 x 8 pixels, and the exact risks of clients with Dirichlet label proportions and an
affine image shift.

- :class:`DigitsModel`: the fitted model as a pytree (weights, bias, the training pixel moments);
- :func:`fit_digits_model`: full-batch Adam on the cross-entropy plus an L2 penalty
  (:func:`jaxlab.core.training.fit`, one ``lax.scan``);
- :func:`shifted_client_risks`: each client draws label proportions ``pi ~ Dirichlet(alpha 1)``
  and an affine shift ``X -> A X + B`` (``A = I + N(0, s^2)``, ``B ~ N(0, s^2)``, 8 x 8 matrices
  acting on the rows of the image); its risk is ``sum_c pi_c err_c(A, B)``, with ``err_c`` the
  model's error rate on the shifted pool images of class ``c``: exact on the pool, no sampling.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from jaxlab.core.checks import check_int, check_key, check_scalar, check_shape, is_concrete
from jaxlab.core.training import fit
from jaxlab.federated.robust_dkw._checks import check_labels, check_static_float, check_values

__all__ = ["DigitsModel", "fit_digits_model", "shifted_client_risks"]

NUM_CLASSES = 10


@struct.dataclass
class DigitsModel:
    """A multinomial logistic regression on standardised digits pixels (a pytree).

    Attributes:
      w: ``[64, 10]`` weights.
      b: ``[10]`` bias.
      mean: ``[64]`` training pixel means.
      sd: ``[64]`` training pixel SDs (floored, see :func:`fit_digits_model`).
    """

    w: jax.Array
    b: jax.Array
    mean: jax.Array
    sd: jax.Array

    def logits(self, img: jax.Array) -> jax.Array:
        """Class scores ``[..., 10]`` of images ``[..., 8, 8]`` with pixels in ``[0, 1]``."""
        lead = (1,) * (img.ndim - 2)
        flat = img.reshape(img.shape[:-2] + (64,))
        f = (flat - self.mean.reshape(lead + (64,))) / self.sd.reshape(lead + (64,))
        return f @ self.w + self.b.reshape(lead + (10,))

    def predict(self, img: jax.Array) -> jax.Array:
        """Labels ``[...]`` of images ``[..., 8, 8]``."""
        return jnp.argmax(self.logits(img), -1)


def fit_digits_model(
    x_train,
    y_train,
    steps: int,
    *,
    lr: float = 0.05,
    l2: float = 1e-3,
    sd_floor: float = 0.1,
) -> DigitsModel:
    """Fit :class:`DigitsModel` by ``steps`` full-batch Adam steps from zero weights.

    Loss: ``mean cross-entropy + l2 ||w||^2``. The pixel moments are computed on the host (NumPy,
    in the pixels' dtype) before the jitted fit; SDs are floored at ``sd_floor`` (border pixels
    are constant in training, and a shifted client's image would otherwise blow them up).

    Args:
      x_train: ``[N, 8, 8]`` images with pixels in ``[0, 1]`` (e.g. from
        :func:`jaxlab.core.data.digits_split` with ``layout="image"``).
      y_train: ``[N]`` integer labels in ``0..9``.
      steps: Adam steps (``>= 0``).
      lr, l2, sd_floor: learning rate, weight penalty, SD floor.
    """
    check_values(x_train, "x_train")
    x_train = check_shape(np.asarray(x_train), "x_train", (None, 8, 8), "[N, 8, 8]")
    if x_train.shape[0] < 1:
        raise ValueError("`x_train` must hold at least one image, got shape (0, 8, 8).")
    check_labels(y_train, "y_train", NUM_CLASSES)
    y_train = check_shape(np.asarray(y_train), "y_train", (x_train.shape[0],), "[N]")
    steps = check_int(steps, "steps", minimum=0)
    lr = check_static_float(lr, "lr", 0.0, strict=True)
    l2 = check_static_float(l2, "l2", 0.0)
    check_scalar(sd_floor, "sd_floor", 0.0, low_open=True)
    flat = x_train.reshape(-1, 64)
    init = DigitsModel(
        jnp.zeros((64, NUM_CLASSES)),
        jnp.zeros((NUM_CLASSES,)),
        jnp.asarray(flat.mean(0)),
        jnp.asarray(np.maximum(flat.std(0), sd_floor)),
    )
    w, b = _fit(init, jnp.asarray(x_train), jnp.asarray(y_train), steps, lr, l2)
    return init.replace(w=w, b=b)


@functools.partial(jax.jit, static_argnames=("steps", "lr", "l2"))
def _fit(init: DigitsModel, xs, ys, steps: int, lr: float, l2: float):
    def loss(wb):
        logits = init.replace(w=wb[0], b=wb[1]).logits(xs)
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, ys).mean()
        return ce + l2 * jnp.sum(wb[0] ** 2)

    wb, _ = fit(loss, (init.w, init.b), optax.adam(lr), steps)
    return wb


def shifted_client_risks(
    model: DigitsModel,
    keys: jax.Array,
    x_pool: jax.Array,
    y_pool: jax.Array,
    alpha,
    shift_sd: float = 0.05,
) -> jax.Array:
    """Exact risks ``[C]`` of clients ``keys [C]`` (module docstring) on a labelled pool.

    Args:
      model: the fixed network.
      keys: one key per client (its proportions, ``A`` and ``B``).
      x_pool: ``[P, 8, 8]`` pool images; y_pool: ``[P]`` labels (every class present).
      alpha: Dirichlet concentration per class (scalar).
      shift_sd: SD ``s`` of the affine shift's entries (static; ``0``: no shift).

    Returns:
      ``[C]`` risks in ``[0, 1]``.
    """
    _check_model(model)
    keys = check_key(keys, "keys", batched=True)
    if keys.ndim != 1:
        raise ValueError(
            f"`keys` must be [C] keys (one per client), got a key of shape {keys.shape}."
        )
    check_values(x_pool, "x_pool")
    check_shape(x_pool, "x_pool", (None, 8, 8), "[P, 8, 8]")
    check_labels(y_pool, "y_pool", NUM_CLASSES, shape=np.shape(x_pool)[:1])
    if is_concrete(y_pool):
        missing = sorted(set(range(NUM_CLASSES)) - set(np.unique(np.asarray(y_pool)).tolist()))
        if missing:
            raise ValueError(
                f"`y_pool` must hold every class 0..9 (a class error rate is a mean over its "
                f"images); classes {missing} are missing."
            )
    check_scalar(alpha, "alpha", 0.0, low_open=True)
    shift_sd = check_static_float(shift_sd, "shift_sd", 0.0)
    return _shifted_risks(model, keys, x_pool, y_pool, alpha, shift_sd)


def _check_model(model) -> None:
    if not isinstance(model, DigitsModel):
        raise TypeError(f"`model` must be a DigitsModel, got {type(model).__name__}.")
    for field, shape in (("w", (64, 10)), ("b", (10,)), ("mean", (64,)), ("sd", (64,))):
        check_values(getattr(model, field), f"model.{field}")
        check_shape(getattr(model, field), f"model.{field}", shape)
    check_values(model.sd, "model.sd", 0.0, low_open=True)


@functools.partial(jax.jit, static_argnames=("shift_sd",))
def _shifted_risks(model, keys, x_pool, y_pool, alpha, shift_sd: float):
    def one(k):
        kp, ka, kb = jax.random.split(k, 3)
        pi = jax.random.dirichlet(kp, jnp.full((NUM_CLASSES,), alpha))
        a = jnp.eye(8) + shift_sd * jax.random.normal(ka, (8, 8))
        b = shift_sd * jax.random.normal(kb, (8, 8))
        shifted = jnp.einsum("ij,pjk->pik", a, x_pool) + b[None, :, :]
        wrong = (model.predict(shifted) != y_pool).astype(jnp.float32)
        onehot = jax.nn.one_hot(y_pool, NUM_CLASSES)
        err = (wrong[:, None] * onehot).sum(0) / onehot.sum(0)
        return jnp.sum(pi * err)

    return jax.vmap(one)(keys)

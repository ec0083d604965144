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

from jaxlab.core.checks import check_int, check_positive, check_shape
from jaxlab.core.training import fit

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
    x_train = check_shape(np.asarray(x_train), "x_train", (None, 8, 8), "[N, 8, 8]")
    y_train = check_shape(np.asarray(y_train), "y_train", (x_train.shape[0],), "[N]")
    steps = check_int(steps, "steps", minimum=0)
    check_positive(lr, "lr")
    check_positive(l2, "l2", strict=False)
    check_positive(sd_floor, "sd_floor")
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


@functools.partial(jax.jit, static_argnames=("shift_sd",))
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

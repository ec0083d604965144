"""Frozen encoders for the digits stand-in and the linear-head baselines.

- ``E_weak`` (:func:`fit_pca` / :func:`pca_embed`): PCA-16 whitened pixels, fitted on the
  pretraining classes, L2-normalised.
- ``E_cnn`` (:func:`train_cnn` / :func:`cnn_embed`): a :class:`jaxlab.core.nn.ConvNet`
  (conv 3x3x32, conv 3x3x64, 2x2 pool, dense 128, dense 64, L2-normalised) trained with a
  cosine-softmax head (``scale * <z, w_c / |w_c|>``) on the pretraining classes, then frozen.
- Head baselines (:func:`train_head`): a linear softmax on the frozen embedding, trained from
  zero or from a previous head (fine-tuning); the monolithic model a memory replaces.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxlab.core.checks import check_int, check_scalar
from jaxlab.core.nn import ConvNet
from jaxlab.core.training import fit, minibatch_epochs

__all__ = [
    "CNNConfig",
    "cnn_embed",
    "cnn_encoder",
    "fit_pca",
    "head_predict",
    "l2_normalise",
    "pca_embed",
    "train_cnn",
    "train_head",
]


def l2_normalise(x, eps: float = 1e-12):
    x = jnp.asarray(x, jnp.float32)
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), eps)


def fit_pca(x, dim: int = 16, eps: float = 1e-6) -> dict[str, np.ndarray]:
    """PCA whitening fitted on ``x [N, D]``: ``{"mean", "components" [D, dim], "scale" [dim]}``."""
    x = np.asarray(x, np.float64)
    check_int(dim, "dim", minimum=1, maximum=min(x.shape))
    mean = x.mean(axis=0)
    _, s, vt = np.linalg.svd(x - mean, full_matrices=False)
    std = s[:dim] / np.sqrt(max(len(x) - 1, 1))
    return {"mean": mean.astype(np.float32), "components": vt[:dim].T.astype(np.float32),
            "scale": (1.0 / (std + eps)).astype(np.float32)}  # fmt: skip


def pca_embed(params: dict, x) -> jax.Array:
    """Whitened, L2-normalised PCA projection ``[N, dim]``."""
    x = jnp.asarray(x, jnp.float32)
    z = (x - params["mean"][None]) @ params["components"] * params["scale"][None]
    return l2_normalise(z)


@dataclasses.dataclass(frozen=True)
class CNNConfig:
    """E_cnn training: ``epochs`` of Adam(``lr``) minibatches of ``batch``; cosine-softmax
    ``scale``; embedding width ``dim``."""

    epochs: int = 30
    batch: int = 64
    lr: float = 1e-3
    scale: float = 16.0
    dim: int = 64

    def __post_init__(self):
        check_int(self.epochs, "epochs", minimum=1)
        check_int(self.batch, "batch", minimum=1)
        check_scalar(self.lr, "lr", 0.0, low_open=True)
        check_scalar(self.scale, "scale", 0.0, low_open=True)
        check_int(self.dim, "dim", minimum=1)


def cnn_encoder(dim: int = 64) -> ConvNet:
    """The E_cnn network (before normalisation)."""
    return ConvNet(channels=(32, 64), head=(128, dim), pool=(1,), global_pool=False)


def cnn_embed(params, x, dim: int = 64) -> jax.Array:
    """L2-normalised E_cnn embeddings of images ``x [N, 8, 8, 1]``."""
    return l2_normalise(cnn_encoder(dim).apply(params, jnp.asarray(x, jnp.float32)))


def train_cnn(key, x, y, n_classes: int, config: CNNConfig = CNNConfig()):
    """Train E_cnn with a cosine-softmax head on ``(x [N, 8, 8, 1], y [N])``; returns
    ``(encoder_params, epoch_losses)`` (the head is discarded: the encoder is frozen)."""
    net = cnn_encoder(config.dim)
    k1, k2, k3 = jax.random.split(key, 3)
    params = {"enc": net.init(k1, jnp.zeros((1, *np.shape(x)[1:]), jnp.float32)),
              "head": jax.random.normal(k2, (config.dim, n_classes)) * 0.1}  # fmt: skip

    def loss_fn(p, batch, _key):
        xb, yb = batch
        z = l2_normalise(net.apply(p["enc"], xb))
        w = p["head"] / jnp.linalg.norm(p["head"], axis=0, keepdims=True)
        logits = config.scale * z @ w
        return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()

    run = jax.jit(
        lambda p, d, k: minibatch_epochs(
            loss_fn, p, optax.adam(config.lr), d, k, epochs=config.epochs, batch_size=config.batch
        )
    )
    params, losses = run(params, (jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.int32)), k3)
    return params["enc"], losses


def train_head(z, y, n_classes: int, *, steps: int = 500, lr: float = 0.1, init=None,
               l2: float = 1e-4):  # fmt: skip
    """A linear softmax head ``{"w" [d, C], "b" [C]}`` on frozen embeddings, full-batch Adam.

    ``init`` (a head) starts fine-tuning from it (its classes padded with zeros to ``n_classes``).
    """
    z = jnp.asarray(z, jnp.float32)
    y = jnp.asarray(y, jnp.int32)
    d = z.shape[1]
    if init is None:
        params = {"w": jnp.zeros((d, n_classes)), "b": jnp.zeros((n_classes,))}
    else:
        c0 = init["w"].shape[1]
        params = {"w": jnp.zeros((d, n_classes)).at[:, :c0].set(init["w"]),
                  "b": jnp.zeros((n_classes,)).at[:c0].set(init["b"])}  # fmt: skip

    def loss_fn(p):
        logits = z @ p["w"] + p["b"][None]
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
        return ce + l2 * jnp.sum(p["w"] ** 2)

    params, _ = jax.jit(fit, static_argnums=(0, 2, 3))(loss_fn, params, optax.adam(lr), steps)
    return params


def head_predict(params, z) -> jax.Array:
    return jnp.argmax(jnp.asarray(z, jnp.float32) @ params["w"] + params["b"][None], axis=1)

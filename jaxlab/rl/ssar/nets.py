"""SSAR's networks on :class:`jaxlab.core.nn.MLP` (spec section 2; widths 64, the official 256).

- :class:`Actor`: TD3's deterministic policy ``a_max tanh(MLP(s))``.
- :class:`TwinCritic`: two independent critics ``[s, a] -> 64 -> LayerNorm -> ReLU -> 64 ->
  LayerNorm -> ReLU -> 1`` (the LayerNorm is in SSAR's code for the baselines too), stacked
  ``[2, B]``.
- :class:`BetaNet`: the state -> coefficient network ``beta_phi``: 3 hidden ReLU layers,
  Xavier-uniform weights, zero biases except the output bias ``ln 2``, output
  ``1.5 beta0 sigmoid(.)`` in ``(0, 1.5 beta0)`` (so ``beta0`` when the output weights are 0).
- :class:`TanhGaussianActor`: CQL's (CORL's) SAC policy: ``s -> 64 -> 64 -> 64 -> (mu,
  log sigma)`` (PyTorch-default hidden init, Xavier-uniform output layer of gain 1e-2, zero
  bias); ``log sigma <- m log sigma + o`` with learned scalars ``m = 1``, ``o = -1`` at init,
  clamped to ``[-20, 2]``; the action is ``tanh`` of the Gaussian (:func:`tanh_gaussian`).
- :class:`CQLCritic`: two critics ``[s, a] -> (64 -> LayerNorm -> ReLU) x 3 -> 1``, orthogonal
  weights (gain ``sqrt 2``, output layer 1e-2), zero biases, stacked ``[2, ...]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpyro.distributions as dist

from jaxlab.core.checks import check_ints, check_scalar
from jaxlab.core.nn import MLP

__all__ = ["Actor", "BetaNet", "CQLCritic", "TanhGaussianActor", "TwinCritic", "tanh_gaussian"]


class Actor(nn.Module):
    """``a_max tanh(MLP(hidden + (action_dim,))(s))``: ``[..., S] -> [..., action_dim]``."""

    action_dim: int
    hidden: Sequence[int] = (64, 64)
    max_action: float = 1.0

    @nn.compact
    def __call__(self, s: jax.Array) -> jax.Array:
        check_ints(self.hidden, "hidden", minimum=1)
        check_scalar(self.max_action, "max_action", 0.0, low_open=True)
        out = MLP((*self.hidden, self.action_dim), activation="relu", init_scheme="torch")(s)
        return self.max_action * jnp.tanh(out)


class TwinCritic(nn.Module):
    """Two critics ``Q_i(s, a)`` with LayerNorm hidden layers: ``[..., S], [..., A] -> [2, ...]``
    (TD3+BC's: PyTorch-default init)."""

    hidden: Sequence[int] = (64, 64)
    layer_norm: bool = True
    init_scheme: str = "torch"
    init_gain: float = 1.0
    output_gain: float | None = None

    @nn.compact
    def __call__(self, s: jax.Array, a: jax.Array) -> jax.Array:
        check_ints(self.hidden, "hidden", minimum=1)
        sa = jnp.concatenate([s, a], axis=-1)
        qs = [
            MLP(
                (*self.hidden, 1),
                activation="relu",
                init_scheme=self.init_scheme,
                init_gain=self.init_gain,
                output_init_gain=self.output_gain,
                layer_norm=self.layer_norm,
                name=f"q{i}",
            )(sa)[..., 0]  # fmt: skip
            for i in (1, 2)
        ]
        return jnp.stack(qs)


def CQLCritic(hidden: Sequence[int] = (64, 64, 64)) -> TwinCritic:  # noqa: N802
    """CQL's twin critics: 3 LayerNorm hidden layers, orthogonal init (gain ``sqrt 2``, output
    layer 1e-2), zero biases."""
    return TwinCritic(tuple(hidden), True, "orthogonal", math.sqrt(2.0), 1e-2)


# tanh(x) = 2 sigmoid(2x) - 1: numpyro 0.22 has no TanhTransform, so the bijector is composed
# from its affine and (numerically stable) sigmoid transforms
_TANH = dist.transforms.ComposeTransform(
    [
        dist.transforms.AffineTransform(0.0, 2.0),
        dist.transforms.SigmoidTransform(),
        dist.transforms.AffineTransform(-1.0, 2.0),
    ]
)


def tanh_gaussian(mean: jax.Array, log_std: jax.Array) -> dist.Distribution:
    """The policy ``tanh(N(mean, exp(log_std)^2))`` per action dimension, a numpyro
    ``TransformedDistribution`` of a ``Normal`` under ``tanh`` (composed as ``2 sigmoid(2x) -
    1``: numpyro 0.22 has no ``TanhTransform``); ``log_prob`` is elementwise with the Jacobian,
    ``sample`` is reparameterised."""
    return dist.TransformedDistribution(dist.Normal(mean, jnp.exp(log_std)), _TANH)


class TanhGaussianActor(nn.Module):
    """CQL's policy head: ``[..., S] -> (mean, log_std)``, each ``[..., action_dim]`` (see the
    module docstring); the deterministic action is ``tanh(mean)``."""

    action_dim: int
    hidden: Sequence[int] = (64, 64, 64)

    @nn.compact
    def __call__(self, s: jax.Array) -> tuple[jax.Array, jax.Array]:
        check_ints(self.hidden, "hidden", minimum=1)
        out = MLP((*self.hidden, 2 * self.action_dim), activation="relu", init_scheme="torch",
                  output_init_scheme="xavier_uniform", output_init_gain=1e-2)(s)  # fmt: skip
        mean, log_std = jnp.split(out, 2, axis=-1)
        scale = self.param("log_std_multiplier", nn.initializers.constant(1.0), ())
        offset = self.param("log_std_offset", nn.initializers.constant(-1.0), ())
        return mean, jnp.clip(scale * log_std + offset, -20.0, 2.0)


class BetaNet(nn.Module):
    """``beta_phi(s) = 1.5 beta0 sigmoid(MLP(s))`` in ``(0, 1.5 beta0)``: ``[..., S] -> [...]``."""

    beta0: float
    hidden: Sequence[int] = (64, 64, 64)

    @nn.compact
    def __call__(self, s: jax.Array) -> jax.Array:
        check_scalar(self.beta0, "beta0", 0.0, low_open=True)
        check_ints(self.hidden, "hidden", minimum=1)
        h = MLP(tuple(self.hidden), activation="relu", output_activation="relu",
                init_scheme="xavier_uniform")(s)  # fmt: skip
        logit = nn.Dense(
            1,
            kernel_init=nn.initializers.xavier_uniform(),
            bias_init=nn.initializers.constant(math.log(2.0)),
            name="out",
        )(h)[..., 0]
        return 1.5 * self.beta0 * jax.nn.sigmoid(logit)

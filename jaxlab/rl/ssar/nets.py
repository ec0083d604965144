"""SSAR's networks on :class:`jaxlab.core.nn.MLP` (spec section 2; widths 64, the official 256).

- :class:`Actor`: TD3's deterministic policy ``a_max tanh(MLP(s))``.
- :class:`TwinCritic`: two independent critics ``[s, a] -> 64 -> LayerNorm -> ReLU -> 64 ->
  LayerNorm -> ReLU -> 1`` (the LayerNorm is in SSAR's code for the baselines too), stacked
  ``[2, B]``.
- :class:`BetaNet`: the state -> coefficient network ``beta_phi``: 3 hidden ReLU layers,
  Xavier-uniform weights, zero biases except the output bias ``ln 2``, output
  ``1.5 beta0 sigmoid(.)`` in ``(0, 1.5 beta0)`` (so ``beta0`` when the output weights are 0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxlab.core.checks import check_ints, check_scalar
from jaxlab.core.nn import MLP

__all__ = ["Actor", "BetaNet", "TwinCritic"]


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
    """Two critics ``Q_i(s, a)`` with LayerNorm hidden layers: ``[B, S], [B, A] -> [2, B]``."""

    hidden: Sequence[int] = (64, 64)
    layer_norm: bool = True

    @nn.compact
    def __call__(self, s: jax.Array, a: jax.Array) -> jax.Array:
        check_ints(self.hidden, "hidden", minimum=1)
        sa = jnp.concatenate([s, a], axis=-1)
        qs = [
            MLP(
                (*self.hidden, 1),
                activation="relu",
                init_scheme="torch",
                layer_norm=self.layer_norm,
                name=f"q{i}",
            )(sa)[..., 0]  # fmt: skip
            for i in (1, 2)
        ]
        return jnp.stack(qs)


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

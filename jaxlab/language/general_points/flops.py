"""Training compute as the paper counts it: ``6 N`` FLOPs per trained token and ``2 N`` per
generated or scored token, ``N`` the policy's per-token matmul parameters, non-pad tokens only.

``N`` counts every matrix a token multiplies through: per block the query, key, value and output
projections (``4 d^2``) and the MLP (``2 d d_mlp``), the LM head (``d V``) and the value MLP (its
weights; it runs on the hidden state). The input embedding is a lookup, not a matmul, and is left
out; biases, LayerNorms and the attention's score / value products (``O(T)`` per token, small at
context 64) are left out too, as in the ``6 N D`` rule.
"""

from __future__ import annotations

from jaxlab.language.general_points import tokens as T
from jaxlab.language.general_points.model import ModelConfig

__all__ = ["inference_flops", "matmul_params", "ppo_update_flops", "training_flops"]


def matmul_params(config: ModelConfig) -> int:
    """``N``: per-token matmul parameters of the policy (see the module docstring)."""
    if not isinstance(config, ModelConfig):
        raise TypeError(f"`config` must be a ModelConfig, got {type(config).__name__}.")
    d = config.d_model
    per_block = 4 * d * d + 2 * d * config.d_mlp
    widths = (d, *config.value_hidden, 1)
    value = sum(a * b for a, b in zip(widths[:-1], widths[1:], strict=True))
    return config.num_layers * per_block + d * T.VOCAB_SIZE + value


def training_flops(config: ModelConfig, n_tokens) -> float:
    """``6 N`` per trained (forward + backward) token."""
    return 6.0 * matmul_params(config) * n_tokens


def inference_flops(config: ModelConfig, n_tokens) -> float:
    """``2 N`` per generated or scored (forward only) token."""
    return 2.0 * matmul_params(config) * n_tokens


def ppo_update_flops(config: ModelConfig, rollout_tokens, epochs: int) -> float:
    """One PPO iteration: the rollout's tokens once forward (``2 N``), then ``epochs`` passes of
    forward + backward over the same tokens (``6 N`` each)."""
    return inference_flops(config, rollout_tokens) + epochs * training_flops(config, rollout_tokens)

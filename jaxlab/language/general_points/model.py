"""The policy (a :class:`jaxlab.core.nn.Transformer` LM with a value head) and its supervised
training: pretraining on P1 + P2 and SFT on GP responses.

The LM is a causal token transformer (RoPE) over the GeneralPoints vocabulary; the value head a
:class:`jaxlab.core.nn.MLP` on the LM's final hidden state (the hidden state before an attempt, as
the official value head reads the last prompt token). Parameters are one dict ``{"lm": ..,
"value": ..}``; supervised training leaves ``value`` unchanged (``optax.set_to_zero``).

Supervised training follows the method contract: :func:`make_lm_trainer` returns ``init(key,
params=None)`` and ``step(state, x=None) -> (state, metrics)``; each step draws its batch inside
``jit`` from ``fold_in(state.train.key, step)``, so a run is one ``lax.scan``
(:func:`jaxlab.core.training.run_chunked`). The formula table reaches the step as part of the
state (:class:`LMState`), not as a constant folded into the compiled program. The loss is the
cross-entropy of the response tokens only (the prompt weighs 0), AdamW with linear warm-up and
cosine decay, gradients clipped by global norm. :func:`pretrain` caches its result with orbax
under a hash of (configs, seed) (:func:`jaxlab.core.checkpoint.load_or_build`).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxlab.core import checkpoint
from jaxlab.core.checks import check_choice, check_int, check_key, check_scalar
from jaxlab.core.nn import MLP, Transformer
from jaxlab.core.sharding import constrain_batch
from jaxlab.core.training import TrainState, all_finite, chunked_runner, next_token_loss
from jaxlab.language.general_points import cards as C
from jaxlab.language.general_points import data as D
from jaxlab.language.general_points import tokens as T

__all__ = [
    "LMState",
    "LMTrainConfig",
    "LMTrainer",
    "ModelConfig",
    "Policy",
    "make_lm_trainer",
    "make_policy",
    "pretrain",
    "sequence_loss",
]

CACHE_VERSION = "general_points-1"


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The policy (defaults: the quick model, d 64, 2 layers of 4 heads, MLP 256).

    Attributes:
      d_model, num_layers, num_heads, d_mlp: the :class:`~jaxlab.core.nn.Transformer` sizes.
      max_len: the longest sequence (prompt and every attempt with its feedback), 64.
      value_hidden: hidden widths of the value MLP (then one output).
    """

    d_model: int = 64
    num_layers: int = 2
    num_heads: int = 4
    d_mlp: int = 256
    max_len: int = 64
    value_hidden: tuple[int, ...] = (64,)

    def __post_init__(self):
        for name in ("d_model", "num_layers", "num_heads", "d_mlp"):
            check_int(getattr(self, name), f"ModelConfig.{name}", minimum=1)
        check_int(self.max_len, "ModelConfig.max_len", minimum=D.GP_LEN)
        if not isinstance(self.value_hidden, tuple) or not all(
            isinstance(w, int) and w >= 1 for w in self.value_hidden
        ):
            raise ValueError(
                f"`ModelConfig.value_hidden` must be a tuple of positive ints, got "
                f"{self.value_hidden!r}."
            )
        if self.d_model % self.num_heads or (self.d_model // self.num_heads) % 2:
            raise ValueError(
                f"`ModelConfig.d_model` ({self.d_model}) must be num_heads ({self.num_heads}) "
                "times an even head width (RoPE)."
            )


class Policy(NamedTuple):
    """The two networks (Flax modules) and their joint initialisation.

    Fields:
      lm: the :class:`~jaxlab.core.nn.Transformer` (logits ``[B, T, VOCAB_SIZE]``).
      value: the value :class:`~jaxlab.core.nn.MLP` (``[.., d_model] -> [.., 1]``).
      init: ``init(key) -> {"lm": .., "value": ..}``.
      config: the :class:`ModelConfig`.
    """

    lm: Transformer
    value: MLP
    init: Any
    config: ModelConfig


def make_policy(config: ModelConfig) -> Policy:
    """The policy of ``config``."""
    if not isinstance(config, ModelConfig):
        raise TypeError(f"`config` must be a ModelConfig, got {type(config).__name__}.")
    lm = Transformer(
        d_model=config.d_model,
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        d_mlp=config.d_mlp,
        vocab_size=T.VOCAB_SIZE,
    )
    value = MLP((*config.value_hidden, 1), "relu")

    def init(key):
        key = check_key(key)
        k1, k2 = jax.random.split(key)
        return {
            "lm": lm.init(k1, jnp.zeros((1, 8), jnp.int32)),
            "value": value.init(k2, jnp.zeros((1, config.d_model))),
        }

    return Policy(lm, value, init, config)


def sequence_loss(lm: Transformer, lm_params, seqs: D.Sequences):
    """Cross-entropy of the response tokens (``loss_mask``; the prompt weighs 0) and the
    teacher-forced exact-match accuracy (every response token the argmax). Returns ``(loss,
    accuracy)``."""
    tokens = seqs.tokens
    logits = lm.apply(lm_params, tokens, mask=tokens != T.PAD)
    return next_token_loss(logits, tokens, seqs.loss_mask)


@dataclasses.dataclass(frozen=True)
class LMTrainConfig:
    """One supervised run.

    Attributes:
      stream: ``"pretrain"`` (P1 + P2) or ``"sft"`` (GP responses on ID-train hands).
      steps, batch_size: optimiser steps and sequences per step.
      learning_rate: peak learning rate (linear warm-up over ``warmup_steps``, cosine to 0).
      warmup_steps: warm-up steps (< ``steps``).
      weight_decay: AdamW decoupled weight decay.
      grad_clip: global gradient-norm clip.
      p1_fraction: share of P1 rows in a pretraining batch.
      split_seed: the ID split (SFT draws ``"train"`` hands of ``id_split(split_seed)``).
      chunk_size: steps per jitted chunk (progress granularity).
    """

    stream: str = "pretrain"
    steps: int = 1000
    batch_size: int = 128
    learning_rate: float = 1e-3
    warmup_steps: int = 50
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    p1_fraction: float = 0.5
    split_seed: int = 0
    chunk_size: int = 100

    def __post_init__(self):
        check_choice(self.stream, "LMTrainConfig.stream", ("pretrain", "sft"))
        check_int(self.steps, "LMTrainConfig.steps", minimum=1)
        check_int(self.batch_size, "LMTrainConfig.batch_size", minimum=1)
        check_scalar(self.learning_rate, "LMTrainConfig.learning_rate", 0.0, low_open=True)
        check_int(self.warmup_steps, "LMTrainConfig.warmup_steps", minimum=0)
        if self.warmup_steps >= self.steps:
            raise ValueError(
                f"`LMTrainConfig.warmup_steps` ({self.warmup_steps}) must be < steps "
                f"({self.steps})."
            )
        check_scalar(self.weight_decay, "LMTrainConfig.weight_decay", 0.0)
        check_scalar(self.grad_clip, "LMTrainConfig.grad_clip", 0.0, low_open=True)
        check_scalar(self.p1_fraction, "LMTrainConfig.p1_fraction", 0.0, 1.0)
        check_int(self.split_seed, "LMTrainConfig.split_seed", minimum=0)
        check_int(self.chunk_size, "LMTrainConfig.chunk_size", minimum=1)


@struct.dataclass
class LMState:
    """A supervised run's state.

    Attributes:
      train: :class:`~jaxlab.core.training.TrainState` over ``{"lm", "value"}`` (``step``;
        ``key``: step ``t`` draws its batch from ``fold_in(key, t)``).
      tables: the formula table (:class:`~jaxlab.language.general_points.cards.DeviceTables`),
        read by the batch generators.
    """

    train: TrainState
    tables: C.DeviceTables


class LMTrainer(NamedTuple):
    """Pure functions of one supervised setup (see :func:`make_lm_trainer`).

    Fields:
      init: ``init(key, params=None) -> LMState`` (``params=None``: a fresh policy from ``key``).
      step: ``step(state, x=None) -> (state, {"loss", "accuracy", "grad_norm", "finite"})``.
      run: ``run(state, n_steps=None, desc="", vmap=False) -> (state, metrics [n_steps])``.
      precompile: ``precompile(state, n_steps=None, vmap=False)`` (compile ``run`` without
        running it).
      sample: ``sample(key, tables) -> Sequences``, one batch of the stream.
      policy: the :class:`Policy`.
    """

    init: Any
    step: Any
    run: Any
    precompile: Any
    sample: Any
    policy: Policy


def make_lm_trainer(model_config: ModelConfig, config: LMTrainConfig, *, mesh=None) -> LMTrainer:
    """Supervised training of the policy's LM on ``config.stream``; ``mesh`` shards each step's
    batch (``batch_size`` a multiple of its devices)."""
    if not isinstance(config, LMTrainConfig):
        raise TypeError(f"`config` must be an LMTrainConfig, got {type(config).__name__}.")
    if mesh is not None and config.batch_size % mesh.size:
        raise ValueError(
            f"`config.batch_size` ({config.batch_size}) must be a multiple of the mesh's "
            f"{mesh.size} devices."
        )
    policy = make_policy(model_config)
    lr = optax.warmup_cosine_decay_schedule(
        0.0, config.learning_rate, config.warmup_steps, config.steps, 0.0
    )
    lm_tx = optax.chain(
        optax.clip_by_global_norm(config.grad_clip),
        optax.adamw(lr, weight_decay=config.weight_decay),
    )
    tx = optax.multi_transform(
        {"lm": lm_tx, "value": optax.set_to_zero()}, {"lm": "lm", "value": "value"}
    )

    def sample(key, tables):
        if config.stream == "pretrain":
            return D.sample_pretrain(key, config.batch_size, tables, config.p1_fraction)
        return D.sample_gp(key, config.batch_size, tables, "train", config.split_seed)

    def init(key, params=None) -> LMState:
        key = check_key(key, "key")
        if params is None:
            params = policy.init(jax.random.fold_in(key, 1))
        return LMState(TrainState.create(params, tx, key), C.device_tables())

    def step(state: LMState, x=None):
        del x
        seqs = constrain_batch(sample(state.train.step_key(), state.tables), mesh)

        def loss_fn(p):
            return sequence_loss(policy.lm, p["lm"], seqs)

        (loss, acc), grads = jax.value_and_grad(loss_fn, has_aux=True)(state.train.params)
        train = state.train.apply_gradients(grads)
        metrics = {
            "loss": loss,
            "accuracy": acc,
            "grad_norm": optax.tree.norm(grads),
            "finite": all_finite(loss, grads),
        }
        return state.replace(train=train), metrics

    run, precompile = chunked_runner(step, config.steps, config.chunk_size, "loss")

    return LMTrainer(init, step, run, precompile, sample, policy)


def pretrain(
    model_config: ModelConfig,
    config: LMTrainConfig,
    seed: int = 0,
    *,
    cache_dir: str | Path | None | bool = None,
    desc: str = "pretrain",
):
    """Pretrain (or load) the policy on P1 + P2 (``config.stream == "pretrain"``).

    ``cache_dir``: folder of cached runs (``None``: ``$JAXLAB_CACHE_DIR/general_points``;
    ``False``: no cache). Returns ``(params, info)``, ``info = {"cached", "loss", "accuracy",
    "path"}`` (the per-step curves are ``None`` when loaded)."""
    check_int(seed, "seed", minimum=0)
    if not isinstance(config, LMTrainConfig) or config.stream != "pretrain":
        raise ValueError("`config` must be an LMTrainConfig with stream='pretrain'.")
    trainer = make_lm_trainer(model_config, config)
    key = jax.random.fold_in(jax.random.key(seed), 11)
    path = None
    if cache_dir is not False:
        root = checkpoint.default_cache_dir("general_points") if cache_dir is None else cache_dir
        path = checkpoint.cache_path(root, "base", (CACHE_VERSION, model_config, config, seed))

    def build():
        state, metrics = trainer.run(trainer.init(key), desc=desc)
        return state.train.params, metrics

    like = jax.eval_shape(lambda: trainer.policy.init(key))
    params, metrics, cached = checkpoint.load_or_build(path, like, build)
    info = {
        "cached": cached,
        "loss": None if metrics is None else metrics["loss"],
        "accuracy": None if metrics is None else metrics["accuracy"],
        "path": None if path is None else str(path),
    }
    return params, info

"""The model, base pretraining and attention-only context-extension fine-tuning.

The model is :class:`jaxlab.core.nn.Transformer` (decoder, pre-LN, RoPE, no biases as in
LLaMA-style models). Context extension is RoPE position interpolation: a model used on sequences
of length ``T`` scales positions by ``base_length / T`` (``interpolation``); every fine-tuned
variant and every evaluation at ``T`` uses the same factor, the no-fine-tuning control too.

Training follows the method contract: :func:`make_trainer` returns ``init(key, params=None)``
and ``step(state, x=None) -> (state, metrics)``; each step draws its batch inside ``jit`` from
``fold_in(state.train.key, step)`` (:func:`~jaxlab.language.retrieval_heads.data.sample_stream`),
so a whole run is one ``lax.scan`` (:func:`jaxlab.core.training.run_chunked`) and seeds can be
``vmap``-ped over ``init`` keys. Base pretraining trains everything (AdamW, linear warm-up then
cosine); fine-tuning trains only the attention projections (``query``/``key``/``value``/``out``)
with Adam through ``optax.multi_transform`` over a label pytree, every other leaf through
``optax.set_to_zero()`` (bitwise unchanged). The base is trained at plain positions
(``position_scale=None``) and context-extended by interpolation plus fine-tuning, as in position
interpolation (Chen et al. 2023). Measured, seed 12, 100 fine-tuning steps (base at 64 / no
fine-tuning at 256 / real fine-tuning at 256): plain 0.89 / 0.10 / 0.88; log-uniform position
scales in [1/2, 1] 0.90 / 0.70 / 0.93 (a base pre-extended on some seeds, little left for the
fine-tuning the paper studies; 0.02 on seed 7); [3/4, 1] 0.83 / 0.00 / 0.82. (Without smeared
keys the plain base fell to 0.8% under interpolation 1/4, which the augmentation was for.)
:func:`pretrain_base` caches the
base parameters with orbax (:mod:`jaxlab.core.checkpoint`) under a hash of (world, model,
training config, seed).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from jaxlab.core import checkpoint
from jaxlab.core.checks import check_bool, check_choice, check_int, check_key, check_scalar
from jaxlab.core.nn import Transformer
from jaxlab.core.sharding import constrain_batch
from jaxlab.core.training import TrainState, all_finite, chunked_runner, next_token_loss
from jaxlab.language.retrieval_heads import data as D

__all__ = [
    "ModelConfig",
    "TrainConfig",
    "Trainer",
    "TrainerState",
    "attention_labels",
    "base_cache_path",
    "default_cache_dir",
    "make_model",
    "make_trainer",
    "pretrain_base",
    "sequence_loss",
]

CACHE_VERSION = "retrieval_heads-2"


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The transformer (defaults: the issue's d_model 64, 4 layers of 4 heads, MLP 256).

    Attributes:
      d_model, num_layers, num_heads, d_mlp: the :class:`~jaxlab.core.nn.Transformer` sizes.
      base_length: the pretraining context; interpolation at length ``T`` is ``base_length / T``.
      use_bias: biases in the attention projections (off: patching every head's residual term
        then reproduces the source model without splitting an output bias).
      smear_keys: smeared keys in every attention layer (:func:`jaxlab.core.nn.smeared_keys`,
        Olsson et al. 2022), on by default. Not in the issue's model: without them the base
        never learns to look up an entity in the budget (measured: plain attention copies a value
        of the asked relation at the rate of a random pick, and plain 8-pair associative recall
        stays at 1/8 after 12000 steps x 32; with them it is solved in 300 steps). The per-head
        smear weight lives under ``attn`` and is fine-tuned with the attention projections.
    """

    d_model: int = 64
    num_layers: int = 4
    num_heads: int = 4
    d_mlp: int = 256
    base_length: int = 64
    use_bias: bool = False
    smear_keys: bool = True

    def __post_init__(self):
        for name in ("d_model", "num_layers", "num_heads", "d_mlp"):
            check_int(getattr(self, name), f"ModelConfig.{name}", minimum=1)
        check_int(self.base_length, "ModelConfig.base_length", minimum=8)
        check_bool(self.use_bias, "ModelConfig.use_bias")
        check_bool(self.smear_keys, "ModelConfig.smear_keys")
        if self.d_model % self.num_heads or (self.d_model // self.num_heads) % 2:
            raise ValueError(
                f"`ModelConfig.d_model` ({self.d_model}) must be num_heads ({self.num_heads}) "
                "times an even head width (RoPE)."
            )


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """One training run's optimisation.

    Attributes:
      steps: optimiser steps.
      batch_size: sequences per step.
      length: sequence length ``T``.
      learning_rate: peak learning rate.
      optimizer: ``"adamw"`` (base) or ``"adam"`` (fine-tuning).
      schedule: ``"cosine"`` (linear warm-up then cosine decay to 0) or ``"constant"``.
      warmup_steps: warm-up steps of the cosine schedule.
      weight_decay: AdamW decoupled weight decay.
      attention_only: train only the attention projections (the rest ``set_to_zero``).
      lm_weight: weight of the non-answer tokens' next-token loss (the answer tokens weigh 1;
        ``lm_only`` data has no answer and weighs every token 1).
      chunk_size: steps per jitted chunk (progress granularity).
      position_scale: ``(low, high)``: each sequence's RoPE positions are scaled by a factor
        drawn log-uniformly from this range (position augmentation; it pre-extends a base, see
        the module docstring); ``None``: the model's own (the default, base included).
    """

    steps: int = 150
    batch_size: int = 16
    length: int = 256
    learning_rate: float = 1e-3
    optimizer: str = "adam"
    schedule: str = "constant"
    warmup_steps: int = 0
    weight_decay: float = 0.0
    attention_only: bool = True
    lm_weight: float = 0.0
    chunk_size: int = 50
    position_scale: tuple[float, float] | None = None

    def __post_init__(self):
        check_int(self.steps, "TrainConfig.steps", minimum=1)
        check_int(self.batch_size, "TrainConfig.batch_size", minimum=1)
        check_int(self.length, "TrainConfig.length", minimum=D._min_length("real"))
        check_scalar(self.learning_rate, "TrainConfig.learning_rate", 0.0, low_open=True)
        check_choice(self.optimizer, "TrainConfig.optimizer", ("adam", "adamw"))
        check_choice(self.schedule, "TrainConfig.schedule", ("cosine", "constant"))
        check_int(self.warmup_steps, "TrainConfig.warmup_steps", minimum=0)
        check_scalar(self.weight_decay, "TrainConfig.weight_decay", 0.0)
        check_bool(self.attention_only, "TrainConfig.attention_only")
        check_scalar(self.lm_weight, "TrainConfig.lm_weight", 0.0)
        check_int(self.chunk_size, "TrainConfig.chunk_size", minimum=1)
        if self.position_scale is not None:
            ok = isinstance(self.position_scale, tuple) and len(self.position_scale) == 2
            lo, hi = self.position_scale if ok else (0, 0)
            if not (ok and 0 < lo <= hi):
                raise ValueError(
                    "`TrainConfig.position_scale` must be None or (low, high) with "
                    f"0 < low <= high, got {self.position_scale!r}."
                )
        if self.schedule == "cosine" and self.warmup_steps >= self.steps:
            raise ValueError(
                f"`TrainConfig.warmup_steps` ({self.warmup_steps}) must be < steps ({self.steps})."
            )


BASE_TRAIN = TrainConfig(
    steps=600,
    batch_size=32,
    length=64,
    learning_rate=3e-3,
    optimizer="adamw",
    schedule="cosine",
    warmup_steps=60,
    weight_decay=0.01,
    attention_only=False,
    lm_weight=0.0,
    position_scale=None,
)


def make_model(
    config: ModelConfig,
    world: D.World,
    length: int | None = None,
    *,
    interpolation: float | None = None,
) -> Transformer:
    """The transformer for sequences of ``length`` tokens (default ``config.base_length``).

    ``interpolation`` is the RoPE position-interpolation factor (``None``: ``base_length /
    length``; ``1.0``: plain RoPE, e.g. the no-interpolation control). All returned modules share
    one parameter tree.
    """
    if not isinstance(config, ModelConfig):
        raise TypeError(f"`config` must be a ModelConfig, got {type(config).__name__}.")
    length = config.base_length if length is None else check_int(length, "length", minimum=1)
    if interpolation is None:
        interpolation = config.base_length / length
    else:
        interpolation = check_scalar(interpolation, "interpolation", 0.0, low_open=True)
    return Transformer(
        d_model=config.d_model,
        num_layers=config.num_layers,
        num_heads=config.num_heads,
        d_mlp=config.d_mlp,
        vocab_size=world.vocab_size,
        rope_scale=float(interpolation),
        use_bias=config.use_bias,
        smear_keys=config.smear_keys,
    )


def attention_labels(params: Any) -> Any:
    """A label pytree of ``params``: ``"attention"`` for leaves under an ``attn`` module
    (``query``, ``key``, ``value``, ``out``), ``"frozen"`` for every other leaf."""

    def label(path, _):
        names = [getattr(k, "key", None) for k in path]
        return "attention" if "attn" in names else "frozen"

    return jax.tree_util.tree_map_with_path(label, params)


def sequence_loss(
    model: Transformer, params, batch: D.Batch, lm_weight: float = 0.0, positions=None
):
    """Weighted next-token cross-entropy: answer targets (``loss_mask``) weigh 1, other real
    targets ``lm_weight``. Returns ``(loss, answer accuracy)`` (teacher-forced, all answer
    tokens right). ``positions``: ``[B, T]`` (float) RoPE positions, default ``arange(T)``."""
    tokens = batch.tokens
    logits = model.apply(params, tokens, mask=D.key_mask(tokens), positions=positions)
    answer = batch.loss_mask
    other = (tokens != D.PAD).astype(jnp.float32) * (1.0 - answer)
    return next_token_loss(logits, tokens, answer + lm_weight * other, scored=answer > 0)


@struct.dataclass
class TrainerState:
    """A training run's state.

    Attributes:
      train: :class:`~jaxlab.core.training.TrainState` (``params``, ``opt_state``, ``step``,
        ``key``: the run's key; step ``t`` draws its batch from ``fold_in(key, t)``).
      stream: ``[]`` int32, index of the fine-tuning variant in the trainer's ``streams``
        (traced, so one compiled program serves every variant); ``-1`` for a fixed stream.
    """

    train: TrainState
    stream: jax.Array


class Trainer(NamedTuple):
    """Pure functions of one training setup (see :func:`make_trainer`).

    Fields:
      init: ``init(key, params=None, variant=None) -> TrainerState`` (``params=None``: a fresh
        initialisation from ``key``; ``variant``: one of the trainer's variants when it was
        made with a tuple of them or ``stream=None``).
      step: ``step(state, x=None) -> (state, {"loss", "accuracy", "finite"})``.
      run: ``run(state, n_steps=None, desc="") -> (state, metrics [n_steps])`` via
        :func:`~jaxlab.core.training.run_chunked` (a progress bar on a terminal).
      model: the :class:`~jaxlab.core.nn.Transformer` at ``config.length``.
      precompile: ``precompile(state, n_steps=None, vmap=False)``: compile what ``run`` with
        these arguments will run, from a template state (only its shapes matter), without
        running it (:func:`~jaxlab.core.training.precompile_chunked`).
    """

    init: Any
    step: Any
    run: Any
    model: Transformer
    precompile: Any


def _optimizer(config: TrainConfig, labels):
    if config.schedule == "cosine":
        lr = optax.warmup_cosine_decay_schedule(
            0.0, config.learning_rate, config.warmup_steps, config.steps, 0.0
        )
    else:
        lr = config.learning_rate
    if config.optimizer == "adamw":
        tx = optax.adamw(lr, weight_decay=config.weight_decay)
    else:
        tx = optax.adam(lr)
    if not config.attention_only:
        return tx
    return optax.multi_transform({"attention": tx, "frozen": optax.set_to_zero()}, labels)


def make_trainer(
    model_config: ModelConfig,
    world: D.World,
    config: TrainConfig,
    *,
    stream: str | tuple[str, ...] | None,
    mesh=None,
) -> Trainer:
    """A training run of ``config.steps`` steps on ``stream`` (one of ``STREAMS``), or on the
    variant stored in the state, chosen at ``init`` among a tuple of ``VARIANTS`` names
    (``stream=None``: all of them). One compiled step serves every listed variant; list only
    those you run (each adds its generator to the program: about 2 s of compile apiece here).

    ``mesh`` (from :func:`jaxlab.core.sharding.data_mesh`) shards each step's generated batch
    over its devices (``batch_size`` a multiple of the device count); ``None``: one device.
    """
    if not isinstance(config, TrainConfig):
        raise TypeError(f"`config` must be a TrainConfig, got {type(config).__name__}.")
    if isinstance(stream, str):
        check_choice(stream, "stream", D.STREAMS)
        streams = None
    else:
        streams = D.check_streams(D.VARIANTS if stream is None else stream, "stream")
    if mesh is not None and config.batch_size % mesh.size:
        raise ValueError(
            f"`config.batch_size` ({config.batch_size}) must be a multiple of the mesh's "
            f"{mesh.size} devices."
        )
    model = make_model(model_config, world, config.length)
    dummy = jnp.zeros((1, config.length), jnp.int32)
    labels = attention_labels(jax.eval_shape(model.init, jax.random.key(0), dummy))
    # one optimiser object for every state: it is static pytree metadata of TrainState, so a
    # fresh one per ``init`` would recompile the step for every run (~15 s each at T = 256)
    tx = _optimizer(config, labels)

    def init(key, params=None, variant=None) -> TrainerState:
        key = check_key(key, "key")
        if params is None:
            params = model.init(jax.random.fold_in(key, 1), dummy)
        if streams is not None:
            check_choice(variant, "variant", streams)
            index = streams.index(variant)
        else:
            if variant is not None:
                raise ValueError("`variant` is only for a trainer of several variants.")
            index = -1
        return TrainerState(TrainState.create(params, tx, key), jnp.asarray(index, jnp.int32))

    def draw(state: TrainerState) -> D.Batch:
        k = state.train.step_key()
        if streams is not None:
            return D.sample_stream(
                k, world, state.stream, config.length, config.batch_size, streams
            )
        return D.sample_batch(k, world, stream, config.length, config.batch_size)

    def step(state: TrainerState, x=None):
        del x
        batch = constrain_batch(draw(state), mesh)
        lm = config.lm_weight
        if streams is not None and "lm_only" in streams:
            lm = jnp.where(state.stream == streams.index("lm_only"), 1.0, lm)
        positions = None
        if config.position_scale is not None:
            lo, hi = np.log(config.position_scale[0]), np.log(config.position_scale[1])
            k = state.train.step_key(salt=1)
            scale = jnp.exp(jax.random.uniform(k, (config.batch_size, 1), minval=lo, maxval=hi))
            positions = scale * jnp.arange(config.length, dtype=jnp.float32)[None, :]

        def loss_fn(p):
            if config.attention_only:  # frozen leaves as constants: no weight gradients for them
                p = jax.tree_util.tree_map(
                    lambda x, lab: x if lab == "attention" else jax.lax.stop_gradient(x), p, labels
                )
            return sequence_loss(model, p, batch, lm, positions)

        grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
        (loss, acc), grads = grad_fn(state.train.params)
        train = state.train.apply_gradients(grads)
        metrics = {"loss": loss, "accuracy": acc, "finite": all_finite(loss, grads)}
        return state.replace(train=train), metrics

    run, precompile = chunked_runner(step, config.steps, config.chunk_size, "loss")

    return Trainer(init, step, run, model, precompile)


def base_cache_path(
    model_config: ModelConfig, world: D.World, config: TrainConfig, seed: int, cache_dir
) -> Path:
    """Where the base of (world, model, training config, seed) is cached under ``cache_dir``."""
    key = (CACHE_VERSION, world, model_config, config, int(seed))
    return checkpoint.cache_path(cache_dir, "base", key)


def default_cache_dir() -> Path:
    """``$JAXLAB_CACHE_DIR/retrieval_heads`` or ``~/.cache/jaxlab/retrieval_heads``."""
    return checkpoint.default_cache_dir("retrieval_heads")


def pretrain_base(
    model_config: ModelConfig,
    world: D.World,
    config: TrainConfig = BASE_TRAIN,
    seed: int = 0,
    *,
    cache_dir: str | Path | None | bool = None,
    desc: str = "base",
):
    """Pretrain (or load) the short-context base model on the ``base`` stream.

    ``cache_dir``: folder of cached bases (``None``: :func:`default_cache_dir`; ``False``: no
    cache). Returns ``(params, info)`` with ``info = {"cached": bool, "loss": [steps] | None,
    "path": str | None}``.
    """
    check_int(seed, "seed", minimum=0)
    trainer = make_trainer(model_config, world, config, stream="base")
    key = jax.random.fold_in(jax.random.key(seed), 7)
    path = None
    if cache_dir is not False:
        root = default_cache_dir() if cache_dir is None else Path(cache_dir)
        path = base_cache_path(model_config, world, config, seed, root)

    def build():
        state, metrics = trainer.run(trainer.init(key), desc=desc)
        return state.train.params, metrics["loss"]

    like = jax.eval_shape(lambda: trainer.init(key).train.params)
    params, loss, cached = checkpoint.load_or_build(path, like, build)
    return params, {"cached": cached, "loss": loss, "path": None if path is None else str(path)}

"""Retrieval heads behind synthetic context extension (Zhao, Yin & Durrett, *Understanding
Synthetic Context Extension via Retrieval Heads*, ICML 2025), with the retrieval score of Wu et
al. (*Retrieval Head Mechanistically Explains Long-Context Factuality*, ICLR 2025; issue 27).

A short-context base transformer is context-extended (RoPE interpolation) by fine-tuning only its
attention on the real retrieval task or on synthetic variants; each model's retrieval heads are
found with Wu et al.'s score on the real task, compared with the real model's (recall,
precision), knocked out (uniform attention) and patched between models.

Modules: :mod:`~jaxlab.language.retrieval_heads.data` (the token world, real task and synthetic
variants as keyed JAX generators), :mod:`~jaxlab.language.retrieval_heads.model` (the
``core.nn.Transformer``, base pretraining with an orbax cache, attention-only fine-tuning),
:mod:`~jaxlab.language.retrieval_heads.scores` (the retrieval score: prefill, then one greedy
KV-cache ``lax.scan`` keeping each head's top-1 attention position) and
:mod:`~jaxlab.language.retrieval_heads.heads` (head sets, recall / precision, correlations,
knockout and patching). No official code exists for the paper; the score follows the official
``Retrieval_Head`` code. Two choices differ from the issue, both measured: the transformer uses
smeared keys (``ModelConfig.smear_keys``) and facts put the entity right before the value
(``World.layout``); without both the base never learns to bind the entity in its budget.

Example::

    import dataclasses
    import jax
    from jaxlab.language import retrieval_heads as rh

    world, cfg = rh.World(), rh.ModelConfig(d_model=32, num_layers=2, num_heads=2, d_mlp=64)
    base = rh.make_trainer(cfg, world, dataclasses.replace(rh.BASE_TRAIN, steps=4, warmup_steps=1),
                           stream="base")
    state, metrics = base.run(base.init(jax.random.key(0)))        # metrics["loss"]: [4]
    ft_cfg = rh.TrainConfig(steps=2, batch_size=4, length=128)
    ft = rh.make_trainer(cfg, world, ft_cfg, stream="symbolic_kv") # stream=None: in the state
    ft_state, _ = ft.run(ft.init(jax.random.key(1), state.train.params))
    batch = rh.sample_batch(rh.split_key(0, "detection"), world, "real", 128, 8)
    prompt = batch.tokens[:, : rh.prompt_length(128)]
    s = rh.retrieval_scores(ft.model, ft_state.train.params, prompt, batch.span)
    s.per_instance.shape                                           # (8, 2, 2)
    acc = rh.knockout_accuracy(ft.model, ft_state.train.params, batch.tokens,
                               rh.top_k_heads(s.per_instance.mean(0), k=1))
"""

from jaxlab.language.retrieval_heads.data import (
    ANSWER_LEN,
    SPLITS,
    STREAMS,
    VARIANTS,
    Batch,
    World,
    key_mask,
    prompt_length,
    sample_batch,
    sample_stream,
    split_key,
)
from jaxlab.language.retrieval_heads.heads import (
    answer_correct,
    correlations,
    head_precision,
    head_recall,
    knockout_accuracy,
    patched_accuracy,
    patched_logits,
    random_head_sets,
    threshold_heads,
    top_k_heads,
)
from jaxlab.language.retrieval_heads.model import (
    BASE_TRAIN,
    ModelConfig,
    TrainConfig,
    Trainer,
    TrainerState,
    attention_labels,
    base_cache_path,
    default_cache_dir,
    make_model,
    make_trainer,
    pretrain_base,
    sequence_loss,
)
from jaxlab.language.retrieval_heads.scores import (
    Decoded,
    Scores,
    aggregate,
    decode_argmax,
    retrieval_scores,
    rouge1_recall,
    score_rule,
)

__all__ = [
    "ANSWER_LEN",
    "BASE_TRAIN",
    "SPLITS",
    "STREAMS",
    "VARIANTS",
    "Batch",
    "Decoded",
    "ModelConfig",
    "Scores",
    "TrainConfig",
    "Trainer",
    "TrainerState",
    "World",
    "aggregate",
    "answer_correct",
    "attention_labels",
    "base_cache_path",
    "correlations",
    "decode_argmax",
    "default_cache_dir",
    "head_precision",
    "head_recall",
    "key_mask",
    "knockout_accuracy",
    "make_model",
    "make_trainer",
    "patched_accuracy",
    "patched_logits",
    "pretrain_base",
    "prompt_length",
    "random_head_sets",
    "retrieval_scores",
    "rouge1_recall",
    "sample_batch",
    "sample_stream",
    "score_rule",
    "sequence_loss",
    "split_key",
    "threshold_heads",
    "top_k_heads",
]

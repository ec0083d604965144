"""PPO on GeneralPoints (the official RL4VLM-style PPO of SFTvsRL, on batched episodes).

**Rollout** (:func:`rollout`, one traceable function). An episode is a hand, its prompt under the
episode's rule and up to ``viter`` attempts. The prompt but its last token is prefilled into a
KV cache; then a ``lax.scan`` over attempts runs a ``lax.scan`` over 15 tokens: step 0 feeds the
token before the attempt (the last prompt token, or the previous attempt's feedback token) and
samples the first response token, step ``j`` feeds response token ``j - 1`` and samples token
``j`` (tokens after ``EOS`` are ``PAD``, fed as masked keys); the 14 tokens are verified inside
the scan (:func:`~jaxlab.language.general_points.verifier.verify_core`), and a correct attempt
ends the episode (its later attempts are ``PAD`` and not valid). Sequence layout, ``S = 15 + 15
viter`` slots at positions ``0 .. S - 1``: the prompt's first 15 tokens, then per attempt ``a``
the fed token at ``f_a = 15 + 15 a`` and the response at ``f_a + 1 .. f_a + 14``. Sampling draws
from ``softmax(logits / temperature)`` with ``PAD`` excluded (so a ``PAD`` in a response always
means "not emitted"); the same scaled log-probabilities enter the loss (the official code divides
by the temperature in both places).

**Policy log-probability** of an attempt: ``thought_coef * sum(log p, NUM field) + sum(log p,
FORM .. EOS)`` (official ``thought_prob_coef`` 0.5; split by response index, not by string
matching). **Value**: the value MLP on the LM's final hidden state at ``f_a`` (the token before the
attempt).

**Update** (:func:`make_ppo`): GAE over the attempts of each episode (gamma 0.9, lambda 0.95;
an episode ends at its last valid attempt: success or out of attempts; the official code instead
bootstraps across a truncation into the next episode of its rollout stream), advantages normalised
over the valid attempts (``(A - mean) / (std + 1e-5)``), then ``epochs`` x ``minibatches`` Adam
steps (eps 1e-7, global-norm clip, cosine decay) in one ``lax.scan``, each on a random share of
the episodes: the clipped surrogate at ``clip_eps`` (a minibatch in which any ratio exceeds 10
keeps only the clipped term, the official rule), plus ``value_coef`` times the official clipped
value loss ``0.5 * max((V - R)^2, (V_clip - R)^2)``; no entropy term (configured but unused in the
official code).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxlab.core.checks import check_choice, check_int, check_key, check_scalar
from jaxlab.core.sharding import constrain_batch
from jaxlab.core.training import TrainState, all_finite, chunked_runner
from jaxlab.language.general_points import cards as C
from jaxlab.language.general_points import tokens as T
from jaxlab.language.general_points import verifier as V
from jaxlab.language.general_points.model import ModelConfig, Policy, make_policy

__all__ = [
    "PPO",
    "PPOConfig",
    "PPOState",
    "Rollout",
    "evaluate_actions",
    "gae",
    "make_ppo",
    "max_viter",
    "ppo_loss",
    "rollout",
    "sequence_length",
]

BLOCK = T.RESPONSE_LEN + 1  # the fed token before an attempt and its 14 response tokens
PREFIX = T.GP_PROMPT_LEN - 1  # prompt tokens prefilled before the first fed token


def sequence_length(viter: int) -> int:
    """Slots of an episode of ``viter`` attempts: ``15 + 15 viter``."""
    return PREFIX + BLOCK * viter


def max_viter(max_len: int) -> int:
    """The most attempts whose episode fits ``max_len`` slots."""
    return (max_len - PREFIX) // BLOCK


def feed_positions(viter: int) -> jax.Array:
    """``[viter]`` slot of the token fed before each attempt."""
    return PREFIX + BLOCK * jnp.arange(viter)


class Rollout(NamedTuple):
    """A batch of episodes (``E`` episodes, ``A = viter`` attempts).

    Fields:
      tokens: ``[E, S]`` int32, the whole sequence (see the module docstring).
      response: ``[E, A, 14]`` int32, each attempt's tokens (``PAD`` where not emitted).
      numbers: ``[E, 4]`` int32, the cards' numbers under the episode's rule.
      reward: ``[E, A]`` float32 (0 for attempts after a success).
      kind: ``[E, A]`` int32 (index of ``KINDS``; -1 for attempts after a success).
      layout: ``[E, A]`` bool, the attempt has the response layout.
      valid: ``[E, A]`` bool, the attempt happened (no earlier success).
      logp: ``[E, A]`` float32, the attempt's policy log-probability (thought-weighted, logits /
        temperature).
      value: ``[E, A]`` float32, the value before the attempt.
      success: ``[E]`` bool, some attempt was correct.
    """

    tokens: jax.Array
    response: jax.Array
    numbers: jax.Array
    reward: jax.Array
    kind: jax.Array
    layout: jax.Array
    valid: jax.Array
    logp: jax.Array
    value: jax.Array
    success: jax.Array


def _scaled_log_probs(logits, temperature):
    """``log_softmax(logits / temperature)`` with ``PAD`` excluded."""
    logits = (
        logits.astype(jnp.promote_types(logits.dtype, jnp.float32)).at[..., T.PAD].set(-jnp.inf)
    )
    return jax.nn.log_softmax(logits / temperature, axis=-1)


def _attempt_logp(token_logp, response, thought_coef):
    """``[.., 14]`` token log-probs -> the attempt's weighted sum over emitted tokens."""
    w = jnp.where(jnp.asarray(T.THOUGHT_MASK), thought_coef, 1.0)
    w = w.reshape((1,) * (token_logp.ndim - 1) + (-1,))
    return jnp.sum(jnp.where(response != T.PAD, token_logp * w, 0.0), axis=-1)


def rollout(
    policy: Policy,
    params,
    tables: C.DeviceTables,
    ranks,
    face_values,
    key,
    *,
    viter: int,
    temperature,
    greedy: bool = False,
    thought_coef=0.5,
) -> Rollout:
    """Play a batch of episodes: ``ranks [E, 4]`` (1..13) under the rules ``face_values [E, 3]``
    (or ``[3]``: the numbers of J, Q, K). ``greedy``: argmax decoding (evaluation); otherwise
    sampling at ``temperature``. Traceable; see the module docstring."""
    lm = policy.lm
    e = ranks.shape[0]
    fv = jnp.broadcast_to(jnp.asarray(face_values, jnp.int32), (e, 3))
    numbers = C.face_numbers(ranks, fv)
    prompt = T.gp_prompt(ranks, fv)
    n_slots = sequence_length(viter)
    dtype = jax.tree_util.tree_leaves(params)[0].dtype
    cache = lm.init_cache(e, n_slots, dtype)
    pos = jnp.broadcast_to(jnp.arange(PREFIX), (e, PREFIX))
    _, aux = lm.apply(params["lm"], prompt[:, :PREFIX], positions=pos, cache=cache)

    def token_step(carry, j):
        cache, fed, ended, done, key = carry
        pos = jnp.broadcast_to(cache.index, (e, 1))
        logits, aux = lm.apply(
            params["lm"],
            fed[:, None],
            mask=(fed != T.PAD)[:, None],
            positions=pos,
            cache=cache,
            return_hidden=True,
        )
        lp = _scaled_log_probs(logits[:, 0], temperature)
        key, sub = jax.random.split(key)
        new = jnp.argmax(lp, -1) if greedy else jax.random.categorical(sub, lp, axis=-1)
        new = jnp.where(ended | done | (j == T.RESPONSE_LEN), T.PAD, new).astype(jnp.int32)
        new_lp = jnp.where(new != T.PAD, jnp.take_along_axis(lp, new[:, None], 1)[:, 0], 0.0)
        ended = ended | (new == T.EOS)
        return (aux.cache, new, ended, done, key), (new, new_lp, aux.hidden[:, 0])

    def attempt(carry, _):
        cache, fed, done, key = carry
        init = (cache, fed, jnp.zeros((e,), bool), done, key)
        (cache, _, _, _, key), (toks, lps, hid) = jax.lax.scan(token_step, init, jnp.arange(BLOCK))
        response = toks[: T.RESPONSE_LEN].T  # [E, 14]
        token_lp = lps[: T.RESPONSE_LEN].T
        value = policy.value.apply(params["value"], hid[0])[:, 0]
        verdict = V.verify_core(tables, numbers, response)
        valid = ~done
        reward = jnp.where(valid, verdict.reward, 0.0)
        kind = jnp.where(valid, verdict.kind, -1)
        new_done = done | (verdict.kind == V.CORRECT)
        next_fed = jnp.where(new_done, T.PAD, verdict.feedback)
        block = jnp.concatenate([fed[:, None], response], axis=1)
        logp = _attempt_logp(token_lp, response, thought_coef)
        out = (block, response, reward, kind, verdict.layout & valid, valid, logp, value)
        return (cache, next_fed, new_done, key), out

    init = (aux.cache, prompt[:, PREFIX], jnp.zeros((e,), bool), key)
    (_, _, done, _), outs = jax.lax.scan(attempt, init, None, length=viter)
    block, response, reward, kind, layout, valid, logp, value = (
        jnp.swapaxes(x, 0, 1) for x in outs
    )
    tokens = jnp.concatenate([prompt[:, :PREFIX], block.reshape(e, -1)], axis=1)
    return Rollout(tokens, response, numbers, reward, kind, layout, valid, logp, value, done)


def evaluate_actions(policy: Policy, params, tokens, response, *, temperature, thought_coef=0.5):
    """Log-probabilities and values of stored attempts by one full forward: ``tokens [E, S]``,
    ``response [E, A, 14]`` -> ``(logp [E, A], value [E, A])`` (equal to the rollout's up to
    floating point)."""
    viter = response.shape[1]
    s = tokens.shape[1]
    pos = jnp.broadcast_to(jnp.arange(s), tokens.shape)
    logits, aux = policy.lm.apply(
        params["lm"], tokens, mask=tokens != T.PAD, positions=pos, return_hidden=True
    )
    f = feed_positions(viter)
    idx = f[:, None] + jnp.arange(T.RESPONSE_LEN)[None, :]  # [A, 14] emitting positions
    lp = _scaled_log_probs(logits[:, idx], temperature)  # [E, A, 14, V]
    token_lp = jnp.take_along_axis(lp, response[..., None], axis=-1)[..., 0]
    logp = _attempt_logp(token_lp, response, thought_coef)
    value = policy.value.apply(params["value"], aux.hidden[:, f])[..., 0]
    return logp, value


def gae(reward, value, valid, gamma: float, lam: float):
    """Generalised advantage estimation over the attempts of each episode: ``reward, value
    [E, A]``, ``valid [E, A]`` bool -> ``(advantages, returns)`` (0 where not valid). The episode
    ends after its last valid attempt (no bootstrap)."""
    next_valid = jnp.concatenate([valid[:, 1:], jnp.zeros_like(valid[:, :1])], axis=1)
    next_value = jnp.concatenate([value[:, 1:], jnp.zeros_like(value[:, :1])], axis=1)
    next_value = jnp.where(next_valid, next_value, 0.0)
    delta = reward + gamma * next_value - value

    def back(g, x):
        d, nv = x
        g = d + gamma * lam * nv * g
        return g, g

    _, adv = jax.lax.scan(back, jnp.zeros(reward.shape[0]), (delta.T, next_valid.T), reverse=True)
    adv = jnp.where(valid, adv.T, 0.0)
    return adv, jnp.where(valid, adv + value, 0.0)


def normalize(adv, valid):
    """``(A - mean) / (std + 1e-5)`` over the valid entries (0 elsewhere)."""
    n = jnp.maximum(jnp.sum(valid), 1)
    mean = jnp.sum(jnp.where(valid, adv, 0.0)) / n
    var = jnp.sum(jnp.where(valid, (adv - mean) ** 2, 0.0)) / jnp.maximum(n - 1, 1)
    return jnp.where(valid, (adv - mean) / (jnp.sqrt(var) + 1e-5), 0.0)


class Batch(NamedTuple):
    """What one PPO minibatch needs (episodes on axis 0)."""

    tokens: jax.Array
    response: jax.Array
    valid: jax.Array
    logp: jax.Array
    value: jax.Array
    advantages: jax.Array
    returns: jax.Array


def ppo_loss(policy: Policy, params, batch: Batch, *, temperature, thought_coef, clip_eps,
             value_coef):  # fmt: skip
    """The official PPO loss of one minibatch; returns ``(loss, aux dict)``."""
    logp, value = evaluate_actions(
        policy, params, batch.tokens, batch.response, temperature=temperature,
        thought_coef=thought_coef,
    )  # fmt: skip
    m = batch.valid.astype(jnp.float32)
    n = jnp.maximum(jnp.sum(m), 1.0)
    ratio = jnp.exp(jnp.where(batch.valid, logp - batch.logp, 0.0))
    adv = batch.advantages
    surr1 = ratio * adv
    surr2 = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv
    clipped_only = jnp.any((ratio > 10.0) & batch.valid)
    pg = jnp.where(clipped_only, surr2, jnp.minimum(surr1, surr2))
    pg_loss = -jnp.sum(pg * m) / n
    v_clip = batch.value + jnp.clip(value - batch.value, -clip_eps, clip_eps)
    vl = jnp.maximum((value - batch.returns) ** 2, (v_clip - batch.returns) ** 2)
    v_loss = 0.5 * jnp.sum(vl * m) / n
    loss = pg_loss + value_coef * v_loss
    clip_frac = jnp.sum((jnp.abs(ratio - 1.0) > clip_eps) * m) / n
    aux = {"pg_loss": pg_loss, "value_loss": v_loss, "clip_fraction": clip_frac,
           "ratio_max": jnp.max(jnp.where(batch.valid, ratio, 0.0))}  # fmt: skip
    return loss, aux


@dataclasses.dataclass(frozen=True)
class PPOConfig:
    """One PPO run (defaults: the issue's quick RL branch).

    Attributes:
      updates: PPO iterations (rollout + update); also the cosine schedule's horizon.
      episodes: episodes per rollout (each ``viter`` attempts at most).
      viter: attempts per episode (the official ``verify_iter``; ``15 + 15 viter <= max_len``).
      temperature: sampling temperature (> 0), also dividing the logits of the loss.
      thought_coef: weight of the NUM field's log-probability (official 0.5; 1 an option).
      gamma, gae_lambda: GAE discount and lambda over attempts.
      clip_eps: ratio (and value) clip.
      value_coef: weight of the value loss.
      epochs, minibatches: passes over the rollout and minibatches per pass.
      learning_rate: Adam's peak rate (cosine decay to 0 over all optimiser steps).
      adam_eps: Adam epsilon (official 1e-7).
      grad_clip: global gradient-norm clip.
      rule: the training environment's rule (``"id"``).
      split: the ID hands drawn (``"train"``, ``"test"`` or ``"all"``).
      split_seed: the ID split's seed.
    """

    updates: int = 15
    episodes: int = 256
    viter: int = 1
    temperature: float = 0.7
    thought_coef: float = 0.5
    gamma: float = 0.9
    gae_lambda: float = 0.95
    clip_eps: float = 0.1
    value_coef: float = 0.5
    epochs: int = 4
    minibatches: int = 4
    learning_rate: float = 3e-5
    adam_eps: float = 1e-7
    grad_clip: float = 1.0
    rule: str = "id"
    split: str = "train"
    split_seed: int = 0

    def __post_init__(self):
        check_int(self.updates, "PPOConfig.updates", minimum=1)
        check_int(self.episodes, "PPOConfig.episodes", minimum=1)
        check_int(self.viter, "PPOConfig.viter", minimum=1)
        check_scalar(self.temperature, "PPOConfig.temperature", 0.0, low_open=True)
        check_scalar(self.thought_coef, "PPOConfig.thought_coef", 0.0, 1.0)
        check_scalar(self.gamma, "PPOConfig.gamma", 0.0, 1.0)
        check_scalar(self.gae_lambda, "PPOConfig.gae_lambda", 0.0, 1.0)
        check_scalar(self.clip_eps, "PPOConfig.clip_eps", 0.0, 1.0, low_open=True, high_open=True)
        check_scalar(self.value_coef, "PPOConfig.value_coef", 0.0)
        check_int(self.epochs, "PPOConfig.epochs", minimum=1)
        check_int(self.minibatches, "PPOConfig.minibatches", minimum=1)
        if self.episodes % self.minibatches:
            raise ValueError(
                f"`PPOConfig.episodes` ({self.episodes}) must be a multiple of minibatches "
                f"({self.minibatches})."
            )
        check_scalar(self.learning_rate, "PPOConfig.learning_rate", 0.0, low_open=True)
        check_scalar(self.adam_eps, "PPOConfig.adam_eps", 0.0, low_open=True)
        check_scalar(self.grad_clip, "PPOConfig.grad_clip", 0.0, low_open=True)
        check_choice(self.rule, "PPOConfig.rule", C.RULES)
        check_choice(self.split, "PPOConfig.split", ("all", "train", "test"))
        check_int(self.split_seed, "PPOConfig.split_seed", minimum=0)


@struct.dataclass
class PPOState:
    """A PPO run's state.

    Attributes:
      train: :class:`~jaxlab.core.training.TrainState` over ``{"lm", "value"}`` (``step`` counts
        updates; update ``t`` draws its hands and samples from ``fold_in(key, t)``).
      tables: the formula table (read by the verifier inside the rollout).
    """

    train: TrainState
    tables: C.DeviceTables


class PPO(NamedTuple):
    """Pure functions of one PPO setup (see :func:`make_ppo`).

    Fields:
      init: ``init(key, params) -> PPOState`` (``params``: the starting policy, e.g. SFT-init).
      step: ``step(state, x=None) -> (state, metrics)``: one rollout and one update; metrics:
        ``reward`` (mean per episode), ``success``, ``kinds`` ``[5]`` (fraction of valid attempts
        of each kind), ``illegal`` (share of attempts with a broken layout), ``pg_loss``,
        ``value_loss``, ``clip_fraction``, ``ratio_max``, ``grad_norm``, ``tokens`` (non-pad
        generated + prompt tokens of the rollout), ``finite``.
      run: ``run(state, n_steps=None, desc="", vmap=False) -> (state, metrics [n])``, ``n_steps``
        updates (default ``config.updates``), one compiled update.
      collect: ``collect(state) -> Rollout``, the rollout ``step`` plays (traceable).
      update: ``update(train, rollout, key) -> (train, aux [epochs, minibatches])``, the update
        ``step`` applies to it (traceable; the benchmark times the two apart).
      policy: the :class:`~jaxlab.language.general_points.model.Policy`.
      config: the :class:`PPOConfig`.
    """

    init: Any
    step: Any
    run: Any
    collect: Any
    update: Any
    policy: Policy
    config: PPOConfig


def make_ppo(model_config: ModelConfig, config: PPOConfig, *, mesh=None) -> PPO:
    """PPO of the policy on the ID environment; ``mesh`` shards the episode axis (``episodes``
    and ``episodes / minibatches`` multiples of its devices)."""
    if not isinstance(config, PPOConfig):
        raise TypeError(f"`config` must be a PPOConfig, got {type(config).__name__}.")
    if sequence_length(config.viter) > model_config.max_len:
        raise ValueError(
            f"`viter` ({config.viter}) needs {sequence_length(config.viter)} slots, more than "
            f"`max_len` ({model_config.max_len}); at most {max_viter(model_config.max_len)}."
        )
    mb = config.episodes // config.minibatches
    if mesh is not None and mb % mesh.size:
        raise ValueError(
            f"`config.episodes / minibatches` ({mb}) must be a multiple of the mesh's "
            f"{mesh.size} devices."
        )
    policy = make_policy(model_config)
    n_opt = config.updates * config.epochs * config.minibatches
    lr = optax.cosine_decay_schedule(config.learning_rate, n_opt)
    tx = optax.chain(
        optax.clip_by_global_norm(config.grad_clip),
        optax.adam(lr, eps=config.adam_eps),
    )
    face = jnp.asarray(T.rule_values(config.rule), jnp.int32)
    loss_kw = dict(temperature=config.temperature, thought_coef=config.thought_coef,
                   clip_eps=config.clip_eps, value_coef=config.value_coef)  # fmt: skip

    def init(key, params) -> PPOState:
        key = check_key(key, "key")
        return PPOState(TrainState.create(params, tx, key), C.device_tables())

    def collect(state: PPOState) -> Rollout:
        """The rollout of update ``state.train.step`` (hands and samples from its key)."""
        k_hand, k_roll, _ = jax.random.split(state.train.step_key(), 3)
        ranks = C._id_hands(k_hand, config.episodes, config.split, config.split_seed)
        ranks = constrain_batch(ranks, mesh)
        params = jax.lax.stop_gradient(state.train.params)
        kw = dict(temperature=config.temperature, thought_coef=config.thought_coef)
        return rollout(policy, params, state.tables, ranks, face, k_roll, viter=config.viter, **kw)

    def update(train: TrainState, ro: Rollout, key):
        """GAE, normalised advantages, then ``epochs x minibatches`` Adam steps on ``ro``."""
        adv, ret = gae(ro.reward, ro.value, ro.valid, config.gamma, config.gae_lambda)
        adv = normalize(adv, ro.valid)
        data = Batch(ro.tokens, ro.response, ro.valid, ro.logp, ro.value, adv, ret)

        def minibatch(train, idx):
            batch = constrain_batch(jax.tree_util.tree_map(lambda a: a[idx], data), mesh)
            grad_fn = jax.value_and_grad(
                lambda p: ppo_loss(policy, p, batch, **loss_kw), has_aux=True
            )
            (loss, aux), grads = grad_fn(train.params)
            aux = {**aux, "loss": loss, "grad_norm": optax.tree.norm(grads),
                   "finite": all_finite(loss, grads)}  # fmt: skip
            return train.apply_gradients(grads), aux

        def epoch(train, k):
            perm = jax.random.permutation(k, ro.tokens.shape[0]).reshape(config.minibatches, -1)
            return jax.lax.scan(minibatch, train, perm)

        return jax.lax.scan(epoch, train, jax.random.split(key, config.epochs))

    def step(state: PPOState, x=None):
        del x
        ro = collect(state)
        k_perm = jax.random.split(state.train.step_key(), 3)[2]
        train, aux = update(state.train, ro, k_perm)
        n_valid = jnp.maximum(jnp.sum(ro.valid), 1)
        kinds = jnp.stack([jnp.sum(ro.kind == i) for i in range(len(V.KINDS))]) / n_valid
        metrics = {
            "reward": jnp.mean(jnp.sum(ro.reward, axis=1)),
            "success": jnp.mean(ro.success.astype(jnp.float32)),
            "kinds": kinds,
            "illegal": jnp.sum(ro.valid & ~ro.layout) / n_valid,
            "pg_loss": jnp.mean(aux["pg_loss"]),
            "value_loss": jnp.mean(aux["value_loss"]),
            "clip_fraction": jnp.mean(aux["clip_fraction"]),
            "ratio_max": jnp.max(aux["ratio_max"]),
            "grad_norm": jnp.mean(aux["grad_norm"]),
            "tokens": jnp.sum(ro.tokens != T.PAD),
            "finite": jnp.all(aux["finite"]),
        }
        train = train.replace(step=state.train.step + 1)
        return state.replace(train=train), metrics

    run, _ = chunked_runner(step, config.updates, 1, "reward")

    return PPO(init, step, run, collect, update, policy, config)

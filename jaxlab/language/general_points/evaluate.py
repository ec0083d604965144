"""Evaluation of a policy on fixed hands: greedy episodes and the two OOD probes.

- :func:`evaluate`: greedy episodes of ``viter`` attempts (the rollout with argmax decoding) on
  ``hands`` under a rule; per hand ``success`` (some attempt correct), ``success_viter1`` (the
  first attempt correct), ``format_valid`` (the first attempt has the ``NUM .. FORM .. EOS``
  layout), ``illegal`` (share of the episode's attempts with a broken layout), ``rule_probe``
  (the first attempt's NUM field is exactly the cards' numbers under the rule: does J become 11?)
  and ``kinds`` of every attempt;
- :func:`face_number_prob`: teacher-forced on one solution response of each hand under the OOD rule
  (``NUM n1..n4 FORM <solution> EOS``), the mean probability the policy gives the 11, 12 and 13
  tokens at the positions that hold them (the spec's number-token suppression probe).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.checks import check_choice, check_int, check_key
from jaxlab.core.training import map_in_chunks
from jaxlab.language.general_points import cards as C
from jaxlab.language.general_points import data as D
from jaxlab.language.general_points import ppo as P
from jaxlab.language.general_points import tokens as T
from jaxlab.language.general_points import verifier as V
from jaxlab.language.general_points.model import Policy

__all__ = ["check_hands", "evaluate", "face_number_prob"]


def check_hands(hands, name: str = "hands") -> np.ndarray:
    """``hands`` as ``[N, 4]`` int32 ranks in 1..13, or a ``ValueError`` naming ``name``."""
    h = np.asarray(hands)
    if h.ndim != 2 or h.shape[1] != 4 or not np.issubdtype(h.dtype, np.integer):
        raise ValueError(f"`{name}` must be integer card ranks [N, 4], got {h.dtype} {h.shape}.")
    if h.size and (h.min() < 1 or h.max() > 13):
        raise ValueError(f"`{name}` must hold ranks in 1..13, got {h.min()}..{h.max()}.")
    return h.astype(np.int32)


def _check_policy(policy) -> None:
    if not isinstance(policy, Policy):
        raise TypeError(f"`policy` must be a general_points Policy, got {type(policy).__name__}.")


@functools.partial(jax.jit, static_argnames=("policy", "viter", "rule"))
def _evaluate(policy, params, tables, ranks, viter: int, rule: str):
    face = jnp.asarray(T.rule_values(rule), jnp.int32)
    ro = P.rollout(policy, params, tables, ranks, face, jax.random.key(0), viter=viter,
                   temperature=1.0, greedy=True)  # fmt: skip
    first = ro.response[:, 0]
    probe = jnp.all(first[:, 1:5] == T.number_token(ro.numbers), axis=1) & (first[:, 0] == T.NUM)
    illegal = jnp.sum(ro.valid & ~ro.layout, 1) / jnp.maximum(jnp.sum(ro.valid, 1), 1)
    return {
        "success": ro.success,
        "success_viter1": ro.kind[:, 0] == V.CORRECT,
        "format_valid": ro.layout[:, 0],
        "illegal": illegal,
        "rule_probe": probe,
        "kinds": ro.kind,
    }


def evaluate(
    policy: Policy, params, hands, rule: str, *, viter: int, chunk: int = 512, tables=None
):
    """Greedy evaluation of ``params`` on ``hands [N, 4]`` (ranks) under ``rule`` with ``viter``
    attempts; returns a dict of NumPy arrays ``[N]`` (``kinds``: ``[N, viter]``, -1 after a
    success); see the module docstring. ``chunk`` hands per compiled call (one shape)."""
    _check_policy(policy)
    ranks = check_hands(hands)
    check_choice(rule, "rule", C.RULES)
    viter = check_int(viter, "viter", minimum=1)
    if P.sequence_length(viter) > policy.config.max_len:
        raise ValueError(
            f"`viter` ({viter}) needs {P.sequence_length(viter)} slots, more than `max_len` "
            f"({policy.config.max_len})."
        )
    tables = C.device_tables() if tables is None else tables
    fn = lambda r: _evaluate(policy, params, tables, r, viter, rule)  # noqa: E731
    out = map_in_chunks(fn, (jnp.asarray(ranks),), chunk)
    return {k: np.asarray(v) for k, v in out.items()}


@functools.partial(jax.jit, static_argnames=("policy",))
def _face_prob(policy, params, tables, ranks, key):
    numbers = C.card_numbers(ranks, "ood")
    response = D.gp_response(key, tables, numbers)
    prompt = T.gp_prompt(ranks, T.rule_values("ood"))
    seq = jnp.concatenate([prompt, response], axis=1)
    logits = policy.lm.apply(params["lm"], seq, mask=seq != T.PAD)
    prob = jax.nn.softmax(logits[:, T.GP_PROMPT_LEN - 1 : -1].astype(jnp.float32), axis=-1)
    p_target = jnp.take_along_axis(prob, response[..., None], axis=-1)[..., 0]  # [N, 14]
    face = (response >= T.number_token(11)) & (response <= T.number_token(13))
    return jnp.sum(jnp.where(face, p_target, 0.0), 1) / jnp.maximum(jnp.sum(face, 1), 1)


def face_number_prob(policy: Policy, params, hands, key, *, tables=None) -> np.ndarray:
    """``[N]`` mean probability of the 11-13 tokens of one (random, ``key``) solution response of
    each hand under the OOD rule, teacher-forced; ``hands`` must each hold a face card and be
    OOD-solvable (as :func:`~jaxlab.language.general_points.cards.sample_ood_hands` draws)."""
    _check_policy(policy)
    ranks = check_hands(hands)
    key = check_key(key)
    if not (ranks >= 11).any(1).all() or not C.solvable(ranks).all():
        raise ValueError("`hands` must each hold a face card and reach 24 under the OOD rule.")
    tables = C.device_tables() if tables is None else tables
    return np.asarray(_face_prob(policy, params, tables, jnp.asarray(ranks), key))

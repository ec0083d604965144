"""Keyed generators of the training sequences (static shapes, traceable: draw batches inside jit).

- **P1** (rule translation, pretraining): four uniform cards, a rule ``J a Q b K c`` with a, b, c
  uniform in 1..13 and independent, the response the four cards' numbers under that rule;
- **P2** (postfix arithmetic, pretraining): four uniform numbers in 1..13 and a target uniform in
  10..36 except 24, redrawn until reachable; the response one uniformly drawn distinct postfix
  solution;
- **GP** (SFT): an ID hand (``"train"`` or ``"test"`` part of the ID split), the ID rule, the
  response ``NUM n1..n4 FORM <a fresh random solution> EOS``.

Pretraining never shows the ``GP`` tag or the target 24 (the GP format is learned in SFT, as the
instruct model needed SFT for format). Every sequence is ``(tokens [B, T], loss_mask [B, T])``,
``loss_mask`` 1 on the response tokens (the targets of next-token prediction), right-padded with
``PAD``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxlab.language.general_points import cards as C
from jaxlab.language.general_points import tokens as T

__all__ = [
    "GP_LEN",
    "P2_TARGETS",
    "PRETRAIN_LEN",
    "Sequences",
    "gp_response",
    "sample_gp",
    "sample_p1",
    "sample_p2",
    "sample_pretrain",
    "terms_to_tokens",
]

PRETRAIN_LEN = 20  # P1: 14 + 6; P2: 9 + 9, padded
GP_LEN = T.GP_PROMPT_LEN + T.RESPONSE_LEN  # 30
P2_TARGETS = tuple(t for t in range(10, 37) if t != C.TARGET)


class Sequences(NamedTuple):
    """A batch of training sequences.

    Fields:
      tokens: ``[B, T]`` int32, right-padded with ``PAD``.
      loss_mask: ``[B, T]`` float32, 1 where the token is a response token (a prediction target).
    """

    tokens: jax.Array
    loss_mask: jax.Array


def terms_to_tokens(terms):
    """Formula terms (numbers ``>= 1``, operator ``i`` as ``-1 - i``) -> tokens."""
    return jnp.where(terms > 0, T.number_token(terms), T.op_token(-1 - terms))


def _col(b: int, v: int):
    return jnp.full((b, 1), v, jnp.int32)


def _assemble(prompt, response, length: int) -> Sequences:
    b = prompt.shape[0]
    toks = jnp.concatenate([prompt, response], axis=1)
    pad = length - toks.shape[1]
    mask = jnp.concatenate([jnp.zeros(prompt.shape), jnp.ones(response.shape)], axis=1)
    toks = jnp.concatenate([toks, jnp.full((b, pad), T.PAD, jnp.int32)], axis=1)
    mask = jnp.concatenate([mask, jnp.zeros((b, pad))], axis=1)
    return Sequences(toks.astype(jnp.int32), mask.astype(jnp.float32))


def sample_p1(key, n: int) -> Sequences:
    """P1 rule translation: ``BOS RULE J a Q b K c CARDS c1..c4 T_TRANSLATE`` -> ``NUM n1..n4
    EOS`` (``[n, PRETRAIN_LEN]``)."""
    k1, k2 = jax.random.split(key)
    ranks = jax.random.randint(k1, (n, 4), 1, 14)
    fv = jax.random.randint(k2, (n, 3), 1, 14)
    numbers = C.face_numbers(ranks, fv)
    head = T.gp_prompt(ranks, fv)[:, : T.GP_PROMPT_LEN - 3]  # BOS RULE .. CARDS c1..c4
    prompt = jnp.concatenate([head, _col(n, T.T_TRANSLATE)], axis=1)
    response = jnp.concatenate([_col(n, T.NUM), T.number_token(numbers), _col(n, T.EOS)], axis=1)
    return _assemble(prompt, response, PRETRAIN_LEN)


def _p2_problem(key, tables: C.DeviceTables):
    """One reachable (numbers [4], target []) by exact rejection."""
    targets = jnp.asarray(P2_TARGETS, jnp.int32)

    def draw(k):
        k1, k2 = jax.random.split(k)
        return jax.random.randint(k1, (4,), 1, 14), targets[jax.random.randint(k2, (), 0, 26)]

    def reachable(numbers, target):
        s = jnp.sort(numbers)
        return jnp.any(tables.values[tables.index[s[0], s[1], s[2], s[3]]] == target)

    def body(c):
        k, _, _ = c
        k, sub = jax.random.split(k)
        return (k, *draw(sub))

    k, sub = jax.random.split(key)
    _, numbers, target = jax.lax.while_loop(lambda c: ~reachable(c[1], c[2]), body, (k, *draw(sub)))
    return numbers, target


def sample_p2(key, n: int, tables: C.DeviceTables) -> Sequences:
    """P2 arithmetic: ``BOS NUMS n1..n4 TARGET T T_MAKE`` -> ``FORM f1..f7 EOS``."""
    k1, k2 = jax.random.split(key)
    numbers, target = jax.vmap(lambda k: _p2_problem(k, tables))(jax.random.split(k1, n))
    terms, _ = C.sample_solution(k2, tables, numbers, target)
    prompt = jnp.concatenate(
        [_col(n, T.BOS), _col(n, T.NUMS), T.number_token(numbers), _col(n, T.TARGET_TOKEN),
         T.number_token(target)[:, None], _col(n, T.T_MAKE)], axis=1
    )  # fmt: skip
    response = jnp.concatenate([_col(n, T.FORM), terms_to_tokens(terms), _col(n, T.EOS)], axis=1)
    return _assemble(prompt, response, PRETRAIN_LEN)


def sample_pretrain(key, n: int, tables: C.DeviceTables, p1_fraction: float = 0.5) -> Sequences:
    """A pretraining batch: each row P1 with probability ``p1_fraction``, else P2."""
    k1, k2, k3 = jax.random.split(key, 3)
    a, b = sample_p1(k1, n), sample_p2(k2, n, tables)
    pick = jax.random.uniform(k3, (n, 1)) < p1_fraction
    return Sequences(jnp.where(pick, a.tokens, b.tokens), jnp.where(pick, a.loss_mask, b.loss_mask))


def gp_response(key, tables: C.DeviceTables, numbers) -> jax.Array:
    """``[B, 14]`` GP responses ``NUM n1..n4 FORM <random solution of 24> EOS`` for hands of
    ``numbers [B, 4]`` (each hand must reach 24)."""
    b = numbers.shape[0]
    terms, _ = C.sample_solution(key, tables, numbers, jnp.full((b,), C.TARGET))
    return jnp.concatenate(
        [_col(b, T.NUM), T.number_token(numbers), _col(b, T.FORM), terms_to_tokens(terms),
         _col(b, T.EOS)], axis=1
    )  # fmt: skip


def sample_gp(
    key, n: int, tables: C.DeviceTables, split: str = "train", split_seed: int = 0
) -> Sequences:
    """SFT sequences on ID hands of ``split`` under the ID rule (``[n, GP_LEN]``)."""
    k1, k2 = jax.random.split(key)
    ranks = C._id_hands(k1, n, split, split_seed)
    numbers = C.card_numbers(ranks, "id")
    prompt = T.gp_prompt(ranks, T.rule_values("id"))
    return _assemble(prompt, gp_response(k2, tables, numbers), GP_LEN)

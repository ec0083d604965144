"""The GeneralPoints token format: vocabulary, prompts, responses and the thought / action split.

Vocabulary (:data:`VOCAB_SIZE` = 69 tokens): ``PAD``; markers ``BOS RULE CARDS TARGET GP NUM FORM
EOS NUMS T_TRANSLATE T_MAKE``; feedback ``FAIL_ILLEGAL FAIL_NUMBERS FAIL_PARTIAL FAIL_WRONG``; the
13 card symbols ``A 2 .. 10 J Q K`` (distinct from numbers); the operators ``+ - * /``; the numbers
1..36 (single tokens, up to the largest pretraining target).

Sequences (the rule is always stated in the prompt, as ``face_card_msg`` is in the official one):

- **GP** prompt (16 tokens): ``BOS RULE J vJ Q vQ K vK CARDS c1 c2 c3 c4 TARGET 24 GP``; response
  (at most :data:`RESPONSE_LEN` = 14): ``NUM n1 n2 n3 n4 FORM f1 .. f7 EOS`` with a postfix
  formula of up to 7 tokens. The *thought* is the NUM field (response positions 0..4), the
  *action* everything from ``FORM`` (position :data:`FORM_INDEX` = 5) to ``EOS``, split by index
  (the official code finds the ``"formula"`` key by string matching).
- **P1** rule translation: ``BOS RULE J a Q b K c CARDS c1 .. c4 T_TRANSLATE`` -> ``NUM n1 .. n4
  EOS``, with a, b, c free in 1..13.
- **P2** arithmetic: ``BOS NUMS n1 .. n4 TARGET T T_MAKE`` -> ``FORM f1 .. f7 EOS``.

A failed attempt is followed by its feedback token, and the next attempt follows that (see
:mod:`~jaxlab.language.general_points.verifier`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.language.general_points.cards import OPS, TARGET

__all__ = [
    "ACTION_MASK",
    "BOS",
    "CARDS",
    "EOS",
    "FAIL_ILLEGAL",
    "FAIL_NUMBERS",
    "FAIL_PARTIAL",
    "FAIL_WRONG",
    "FORM",
    "FORM_INDEX",
    "GP",
    "GP_PROMPT_LEN",
    "MAX_NUMBER_TOKEN",
    "NUM",
    "NUMS",
    "PAD",
    "RESPONSE_LEN",
    "RULE",
    "TARGET_TOKEN",
    "THOUGHT_MASK",
    "T_MAKE",
    "T_TRANSLATE",
    "VOCAB_SIZE",
    "card_token",
    "decode",
    "gp_prompt",
    "is_number_token",
    "is_op_token",
    "number_token",
    "op_token",
    "rule_values",
    "token_number",
]

(
    PAD,
    BOS,
    RULE,
    CARDS,
    TARGET_TOKEN,
    GP,
    NUM,
    FORM,
    EOS,
    NUMS,
    T_TRANSLATE,
    T_MAKE,
    FAIL_ILLEGAL,
    FAIL_NUMBERS,
    FAIL_PARTIAL,
    FAIL_WRONG,
) = range(16)
_MARKERS = (
    "PAD BOS RULE CARDS TARGET GP NUM FORM EOS NUMS T_TRANSLATE T_MAKE "
    "FAIL_ILLEGAL FAIL_NUMBERS FAIL_PARTIAL FAIL_WRONG"
).split()
CARD_BASE = 16  # card symbol of rank r: CARD_BASE + r - 1
CARD_SYMBOLS = ("A", "2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K")
OP_BASE = CARD_BASE + 13  # operator i of OPS: OP_BASE + i
NUMBER_BASE = OP_BASE + 4  # number n: NUMBER_BASE + n - 1
MAX_NUMBER_TOKEN = 36
VOCAB_SIZE = NUMBER_BASE + MAX_NUMBER_TOKEN  # 69

GP_PROMPT_LEN = 16
RESPONSE_LEN = 14  # NUM n1..n4 FORM f1..f7 EOS
FORM_INDEX = 5
FORMULA_LEN = 7
# thought = the NUM field, action = FORM .. EOS (response positions)
THOUGHT_MASK = np.arange(RESPONSE_LEN) < FORM_INDEX
ACTION_MASK = ~THOUGHT_MASK


def _xp(x):
    return jnp if isinstance(x, jax.Array) else np


def card_token(rank):
    """The card symbol of ``rank`` (1..13)."""
    return rank + (CARD_BASE - 1)


def number_token(n):
    """The token of the number ``n`` (1..36)."""
    return n + (NUMBER_BASE - 1)


def op_token(i):
    """The token of ``OPS[i]``."""
    return i + OP_BASE


def is_number_token(tok):
    return (tok >= NUMBER_BASE) & (tok < NUMBER_BASE + MAX_NUMBER_TOKEN)


def is_op_token(tok):
    return (tok >= OP_BASE) & (tok < OP_BASE + len(OPS))


def token_number(tok):
    """The number of a number token (0 for any other token)."""
    return _xp(tok).where(is_number_token(tok), tok - (NUMBER_BASE - 1), 0)


def rule_values(rule: str) -> tuple[int, int, int]:
    """The numbers of J, Q, K under ``rule`` (``"id"``: 10, 10, 10; ``"ood"``: 11, 12, 13)."""
    if rule not in ("id", "ood"):
        raise ValueError(f"`rule` must be 'id' or 'ood', got {rule!r}.")
    return (10, 10, 10) if rule == "id" else (11, 12, 13)


def gp_prompt(ranks, face_values) -> jax.Array:
    """``[B, 16]`` int32 GP prompts of ``ranks [B, 4]`` under the rule ``face_values [B, 3]`` (or
    ``[3]``: the numbers of J, Q, K). Traceable."""
    ranks = jnp.asarray(ranks, jnp.int32)
    b = ranks.shape[0]
    fv = jnp.broadcast_to(jnp.asarray(face_values, jnp.int32), (b, 3))
    col = lambda v: jnp.full((b, 1), v, jnp.int32)  # noqa: E731
    rule = [col(RULE)]
    for i in range(3):
        rule += [col(card_token(11 + i)), number_token(fv[:, i : i + 1])]
    parts = [col(BOS), *rule, col(CARDS), card_token(ranks)]
    parts += [col(TARGET_TOKEN), col(number_token(TARGET)), col(GP)]
    return jnp.concatenate(parts, axis=1)


def decode(tokens) -> str:
    """A readable string of a token sequence (for reports and errors)."""
    out = []
    for t in np.asarray(tokens).ravel().tolist():
        if t < CARD_BASE:
            out.append(_MARKERS[t])
        elif t < OP_BASE:
            out.append("c" + CARD_SYMBOLS[t - CARD_BASE])
        elif t < NUMBER_BASE:
            out.append(OPS[t - OP_BASE])
        elif t < VOCAB_SIZE:
            out.append(str(t - NUMBER_BASE + 1))
        else:
            out.append(f"<{t}>")
    return " ".join(out)

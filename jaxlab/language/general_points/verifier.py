"""The GeneralPoints verifier (the official ``step_rewards`` on postfix formulas), twice: a
``Fraction`` reference in the official order of checks, and a jitted, vmapped JAX evaluator on
int32 (numerator, denominator) stacks.

One attempt is a response ``[14]`` (see :mod:`~jaxlab.language.general_points.tokens`) on a hand of
four numbers (the cards under the episode's rule). Its reward, in the official order:

1. **layout**: a response that is not ``NUM x x x x FORM <formula> EOS`` (``NUM`` at 0, ``FORM`` at
   5, the first ``EOS`` at 6..13) is one illegal formula: -3, nothing else checked (the official
   parser finds no ``"formula"`` field);
2. **grammar**: -3 for each token of the formula that is neither a number nor an operator, and for
   each operator that finds fewer than two operands on the stack (postfix underflow; the operator
   is skipped);
3. **numbers**: -2 if the formula uses a number that is not on a card, *else* -2 if it uses a
   number more often than the cards hold it (the official ``elif``); -2 more if a card's number is
   used less often than it occurs (so a wrong number that replaces a card costs -4);
4. with no penalty so far: a complete formula (one value left on the stack) equal to 24 gives +5
   (the episode ends); another value -1; an incomplete formula (more than one value left) or a
   division by zero gives +1 if its tokens are a prefix of a stored solution of the hand (the
   official partial solution), else -1 (the JAX evaluator binary-searches the hand's solution
   prefixes, :func:`~jaxlab.language.general_points.cards.solution_prefixes`; those are stored
   for 24 only: for another ``target``, e.g. the P2 probe, an incomplete formula gets -1).

A penalty is the sum of its terms (-3 and -2 terms add up). The attempt's *kind* is the first that
applies of illegal (``-3``), numbers (``-2``), correct (``+5``), partial (``+1``), wrong (``-1``);
its feedback token (``FAIL_*``) starts the next attempt.
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.checks import check_array
from jaxlab.language.general_points import cards as C
from jaxlab.language.general_points import tokens as T

__all__ = [
    "FEEDBACK",
    "KINDS",
    "REWARDS",
    "Verdict",
    "reference_solutions",
    "verify",
    "verify_core",
    "verify_reference",
]

KINDS = ("+5", "+1", "-1", "-2", "-3")  # correct, partial, wrong, numbers, illegal
CORRECT, PARTIAL, WRONG, NUMBERS, ILLEGAL = range(5)
REWARDS = {"correct": 5.0, "partial": 1.0, "wrong": -1.0, "numbers": -2.0, "illegal": -3.0}
# the token that follows an attempt of each kind (a correct attempt ends the episode: PAD)
FEEDBACK = np.array([T.PAD, T.FAIL_PARTIAL, T.FAIL_WRONG, T.FAIL_NUMBERS, T.FAIL_ILLEGAL])


# ---- the Fraction reference --------------------------------------------------------------------


@functools.cache
def _reference_solutions(hand: tuple[int, ...]) -> frozenset[tuple[int, ...]]:
    sols = set()
    for order in set(itertools.permutations(hand)):
        for ops in itertools.product(range(4), repeat=3):
            for shape in C.SHAPES:
                nums, opit, toks = iter(order), iter(ops), []
                for c in shape:
                    toks.append(T.number_token(next(nums)) if c == "n" else T.op_token(next(opit)))
                v = C.evaluate_postfix(_as_terms(toks))
                if v == C.TARGET:
                    sols.add(tuple(toks))
    return frozenset(sols)


def reference_solutions(numbers: Sequence[int], brute_force: bool = False):
    """Every postfix solution of a hand as a frozenset of token tuples: from the formula table
    (:func:`~jaxlab.language.general_points.cards.solutions`), or with ``brute_force`` by
    evaluating every formula with ``Fraction`` (independent of the table; about 0.5 s a hand)."""
    hand = tuple(sorted(int(n) for n in numbers))
    if brute_force:
        return _reference_solutions(hand)
    return _table_solutions(hand)


@functools.cache
def _table_solutions(hand: tuple[int, ...]) -> frozenset[tuple[int, ...]]:
    out = set()
    for sol in C.solutions(list(hand)):
        out.add(tuple(T.op_token(C.OPS.index(w)) if w in C.OPS else T.number_token(int(w))
                      for w in sol.split()))  # fmt: skip
    return frozenset(out)


def _as_terms(toks):
    return [C.OPS[t - T.OP_BASE] if T.is_op_token(t) else int(T.token_number(t)) for t in toks]


def verify_reference(
    numbers: Sequence[int],
    response: Sequence[int],
    solutions: Iterable[tuple[int, ...]] | None = None,
) -> tuple[float, int]:
    """``(reward, kind)`` of one attempt, in plain Python (``Fraction``), in the official order of
    checks (see the module docstring). ``solutions``: the hand's solutions as token tuples
    (default :func:`reference_solutions`)."""
    r = [int(t) for t in response]
    eos = [i for i, t in enumerate(r) if t == T.EOS]
    if len(r) <= T.FORM_INDEX or r[0] != T.NUM or r[T.FORM_INDEX] != T.FORM:
        return REWARDS["illegal"], ILLEGAL
    if not eos or not T.FORM_INDEX < eos[0] < T.RESPONSE_LEN:
        return REWARDS["illegal"], ILLEGAL
    formula = r[T.FORM_INDEX + 1 : eos[0]]
    illegal, stack, div_zero = 0, [], False
    for t in formula:
        if T.is_number_token(t):
            stack.append(Fraction(int(T.token_number(t))))
        elif T.is_op_token(t):
            if len(stack) < 2:
                illegal += 1
                continue
            b, a = stack.pop(), stack.pop()
            op = C.OPS[t - T.OP_BASE]
            if op == "/" and b == 0:
                div_zero = True
                stack.append(Fraction(0))
            else:
                stack.append({"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else a}[op])
        else:
            illegal += 1
    used = Counter(int(T.token_number(t)) for t in formula if T.is_number_token(t))
    have = Counter(int(n) for n in numbers)
    penalty = REWARDS["illegal"] * illegal
    numbers_wrong = False
    if any(n not in have for n in used) or any(used[n] > have[n] for n in used):
        penalty += REWARDS["numbers"]
        numbers_wrong = True
    if any(have[n] > used[n] for n in have):
        penalty += REWARDS["numbers"]
        numbers_wrong = True
    if illegal:
        return penalty, ILLEGAL
    if numbers_wrong:
        return penalty, NUMBERS
    if len(stack) == 1 and not div_zero:
        return (REWARDS["correct"], CORRECT) if stack[0] == C.TARGET else (REWARDS["wrong"], WRONG)
    sols = reference_solutions(numbers) if solutions is None else solutions
    k = len(formula)
    if any(tuple(s[:k]) == tuple(formula) for s in sols):
        return REWARDS["partial"], PARTIAL
    return REWARDS["wrong"], WRONG


# ---- the JAX evaluator -------------------------------------------------------------------------


def _one(tables: C.DeviceTables, numbers, r, target):
    n_form = T.FORMULA_LEN
    is_eos = r == T.EOS
    first_eos = jnp.where(is_eos.any(), jnp.argmax(is_eos), T.RESPONSE_LEN)
    layout = (r[0] == T.NUM) & (r[T.FORM_INDEX] == T.FORM) & (first_eos > T.FORM_INDEX)
    layout &= first_eos < T.RESPONSE_LEN
    f = r[T.FORM_INDEX + 1 : T.FORM_INDEX + 1 + n_form]
    k = first_eos - (T.FORM_INDEX + 1)
    in_f = jnp.arange(n_form) < k
    is_num = T.is_number_token(f) & in_f
    is_op = T.is_op_token(f) & in_f
    value = T.token_number(f)
    op = f - T.OP_BASE

    def push_pop(c, x):
        sn, sd, depth, under, div0 = c
        num_j, op_j, v, o = x
        apply = op_j & (depth >= 2)
        a_i, b_i = jnp.maximum(depth - 2, 0), jnp.maximum(depth - 1, 0)
        slots = jnp.arange(sn.shape[0])  # one-hot reads and writes (no gathers / scatters)
        at_a, at_b, at_top = slots == a_i, slots == b_i, slots == depth
        an, ad = jnp.sum(jnp.where(at_a, sn, 0)), jnp.sum(jnp.where(at_a, sd, 0))
        bn, bd = jnp.sum(jnp.where(at_b, sn, 0)), jnp.sum(jnp.where(at_b, sd, 0))
        rn = jnp.select([o == 0, o == 1, o == 2], [an * bd + bn * ad, an * bd - bn * ad, an * bn],
                        an * bd)  # fmt: skip
        rd = jnp.where(o == 3, ad * bn, ad * bd)
        div0 = div0 | (apply & (o == 3) & (bn == 0))
        sn = jnp.where(num_j & at_top, v, jnp.where(apply & at_a, rn, sn))
        sd = jnp.where(num_j & at_top, 1, jnp.where(apply & at_a, rd, sd))
        depth = depth + num_j.astype(jnp.int32) - apply.astype(jnp.int32)
        under = under + (op_j & ~apply).astype(jnp.int32)
        return (sn, sd, depth, under, div0), None

    zeros = jnp.zeros(n_form + 1, jnp.int32)
    init = (zeros, zeros + 1, jnp.int32(0), jnp.int32(0), jnp.bool_(False))
    xs = (is_num, is_op, value, op)
    (sn, sd, depth, under, div0), _ = jax.lax.scan(push_pop, init, xs, unroll=True)
    illegal = jnp.sum(in_f & ~is_num & ~is_op) + under

    vals = jnp.arange(1, T.MAX_NUMBER_TOKEN + 1)
    used = jnp.sum((value[:, None] == vals[None, :]) & is_num[:, None], axis=0)
    have = jnp.sum(numbers[:, None] == vals[None, :], axis=0)
    invalid_or_over = jnp.any((used > 0) & (have == 0)) | jnp.any(used > have)
    under_used = jnp.any(have > used)
    numbers_wrong = invalid_or_over | under_used
    penalty = (
        REWARDS["illegal"] * illegal
        + REWARDS["numbers"] * invalid_or_over
        + REWARDS["numbers"] * under_used
    )

    complete = (depth == 1) & ~div0
    correct = complete & (sd[0] != 0) & (sn[0] == target * sd[0])
    # +1 check: map the formula to card slots (the i-th use of a number takes its i-th copy in
    # the sorted hand, the canonical order), then binary-search the hand's solution prefixes
    hand = jnp.sort(numbers)
    row = jnp.maximum(tables.index[hand[0], hand[1], hand[2], hand[3]], 0)
    first = jnp.argmax(hand[None, :] == value[:, None], axis=1)  # first copy of each number
    earlier = jnp.tril(jnp.ones((n_form, n_form), bool), -1)
    repeat = jnp.sum(earlier & (value[None, :] == value[:, None]) & is_num[None, :], axis=1)
    slot = jnp.where(is_num, jnp.minimum(first + repeat, 3), C._OP_CODE + jnp.maximum(op, 0))
    weights = C._CODE_BASE ** jnp.arange(6, -1, -1)
    code = jnp.sum(jnp.where(in_f, (slot + 1) * weights, 0))
    width = tables.prefixes.shape[1]
    lo, hi = jnp.int32(0), jnp.int32(width - 1)  # first index with prefixes[row, i] >= code
    for _ in range(int(np.ceil(np.log2(width + 1)))):  # unrolled: scalar reads, not a row copy
        mid = (lo + hi) // 2
        below = tables.prefixes[row, mid] < code
        lo, hi = jnp.where(below, mid + 1, lo), jnp.where(below, hi, mid)
    found = tables.prefixes[row, jnp.minimum(lo, width - 1)] == code
    partial = (target == C.TARGET) & (k >= 4) & (k <= 6) & found

    clean_kind = jnp.where(complete, jnp.where(correct, CORRECT, WRONG),
                           jnp.where(partial, PARTIAL, WRONG))  # fmt: skip
    clean_reward = jnp.asarray([5.0, 1.0, -1.0])[clean_kind]
    kind = jnp.where(illegal > 0, ILLEGAL, jnp.where(numbers_wrong, NUMBERS, clean_kind))
    reward = jnp.where(illegal + numbers_wrong > 0, penalty, clean_reward)
    kind = jnp.where(layout, kind, ILLEGAL).astype(jnp.int32)
    reward = jnp.where(layout, reward, REWARDS["illegal"]).astype(jnp.float32)
    return reward, kind, layout


class Verdict(NamedTuple):
    """The verifier's result for a batch of attempts.

    Fields:
      reward: ``[B]`` float32, the attempt's reward (penalties summed).
      kind: ``[B]`` int32, its kind (an index of :data:`KINDS`: 0 ``+5``, 1 ``+1``, 2 ``-1``,
        3 ``-2``, 4 ``-3``).
      feedback: ``[B]`` int32, the token that follows it (``PAD`` after a correct attempt).
      layout: ``[B]`` bool, the response has the ``NUM .. FORM .. EOS`` layout (format valid).
    """

    reward: jax.Array
    kind: jax.Array
    feedback: jax.Array
    layout: jax.Array


@jax.jit
def _verify(tables, numbers, response, target):
    one = jax.vmap(_one, in_axes=(None, 0, 0, 0))
    reward, kind, layout = one(tables, numbers, response, target)
    return Verdict(reward, kind, jnp.asarray(FEEDBACK)[kind], layout)


def verify(numbers, response, target=C.TARGET, tables: C.DeviceTables | None = None) -> Verdict:
    """Rewards of a batch of attempts: ``numbers [B, 4]`` (the cards' numbers, 1..13),
    ``response [B, 14]`` tokens, ``target`` (an int or ``[B]``; 24 in the game, the pretraining
    targets for P2) -> :class:`Verdict`. Jitted (:func:`verify_core` inside ``jit``)."""
    numbers = check_array(numbers, "numbers", ndim=2, kind="int")
    response = check_array(response, "response", ndim=2, kind="int")
    if numbers.shape[1] != 4 or response.shape != (numbers.shape[0], T.RESPONSE_LEN):
        raise ValueError(
            f"`numbers` must be [B, 4] and `response` [B, {T.RESPONSE_LEN}], got "
            f"{numbers.shape} and {response.shape}."
        )
    if not isinstance(numbers, jax.core.Tracer):
        n = np.asarray(numbers)
        if n.min() < 1 or n.max() > C.MAX_NUMBER:
            raise ValueError(
                f"`numbers` must lie in 1..13 (card numbers), got {n.min()}..{n.max()}."
            )
    target = check_array(target, "target", ndim=(0, 1), kind="int")
    target = jnp.broadcast_to(target.astype(jnp.int32), (numbers.shape[0],))
    tables = C.device_tables() if tables is None else tables
    return _verify(tables, numbers.astype(jnp.int32), response.astype(jnp.int32), target)


def verify_core(tables: C.DeviceTables, numbers, response, target=C.TARGET) -> Verdict:
    """:func:`verify` without checks, for use inside jitted code (``target`` int or ``[B]``)."""
    target = jnp.broadcast_to(jnp.asarray(target, jnp.int32), (numbers.shape[0],))
    return _verify(tables, numbers, response, target)

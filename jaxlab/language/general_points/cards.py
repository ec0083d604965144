"""GeneralPoints cards: the face-card rules, one exact table of every postfix formula of every hand,
and keyed samplers with the official hand distributions.

A hand is four card ranks in 1..13 (A = 1, J, Q, K = 11, 12, 13). The rule stated in the prompt maps
ranks to numbers: ``"id"`` counts J, Q, K as 10 (``min(rank, 10)``), ``"ood"`` as 11, 12, 13.

**The formula table.** Every formula over four numbers in postfix notation is one of
``24 * 64 * 5 = 7,680`` (an order of the four cards, three operators from ``+ - * /``, one of the
five postfix shapes). :func:`formula_table` evaluates all of them exactly (integer rationals) for
each of the 1,820 number multisets over 1..13 and keeps each value as ``uint8`` (the value when it
is an integer in 0..254, else :data:`NOT_INT`: a fraction, a negative or large value, or a
division by zero). One table serves solvability (any formula equal to 24), the solutions for any
target (the pretraining targets 10..36) and the verifier's +1 prefix check. Formulas that differ
only by swapping two equal cards are the same token sequence: :func:`canonical_mask` keeps one
of them (each solution counted once when a random one is drawn).

**Samplers** (keyed, static shapes, exact rejection with ``lax.while_loop``):

- :func:`sample_id_hands`: four uniform ranks, redrawn until solvable under the ID rule (the
  official ``ood=False`` sampler); ``split="train"`` / ``"test"`` also redraw until the hand's
  number multiset lies in that part of :func:`id_split`;
- :func:`sample_ood_hands`: three uniform ranks plus one face card (J, Q or K), shuffled, redrawn
  until solvable under the OOD rule (the official ``ood=True`` sampler: every OOD hand holds a face
  card, so the rule always matters).

**ID-train / ID-test** (:func:`id_split`): a seeded 80 / 20 split of the 566 solvable ID *number*
multisets (of 715 over 1..10), not of rank multisets: under the ID rule a 10 and a J are one
number, so a rank split would put the same task in both parts.
"""

from __future__ import annotations

import functools
import itertools
from fractions import Fraction
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.checks import check_choice, check_int, check_key

__all__ = [
    "N_FORMULAS",
    "NOT_INT",
    "OPS",
    "RULES",
    "SHAPES",
    "TARGET",
    "DeviceTables",
    "FormulaTable",
    "canonical_mask",
    "card_numbers",
    "device_tables",
    "face_numbers",
    "formula_table",
    "hand_index",
    "id_split",
    "prefix_code",
    "sample_id_hands",
    "sample_ood_hands",
    "sample_solution",
    "solution_prefixes",
    "solutions",
    "solvable",
]

TARGET = 24
RULES = ("id", "ood")
OPS = ("+", "-", "*", "/")
# The five postfix shapes of four operands: "n" an operand, "o" an operator (Catalan(3) = 5).
SHAPES = ("nnonono", "nnnoono", "nnonnoo", "nnnonoo", "nnnnooo")
PERMS = tuple(itertools.permutations(range(4)))  # 24 orders of the four cards
N_FORMULAS = len(PERMS) * len(OPS) ** 3 * len(SHAPES)  # 7,680
NOT_INT = 255  # the table's value for anything but an integer in 0..254
MAX_NUMBER = 13
_OP_CODE = 4  # formula slots: 0..3 pick a card (of the sorted hand), 4..7 an operator of OPS


def card_numbers(ranks, rule: str):
    """The numbers of ``ranks`` (ints 1..13, any shape; NumPy or JAX) under ``rule``: ``"id"``
    counts J, Q, K as 10, ``"ood"`` as 11, 12, 13."""
    check_choice(rule, "rule", RULES)
    if rule == "ood":
        return ranks
    return jnp.minimum(ranks, 10) if isinstance(ranks, jax.Array) else np.minimum(ranks, 10)


def face_numbers(ranks, face_values):
    """The numbers of ``ranks [B, 4]`` (JAX ints 1..13) under any stated rule: J, Q, K count as
    ``face_values [B, 3]`` (their numbers, e.g. 10, 10, 10 or 11, 12, 13), every other card as
    its rank. Traceable."""
    fv = jnp.broadcast_to(jnp.asarray(face_values, jnp.int32), (ranks.shape[0], 3))
    return jnp.where(ranks >= 11, jnp.take_along_axis(fv, jnp.clip(ranks - 11, 0, 2), 1), ranks)


# ---- the formula table -------------------------------------------------------------------------


def _multisets() -> np.ndarray:
    """``[1820, 4]`` int: every sorted multiset of four numbers in 1..13, lexicographic."""
    combos = itertools.combinations_with_replacement(range(1, MAX_NUMBER + 1), 4)
    return np.asarray(list(combos), np.int64)


@functools.cache
def formula_slots() -> np.ndarray:
    """``[7680, 7]`` int32: formula ``f``'s tokens as slots (0..3: the card at that index of the
    sorted hand; 4..7: operator ``OPS[slot - 4]``). ``f = (perm * 64 + ops) * 5 + shape`` with
    ``ops = 16 o1 + 4 o2 + o3`` (the operators in reading order)."""
    rows = []
    for perm in PERMS:
        for ops in itertools.product(range(4), repeat=3):
            for shape in SHAPES:
                cards, opit, row = iter(perm), iter(ops), []
                for c in shape:
                    row.append(next(cards) if c == "n" else _OP_CODE + next(opit))
                rows.append(row)
    return np.asarray(rows, np.int32)


def _apply(op: int, a, b):
    """``a op b`` on integer-rational pairs ``(num, den)`` (arrays), reduced by their gcd."""
    (an, ad), (bn, bd) = a, b
    if op == 0:
        n, d = an * bd + bn * ad, ad * bd
    elif op == 1:
        n, d = an * bd - bn * ad, ad * bd
    elif op == 2:
        n, d = an * bn, ad * bd
    else:
        n, d = an * bd, ad * bn
    g = np.gcd(n, d)
    g = np.where(g == 0, 1, g)
    return n // g, d // g


def _evaluate_all(multisets: np.ndarray) -> np.ndarray:
    """``[M, 7680]`` uint8 values (see the module docstring) by exact integer-rational stacks:
    one pass per (operators, shape), vectorised over multisets and card orders."""
    m = len(multisets)
    seq = multisets[:, np.asarray(PERMS)].reshape(m * len(PERMS), 4)  # [M * 24, 4]
    out = np.empty((m, len(PERMS), len(OPS) ** 3, len(SHAPES)), np.uint8)
    ones = np.ones(len(seq), np.int64)
    for o, ops in enumerate(itertools.product(range(4), repeat=3)):
        for s, shape in enumerate(SHAPES):
            stack, cards, opit = [], iter(range(4)), iter(ops)
            bad = np.zeros(len(seq), bool)
            for c in shape:
                if c == "n":
                    stack.append((seq[:, next(cards)], ones))
                else:
                    b, a, op = stack.pop(), stack.pop(), next(opit)
                    if op == 3:
                        bad |= b[0] == 0
                    stack.append(_apply(op, a, b))
            n, d = stack[0]
            d_safe = np.where(d == 0, 1, d)
            q = n // d_safe
            integer = ~bad & (d != 0) & (q * d_safe == n) & (q >= 0) & (q < NOT_INT)
            out[:, :, o, s] = np.where(integer, q, NOT_INT).reshape(m, len(PERMS))
    return out.reshape(m, N_FORMULAS)


class FormulaTable(NamedTuple):
    """Every postfix formula of every hand, exactly (see the module docstring).

    Fields:
      multisets: ``[1820, 4]`` int32, the sorted number multisets over 1..13.
      values: ``[1820, 7680]`` uint8, formula ``f``'s value on multiset ``m`` (``NOT_INT`` unless
        an integer in 0..254).
      slots: ``[7680, 7]`` int32, each formula's tokens as slots (:func:`formula_slots`).
      canonical: ``[1820, 24]`` bool, the card orders that are not a swap of two equal cards of an
        earlier order (one formula per distinct token sequence).
      index: ``[14, 14, 14, 14]`` int32, a sorted multiset's row (``-1`` outside 1..13).
    """

    multisets: np.ndarray
    values: np.ndarray
    slots: np.ndarray
    canonical: np.ndarray
    index: np.ndarray


@functools.cache
def formula_table() -> FormulaTable:
    """The formula table, computed once per process (about a second; 14 MB)."""
    ms = _multisets()
    values = _evaluate_all(ms)
    perms = np.asarray(PERMS)  # [24, 4]
    seq = ms[:, perms]  # [M, 24, 4] the numbers in each order
    # an order is canonical when equal numbers keep their sorted-index order
    canonical = np.ones(seq.shape[:2], bool)
    for i in range(4):
        for j in range(i + 1, 4):
            canonical &= ~((seq[:, :, i] == seq[:, :, j]) & (perms[None, :, i] > perms[None, :, j]))
    index = -np.ones((MAX_NUMBER + 1,) * 4, np.int32)
    index[tuple(ms.T)] = np.arange(len(ms), dtype=np.int32)
    return FormulaTable(ms.astype(np.int32), values, formula_slots(), canonical, index)


PREFIX_LENGTHS = (4, 5, 6)  # the incomplete formulas that use all four cards
_CODE_BASE = 9  # a slot prefix (slots 0..7) as one int32: sum_j (slot_j + 1) * 9^(6 - j)


def prefix_code(slots, k: int):
    """The code of the first ``k`` slots of ``slots [..., >= k]`` (NumPy or JAX ints)."""
    xp = jnp if isinstance(slots, jax.Array) else np
    w = xp.asarray(_CODE_BASE ** np.arange(6, -1, -1)[:k], dtype=xp.int32)
    return xp.sum((slots[..., :k] + 1) * w, axis=-1)


@functools.cache
def solution_prefixes() -> np.ndarray:
    """``[1820, K]`` int32: per multiset, the sorted distinct codes (:func:`prefix_code`) of the
    4-, 5- and 6-slot prefixes of its canonical solutions of 24, padded with ``2^31 - 1``. The
    verifier's +1 check is then a binary search (an incomplete formula with no penalty uses all
    four cards, so its length is 4..6)."""
    t = formula_table()
    hits = (t.values == TARGET) & canonical_mask(t)
    codes = np.stack([prefix_code(t.slots, k) for k in PREFIX_LENGTHS], axis=1)  # [7680, 3]
    rows = [np.unique(codes[np.flatnonzero(h)]) for h in hits]
    width = max(len(r) for r in rows)
    out = np.full((len(rows), width), np.iinfo(np.int32).max, np.int32)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


class DeviceTables(NamedTuple):
    """The formula table on device, for jitted code (pass it as an argument: as a closed-over
    constant its 14 MB would be embedded in every compiled program).

    Fields:
      index: ``[14, 14, 14, 14]`` int32, a sorted hand's row.
      values: ``[1820, 7680]`` uint8, every formula's value (``NOT_INT`` unless an integer).
      slots: ``[7680, 7]`` int32, each formula's tokens as slots.
      canonical: ``[1820, 24]`` bool, the canonical card orders.
      multisets: ``[1820, 4]`` int32, the sorted hands.
      prefixes: ``[1820, K]`` int32, :func:`solution_prefixes`.
    """

    index: jax.Array
    values: jax.Array
    slots: jax.Array
    canonical: jax.Array
    multisets: jax.Array
    prefixes: jax.Array


@functools.cache
def device_tables() -> DeviceTables:
    """:func:`formula_table` as device arrays (computed once per process)."""
    t = formula_table()
    return DeviceTables(
        jnp.asarray(t.index),
        jnp.asarray(t.values),
        jnp.asarray(t.slots),
        jnp.asarray(t.canonical),
        jnp.asarray(t.multisets),
        jnp.asarray(solution_prefixes()),
    )


def sample_solution(key, tables: DeviceTables, numbers, target) -> tuple[jax.Array, jax.Array]:
    """One uniformly drawn distinct postfix solution of each hand: ``numbers [B, 4]`` (1..13),
    ``target [B]`` -> ``(formula [B, 7] as (number, operator) terms, ok [B])`` where
    ``formula[..., j]`` is a number (1..13) or ``-1 - i`` for operator ``OPS[i]``; ``ok`` is False
    where the hand cannot reach its target (the formula is then arbitrary). Traceable."""
    hand = jnp.sort(numbers, axis=-1)
    row = jnp.maximum(tables.index[hand[:, 0], hand[:, 1], hand[:, 2], hand[:, 3]], 0)
    perm_of = jnp.arange(N_FORMULAS) // (len(OPS) ** 3 * len(SHAPES))
    hits = (tables.values[row] == target[:, None]) & tables.canonical[row][:, perm_of]
    logits = jnp.where(hits, 0.0, -jnp.inf)
    f = jax.random.categorical(key, jnp.where(hits.any(1, keepdims=True), logits, 0.0))
    slots = tables.slots[f]  # [B, 7]
    terms = jnp.where(slots < _OP_CODE, jnp.take_along_axis(hand, jnp.minimum(slots, 3), 1),
                      _OP_CODE - 1 - slots)  # fmt: skip
    return terms, hits.any(1)


def canonical_mask(table: FormulaTable | None = None) -> np.ndarray:
    """``[1820, 7680]`` bool: formula ``f`` is the first of its token sequence on multiset ``m``."""
    table = table or formula_table()
    perm_of = np.arange(N_FORMULAS) // (len(OPS) ** 3 * len(SHAPES))
    return table.canonical[:, perm_of]


def hand_index(numbers, table: FormulaTable | None = None):
    """The table row of each hand: ``numbers [..., 4]`` (NumPy or JAX ints in 1..13) -> ``[...]``
    int32 (``-1`` if a number lies outside 1..13)."""
    table = table or formula_table()
    xp = jnp if isinstance(numbers, jax.Array) else np
    s = xp.sort(numbers, axis=-1)
    ok = xp.all((s >= 1) & (s <= MAX_NUMBER), axis=-1)
    s = xp.clip(s, 0, MAX_NUMBER)
    row = xp.asarray(table.index)[s[..., 0], s[..., 1], s[..., 2], s[..., 3]]
    return xp.where(ok, row, -1)


@functools.cache
def _solvable_rows(target: int) -> np.ndarray:
    return (formula_table().values == target).any(axis=1)


def solvable(numbers, target: int = TARGET) -> np.ndarray:
    """Whether each hand ``numbers [..., 4]`` (ints 1..13, NumPy) reaches ``target``."""
    target = check_int(target, "target", minimum=0, maximum=NOT_INT - 1)
    row = hand_index(np.asarray(numbers))
    return np.where(row >= 0, _solvable_rows(target)[np.maximum(row, 0)], False)


def _render(slots_row, hand) -> str:
    return " ".join(str(hand[s]) if s < _OP_CODE else OPS[s - _OP_CODE] for s in slots_row)


def solutions(numbers, target: int = TARGET) -> list[str]:
    """Every distinct postfix solution of one hand ``numbers [4]``, as space-separated strings
    (e.g. ``"4 6 * 1 * 1 *"``), in table order."""
    numbers = np.asarray(numbers)
    if numbers.shape != (4,):
        raise ValueError(f"`numbers` must be one hand of 4 numbers, got shape {numbers.shape}.")
    target = check_int(target, "target", minimum=0, maximum=NOT_INT - 1)
    table = formula_table()
    row = int(hand_index(numbers, table))
    if row < 0:
        raise ValueError(f"`numbers` must lie in 1..13, got {numbers.tolist()}.")
    hand = table.multisets[row]
    hits = np.flatnonzero((table.values[row] == target) & canonical_mask(table)[row])
    return [_render(table.slots[f], hand) for f in hits]


def evaluate_postfix(tokens) -> Fraction | None:
    """The exact value of a postfix formula given as a sequence of ints and operator strings
    (``None`` on a division by zero or a malformed formula); a reference for tests."""
    stack: list[Fraction] = []
    for tok in tokens:
        if tok in OPS:
            if len(stack) < 2:
                return None
            b, a = stack.pop(), stack.pop()
            if tok == "/" and b == 0:
                return None
            stack.append({"+": a + b, "-": a - b, "*": a * b, "/": a / b if b else a}[tok])
        else:
            stack.append(Fraction(int(tok)))
    return stack[0] if len(stack) == 1 else None


# ---- splits and samplers -----------------------------------------------------------------------


@functools.cache
def id_split(seed: int = 0, train_fraction: float = 0.8) -> tuple[np.ndarray, np.ndarray]:
    """``(train, test)``: table rows of the solvable ID number multisets (numbers in 1..10),
    shuffled by ``seed`` and cut at ``train_fraction`` (566 multisets: 452 / 114 at 0.8)."""
    table = formula_table()
    in_id = (table.multisets <= 10).all(axis=1)
    rows = np.flatnonzero(in_id & _solvable_rows(TARGET))
    rows = np.random.default_rng(seed).permutation(rows)
    cut = int(round(train_fraction * len(rows)))
    return np.sort(rows[:cut]), np.sort(rows[cut:])


def _row_mask(rows: np.ndarray) -> np.ndarray:
    mask = np.zeros(len(formula_table().multisets), bool)
    mask[rows] = True
    return mask


def _rejection(key, n: int, draw, accept):
    """``n`` independent draws of ``draw(key) -> ranks [4]``, each redrawn until ``accept(ranks)``
    (exact rejection: one ``lax.while_loop`` per hand, vmapped)."""

    def one(k):
        def cond(c):
            return ~accept(c[1])

        def body(c):
            k, _ = c
            k, sub = jax.random.split(k)
            return k, draw(sub)

        k, sub = jax.random.split(k)
        return jax.lax.while_loop(cond, body, (k, draw(sub)))[1]

    return jax.vmap(one)(jax.random.split(key, n))


def _accepts(rule: str, rows_ok: np.ndarray):
    table = formula_table()
    index, ok = jnp.asarray(table.index), jnp.asarray(rows_ok)

    def accept(ranks):
        s = jnp.sort(card_numbers(ranks, rule))
        return ok[index[s[0], s[1], s[2], s[3]]]

    return accept


@functools.partial(jax.jit, static_argnames=("n", "split", "seed"))
def _id_hands(key, n: int, split: str, seed: int):
    rows_ok = _solvable_rows(TARGET).copy()
    if split != "all":
        rows_ok &= _row_mask(id_split(seed)[0 if split == "train" else 1])
    draw = lambda k: jax.random.randint(k, (4,), 1, MAX_NUMBER + 1)  # noqa: E731
    return _rejection(key, n, draw, _accepts("id", rows_ok))


@functools.partial(jax.jit, static_argnames=("n",))
def _ood_hands(key, n: int):
    def draw(k):
        k1, k2, k3 = jax.random.split(k, 3)
        cards = jnp.concatenate(
            [jax.random.randint(k1, (3,), 1, MAX_NUMBER + 1), jax.random.randint(k2, (1,), 11, 14)]
        )
        return jax.random.permutation(k3, cards)

    return _rejection(key, n, draw, _accepts("ood", _solvable_rows(TARGET)))


def sample_id_hands(key, n: int, split: str = "all", *, split_seed: int = 0) -> jax.Array:
    """``[n, 4]`` int32 ranks: four uniform cards redrawn until solvable under the ID rule and,
    for ``split="train"`` / ``"test"``, until their number multiset lies in that part of
    ``id_split(split_seed)``. Deterministic for a fixed key; jitted."""
    key = check_key(key)
    n = check_int(n, "n", minimum=1)
    check_choice(split, "split", ("all", "train", "test"))
    split_seed = check_int(split_seed, "split_seed", minimum=0)
    return _id_hands(key, n, split, split_seed)


def sample_ood_hands(key, n: int) -> jax.Array:
    """``[n, 4]`` int32 ranks: three uniform cards and one of J, Q, K, shuffled, redrawn until
    solvable under the OOD rule (J, Q, K = 11, 12, 13). Jitted."""
    key = check_key(key)
    n = check_int(n, "n", minimum=1)
    return _ood_hands(key, n)

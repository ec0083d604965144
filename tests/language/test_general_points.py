"""general_points: the 24 solver and its table against independent Fraction searches, the verifier's
reward table and its JAX evaluator against the Fraction reference, the samplers' distributions,
the token format and the training generators."""

import functools
import itertools
from fractions import Fraction

import jax
import numpy as np
import pytest

from jaxlab.language.general_points import cards as C
from jaxlab.language.general_points import data as D
from jaxlab.language.general_points import tokens as T
from jaxlab.language.general_points import verifier as V

# ---- the solver ----------------------------------------------------------------------------


@functools.cache
def _reaches(values: tuple, target=Fraction(24)) -> bool:
    """Independent recursive search: combine any two values with + - * / (both orders)."""
    if len(values) == 1:
        return values[0] == target
    for i, j in itertools.combinations(range(len(values)), 2):
        a, b = values[i], values[j]
        rest = [v for k, v in enumerate(values) if k not in (i, j)]
        out = {a + b, a - b, b - a, a * b}
        out |= {a / b} if b else set()
        out |= {b / a} if a else set()
        if any(_reaches(tuple(sorted(rest + [r]))) for r in out):
            return True
    return False


def test_known_hands():
    assert not C.solvable(np.array([1, 1, 1, 1]))
    for hand in ([4, 6, 1, 1], [3, 3, 8, 8], [1, 5, 5, 5]):
        assert C.solvable(np.array(hand))
        sols = C.solutions(hand)
        assert sols and all(C.evaluate_postfix(s.split()) == 24 for s in sols)
        assert len(set(sols)) == len(sols)  # distinct token sequences
    assert C.solutions([3, 3, 8, 8]) == ["8 3 8 3 / - /"]  # 8 / (3 - 8 / 3), the only one
    for hand in ([4, 6, 1, 1], [1, 5, 5, 5]):  # the table's solutions are all there are
        brute = V.reference_solutions(hand, brute_force=True)
        assert brute == V.reference_solutions(hand) and len(brute) == len(C.solutions(hand))


def test_id_multisets_solvable_as_an_independent_search_finds():
    table = C.formula_table()
    in_id = (table.multisets <= 10).all(1)
    ours = C.solvable(table.multisets[in_id])
    ref = np.array([_reaches(tuple(Fraction(int(v)) for v in m)) for m in table.multisets[in_id]])
    assert in_id.sum() == 715 and ours.sum() == 566
    np.testing.assert_array_equal(ours, ref)
    train, test = C.id_split(0)
    assert len(train) + len(test) == 566 and not set(train) & set(test)
    assert len(train) == round(0.8 * 566)


def test_table_equals_fraction_evaluation():
    table = C.formula_table()
    rng = np.random.default_rng(0)
    for r, f in zip(rng.integers(0, 1820, 400), rng.integers(0, C.N_FORMULAS, 400), strict=True):
        hand = table.multisets[r]
        toks = [str(hand[s]) if s < 4 else C.OPS[s - 4] for s in table.slots[f]]
        v = C.evaluate_postfix(toks)
        want = C.NOT_INT if v is None or v.denominator != 1 or not 0 <= v < C.NOT_INT else int(v)
        assert table.values[r, f] == want, (hand, toks, v)


# ---- the verifier ----------------------------------------------------------------------------

HAND = [4, 6, 1, 1]


def _resp(formula: str) -> list[int]:
    """``NUM 4 6 1 1 FORM <formula> EOS`` padded to 14; formula words: numbers, ops, or token
    names (``GP``)."""
    toks = []
    for w in formula.split():
        if w in C.OPS:
            toks.append(T.op_token(C.OPS.index(w)))
        elif w.isdigit():
            toks.append(T.number_token(int(w)))
        else:
            toks.append(getattr(T, w))
    r = [T.NUM, *(T.number_token(n) for n in HAND), T.FORM, *toks, T.EOS]
    return (r + [T.PAD] * T.RESPONSE_LEN)[: T.RESPONSE_LEN]


CASES = [  # (formula, reward, kind)
    ("4 6 * 1 * 1 *", 5.0, V.CORRECT),
    ("4 6 * 1 * 1 GP", -3.0, V.ILLEGAL),  # one illegal token; numbers all used
    ("4 6 GP 1 1 GP *", -6.0, V.ILLEGAL),  # two illegal tokens
    ("4 6 * * 1 1 *", -3.0, V.ILLEGAL),  # an operator on one operand (underflow)
    ("4 6 * 5 * 4 *", -4.0, V.NUMBERS),  # a wrong number (5), 4 overused, 1 underused
    ("4 6 * 1 *", -2.0, V.NUMBERS),  # a card not used
    ("4 6 + 1 * 1 *", -1.0, V.WRONG),  # 10
    ("4 6 1 1 * *", 1.0, V.PARTIAL),  # incomplete, a prefix of 4 6 1 1 * * *
    ("4 1 + 1 6", -1.0, V.WRONG),  # incomplete, and no solution starts so
    ("4 1 1 - / 6 *", -1.0, V.WRONG),  # 4 / 0: no crash, no solution
]


@pytest.mark.parametrize("formula,reward,kind", CASES)
def test_reward_table(formula, reward, kind):
    assert V.verify_reference(HAND, _resp(formula)) == (reward, kind)


def test_reward_table_jax_and_layout():
    resp = [_resp(f) for f, _, _ in CASES]
    broken = [_resp("4 6 * 1 * 1 *") for _ in range(3)]
    broken[0][0] = T.PAD  # no NUM
    broken[1][T.FORM_INDEX] = T.NUM  # no FORM
    broken[2][-1] = T.FORM  # the EOS slot overwritten: 14 tokens, no EOS
    broken[2][13] = T.number_token(3)
    resp += broken
    r, k, fb, layout = V.verify(np.array([HAND] * len(resp)), np.array(resp))
    want = [c[1] for c in CASES] + [-3.0] * 3
    np.testing.assert_array_equal(np.asarray(r), want)
    np.testing.assert_array_equal(np.asarray(k), [c[2] for c in CASES] + [V.ILLEGAL] * 3)
    assert [V.verify_reference(HAND, b)[0] for b in broken] == [-3.0] * 3
    assert int(fb[0]) == T.PAD and int(fb[1]) == T.FAIL_ILLEGAL and int(fb[7]) == T.FAIL_PARTIAL
    np.testing.assert_array_equal(np.asarray(layout), [True] * len(CASES) + [False] * 3)


def _random_attempts(rng, nums, n):
    pool = np.r_[T.number_token(np.arange(1, 14)), T.op_token(np.arange(4))]
    out_n, out_r = [], []
    sorted_sols = [sorted(V.reference_solutions(h)) for h in nums]
    for _ in range(n):
        i = rng.integers(len(nums))
        hand, sols = nums[i], sorted_sols[i]
        f = list(sols[rng.integers(len(sols))])
        case = rng.integers(6)
        if case == 1:  # a prefix
            f = f[: rng.integers(0, 7)]
        elif case == 2:  # random numbers and operators
            f = [int(x) for x in rng.choice(pool, size=rng.integers(0, 8))]
        elif case == 3:  # one token replaced by any token
            f[rng.integers(7)] = int(rng.integers(0, T.VOCAB_SIZE))
        elif case == 4:  # shuffled
            rng.shuffle(f)
        r = [T.NUM, *(int(x) for x in rng.integers(0, T.VOCAB_SIZE, 4)), T.FORM, *f, T.EOS]
        r = (r + [T.PAD] * 14)[:14]
        if case == 5:  # anything may break the layout
            r[rng.integers(14)] = int(rng.integers(0, T.VOCAB_SIZE))
        out_n.append(hand)
        out_r.append(r)
    return np.asarray(out_n), np.asarray(out_r)


def test_jax_verifier_equals_fraction_reference_on_10k_attempts():
    hands = np.asarray(C.sample_id_hands(jax.random.key(0), 24))
    ood = np.asarray(C.sample_ood_hands(jax.random.key(1), 16))
    nums = np.concatenate([C.card_numbers(hands, "id"), C.card_numbers(ood, "ood")])
    numbers, resp = _random_attempts(np.random.default_rng(1), nums, 10_000)
    ref = [V.verify_reference(n, r) for n, r in zip(numbers, resp, strict=True)]
    reward, kind, _, _ = V.verify(numbers, resp)
    np.testing.assert_array_equal(np.asarray(reward), [x[0] for x in ref])
    np.testing.assert_array_equal(np.asarray(kind), [x[1] for x in ref])
    assert len(set(np.asarray(kind).tolist())) == 5  # every kind occurs


# ---- samplers and formats -------------------------------------------------------------------


def test_samplers():
    ood = np.asarray(C.sample_ood_hands(jax.random.key(2), 256))
    assert (ood >= 11).any(1).all() and C.solvable(C.card_numbers(ood, "ood")).all()
    idh = np.asarray(C.sample_id_hands(jax.random.key(3), 256))
    assert idh.min() >= 1 and idh.max() <= 13 and C.solvable(C.card_numbers(idh, "id")).all()
    assert (idh >= 11).any()  # face cards drawn, counted as 10
    train, test = C.id_split(0)
    for split, rows in (("train", train), ("test", test)):
        h = np.asarray(C.sample_id_hands(jax.random.key(4), 128, split))
        assert np.isin(C.hand_index(C.card_numbers(h, "id")), rows).all()
    again = np.asarray(C.sample_ood_hands(jax.random.key(2), 256))
    np.testing.assert_array_equal(again, ood)


def test_gp_format_and_sft_targets_are_solutions():
    tables = C.device_tables()
    seq = jax.jit(lambda k: D.sample_gp(k, 64, tables))(jax.random.key(5))
    tok, mask = np.asarray(seq.tokens), np.asarray(seq.loss_mask)
    prompt, resp = tok[:, : T.GP_PROMPT_LEN], tok[:, T.GP_PROMPT_LEN :]
    assert (prompt[:, -1] == T.GP).all() and (prompt[:, -2] == T.number_token(24)).all()
    assert (resp[:, T.FORM_INDEX] == T.FORM).all() and (resp[:, 0] == T.NUM).all()
    assert T.THOUGHT_MASK.sum() == T.FORM_INDEX and T.ACTION_MASK[T.FORM_INDEX]
    np.testing.assert_array_equal(mask[:, T.GP_PROMPT_LEN :], 1.0)
    assert mask[:, : T.GP_PROMPT_LEN].sum() == 0
    numbers = T.token_number(resp[:, 1:5])  # the NUM field: the cards' ID numbers
    ranks = prompt[:, 9:13] - (T.CARD_BASE - 1)
    np.testing.assert_array_equal(numbers, C.card_numbers(ranks, "id"))
    assert (np.asarray(V.verify(numbers, resp).reward) == 5.0).all()


def test_pretraining_has_no_gp_tag_or_target_24():
    tables = C.device_tables()
    seq = jax.jit(lambda k: D.sample_pretrain(k, 256, tables))(jax.random.key(6))
    tok = np.asarray(seq.tokens)
    assert not (tok == T.GP).any() and not (tok == T.number_token(24)).any()
    p1 = tok[tok[:, -7] == T.T_TRANSLATE]
    p2 = tok[tok[:, 8] == T.T_MAKE]
    assert len(p1) + len(p2) == len(tok) and len(p1) > 50 and len(p2) > 50
    # P1: the response is the cards' numbers under the stated rule
    fv = T.token_number(p1[:, [3, 5, 7]])
    ranks = p1[:, 9:13] - (T.CARD_BASE - 1)
    want = np.where(ranks >= 11, np.take_along_axis(fv, np.clip(ranks - 11, 0, 2), 1), ranks)
    np.testing.assert_array_equal(T.token_number(p1[:, 15:19]), want)
    # P2: the formula reaches the target
    for row in p2:
        target = int(T.token_number(row[7]))
        terms = [C.OPS[t - T.OP_BASE] if T.is_op_token(t) else int(T.token_number(t))
                 for t in row[10:17]]  # fmt: skip
        assert C.evaluate_postfix(terms) == target and target in D.P2_TARGETS

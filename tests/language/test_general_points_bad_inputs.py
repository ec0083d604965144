"""general_points: bad input at every public entry point is a clear error naming the argument."""

import functools

import jax
import numpy as np
import pytest

from jaxlab.language import general_points as G
from jaxlab.language.general_points import cards as C
from jaxlab.language.general_points import ppo as P

MC = G.ModelConfig(d_model=16, num_layers=1, num_heads=2, d_mlp=32, value_hidden=(8,))


@functools.cache
def setup():
    policy = G.make_policy(MC)
    return policy, policy.init(jax.random.key(0))


def _eval(hands, **kw):
    policy, params = setup()
    return G.evaluate(policy, params, hands, kw.pop("rule", "ood"), viter=kw.pop("viter", 1), **kw)


GOOD = np.array([[1, 2, 3, 11]])
RESP = np.zeros((1, G.RESPONSE_LEN), np.int32)

CASES = [
    ("model: heads", lambda: G.ModelConfig(d_model=30, num_heads=4), ValueError, "d_model"),
    ("model: max_len", lambda: G.ModelConfig(max_len=20), ValueError, "max_len"),
    ("model: value_hidden", lambda: G.ModelConfig(value_hidden=[8]), ValueError, "value_hidden"),
    ("lm: stream", lambda: G.LMTrainConfig(stream="rl"), ValueError, "stream"),
    ("lm: warm-up", lambda: G.LMTrainConfig(steps=5, warmup_steps=5), ValueError, "warmup_steps"),
    ("lm: lr", lambda: G.LMTrainConfig(learning_rate=0.0), ValueError, "learning_rate"),
    ("ppo: viter", lambda: G.PPOConfig(viter=0), ValueError, "viter"),
    ("ppo: temperature", lambda: G.PPOConfig(temperature=0.0), ValueError, "temperature"),
    ("ppo: clip_eps", lambda: G.PPOConfig(clip_eps=1.5), ValueError, "clip_eps"),
    ("ppo: minibatches", lambda: G.PPOConfig(episodes=10, minibatches=4), ValueError, "episodes"),
    ("ppo: thought_coef", lambda: G.PPOConfig(thought_coef=2.0), ValueError, "thought_coef"),
    (
        "ppo: viter vs max_len",
        lambda: G.make_ppo(MC, G.PPOConfig(viter=4)),
        ValueError,
        "max_len",
    ),
    ("ppo: config", lambda: G.make_ppo(MC, {"viter": 1}), TypeError, "config"),
    ("hands: shape", lambda: _eval(np.array([1, 2, 3, 4])), ValueError, "hands"),
    ("hands: rank 14", lambda: _eval(np.array([[1, 2, 3, 14]])), ValueError, "hands"),
    ("hands: floats", lambda: _eval(np.array([[1.0, 2, 3, 4]])), ValueError, "hands"),
    ("evaluate: viter", lambda: _eval(GOOD, viter=0), ValueError, "viter"),
    ("evaluate: viter too long", lambda: _eval(GOOD, viter=4), ValueError, "max_len"),
    ("evaluate: rule", lambda: _eval(GOOD, rule="mixed"), ValueError, "rule"),
    ("samplers: n", lambda: G.sample_ood_hands(jax.random.key(0), 0), ValueError, "`n`"),
    (
        "samplers: split",
        lambda: G.sample_id_hands(jax.random.key(0), 2, "val"),
        ValueError,
        "split",
    ),
    ("samplers: key", lambda: G.sample_id_hands(3, 2), ValueError, "key"),
    ("solutions: shape", lambda: G.solutions([1, 2, 3]), ValueError, "numbers"),
    ("solutions: range", lambda: G.solutions([1, 2, 3, 20]), ValueError, "numbers"),
    ("verify: numbers", lambda: G.verify(np.zeros((1, 4), np.int32), RESP), ValueError, "numbers"),
    ("verify: response", lambda: G.verify(GOOD, RESP[:, :5]), ValueError, "response"),
    ("verify: float", lambda: G.verify(GOOD, RESP.astype(float)), TypeError, "response"),
    ("rule", lambda: G.card_numbers(GOOD, "red"), ValueError, "rule"),
    (
        "face prob: no face card",
        lambda: G.face_number_prob(*setup(), np.array([[1, 2, 3, 4]]), jax.random.key(0)),
        ValueError,
        "hands",
    ),
    ("flops: config", lambda: G.matmul_params({"d_model": 4}), TypeError, "config"),
]


@pytest.mark.parametrize("name,fn,err,needle", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_a_clear_error(name, fn, err, needle):
    with pytest.raises(err, match=needle):
        fn()


def test_sequence_budget():
    assert P.max_viter(64) == 3 and P.sequence_length(3) == 60
    assert C.TARGET == 24

"""retrieval_heads: bad input at every public entry point is a clear error naming the argument."""

import functools

import jax
import numpy as np
import pytest

from jaxlab.language import retrieval_heads as R

WORLD = R.World()
CFG = R.ModelConfig(d_model=16, num_layers=2, num_heads=2, d_mlp=32, base_length=64)


@functools.cache
def setup():
    model = R.make_model(CFG, WORLD, 80)
    batch = R.sample_batch(jax.random.key(3), WORLD, "real", 80, 4)
    return model, model.init(jax.random.key(0), batch.tokens), batch


def _scores(**kw):
    model, params, batch = setup()
    args = {"prompt": batch.tokens[:, :77], "answer_span": batch.span} | kw
    return R.retrieval_scores(model, params, args.pop("prompt"), args.pop("answer_span"), **args)


def _knock(mask):
    model, params, batch = setup()
    return R.knockout_accuracy(model, params, batch.tokens, mask)


def _patch(mask):
    model, params, batch = setup()
    return R.patched_accuracy(model, params, params, batch.tokens, mask)


S = np.array([[0.5, 0.0], [0.2, 0.1]])
H = np.array([[True, False], [False, False]])

CASES = [
    ("world: odd rel_words", lambda: R.World(rel_words=5), ValueError, "World.rel_words"),
    ("world: p_filler", lambda: R.World(p_filler=1.5), ValueError, "World.p_filler"),
    ("world: base_questions", lambda: R.World(base_questions=0), ValueError, "base_questions"),
    ("model: heads", lambda: R.ModelConfig(d_model=30, num_heads=4), ValueError, "d_model"),
    ("model: layers", lambda: R.ModelConfig(num_layers=0), ValueError, "num_layers"),
    ("train: steps", lambda: R.TrainConfig(steps=0), ValueError, "TrainConfig.steps"),
    ("train: lr", lambda: R.TrainConfig(learning_rate=-1.0), ValueError, "learning_rate"),
    ("train: optimizer", lambda: R.TrainConfig(optimizer="sgd"), ValueError, "optimizer"),
    (
        "train: warm-up",
        lambda: R.TrainConfig(schedule="cosine", steps=5, warmup_steps=5),
        ValueError,
        "warmup_steps",
    ),
    ("train: length", lambda: R.TrainConfig(length=10), ValueError, "TrainConfig.length"),
    (
        "interpolation: zero",
        lambda: R.make_model(CFG, WORLD, 80, interpolation=0.0),
        ValueError,
        "`interpolation`",
    ),
    (
        "interpolation: nan",
        lambda: R.make_model(CFG, WORLD, 80, interpolation=float("nan")),
        ValueError,
        "`interpolation`",
    ),
    ("model: config type", lambda: R.make_model({}, WORLD), TypeError, "`config`"),
    (
        "sample: stream",
        lambda: R.sample_batch(jax.random.key(0), WORLD, "qa", 80, 2),
        ValueError,
        "`stream`",
    ),
    (
        "sample: length",
        lambda: R.sample_batch(jax.random.key(0), WORLD, "real", 20, 2),
        ValueError,
        "`length`",
    ),
    (
        "sample: batch",
        lambda: R.sample_batch(jax.random.key(0), WORLD, "real", 80, 0),
        ValueError,
        "`batch_size`",
    ),
    ("sample: key", lambda: R.sample_batch(3, WORLD, "real", 80, 2), ValueError, "`key`"),
    ("split", lambda: R.split_key(0, "test"), ValueError, "`split`"),
    (
        "trainer: stream",
        lambda: R.make_trainer(CFG, WORLD, R.TrainConfig(length=80), stream="x"),
        ValueError,
        "`stream`",
    ),
    (
        "trainer: stream tuple",
        lambda: R.make_trainer(CFG, WORLD, R.TrainConfig(length=80), stream=("real", "base")),
        ValueError,
        "`stream`",
    ),
    (
        "trainer: variant outside its streams",
        lambda: R.make_trainer(CFG, WORLD, R.TrainConfig(length=80), stream=("real",)).init(
            jax.random.key(0), variant="symbolic_kv"
        ),
        ValueError,
        "`variant`",
    ),
    (
        "stream switch: streams",
        lambda: R.sample_stream(jax.random.key(0), WORLD, 0, 80, 2, ["real"]),
        ValueError,
        "`streams`",
    ),
    (
        "world: distinct_gold_tokens",
        lambda: R.World(distinct_gold_tokens=1),
        (TypeError, ValueError),
        "distinct_gold_tokens",
    ),
    (
        "trainer: variant",
        lambda: R.make_trainer(CFG, WORLD, R.TrainConfig(length=80), stream=None).init(
            jax.random.key(0), variant="fake"
        ),
        ValueError,
        "`variant`",
    ),
    ("trainer: config", lambda: R.make_trainer(CFG, WORLD, {}, stream=None), TypeError, "`config`"),
    (
        "span: shape",
        lambda: _scores(answer_span=np.zeros((4, 3), np.int32)),
        ValueError,
        "`answer_span`",
    ),
    (
        "span: outside",
        lambda: _scores(answer_span=np.array([[70, 90]] * 4)),
        ValueError,
        "`answer_span`",
    ),
    (
        "span: empty",
        lambda: _scores(answer_span=np.array([[5, 5]] * 4)),
        ValueError,
        "`answer_span`",
    ),
    ("span: float", lambda: _scores(answer_span=np.zeros((4, 2))), ValueError, "`answer_span`"),
    ("prompt: rank", lambda: _scores(prompt=np.zeros(77, np.int32)), ValueError, "`prompt`"),
    ("scores: steps", lambda: _scores(n_steps=0), ValueError, "`n_steps`"),
    ("scores: dedup", lambda: _scores(dedup="yes"), TypeError, "`dedup`"),
    (
        "scores: model",
        lambda: R.retrieval_scores(None, {}, np.zeros((1, 5), np.int32), np.array([[1, 2]])),
        ValueError,
        "`model`",
    ),
    ("tau: negative", lambda: R.threshold_heads(S, -0.1), ValueError, "`tau`"),
    ("tau: nan", lambda: R.threshold_heads(S, float("nan")), ValueError, "`tau`"),
    ("scores: rank", lambda: R.threshold_heads(S[0]), ValueError, "`scores`"),
    ("k: zero", lambda: R.top_k_heads(S, 0), ValueError, "`k`"),
    ("k: too many", lambda: R.top_k_heads(S, 5), ValueError, "`k`"),
    ("k: float", lambda: R.top_k_heads(S, 1.5), ValueError, "`k`"),
    ("recall: shapes", lambda: R.head_recall(H, H[0]), ValueError, "`heads`"),
    ("random: size", lambda: R.random_head_sets(jax.random.key(0), H, 4), ValueError, "`size`"),
    (
        "random: exclude",
        lambda: R.random_head_sets(jax.random.key(0), H[0], 1),
        ValueError,
        "`exclude`",
    ),
    ("head_mask: shape", lambda: _knock(np.zeros((3, 2), bool)), ValueError, "`head_mask`"),
    ("head_mask: dtype", lambda: _knock(np.zeros((2, 2))), ValueError, "`head_mask`"),
    ("head_mask: patch", lambda: _patch(np.zeros((1, 2, 3), bool)), ValueError, "`head_mask`"),
    (
        "tokens: rank",
        lambda: R.knockout_accuracy(setup()[0], setup()[1], np.zeros(80, np.int32), H),
        ValueError,
        "`tokens`",
    ),
    ("seed", lambda: R.pretrain_base(CFG, WORLD, seed=-1), ValueError, "`seed`"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_a_clear_error(case):
    _, call, exc, match = case
    with pytest.raises(exc, match=match):
        call()

"""jaxlab.core.text: the Flax all-MiniLM-L6-v2 port against an independent NumPy forward pass."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file
from scipy.special import erf

from jaxlab.core import text
from jaxlab.core.text import (
    EMBED_DIM,
    BertConfig,
    bert_forward,
    encode,
    load_encoder,
    params_from_torch,
    tokenize,
)

SENTENCES = [
    "Hi.",
    "The cat sat on the mat.",
    "A man is playing a guitar on the street corner tonight.",
    "Quantum entanglement links the states of two particles, no matter how far apart they are.",
    "After the long winter, the farmers of the northern valley finally planted their wheat, "
    "barley and oats, hoping that the spring rains would come early and stay late this year.",
    "",
]


@pytest.fixture(scope="module")
def encoder():
    return load_encoder()


@pytest.fixture(scope="module")
def weights(encoder):
    return load_file(str(encoder.path / "model.safetensors"))


@pytest.fixture(scope="module")
def weights64(weights):
    return {k: v.astype(np.float64) for k, v in weights.items() if k != "embeddings.position_ids"}


def _layer_norm(x, w, b, eps=1e-12):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def numpy_encode(w, ids, n_layers=6, n_heads=12):
    """all-MiniLM-L6-v2 on one unpadded id list, in float64, straight from the PyTorch weights."""
    ids = np.asarray(ids)
    t = len(ids)
    e = "embeddings."
    x = (
        w[e + "word_embeddings.weight"][ids]
        + w[e + "position_embeddings.weight"][:t]
        + w[e + "token_type_embeddings.weight"][0]
    )
    x = _layer_norm(x, w[e + "LayerNorm.weight"], w[e + "LayerNorm.bias"])

    def linear(name, y):
        return y @ w[name + ".weight"].T + w[name + ".bias"]

    for i in range(n_layers):
        p = f"encoder.layer.{i}."
        d = x.shape[1] // n_heads
        q, k, v = (
            linear(p + f"attention.self.{n}", x).reshape(t, n_heads, d).transpose(1, 0, 2)
            for n in ("query", "key", "value")
        )
        s = q @ k.transpose(0, 2, 1) / np.sqrt(d)
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        ctx = (a @ v).transpose(1, 0, 2).reshape(t, -1)
        x = _layer_norm(
            x + linear(p + "attention.output.dense", ctx),
            w[p + "attention.output.LayerNorm.weight"],
            w[p + "attention.output.LayerNorm.bias"],
        )
        h = linear(p + "intermediate.dense", x)
        h = 0.5 * h * (1.0 + erf(h / np.sqrt(2.0)))
        x = _layer_norm(
            x + linear(p + "output.dense", h),
            w[p + "output.LayerNorm.weight"],
            w[p + "output.LayerNorm.bias"],
        )
    pooled = x.mean(0)
    return pooled / np.linalg.norm(pooled)


def test_tokenizer_is_unpadded_uncased_and_truncates_at_256(encoder):
    ids = tokenize(["Hello World", "", "word " * 400], encoder=encoder)
    assert ids[0] == [101, 7592, 2088, 102]  # [CLS] hello world [SEP]: lowercased, not padded
    assert ids[1] == [101, 102]
    assert len(ids[2]) == 256 and ids[2][-1] == 102


def test_matches_independent_numpy_forward(encoder, weights64):
    ids = tokenize(SENTENCES, encoder=encoder)
    assert len({len(x) for x in ids}) == len(SENTENCES)  # all lengths differ
    got = encode(SENTENCES, encoder=encoder)
    want = np.stack([numpy_encode(weights64, x) for x in ids])
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_output_shape_dtype_unit_norm_and_order(encoder):
    out = encode(SENTENCES, encoder=encoder)
    assert out.shape == (len(SENTENCES), EMBED_DIM) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    # Reversed input gives reversed rows: the length sort is undone.
    np.testing.assert_allclose(encode(SENTENCES[::-1], encoder=encoder), out[::-1], atol=1e-6)


def test_bucketing_and_batching_invariance(encoder):
    alone = encode([SENTENCES[1]], encoder=encoder)[0]  # 1 row, length bucket 16
    batched = encode(SENTENCES, encoder=encoder)  # 8 rows, bucket 48, with longer texts
    assert not np.array_equal(alone, encode([SENTENCES[2]], encoder=encoder)[0])
    np.testing.assert_allclose(batched[1], alone, atol=1e-6)
    # Batches of 4 and 2 rows (length buckets 16 and 48) give the same vectors as one batch.
    np.testing.assert_allclose(encode(SENTENCES, batch_size=4, encoder=encoder), batched, atol=1e-6)


def test_paraphrase_is_closer_than_unrelated(encoder):
    a, b, c = encode(
        [
            "A man is playing a guitar.",
            "Someone is strumming a guitar.",
            "The central bank raised interest rates again.",
        ],
        encoder=encoder,
    )
    assert a @ b > 0.6 > a @ c + 0.4


def test_empty_list_and_bad_input(encoder):
    empty = encode([], encoder=encoder)
    assert empty.shape == (0, EMBED_DIM) and empty.dtype == np.float32
    with pytest.raises(ValueError, match="`texts`.*single str"):
        encode("a single string", encoder=encoder)
    with pytest.raises(ValueError, match="`texts`.*item 1 is int"):
        encode(["ok", 3], encoder=encoder)
    with pytest.raises(ValueError, match="`texts`"):
        encode({"a": 1}, encoder=encoder)
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="`batch_size`"):
            encode(["ok"], batch_size=bad, encoder=encoder)
    with pytest.raises(ValueError, match="`encoder`"):
        encode(["ok"], encoder="minilm")
    with pytest.raises(FileNotFoundError, match="`path`.*config.json"):
        load_encoder("/nonexistent/model/dir")


def test_load_is_cached_and_params_tree_matches_module(encoder, weights):
    assert load_encoder() is encoder
    assert encoder.params["params"]["layer_0"]["query"]["kernel"].shape == (384, 384)
    np.testing.assert_array_equal(
        encoder.params["params"]["layer_5"]["intermediate"]["kernel"],
        weights["encoder.layer.5.intermediate.dense.weight"].T,
    )
    broken = dict(weights)
    del broken["encoder.layer.3.output.dense.bias"]
    with pytest.raises(ValueError, match="missing.*layer_3/output/bias"):
        params_from_torch(broken)
    with pytest.raises(ValueError, match="unknown key"):
        params_from_torch({**weights, "encoder.layer.0.extra.weight": np.zeros(1)})


def test_bert_forward_is_pure_and_composes(encoder):
    ids = jnp.zeros((1, 16), jnp.int32).at[0, :4].set(jnp.array([101, 7592, 2088, 102]))
    mask = (ids != 0).astype(jnp.int32)
    hidden = jax.jit(bert_forward, static_argnames="config")(
        encoder.params, ids, mask, None, config=encoder.config
    )
    assert hidden.shape == (1, 16, 384)
    pooled = text.l2_normalize(text.mean_pool(hidden, mask))
    np.testing.assert_allclose(pooled[0], encode(["hello world"], encoder=encoder)[0], atol=1e-6)
    assert encoder.config == BertConfig()

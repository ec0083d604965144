"""Bad input to ``jaxlab.core``: every case raises ``ValueError`` / ``TypeError`` at the boundary
with a message naming the argument (issue 23). One table, one parametrised test; nothing here
compiles a program (the checks run before any tracing)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.core import checkpoint, data, nn, sharding, text, timing, training

KEY = jax.random.key(0)
X = jnp.ones((2, 3))
TOKENS = jnp.zeros((1, 3), jnp.int32)
LM = nn.Transformer(d_model=8, num_layers=1, num_heads=2, vocab_size=11)
MESH = sharding.data_mesh()
BAD_KEYS = {"int": 0, "float array": np.zeros(2, np.float32), "uint32[3]": np.zeros(3, np.uint32)}


def _mlp(**kw):
    return lambda: nn.MLP(**{"features": (4, 2), **kw}).init(KEY, X)


def _lm(**kw):
    fields = {"d_model": 8, "num_layers": 1, "num_heads": 2, "vocab_size": 11, **kw}
    return lambda: nn.Transformer(**fields).init(KEY, TOKENS)


def _generate(**kw):
    args = {"key": KEY, "max_new_tokens": 2, **kw}
    return lambda: nn.generate(LM, None, args.pop("prompt", TOKENS), **args)


def _step(state, x):
    return state, {}


CASES = [
    # nn: modules (checked when init/apply first calls them) and functions
    ("MLP.features", _mlp(features=()), ValueError, "`features` must be a non-empty tuple"),
    ("MLP.features float", _mlp(features=(2.5,)), ValueError, "`features` must be"),
    ("MLP.features str", _mlp(features="44"), ValueError, "`features` must be"),
    ("MLP.features 0", _mlp(features=(4, 0)), ValueError, "`features` must be"),
    ("MLP.dropout", _mlp(dropout=1.5), ValueError, "`dropout` must be in [0, 1)"),
    ("MLP.dropout nan", _mlp(dropout=float("nan")), ValueError, "`dropout`"),
    ("MLP.init_scheme", _mlp(init_scheme="he"), ValueError, "`init_scheme` must be one of"),
    ("MLP.activation", _mlp(activation="swishy"), ValueError, "`activation` must be a callable"),
    (
        "ConvNet.x rank",
        lambda: nn.ConvNet().init(KEY, jnp.ones((2, 8, 8))),
        ValueError,
        "`x` must be [B, H, W, C]",
    ),
    (
        "ConvNet.channels",
        lambda: nn.ConvNet(channels=(8, -1)).init(KEY, jnp.ones((1, 8, 8, 1))),
        ValueError,
        "`channels` must be",
    ),
    ("rope.x rank", lambda: nn.rope(jnp.ones((2, 3, 4)), jnp.arange(3)), ValueError, "`x` must be"),
    ("rope.odd D", lambda: nn.rope(jnp.ones((1, 3, 2, 5)), jnp.arange(3)), ValueError, "even"),
    (
        "rope.positions",
        lambda: nn.rope(jnp.ones((1, 3, 2, 4)), jnp.arange(4)),
        ValueError,
        "`positions` must be [B, T]",
    ),
    (
        "rope.scale",
        lambda: nn.rope(jnp.ones((1, 3, 2, 4)), jnp.arange(3), scale=0.0),
        ValueError,
        "`scale` must lie in (0.0",
    ),
    (
        "rope.scale nan",
        lambda: nn.rope(jnp.ones((1, 3, 2, 4)), jnp.arange(3), scale=float("nan")),
        ValueError,
        "`scale` must be finite",
    ),
    (
        "rope.base",
        lambda: nn.rope(jnp.ones((1, 3, 2, 4)), jnp.arange(3), base=-1.0),
        ValueError,
        "`base` must lie in (0.0",
    ),
    ("sinusoidal.dim odd", lambda: nn.sinusoidal_embedding(X, 5), ValueError, "`dim` must be an"),
    ("sinusoidal.dim float", lambda: nn.sinusoidal_embedding(X, 4.0), ValueError, "`dim` must"),
    (
        "sinusoidal.max_period",
        lambda: nn.sinusoidal_embedding(X, 4, max_period=-10.0),
        ValueError,
        "`max_period` must lie in (0.0",
    ),
    ("Transformer.d_model", _lm(d_model=0), ValueError, "`Transformer.d_model` must be >= 1"),
    ("Transformer.d_model float", _lm(d_model=8.0), ValueError, "`Transformer.d_model` must be"),
    ("Transformer.heads", _lm(num_heads=3), ValueError, "divisible by `num_heads`"),
    ("Transformer.layers", _lm(num_layers=0), ValueError, "`Transformer.num_layers` must be"),
    ("Transformer.vocab", _lm(vocab_size=0), ValueError, "`Transformer.vocab_size` must be"),
    ("Transformer.d_mlp", _lm(d_mlp=2.5), ValueError, "`Transformer.d_mlp` must be an int"),
    ("Transformer.position", _lm(position_encoding="alibi"), ValueError, "`position_encoding`"),
    ("Transformer.rope_scale", _lm(rope_scale=-1.0), ValueError, "`rope_scale` must be > 0"),
    ("Transformer.dropout", _lm(dropout=1.0), ValueError, "`dropout` must be in [0, 1)"),
    ("Transformer.ln eps", _lm(layer_norm_eps=0.0), ValueError, "`Transformer.layer_norm_eps`"),
    (
        "Transformer.inputs dtype",
        lambda: LM.init(KEY, jnp.zeros((1, 3))),
        ValueError,
        "`inputs` must be integer token ids",
    ),
    ("generate.prompt", _generate(prompt=jnp.zeros((3,), jnp.int32)), ValueError, "`prompt`"),
    ("generate.prompt float", _generate(prompt=jnp.zeros((1, 3))), ValueError, "`prompt`"),
    ("generate.max_new_tokens", _generate(max_new_tokens=0), ValueError, "`max_new_tokens`"),
    ("generate.max_new float", _generate(max_new_tokens=2.5), ValueError, "`max_new_tokens`"),
    ("generate.top_k", _generate(top_k=0), ValueError, "`top_k` must be an int in"),
    ("generate.top_k float", _generate(top_k=2.0), ValueError, "`top_k` must be an int"),
    ("generate.temperature", _generate(temperature=float("nan")), ValueError, "`temperature`"),
    (
        "generate.prompt_mask",
        _generate(prompt_mask=jnp.ones((1, 3))),
        ValueError,
        "`prompt_mask` must be bool",
    ),
    *[
        (f"generate.key {k}", _generate(key=v), ValueError, "`key` must be a PRNG key")
        for k, v in BAD_KEYS.items()
    ],
    # text: argument checks before any model is loaded
    ("encode.texts str", lambda: text.encode("a sentence"), ValueError, "`texts` must be a list"),
    ("encode.texts int", lambda: text.encode(3), ValueError, "`texts` must be a list"),
    ("encode.texts items", lambda: text.encode(["a", 2]), ValueError, "item 1 is int"),
    ("encode.batch_size", lambda: text.encode(["a"], batch_size=0), ValueError, "`batch_size`"),
    ("encode.batch float", lambda: text.encode(["a"], batch_size=2.0), ValueError, "`batch_size`"),
    ("encode.encoder", lambda: text.encode(["a"], encoder="minilm"), ValueError, "`encoder`"),
    ("tokenize.texts", lambda: text.tokenize(None), ValueError, "`texts` must be a list"),
    # data
    ("load_digits.scale", lambda: data.load_digits(scale="z"), ValueError, "`scale` must be"),
    ("load_digits.layout", lambda: data.load_digits(layout="nchw"), ValueError, "`layout`"),
    ("load_digits.dtype", lambda: data.load_digits(dtype=np.int32), TypeError, "`dtype` must be"),
    ("load_digits.dtype str", lambda: data.load_digits(dtype="pixels"), TypeError, "`dtype`"),
    ("digits_split.test_size", lambda: data.digits_split(5), ValueError, "`test_size` must be"),
    ("digits_split.float", lambda: data.digits_split(100.5), ValueError, "`test_size` must be"),
    ("digits_split.seed", lambda: data.digits_split(seed=-1), ValueError, "`seed` must be >= 0"),
    # training
    (
        "scan_steps.n_steps",
        lambda: training.scan_steps(_step, 0, -1),
        ValueError,
        "`n_steps` must be >= 0",
    ),
    (
        "run_chunked.n_steps",
        lambda: training.run_chunked(_step, 0, 0, chunk_size=1),
        ValueError,
        "`n_steps` must be >= 1",
    ),
    (
        "run_chunked.chunk float",
        lambda: training.run_chunked(_step, 0, 4, chunk_size=2.0),
        ValueError,
        "`chunk_size` must be an int",
    ),
    (
        "run_chunked.xs",
        lambda: training.run_chunked(_step, 0, 4, chunk_size=2, xs=jnp.ones(3)),
        ValueError,
        "`xs` leading axes [3] != n_steps=4",
    ),
    (
        "fit.num_steps",
        lambda: training.fit(lambda p: p, 0.0, optax.sgd(0.1), -1),
        ValueError,
        "`num_steps` must be >= 0",
    ),
    *[
        (
            f"fit.key {k}",
            lambda v=v: training.fit(lambda p, k: p, 0.0, optax.sgd(0.1), 2, key=v),
            ValueError,
            "`key` must be a PRNG key",
        )
        for k, v in BAD_KEYS.items()
    ],
    (
        "minibatch_epochs.lengths",
        lambda: training.minibatch_epochs(
            _step, 0.0, optax.sgd(0.1), (np.ones(3), np.ones(4)), KEY, epochs=1, batch_size=2
        ),
        ValueError,
        "`data` arrays have different lengths",
    ),
    (
        "minibatch_epochs.batch_size",
        lambda: training.minibatch_epochs(
            _step, 0.0, optax.sgd(0.1), (np.ones(3),), KEY, epochs=1, batch_size=0
        ),
        ValueError,
        "`batch_size` must be >= 1",
    ),
    (
        "minibatch_epochs.key",
        lambda: training.minibatch_epochs(
            _step, 0.0, optax.sgd(0.1), (np.ones(3),), 7, epochs=1, batch_size=2
        ),
        ValueError,
        "`key` must be a PRNG key",
    ),
    (
        "map_in_chunks.chunk",
        lambda: training.map_in_chunks(lambda x: x, (X,), 0),
        ValueError,
        "`chunk` must be >= 1",
    ),
    # sharding
    ("data_mesh.devices", lambda: sharding.data_mesh([]), ValueError, "`devices` is empty"),
    ("pad_batch.multiple", lambda: sharding.pad_batch(X, 0), ValueError, "`multiple` must be >="),
    ("pad_batch.float", lambda: sharding.pad_batch(X, 2.0), ValueError, "`multiple` must be an"),
    (
        "shard_batch.indivisible",
        lambda: sharding.shard_batch(jnp.ones((3, 2)), MESH),
        ValueError,
        "`batch`",
    ),
    ("batch_size.scalar", lambda: sharding.batch_size(1.0), ValueError, "scalar leaf"),
    # checkpoint, timing
    (
        "restore_pytree.path",
        lambda: checkpoint.restore_pytree("/nonexistent/ckpt", X),
        FileNotFoundError,
        "no checkpoint at `path`",
    ),
    (
        "Checkpointer.every_seconds",
        lambda: checkpoint.Checkpointer("/tmp/x", every_seconds=-1.0),
        ValueError,
        "`every_seconds` must lie in [0.0",
    ),
    (
        "Checkpointer.max_to_keep",
        lambda: checkpoint.Checkpointer("/tmp/x", max_to_keep=0),
        ValueError,
        "`max_to_keep` must be >= 1",
    ),
    ("time_call.n_runs", lambda: timing.time_call(abs, 1.0, n_runs=0), ValueError, "`n_runs`"),
    ("time_call.n_warmup", lambda: timing.time_call(abs, 1.0, n_warmup=-1), ValueError, "`n_war"),
    ("time_call.fn", lambda: timing.time_call("f", 1.0), TypeError, "`fn` must be callable"),
]


# found by an independent probe (issue 23 review): each used to be silent or unclear
CASES += [
    ("torch_uniform.fan_in", lambda: nn.torch_uniform(-1), ValueError, "`fan_in` must be >= 1"),
    (
        "MLP.apply width",
        lambda: nn.MLP((4, 2)).apply(nn.MLP((4, 2)).init(KEY, X), jnp.ones((2, 5))),
        ValueError,
        "`x` has (5,) input features but the parameters expect 3",
    ),
    ("dense_init.fan_in", lambda: nn.dense_init("torch", 0), ValueError, "`fan_in` must be"),
    (
        "Transformer.token ids",
        lambda: LM.init(KEY, jnp.full((1, 3), 50, jnp.int32)),
        ValueError,
        "`inputs` must lie in [0, 10]",
    ),
    ("BertConfig.vocab", lambda: text.BertConfig(vocab_size=-1), ValueError, "vocab_size` must"),
    ("BertConfig.layers", lambda: text.BertConfig(num_layers=0), ValueError, "num_layers` must"),
    ("BertConfig.precision", lambda: text.BertConfig(precision="x"), ValueError, "precision`"),
    ("l2_normalize.eps", lambda: text.l2_normalize(X, eps=-1.0), ValueError, "`eps` must lie"),
    (
        "mean_pool.mask",
        lambda: text.mean_pool(jnp.ones((2, 4, 3)), jnp.ones((2, 5))),
        ValueError,
        "`attention_mask` must have shape (2, 4)",
    ),
    ("scan_steps.step", lambda: training.scan_steps(None, 0.0, 2), TypeError, "`step` must be"),
    (
        "scan_steps.xs",
        lambda: training.scan_steps(_step, 0.0, 3, xs=jnp.zeros(5)),
        ValueError,
        "`xs` leading axes [5] != n_steps=3",
    ),
    (
        "fit.optimizer",
        lambda: training.fit(lambda p: p, 0.0, None, 3),
        TypeError,
        "`optimizer` must be an optax",
    ),
    (
        "fit.params nan",
        lambda: training.fit(lambda p: p.sum(), jnp.array([1.0, jnp.nan]), optax.sgd(0.1), 3),
        ValueError,
        "`params` must be finite",
    ),
    (
        "TrainState.tx",
        lambda: training.TrainState.create(params=X, tx=None),
        TypeError,
        "`tx` must be an optax",
    ),
    (
        "map_in_chunks.chunk float",
        lambda: training.map_in_chunks(lambda a: a, (X,), 1.5),
        ValueError,
        "`chunk` must be an int",
    ),
    (
        "map_in_chunks.sizes",
        lambda: training.map_in_chunks(lambda a, b: a, (jnp.ones(4), jnp.ones(3)), 2),
        ValueError,
        "every leaf of `args` needs one leading size",
    ),
    ("data_mesh.str", lambda: sharding.data_mesh("cpu"), TypeError, "`devices` must be a list"),
    ("data_mesh.items", lambda: sharding.data_mesh([1]), TypeError, "`devices` must hold"),
    ("shard_batch.mesh", lambda: sharding.shard_batch(X, None), TypeError, "`mesh` must be a"),
    (
        "batch_sharding.axis",
        lambda: sharding.batch_sharding(MESH, "model"),
        ValueError,
        "mesh has no axis named 'model'",
    ),
    (
        "check_divisible.size",
        lambda: sharding.check_divisible(-1, MESH),
        ValueError,
        "`batch` must be >= 0",
    ),
    (
        "Checkpointer.every str",
        lambda: checkpoint.Checkpointer("/tmp/x", every_seconds="30"),
        TypeError,
        "`every_seconds` must be real",
    ),
    (
        "Checkpointer.keep float",
        lambda: checkpoint.Checkpointer("/tmp/x", max_to_keep=1.5),
        ValueError,
        "`max_to_keep` must be an int",
    ),
]


@pytest.mark.parametrize(("case", "call", "exc", "fragment"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_raises_naming_the_argument(case, call, exc, fragment):
    with pytest.raises(exc) as info:
        call()
    assert fragment in str(info.value), str(info.value)


def test_restore_with_a_mismatched_like_names_it(tmp_path):
    checkpoint.save_pytree(tmp_path / "c", {"w": jnp.ones(3)})
    with pytest.raises(ValueError, match="`like` does not match the checkpoint"):
        checkpoint.restore_pytree(tmp_path / "c", {"w": jnp.ones(4), "b": jnp.ones(1)})


def test_save_never_deletes_what_is_not_a_checkpoint(tmp_path):
    user_file = tmp_path / "notes.txt"
    user_file.write_text("keep me")
    with pytest.raises(ValueError, match="is a file, not a checkpoint"):
        checkpoint.save_pytree(user_file, {"w": jnp.ones(3)})
    assert user_file.read_text() == "keep me"
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "x.csv").write_text("1,2")
    with pytest.raises(ValueError, match="holds no checkpoint"):
        checkpoint.save_pytree(folder, {"w": jnp.ones(3)})
    assert (folder / "x.csv").exists()
    with pytest.raises(TypeError, match=r"`tree\['w'\]` is not"):
        checkpoint.save_pytree(tmp_path / "c", {"w": object()})
    checkpoint.save_pytree(tmp_path / "c", {"w": jnp.ones(3)})  # a checkpoint is replaced
    checkpoint.save_pytree(tmp_path / "c", {"w": jnp.zeros(3)})
    np.testing.assert_array_equal(checkpoint.restore_pytree(tmp_path / "c", {"w": X[0]})["w"], 0)

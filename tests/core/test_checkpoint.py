"""jaxlab.core.checkpoint: round trips, periodic saves and resuming an interrupted loop."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core import sharding
from jaxlab.core.checkpoint import (
    Checkpointer,
    cache_path,
    default_cache_dir,
    load_or_build,
    restore_pytree,
    save_pytree,
)
from jaxlab.core.training import run_chunked
from tests.core.test_training import random_walk_step, walk_init


def make_state():
    return {
        "params": {"w": jnp.arange(6.0).reshape(2, 3), "b": jnp.float32(-1.5)},
        "step": jnp.int32(7),
        "typed_key": jax.random.key(11),
        "raw_key": jax.random.PRNGKey(12),
        "host": np.array([1, 2, 3], dtype=np.int64),
    }


def assert_same(a, b):
    a = jax.tree_util.tree_map(lambda x: jax.random.key_data(x) if _typed(x) else x, a)
    b = jax.tree_util.tree_map(lambda x: jax.random.key_data(x) if _typed(x) else x, b)
    assert jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b)
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        assert np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _typed(x):
    return isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key)


def test_round_trip_keeps_values_dtypes_and_keys(tmp_path):
    state = make_state()
    save_pytree(tmp_path / "ckpt", state)
    restored = restore_pytree(tmp_path / "ckpt", make_state())
    assert_same(restored, state)
    assert _typed(restored["typed_key"])
    # The restored key draws the same numbers as the original.
    np.testing.assert_array_equal(
        jax.random.normal(restored["typed_key"], (3,)), jax.random.normal(state["typed_key"], (3,))
    )


def test_round_trip_with_abstract_template(tmp_path):
    state = make_state()
    save_pytree(tmp_path / "ckpt", state)
    restored = restore_pytree(tmp_path / "ckpt", jax.eval_shape(lambda: make_state()))
    np.testing.assert_array_equal(restored["params"]["w"], state["params"]["w"])


def test_sharded_state_restores_with_its_sharding(tmp_path, mesh):
    x = sharding.shard_batch(jnp.arange(16.0).reshape(8, 2), mesh)
    save_pytree(tmp_path / "ckpt", {"x": x})
    restored = restore_pytree(tmp_path / "ckpt", {"x": x})
    assert restored["x"].sharding == x.sharding
    np.testing.assert_array_equal(restored["x"], x)


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        restore_pytree(tmp_path / "nothing", make_state())
    with Checkpointer(tmp_path / "empty") as ckpt:
        assert ckpt.latest_step() is None
        with pytest.raises(FileNotFoundError, match="no checkpoint"):
            ckpt.restore(make_state())
    with pytest.raises(ValueError, match=r"`every_seconds` must lie in \[0.0, inf\]"):
        Checkpointer(tmp_path / "x", every_seconds=-1)


def test_checkpointer_saves_periodically_and_restores_latest(tmp_path):
    with Checkpointer(tmp_path / "run", every_seconds=3600, max_to_keep=2) as ckpt:
        assert not ckpt.maybe_save(1, make_state())  # interval not reached
        assert ckpt.maybe_save(2, make_state(), force=True)
        state = make_state()
        state["step"] = jnp.int32(99)
        assert ckpt.maybe_save(3, state, force=True)
        step, restored = ckpt.restore(make_state())
    assert step == 3 and int(restored["step"]) == 99


class Interrupt(Exception):
    pass


def test_interrupted_run_resumes_to_the_uninterrupted_result(tmp_path):
    state0 = walk_init(5)
    _, reference = run_chunked(random_walk_step, state0, 20, chunk_size=4)

    def stop_after_8(done, _):
        if done == 8:
            raise Interrupt

    with Checkpointer(tmp_path / "run", every_seconds=0) as ckpt, pytest.raises(Interrupt):
        run_chunked(
            random_walk_step, state0, 20, chunk_size=4, checkpointer=ckpt, on_chunk=stop_after_8
        )

    progress = []
    with Checkpointer(tmp_path / "run", every_seconds=0) as ckpt:
        assert ckpt.latest_step() == 8
        final, metrics = run_chunked(
            random_walk_step,
            state0,
            20,
            chunk_size=4,
            checkpointer=ckpt,
            on_chunk=lambda done, _: progress.append(done),
        )
    assert progress == [12, 16, 20]  # only the remaining chunks ran
    np.testing.assert_array_equal(metrics["x"], reference["x"])
    assert int(final["t"]) == 20

    # A finished run restores its final checkpoint and runs nothing.
    with Checkpointer(tmp_path / "run", every_seconds=0) as ckpt:
        _, again = run_chunked(
            random_walk_step,
            state0,
            20,
            chunk_size=4,
            checkpointer=ckpt,
            on_chunk=lambda *_: pytest.fail("nothing left to run"),
        )
    np.testing.assert_array_equal(again["x"], reference["x"])


def test_checkpoint_from_a_longer_run_is_rejected(tmp_path):
    with Checkpointer(tmp_path / "run", every_seconds=0) as ckpt:
        run_chunked(random_walk_step, walk_init(0), 12, chunk_size=4, checkpointer=ckpt)
    with Checkpointer(tmp_path / "run") as ckpt, pytest.raises(ValueError, match="past n_steps"):
        run_chunked(random_walk_step, walk_init(0), 8, chunk_size=4, checkpointer=ckpt)


def test_load_or_build_builds_once_then_restores(tmp_path, monkeypatch):
    calls = []

    def build():
        calls.append(1)
        return {"w": np.arange(3.0, dtype=np.float32)}, "trained"

    like = {"w": jax.ShapeDtypeStruct((3,), jnp.float32)}
    path = cache_path(tmp_path, "base", ("v1", 3))
    assert (
        path == cache_path(tmp_path, "base", ("v1", 3)) != cache_path(tmp_path, "base", ("v1", 4))
    )
    a, info_a, cached_a = load_or_build(path, like, build)
    b, info_b, cached_b = load_or_build(path, like, build)
    assert (cached_a, cached_b, info_a, info_b, len(calls)) == (False, True, "trained", None, 1)
    np.testing.assert_array_equal(np.asarray(b["w"]), a["w"])
    load_or_build(None, like, build)  # no cache: always built
    assert len(calls) == 2
    monkeypatch.setenv("JAXLAB_CACHE_DIR", str(tmp_path))
    assert default_cache_dir("m") == tmp_path / "m"

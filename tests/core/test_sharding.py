"""jaxlab.core.sharding on 4 forced host devices: sharded == unsharded, shardings, errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxlab.core import sharding


def quadratic(params, x):
    """Per-example loss and a second output, to exercise pytree outputs."""
    r = params["w"] * x["a"] - params["b"]
    return {"loss": jnp.sum(r**2), "resid": r}


def make_batch(key, n):
    k1, k2 = jax.random.split(key)
    return {"a": jax.random.normal(k1, (n, 3)), "tag": jax.random.normal(k2, (n,))}


PARAMS = {"w": jnp.array([1.0, -2.0, 0.5]), "b": jnp.float32(0.3)}


def test_mesh_spans_all_devices(mesh):
    assert mesh.shape == {"data": 4}
    assert sharding.data_mesh(jax.devices()[:2]).shape == {"data": 2}
    with pytest.raises(ValueError, match="`devices` is empty"):
        sharding.data_mesh([])


def test_shard_batch_places_rows_on_devices(mesh, key):
    batch = make_batch(key, 8)
    placed = sharding.shard_batch(batch, mesh)
    assert placed["a"].sharding == NamedSharding(mesh, P("data"))
    # Each device holds 2 consecutive rows.
    shards = sorted(placed["a"].addressable_shards, key=lambda s: s.index[0].start)
    assert [s.data.shape for s in shards] == [(2, 3)] * 4
    np.testing.assert_array_equal(np.asarray(placed["a"]), np.asarray(batch["a"]))
    params = sharding.replicate(PARAMS, mesh)
    assert params["w"].sharding == NamedSharding(mesh, P())


def test_sharded_map_equals_vmap_and_keeps_batch_sharding(mesh, key):
    batch = make_batch(key, 12)
    expected = jax.vmap(quadratic, in_axes=(None, 0))(PARAMS, batch)
    out = sharding.sharded_map(quadratic, mesh)(PARAMS, sharding.shard_batch(batch, mesh))
    np.testing.assert_allclose(out["loss"], expected["loss"], rtol=1e-6)
    np.testing.assert_allclose(out["resid"], expected["resid"], rtol=1e-6)
    assert out["loss"].sharding == NamedSharding(mesh, P("data"))


def test_sharded_mean_equals_unsharded_mean_and_gradient(mesh, key):
    batch = make_batch(key, 16)
    mean_fn = sharding.sharded_mean(quadratic, mesh)
    out = mean_fn(PARAMS, sharding.shard_batch(batch, mesh))
    per_example = jax.vmap(quadratic, in_axes=(None, 0))(PARAMS, batch)
    np.testing.assert_allclose(out["loss"], jnp.mean(per_example["loss"]), rtol=1e-5)
    np.testing.assert_allclose(out["resid"], jnp.mean(per_example["resid"], 0), rtol=1e-5)
    assert out["loss"].sharding.is_fully_replicated

    grad_sharded = jax.grad(lambda p: mean_fn(p, batch)["loss"])(PARAMS)
    grad_plain = jax.grad(
        lambda p: jnp.mean(jax.vmap(quadratic, in_axes=(None, 0))(p, batch)["loss"])
    )(PARAMS)
    for name in PARAMS:
        np.testing.assert_allclose(grad_sharded[name], grad_plain[name], rtol=1e-5)


def test_sharded_mean_closed_form(mesh):
    # mean of x^2 over x = 0..7 is 17.5
    xs = jnp.arange(8.0)
    out = sharding.sharded_mean(lambda p, x: p * x**2, mesh)(jnp.float32(1.0), xs)
    np.testing.assert_allclose(out, 17.5)


def test_pad_and_mask_give_the_unpadded_mean(mesh, key):
    batch = make_batch(key, 7)
    padded, mask = sharding.pad_batch(batch, 4)
    assert padded["a"].shape == (8, 3)
    np.testing.assert_array_equal(mask, [True] * 7 + [False])
    np.testing.assert_array_equal(padded["a"][7], batch["a"][6])  # padding repeats the last row
    out = sharding.sharded_mean(quadratic, mesh)(PARAMS, padded, mask)
    expected = jnp.mean(jax.vmap(quadratic, in_axes=(None, 0))(PARAMS, batch)["loss"])
    np.testing.assert_allclose(out["loss"], expected, rtol=1e-5)
    same, full_mask = sharding.pad_batch(batch["a"][:4], 4)
    assert same.shape == (4, 3) and bool(full_mask.all())


def test_non_divisible_batch_is_a_clear_error(mesh, key):
    batch = make_batch(key, 7)
    with pytest.raises(ValueError, match=r"batch size 7.*multiple of the 4 devices.*pad_batch"):
        sharding.shard_batch(batch, mesh)
    with pytest.raises(ValueError, match="batch size 7"):
        sharding.sharded_map(quadratic, mesh)(PARAMS, batch)
    with pytest.raises(ValueError, match="batch size 7"):
        sharding.sharded_mean(quadratic, mesh)(PARAMS, batch)


def test_bad_inputs_name_the_argument(mesh):
    with pytest.raises(ValueError, match="disagree on the batch size"):
        sharding.shard_batch({"a": jnp.zeros((4, 2)), "b": jnp.zeros((8,))}, mesh)
    with pytest.raises(ValueError, match="scalar leaf"):
        sharding.shard_batch({"a": jnp.float32(1.0)}, mesh)
    with pytest.raises(ValueError, match="`mask` must have shape"):
        sharding.sharded_mean(quadratic, mesh)(
            PARAMS, make_batch(jax.random.key(0), 8), jnp.ones(4)
        )
    with pytest.raises(ValueError, match="no axis named 'model'"):
        sharding.sharded_map(quadratic, mesh, axis_name="model")
    with pytest.raises(ValueError, match="`multiple` must be >= 1"):
        sharding.pad_batch(jnp.zeros((3,)), 0)


def test_traced_once_across_calls(mesh, key):
    traces = []

    def fn(params, x):
        traces.append(1)  # runs at trace time only
        return quadratic(params, x)

    mean_fn = sharding.sharded_mean(fn, mesh)
    for i in range(3):
        mean_fn(PARAMS, make_batch(jax.random.fold_in(key, i), 8))
    assert len(traces) == 1


def test_random_draws_do_not_depend_on_the_layout(mesh, key):
    """threefry_partitionable (JAX default): sharded sampling == unsharded sampling."""
    draw = lambda k: jax.random.normal(k, (16, 3))
    sharded = jax.jit(draw, out_shardings=sharding.batch_sharding(mesh))(key)
    plain = jax.jit(draw)(key)
    np.testing.assert_array_equal(np.asarray(sharded), np.asarray(plain))

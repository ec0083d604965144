"""The one way a jaxlab hot core shards its batch axis.

Every hot core (Monte Carlo samples, auction valuation samples, GP time points, batches of games,
distillation batches, memory shards) runs through the same path, from one CPU to a multi-host TPU
slice:

1. :func:`data_mesh` builds a 1-D mesh named ``"data"`` over the available devices;
2. :func:`shard_batch` places a batch with ``NamedSharding(mesh, P("data"))`` (leading axis split
   across devices) and :func:`replicate` places parameters with ``NamedSharding(mesh, P())``;
3. :func:`sharded_map` runs a per-example function over a sharded batch (``jit`` with in/out
   shardings, output sharded like the batch), and :func:`sharded_mean` averages a per-example
   function over a sharded batch with ``jax.shard_map`` (a per-shard sum, then one ``psum``).

**The non-divisible rule.** A batch axis whose size is not a multiple of the number of devices on
the mesh is a clear ``ValueError`` (naming the argument, its size and the device count), never a
silent reshape. The remedy is explicit: :func:`pad_batch` pads the batch to a multiple by repeating
its last example and returns a boolean ``mask``; :func:`sharded_mean` takes that mask and gives
padded examples zero weight, so the mean equals the unpadded one exactly.

Random numbers do not depend on the layout because JAX >= 0.5 defaults to
``jax_threefry_partitionable=True``; this module does not configure JAX.

Multi-host: call ``jax.distributed.initialize()`` first; :func:`data_mesh` then spans every
process's devices, and :func:`shard_batch` treats its argument as this process's slice of the
global batch (``jax.make_array_from_process_local_data``).

Example::

    mesh = data_mesh()
    per_example_loss = lambda params, x: jnp.sum((params["w"] * x) ** 2)
    mean_loss = sharded_mean(per_example_loss, mesh)
    grads = jax.grad(mean_loss)(replicate(params, mesh), shard_batch(xs, mesh))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxlab.core.checks import check_instance, check_int

PyTree = Any

DATA_AXIS = "data"

__all__ = [
    "DATA_AXIS",
    "batch_sharding",
    "batch_size",
    "check_divisible",
    "constrain_batch",
    "data_mesh",
    "pad_batch",
    "replicate",
    "replicated_sharding",
    "shard_batch",
    "sharded_map",
    "sharded_mean",
]


def data_mesh(devices: Sequence[jax.Device] | None = None, axis_name: str = DATA_AXIS) -> Mesh:
    """A 1-D mesh over ``devices`` (default: all devices of all processes) with one named axis.

    The axis is ``AxisType.Auto`` so that XLA propagates shardings through ordinary jitted code
    (explicit-sharding mode would make every op declare its output sharding).

    Args:
      devices: the devices to span; ``None`` means ``jax.devices()``.
      axis_name: the mesh axis name batch axes are sharded over.

    Returns:
      A ``jax.sharding.Mesh`` of shape ``(len(devices),)``.
    """
    if isinstance(devices, str) or not (devices is None or isinstance(devices, Sequence)):
        raise TypeError(f"`devices` must be a list of jax devices or None, got {devices!r:.60}.")
    devices = list(jax.devices() if devices is None else devices)
    if not devices:
        raise ValueError("data_mesh: `devices` is empty; expected at least one device.")
    bad = [d for d in devices if not isinstance(d, jax.Device)]
    if bad:
        raise TypeError(f"`devices` must hold jax devices (jax.devices()), got {bad[0]!r:.60}.")
    return jax.make_mesh(
        (len(devices),), (axis_name,), axis_types=(AxisType.Auto,), devices=devices
    )


def batch_sharding(mesh: Mesh, axis_name: str = DATA_AXIS) -> NamedSharding:
    """``NamedSharding(mesh, P(axis_name))``: leading axis split over the mesh, the rest whole."""
    _n_shards(mesh, axis_name)  # checks the mesh and the axis
    return NamedSharding(mesh, P(axis_name))


def replicated_sharding(mesh: Mesh) -> NamedSharding:
    """``NamedSharding(mesh, P())``: a full copy on every device (parameters, scalars)."""
    check_instance(mesh, "mesh", Mesh)
    return NamedSharding(mesh, P())


def _n_shards(mesh: Mesh, axis_name: str) -> int:
    check_instance(mesh, "mesh", Mesh)
    if axis_name not in mesh.shape:
        raise ValueError(
            f"mesh has no axis named {axis_name!r}; its axes are {tuple(mesh.axis_names)}."
        )
    return mesh.shape[axis_name]


def batch_size(tree: PyTree, name: str = "batch") -> int:
    """The common leading-axis size of every leaf of ``tree``.

    Raises:
      ValueError: if ``tree`` has no leaves, a leaf is a scalar, or leading sizes disagree.
    """
    leaves = jax.tree_util.tree_leaves(tree)
    if not leaves:
        raise ValueError(f"`{name}` has no array leaves; expected arrays with a batch axis.")
    sizes = set()
    for leaf in leaves:
        shape = np.shape(leaf)
        if len(shape) == 0:
            raise ValueError(f"`{name}` has a scalar leaf; every leaf needs a leading batch axis.")
        sizes.add(shape[0])
    if len(sizes) != 1:
        raise ValueError(f"`{name}` leaves disagree on the batch size: {sorted(sizes)}.")
    return sizes.pop()


def check_divisible(size: int, mesh: Mesh, name: str = "batch", axis_name: str = DATA_AXIS):
    """Raise the module's one non-divisible error if ``size`` is not a multiple of the shards."""
    check_int(size, name, minimum=0)
    n = _n_shards(mesh, axis_name)
    if size % n:
        raise ValueError(
            f"`{name}` has batch size {size}, which is not a multiple of the {n} devices on mesh "
            f"axis {axis_name!r}. Choose a multiple of {n}, or pad with "
            f"jaxlab.core.sharding.pad_batch(x, {n}) and pass the returned mask."
        )


def shard_batch(
    tree: PyTree, mesh: Mesh, *, name: str = "batch", axis_name: str = DATA_AXIS
) -> PyTree:
    """Place every leaf of ``tree`` with its leading axis split across ``mesh``'s devices.

    Args:
      tree: pytree of arrays ``[B, ...]`` with a common ``B`` (on several hosts: this process's
        ``B / process_count`` slice).
      mesh: a mesh with axis ``axis_name`` (see :func:`data_mesh`).
      name: the argument name used in error messages.

    Returns:
      The same pytree with leaves sharded as ``P(axis_name)``.

    Raises:
      ValueError: if ``B`` is not a multiple of the number of devices on the axis.
    """
    sharding = batch_sharding(mesh, axis_name)
    if jax.process_count() > 1:
        local = batch_size(tree, name) * jax.process_count()
        check_divisible(local, mesh, name, axis_name)
        return jax.tree_util.tree_map(
            lambda x: jax.make_array_from_process_local_data(sharding, np.asarray(x)), tree
        )
    check_divisible(batch_size(tree, name), mesh, name, axis_name)
    return jax.device_put(tree, sharding)


def replicate(tree: PyTree, mesh: Mesh) -> PyTree:
    """Place every leaf of ``tree`` whole on every device of ``mesh`` (``P()``)."""
    return jax.device_put(tree, replicated_sharding(mesh))


def constrain_batch(
    tree: PyTree, mesh: Mesh | None, *, axis: int = 0, axis_name: str = DATA_AXIS
) -> PyTree:
    """Inside jitted code: ask XLA to split axis ``axis`` of every leaf across ``mesh``.

    ``jax.lax.with_sharding_constraint`` with ``P(None, ..., axis_name)`` (the mesh axis at
    position ``axis``); XLA partitions the surrounding computation to match, so per-sample work
    (e.g. a kernel sum over a market sample) runs on each device's slice. Under ``vmap`` the
    mapped axis is left unsharded. ``mesh=None`` returns ``tree`` unchanged (one code path for
    sharded and unsharded runs). The axis size must be a multiple of the device count.
    """
    if mesh is None:
        return tree
    n = _n_shards(mesh, axis_name)

    def constrain(x):
        if x.shape[axis] % n:
            check_divisible(x.shape[axis], mesh, f"axis {axis}", axis_name)
        spec = P(*([None] * axis), axis_name)
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec))

    return jax.tree_util.tree_map(constrain, tree)


def pad_batch(tree: PyTree, multiple: int) -> tuple[PyTree, jax.Array]:
    """Pad the leading axis of every leaf up to a multiple of ``multiple``.

    Padding repeats the last example (not zeros), so per-example functions stay finite on the
    padding (no ``log(0)``); the returned mask marks real examples.

    Args:
      tree: pytree of arrays ``[B, ...]``.
      multiple: pad ``B`` up to the next multiple of this (usually the device count).

    Returns:
      ``(padded, mask)``: leaves ``[B', ...]`` with ``B' = ceil(B / multiple) * multiple``, and
      ``mask: [B'] bool``, true for the first ``B`` rows.
    """
    check_int(multiple, "multiple", minimum=1)
    b = batch_size(tree, "tree")
    padded_size = -(-b // multiple) * multiple
    pad = padded_size - b

    def pad_leaf(x):
        x = jnp.asarray(x)
        if pad == 0:
            return x
        return jnp.concatenate([x, jnp.repeat(x[-1:], pad, axis=0)], axis=0)

    mask = jnp.arange(padded_size) < b
    return jax.tree_util.tree_map(pad_leaf, tree), mask


def sharded_map(
    fn: Callable[[PyTree, PyTree], PyTree],
    mesh: Mesh | None = None,
    *,
    axis_name: str = DATA_AXIS,
) -> Callable[[PyTree, PyTree], PyTree]:
    """Map a per-example function over a batch sharded across ``mesh``.

    ``out[i] = fn(params, batch[i])``, computed as one jitted ``vmap`` whose inputs are
    ``params -> P()`` and ``batch -> P(axis_name)`` and whose output is sharded like the batch:
    every device computes its own rows, with no communication.

    Args:
      fn: ``fn(params, example) -> out`` on one unbatched example (pytrees allowed).
      mesh: the mesh; ``None`` means :func:`data_mesh` over all devices.

    Returns:
      ``mapped(params, batch) -> out`` with leaves ``[B, ...]`` sharded as ``P(axis_name)``.
      A batch size that is not a multiple of the device count raises ``ValueError``.
    """
    mesh = data_mesh(axis_name=axis_name) if mesh is None else mesh
    _n_shards(mesh, axis_name)
    repl, data = replicated_sharding(mesh), batch_sharding(mesh, axis_name)
    mapped = jax.jit(jax.vmap(fn, in_axes=(None, 0)), in_shardings=(repl, data), out_shardings=data)

    def call(params: PyTree, batch: PyTree) -> PyTree:
        check_divisible(batch_size(batch), mesh, "batch", axis_name)
        return mapped(params, batch)

    return call


def sharded_mean(
    fn: Callable[[PyTree, PyTree], PyTree],
    mesh: Mesh | None = None,
    *,
    axis_name: str = DATA_AXIS,
) -> Callable[..., PyTree]:
    """Average a per-example function over a batch sharded across ``mesh``.

    .. math:: \\bar f(\\theta) = \\frac{\\sum_i m_i f(\\theta, x_i)}{\\sum_i m_i}

    Each device sums ``m_i f(theta, x_i)`` over its own rows (``jax.shard_map``), then one ``psum``
    over ``axis_name`` combines the partial sums and counts; the result is replicated. It is
    differentiable in ``params`` (gradient estimates are ``jax.grad`` of this mean).

    Args:
      fn: ``fn(params, example) -> pytree of arrays`` on one unbatched example.
      mesh: the mesh; ``None`` means :func:`data_mesh` over all devices.

    Returns:
      ``mean(params, batch, mask=None) -> pytree`` (leaves shaped like ``fn``'s outputs, float).
      ``batch`` leaves are ``[B, ...]``; ``mask: [B] bool`` (from :func:`pad_batch`) excludes
      padded rows. ``B`` must be a multiple of the device count.
    """
    mesh = data_mesh(axis_name=axis_name) if mesh is None else mesh
    _n_shards(mesh, axis_name)

    def per_shard(params, batch, mask):
        values = jax.vmap(fn, in_axes=(None, 0))(params, batch)
        weight = mask.astype(jnp.float32)

        def weighted_sum(v):
            v = jnp.asarray(v)
            v = v.astype(jnp.promote_types(v.dtype, jnp.float32))
            return jnp.tensordot(weight.astype(v.dtype), v, axes=1)

        sums = jax.lax.psum(jax.tree_util.tree_map(weighted_sum, values), axis_name)
        count = jax.lax.psum(jnp.sum(weight), axis_name)
        return jax.tree_util.tree_map(lambda s: s / count.astype(s.dtype), sums)

    reduce = jax.jit(
        jax.shard_map(
            per_shard,
            mesh=mesh,
            in_specs=(P(), P(axis_name), P(axis_name)),
            out_specs=P(),
        )
    )

    def call(params: PyTree, batch: PyTree, mask: jax.Array | None = None) -> PyTree:
        b = batch_size(batch)
        check_divisible(b, mesh, "batch", axis_name)
        if mask is None:
            mask = jnp.ones((b,), dtype=bool)
        elif np.shape(mask) != (b,):
            raise ValueError(
                f"`mask` must have shape ({b},) to match the batch, got {np.shape(mask)}."
            )
        return reduce(params, batch, mask)

    return call

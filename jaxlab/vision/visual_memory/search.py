"""Exact (and ``approx_max_k``) top-k search over a memory, blocked and row-sharded.

:func:`search_arrays` is the core: a ``lax.scan`` over fixed-size blocks of memory rows keeping a
running top-k, so the ``B x N`` similarity matrix is never built (peak memory
``O(B * (block + k))``). Invalid rows score ``-inf``; ``query_ids`` masks a query's own row
(memory-vs-memory queries). Ties go to the lower id: rows are in id order (see
:mod:`~jaxlab.vision.visual_memory.memory`), ``lax.top_k`` is stable (lower index first) and the
running candidates (earlier rows) always precede a block's.

With a ``mesh`` the memory rows are sharded ``P("mem", None)``: under ``shard_map`` every device
searches its own rows, the per-device top-k candidates (``k x devices``) are all-gathered in
device (= row) order, and the global top-k is selected, which equals the unsharded answer exactly.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from jaxlab.core.checks import check_choice, check_instance, check_int, check_scalar
from jaxlab.core.sharding import data_mesh
from jaxlab.vision.visual_memory.memory import Memory, _check_embeddings, _check_memory

__all__ = ["MEM_AXIS", "SEARCH_METHODS", "memory_mesh", "search", "search_arrays", "shard_memory"]

MEM_AXIS = "mem"
SEARCH_METHODS = ("exact", "approx")
DEFAULT_BLOCK = 1024


def memory_mesh(devices=None) -> Mesh:
    """A 1-D mesh named ``"mem"`` (memory rows are split over it)."""
    return data_mesh(devices, axis_name=MEM_AXIS)


def _n_shards(mesh: Mesh, axis: str = MEM_AXIS) -> int:
    check_instance(mesh, "mesh", Mesh)
    if axis not in mesh.shape:
        raise ValueError(
            f"`mesh` has no axis {axis!r} (use memory_mesh()); axes: {mesh.axis_names}."
        )
    return int(mesh.shape[axis])


def _block_topk(s, k: int, method: str, recall: float, total: int):
    if method == "approx":
        return jax.lax.approx_max_k(s, k, recall_target=recall,
                                    reduction_input_size_override=total)  # fmt: skip
    return jax.lax.top_k(s, k)


def _local_search(q, emb, valid, ids, qids, *, k, block, method, recall, total):
    """Top-k of ``q @ emb.T`` over rows (scan over ``block``-row slices); ``(sims, ids)``."""
    n, d = emb.shape
    nb = n // block
    kb = min(k, block)

    def body(carry, blk):
        best_s, best_i = carry
        e, v, i = blk
        s = jnp.matmul(q, e.T, precision=jax.lax.Precision.HIGHEST)
        keep = v[None, :] & (i[None, :] != qids[:, None])
        s = jnp.where(keep, s, -jnp.inf)
        bs, bj = _block_topk(s, kb, method, recall, total)
        cat_s = jnp.concatenate([best_s, bs], axis=1)
        cat_i = jnp.concatenate([best_i, i[bj]], axis=1)
        top_s, j = jax.lax.top_k(cat_s, k)
        return (top_s, jnp.take_along_axis(cat_i, j, axis=1)), None

    b = q.shape[0]
    init = (jnp.full((b, k), -jnp.inf, q.dtype), jnp.full((b, k), -1, ids.dtype))
    blocks = (emb.reshape(nb, block, d), valid.reshape(nb, block), ids.reshape(nb, block))
    (sims, out), _ = jax.lax.scan(body, init, blocks)
    return sims, out


@functools.partial(jax.jit, static_argnames=("k", "block", "method", "recall", "mesh"))
def search_arrays(
    queries, emb, valid, ids, query_ids=None, *, k: int, block: int = DEFAULT_BLOCK,
    method: str = "exact", recall: float = 0.95, mesh: Mesh | None = None,
):  # fmt: skip
    """Jitted core of :func:`search` on raw arrays (no checks).

    Args:
      queries: ``[B, d]``. emb: ``[N, d]``; valid: ``[N]`` bool; ids: ``[N]`` int32.
      query_ids: ``[B]`` ids to exclude per query (``-1``/``None``: none).
      k: neighbours (static). block: rows per scan step (static; ``N`` per device must be a
        multiple, use a power of two). method: ``"exact"`` or ``"approx"`` (``approx_max_k``
        per block with the global ``N`` as its reduction size; exact off TPU). mesh: shard the
        memory rows over its ``"mem"`` axis.

    Returns:
      ``(sims [B, k], ids [B, k])``, similarity descending, ties to the lower id; a slot with no
      valid row holds ``(-inf, -1)``.
    """
    if query_ids is None:
        query_ids = jnp.full((queries.shape[0],), -1, ids.dtype)
    total = emb.shape[0]
    if mesh is None:
        return _local_search(queries, emb, valid, ids, query_ids, k=k, block=min(block, total),
                             method=method, recall=recall, total=total)  # fmt: skip
    n_dev = mesh.shape[MEM_AXIS]
    local = total // n_dev
    blk = min(block, local)

    def per_device(q, e, v, i, qi):
        s, j = _local_search(q, e, v, i, qi, k=min(k, local), block=blk, method=method,
                             recall=recall, total=total)  # fmt: skip
        all_s = jax.lax.all_gather(s, MEM_AXIS, axis=1, tiled=True)  # [B, devices * k]
        all_j = jax.lax.all_gather(j, MEM_AXIS, axis=1, tiled=True)
        top_s, t = jax.lax.top_k(all_s, k)
        return top_s, jnp.take_along_axis(all_j, t, axis=1)

    rows, rep = P(MEM_AXIS), P()
    fn = jax.shard_map(per_device, mesh=mesh, in_specs=(rep, rows, rows, rows, rep),
                       out_specs=(rep, rep), check_vma=False)  # fmt: skip
    return fn(queries, emb, valid, ids, query_ids)


def shard_memory(memory: Memory, mesh: Mesh) -> Memory:
    """Place the memory's arrays with rows split over ``mesh``'s ``"mem"`` axis
    (``P("mem", None)``); the capacity must be a multiple of the device count."""
    memory = _check_memory(memory)
    n = _n_shards(mesh)
    if memory.capacity % n:
        raise ValueError(
            f"`memory` capacity {memory.capacity} is not a multiple of the {n} devices on mesh "
            f"axis {MEM_AXIS!r}."
        )
    from jax.sharding import NamedSharding

    rows = NamedSharding(mesh, P(MEM_AXIS))
    put = {f: jax.device_put(getattr(memory, f), rows) for f in ("emb", "labels", "ids",
                                                                 "weights", "valid")}  # fmt: skip
    return memory.replace(**put)


def search(
    queries,
    memory: Memory,
    k: int,
    *,
    exclude_self=None,
    block: int = DEFAULT_BLOCK,
    method: str = "exact",
    recall: float = 0.95,
    mesh: Mesh | None = None,
) -> tuple[jax.Array, jax.Array]:
    """The ``k`` most similar live memory items of each query: ``(sims [B, k], ids [B, k])``.

    Args:
      queries: ``[B, d]`` unit embeddings from the memory's encoder.
      memory: the memory.
      k: neighbours, ``1 <= k <= live items`` (``live - 1`` with ``exclude_self``).
      exclude_self: ``[B]`` ids of the queries' own memory items (memory-vs-memory queries: the
        item never retrieves itself), or ``None``.
      block: rows per scan step (power of two; capped at the capacity).
      method: ``"exact"`` or ``"approx"`` (``lax.approx_max_k``; exact off TPU).
      recall: the approx recall target, in (0, 1].
      mesh: a ``"mem"`` mesh (:func:`memory_mesh`): memory rows sharded, candidates all-gathered.

    Distances are ``1 - sims``. Ids, never positions, are returned.
    """
    memory = _check_memory(memory)
    q = _check_embeddings(queries, memory.meta.dim, "queries")
    check_int(k, "k", minimum=1)
    check_int(block, "block", minimum=1)
    if block & (block - 1):
        raise ValueError(f"`block` must be a power of two, got {block}.")
    check_choice(method, "method", SEARCH_METHODS)
    check_scalar(recall, "recall", 0.0, 1.0, low_open=True)
    live = memory.n_live - (exclude_self is not None)
    if k > live:
        raise ValueError(
            f"`k` = {k} exceeds the memory's {live} live items"
            + (" (less the query itself)" if exclude_self is not None else "")
            + "."
        )
    qids = None
    if exclude_self is not None:
        qids = np.asarray(exclude_self)
        if qids.shape != (q.shape[0],) or not np.issubdtype(qids.dtype, np.integer):
            raise ValueError(
                f"`exclude_self` must be [{q.shape[0]}] integer ids, got {qids.shape}."
            )
        qids = jnp.asarray(qids, jnp.int32)
    if mesh is not None:
        n = _n_shards(mesh)
        if memory.capacity % n:
            raise ValueError(f"`memory` capacity {memory.capacity} is not a multiple of the {n} "
                             f"devices on mesh axis {MEM_AXIS!r}.")  # fmt: skip
        memory = shard_memory(memory, mesh)
    return search_arrays(jnp.asarray(q), memory.emb, memory.valid, memory.ids, qids, k=int(k),
                         block=int(block), method=method, recall=float(recall),
                         mesh=mesh)  # fmt: skip

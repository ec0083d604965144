"""The memory: an editable, persistent store of unit embeddings with labels, ids and weights.

A :class:`Memory` is a ``flax.struct`` pytree of fixed-capacity arrays plus static
:class:`MemoryMeta`. Edits are pure functions returning a new memory (``add``, ``remove``,
``relabel``, ``reweight``, ``compact``); the arrays only change shape when capacity doubles, so
jitted search over a growing memory compiles once per capacity, not once per add.

**Ids.** Every item has a stable integer id, never its position. Ids are issued in increasing
order: ``add`` assigns ``next_id, next_id + 1, ...`` unless ids are given, and given ids must be
strictly increasing and above every id issued before. So rows are always sorted by id, which is
what makes the search's tie rule ("equal similarity: the lower id first") exact with a stable
top-k, and ``compact`` keeps the order (and the ids).

**Removal is unlearning.** ``remove`` clears ``valid`` *and* zeroes the row's embedding, label,
id and weight, so no later save holds the item; ``compact`` drops tombstones, and a save after a
compaction deletes every older saved version (see :func:`save_memory`).
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxlab.core.checks import check_choice, check_instance, check_int

__all__ = [
    "METRICS",
    "Memory",
    "MemoryMeta",
    "add",
    "build_memory",
    "compact",
    "empty_memory",
    "fingerprint",
    "live_rows",
    "position_of",
    "relabel",
    "remove",
    "restore_memory",
    "reweight",
    "save_memory",
    "saved_versions",
]

METRICS = ("cosine",)
NORM_TOL = 1e-3
MIN_CAPACITY = 64


@dataclasses.dataclass(frozen=True)
class MemoryMeta:
    """Static metadata of a memory (hashable; not traced).

    Attributes:
      encoder: the encoder's name.
      fingerprint: a hash of the encoder's weights (:func:`fingerprint`); memories and queries
        from different encoders must not mix, and restoring checks it.
      dim: the embedding width ``d``.
      metric: ``"cosine"``: unit embeddings, similarity ``<q, z>``, distance ``1 - <q, z>``.
      vocab: the label vocabulary (label ``c`` names ``vocab[c]``).
      version: incremented by every edit; the checkpoint step of :func:`save_memory`.
      next_id: the smallest id a new item may take.
      compacted: this version was produced by :func:`compact` (so its save deletes older ones).
    """

    encoder: str
    fingerprint: str
    dim: int
    metric: str = "cosine"
    vocab: tuple[str, ...] = ()
    version: int = 0
    next_id: int = 0
    compacted: bool = False

    def __post_init__(self):
        check_instance(self.encoder, "encoder", str)
        check_instance(self.fingerprint, "fingerprint", str)
        check_int(self.dim, "dim", minimum=1)
        check_choice(self.metric, "metric", METRICS)
        check_int(self.version, "version", minimum=0)
        check_int(self.next_id, "next_id", minimum=0)


@struct.dataclass
class Memory:
    """A kNN memory of capacity ``cap`` (a power of two, at least 64).

    Attributes:
      emb: ``[cap, d]`` float32 unit embeddings (rows at and beyond ``size``, and removed rows,
        are zero).
      labels: ``[cap]`` int32 labels in ``[0, len(vocab))`` (``-1`` where not valid).
      ids: ``[cap]`` int32 stable ids, increasing along valid rows (``-1`` where not valid).
      weights: ``[cap]`` float32 per-item reliability weights (1 unless reweighted; 0 where not
        valid).
      valid: ``[cap]`` bool, false for empty rows and tombstones.
      size: ``[]`` int32, rows in use (live items plus tombstones).
      meta: :class:`MemoryMeta` (static).
    """

    emb: jax.Array
    labels: jax.Array
    ids: jax.Array
    weights: jax.Array
    valid: jax.Array
    size: jax.Array
    meta: MemoryMeta = struct.field(pytree_node=False)

    @property
    def capacity(self) -> int:
        return int(self.emb.shape[0])

    @property
    def n_live(self) -> int:
        """Live items (valid rows), from the host."""
        return int(np.asarray(self.valid).sum())


def fingerprint(tree) -> str:
    """A short sha256 hex digest of a pytree's leaves (shapes, dtypes and bytes)."""
    h = hashlib.sha256()
    for leaf in jax.tree_util.tree_leaves(tree):
        a = np.asarray(leaf)
        h.update(str((a.shape, a.dtype.str)).encode())
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def _capacity_for(n: int) -> int:
    cap = MIN_CAPACITY
    while cap < n:
        cap *= 2
    return cap


def empty_memory(
    dim: int,
    *,
    encoder: str = "unknown",
    fingerprint: str = "",
    vocab: tuple[str, ...] | int = (),
    capacity: int = MIN_CAPACITY,
) -> Memory:
    """An empty memory of width ``dim`` (capacity rounded up to a power of two >= 64).

    ``vocab`` is a tuple of class names or a number of classes (names ``"0", "1", ...``).
    """
    check_int(capacity, "capacity", minimum=1)
    if isinstance(vocab, int | np.integer):
        check_int(vocab, "vocab", minimum=1)
        vocab = tuple(str(c) for c in range(int(vocab)))
    vocab = tuple(str(v) for v in vocab)
    meta = MemoryMeta(encoder=encoder, fingerprint=fingerprint, dim=int(dim), vocab=vocab)
    cap = _capacity_for(int(capacity))
    return Memory(
        emb=jnp.zeros((cap, meta.dim), jnp.float32),
        labels=jnp.full((cap,), -1, jnp.int32),
        ids=jnp.full((cap,), -1, jnp.int32),
        weights=jnp.zeros((cap,), jnp.float32),
        valid=jnp.zeros((cap,), bool),
        size=jnp.zeros((), jnp.int32),
        meta=meta,
    )


def _check_memory(memory) -> Memory:
    if not isinstance(memory, Memory):
        raise TypeError(f"`memory` must be a visual_memory.Memory, got {type(memory).__name__}.")
    return memory


def _check_embeddings(emb, dim: int, name: str = "emb") -> np.ndarray:
    try:
        a = np.asarray(emb, dtype=np.float32)
    except (TypeError, ValueError) as e:
        raise TypeError(
            f"`{name}` must be a float array [n, {dim}], got {type(emb).__name__} ({e})."
        ) from None
    if a.ndim != 2 or a.shape[1] != dim:
        raise ValueError(f"`{name}` must have shape [n, d={dim}], got {a.shape}.")
    if not np.isfinite(a).all():
        raise ValueError(f"`{name}` holds NaN or inf values.")
    norms = np.linalg.norm(a, axis=1)
    bad = np.abs(norms - 1.0) > NORM_TOL
    if bad.any():
        raise ValueError(
            f"`{name}` must hold unit-norm rows (cosine metric); row {int(np.argmax(bad))} has "
            f"norm {norms[bad][0]:.4g}. L2-normalise the embeddings first."
        )
    return a


def _check_labels(labels, n: int, n_classes: int, name: str = "labels") -> np.ndarray:
    a = np.asarray(labels)
    if a.shape != (n,):
        raise ValueError(f"`{name}` must have shape [{n}], got {a.shape}.")
    if n and not np.issubdtype(a.dtype, np.integer):
        raise TypeError(f"`{name}` must be integers, got dtype {a.dtype}.")
    if n and n_classes and (a.min() < 0 or a.max() >= n_classes):
        raise ValueError(
            f"`{name}` must lie in [0, {n_classes}) (the memory's vocabulary), got values in "
            f"[{a.min()}, {a.max()}]."
        )
    if n and a.min() < 0:
        raise ValueError(f"`{name}` must be non-negative, got {a.min()}.")
    return a.astype(np.int32)


def _check_weights(weights, n: int, name: str = "weights") -> np.ndarray:
    a = np.asarray(weights, dtype=np.float32)
    if a.shape != (n,):
        raise ValueError(f"`{name}` must have shape [{n}], got {a.shape}.")
    if not np.isfinite(a).all() or (a <= 0).any():
        raise ValueError(f"`{name}` must be finite and > 0 (remove an item instead of weight 0).")
    return a


@jax.jit
def _write(emb, labels, ids, weights, valid, pos, new_emb, new_labels, new_ids, new_weights):
    """Scatter rows at ``pos`` (positions >= capacity are padding and dropped)."""

    def put(a, v):
        return a.at[pos].set(v, mode="drop")

    return (put(emb, new_emb), put(labels, new_labels), put(ids, new_ids),
            put(weights, new_weights), put(valid, jnp.ones_like(new_labels, bool)))  # fmt: skip


def _bucket(n: int) -> int:
    """Pad an add of ``n`` rows to a power of two, so adds of similar size share one program."""
    b = 1
    while b < n:
        b *= 2
    return b


def _grow(memory: Memory, needed: int) -> Memory:
    cap = memory.capacity
    if needed <= cap:
        return memory
    new_cap = cap
    while new_cap < needed:
        new_cap *= 2
    pad = new_cap - cap

    def ext(a, fill):
        return jnp.concatenate([a, jnp.full((pad, *a.shape[1:]), fill, a.dtype)])

    return memory.replace(
        emb=ext(memory.emb, 0.0), labels=ext(memory.labels, -1), ids=ext(memory.ids, -1),
        weights=ext(memory.weights, 0.0), valid=ext(memory.valid, False),
    )  # fmt: skip


def add(memory: Memory, emb, labels, ids=None, weights=None) -> Memory:
    """Append items; returns the new memory (capacity doubles as often as needed).

    Args:
      memory: the memory.
      emb: ``[n, d]`` unit embeddings (checked: width ``d``, norm 1 within 1e-3, finite).
      labels: ``[n]`` ints in ``[0, len(vocab))`` (any non-negative int if the vocabulary is
        empty).
      ids: ``[n]`` strictly increasing ints, each ``>= memory.meta.next_id``; ``None`` issues
        ``next_id, next_id + 1, ...``.
      weights: ``[n]`` positive reliability weights (default 1).
    """
    memory = _check_memory(memory)
    a = _check_embeddings(emb, memory.meta.dim)
    n = a.shape[0]
    lab = _check_labels(labels, n, len(memory.meta.vocab))
    if ids is None:
        new_ids = np.arange(memory.meta.next_id, memory.meta.next_id + n, dtype=np.int64)
    else:
        new_ids = np.asarray(ids)
        if new_ids.shape != (n,) or (n and not np.issubdtype(new_ids.dtype, np.integer)):
            raise ValueError(f"`ids` must be [{n}] integers, got shape {new_ids.shape}.")
        if n and (np.diff(new_ids) == 0).any():
            dup = new_ids[np.flatnonzero(np.diff(np.sort(new_ids)) == 0)[0]]
            raise ValueError(f"`ids` holds the duplicate id {dup}.")
        if n and (np.diff(new_ids) < 0).any():
            raise ValueError("`ids` must be strictly increasing (ids are issued in order).")
        if n and new_ids[0] < memory.meta.next_id:
            live = np.asarray(memory.ids)[np.asarray(memory.valid)]
            if np.isin(new_ids, live).any():
                dup = new_ids[np.isin(new_ids, live)][0]
                raise ValueError(f"`ids` holds id {dup}, which is already in the memory.")
            raise ValueError(
                f"`ids` must be >= {memory.meta.next_id} (ids are never reused), got {new_ids[0]}."
            )
    if n and new_ids[-1] >= 2**31 - 1:
        raise ValueError("`ids` must fit in int32.")
    w = np.ones(n, np.float32) if weights is None else _check_weights(weights, n)
    if n == 0:
        return memory
    size = int(memory.size)
    memory = _grow(memory, size + n)
    b = _bucket(n)
    pos = np.full(b, memory.capacity, np.int32)  # padding rows: out of range, dropped
    pos[:n] = np.arange(size, size + n)

    def pad(x, fill=0):
        return np.concatenate([x, np.full((b - n, *x.shape[1:]), fill, x.dtype)])

    arrays = _write(memory.emb, memory.labels, memory.ids, memory.weights, memory.valid,
                    pos, pad(a), pad(lab), pad(new_ids.astype(np.int32)), pad(w))  # fmt: skip
    meta = dataclasses.replace(memory.meta, version=memory.meta.version + 1,
                               next_id=int(new_ids[-1]) + 1, compacted=False)  # fmt: skip
    return Memory(*arrays, size=jnp.asarray(size + n, jnp.int32), meta=meta)


def build_memory(
    emb,
    labels,
    *,
    ids=None,
    weights=None,
    encoder: str = "unknown",
    fingerprint: str = "",
    vocab: tuple[str, ...] | int = (),
) -> Memory:
    """A new memory holding ``emb`` / ``labels`` (see :func:`add`)."""
    n = int(np.shape(emb)[0]) if np.ndim(emb) == 2 else 0
    dim = int(np.shape(emb)[-1]) if np.ndim(emb) == 2 else 0
    if np.ndim(emb) != 2 or dim < 1:
        raise ValueError(f"`emb` must have shape [n, d], got {np.shape(emb)}.")
    mem = empty_memory(dim, encoder=encoder, fingerprint=fingerprint, vocab=vocab,
                       capacity=max(n, 1))  # fmt: skip
    return add(mem, emb, labels, ids=ids, weights=weights)


def position_of(memory: Memory, ids, name: str = "ids") -> np.ndarray:
    """Row positions of live ``ids`` (an error names the first unknown or removed id)."""
    memory = _check_memory(memory)
    want = np.asarray(ids)
    if want.ndim != 1 or (want.size and not np.issubdtype(want.dtype, np.integer)):
        raise ValueError(f"`{name}` must be a 1-d array of integer ids, got shape {want.shape}.")
    if len(np.unique(want)) != len(want):
        raise ValueError(f"`{name}` lists an id twice.")
    all_ids = np.asarray(memory.ids)
    valid = np.asarray(memory.valid)
    live_pos = np.flatnonzero(valid)
    live_ids = all_ids[live_pos]  # increasing
    at = np.searchsorted(live_ids, want)
    found = (at < len(live_ids)) & (live_ids[np.minimum(at, len(live_ids) - 1)] == want)
    if not found.all():
        raise ValueError(
            f"`{name}`: id {want[~found][0]} is not in the memory (unknown or removed)."
        )
    return live_pos[at].astype(np.int32)


@jax.jit
def _tombstone(emb, labels, ids, weights, valid, pos):
    return (emb.at[pos].set(0.0), labels.at[pos].set(-1), ids.at[pos].set(-1),
            weights.at[pos].set(0.0), valid.at[pos].set(False))  # fmt: skip


def _bump(memory: Memory) -> MemoryMeta:
    return dataclasses.replace(memory.meta, version=memory.meta.version + 1, compacted=False)


def remove(memory: Memory, ids) -> Memory:
    """Delete items: ``valid`` cleared and the rows zeroed (embedding, label, id, weight).

    O(number removed): no other row moves, nothing is re-encoded. Search never returns the items;
    a memory built without them answers every query identically (same similarities, same ids).
    """
    pos = position_of(memory, ids)
    if len(pos) == 0:
        return memory
    b = _bucket(len(pos))
    pad = np.full(b, memory.capacity, np.int32)
    pad[: len(pos)] = pos
    arrays = _tombstone(memory.emb, memory.labels, memory.ids, memory.weights, memory.valid,
                        jnp.asarray(pad))  # fmt: skip
    return Memory(*arrays, size=memory.size, meta=_bump(memory))


def relabel(memory: Memory, ids, labels) -> Memory:
    """Set the labels of live ``ids``."""
    pos = position_of(memory, ids)
    lab = _check_labels(labels, len(pos), len(memory.meta.vocab))
    return memory.replace(labels=memory.labels.at[pos].set(lab), meta=_bump(memory))


def reweight(memory: Memory, ids, weights) -> Memory:
    """Set the reliability weights of live ``ids`` (positive; see soft pruning)."""
    pos = position_of(memory, ids)
    w = _check_weights(weights, len(pos))
    return memory.replace(weights=memory.weights.at[pos].set(w), meta=_bump(memory))


def live_rows(memory: Memory) -> dict[str, np.ndarray]:
    """The live items as host arrays ``{"emb", "labels", "ids", "weights"}``, in id order."""
    valid = np.asarray(_check_memory(memory).valid)
    return {k: np.asarray(getattr(memory, k))[valid] for k in ("emb", "labels", "ids", "weights")}


def compact(memory: Memory) -> Memory:
    """Drop tombstones: live rows move to the front in id order, ids unchanged; the capacity
    shrinks to the smallest power of two (>= 64) that holds them."""
    rows = live_rows(memory)
    n = len(rows["ids"])
    cap = _capacity_for(max(n, 1))
    out = empty_memory(memory.meta.dim, capacity=cap)

    def put(a, v):
        return np.asarray(a).copy() if n == 0 else np.concatenate([v, np.asarray(a)[n:]])

    meta = dataclasses.replace(memory.meta, version=memory.meta.version + 1, compacted=True)
    return Memory(
        emb=jnp.asarray(put(out.emb, rows["emb"])),
        labels=jnp.asarray(put(out.labels, rows["labels"])),
        ids=jnp.asarray(put(out.ids, rows["ids"])),
        weights=jnp.asarray(put(out.weights, rows["weights"])),
        valid=jnp.arange(cap) < n,
        size=jnp.asarray(n, jnp.int32),
        meta=meta,
    )


# --------------------------------------------------------------------------------------------------
# Persistence (orbax CheckpointManager, step = memory version)
# --------------------------------------------------------------------------------------------------

_ARRAYS = ("emb", "labels", "ids", "weights", "valid", "size")


def _manager(directory: str | Path):
    import orbax.checkpoint as ocp

    path = Path(directory).absolute()
    path.mkdir(parents=True, exist_ok=True)
    return ocp.CheckpointManager(path, item_names=("arrays", "meta"))


def saved_versions(directory: str | Path) -> list[int]:
    """The memory versions saved in ``directory`` (ascending)."""
    with _manager(directory) as mgr:
        return sorted(mgr.all_steps())


def save_memory(directory: str | Path, memory: Memory) -> int:
    """Save ``memory`` as checkpoint step ``meta.version`` (atomic); returns the version.

    A memory produced by :func:`compact` deletes every other saved version after it is written,
    so that items removed before the compaction survive in no file.
    """
    import orbax.checkpoint as ocp

    memory = _check_memory(memory)
    arrays = {k: np.asarray(getattr(memory, k)) for k in _ARRAYS}
    meta = dataclasses.asdict(memory.meta)
    meta["vocab"] = list(meta["vocab"])
    step = memory.meta.version
    with _manager(directory) as mgr:
        if step in mgr.all_steps():
            mgr.delete(step)
        mgr.save(step, args=ocp.args.Composite(arrays=ocp.args.StandardSave(arrays),
                                               meta=ocp.args.JsonSave(meta)))  # fmt: skip
        mgr.wait_until_finished()
        if memory.meta.compacted:
            for old in mgr.all_steps():
                if old != step:
                    mgr.delete(old)
    return step


def restore_memory(
    directory: str | Path,
    version: int | None = None,
    *,
    fingerprint: str | None = None,
    dim: int | None = None,
) -> Memory:
    """Restore a saved memory (the latest version unless ``version``).

    ``fingerprint`` / ``dim``, if given, must match the saved encoder fingerprint and width:
    a mismatch (queries from another encoder) is a ``ValueError``.
    """
    import orbax.checkpoint as ocp

    with _manager(directory) as mgr:
        steps = mgr.all_steps()
        if not steps:
            raise ValueError(f"`directory` {str(directory)!r} holds no saved memory.")
        step = max(steps) if version is None else int(version)
        if step not in steps:
            raise ValueError(f"`version` {version} is not saved; saved: {sorted(steps)}.")
        meta = mgr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"]
        if fingerprint is not None and meta["fingerprint"] != fingerprint:
            raise ValueError(
                f"`fingerprint` {fingerprint!r} does not match the saved memory's encoder "
                f"fingerprint {meta['fingerprint']!r} ({meta['encoder']}): embeddings from "
                "different encoders cannot share a memory."
            )
        if dim is not None and int(meta["dim"]) != int(dim):
            raise ValueError(f"`dim` {dim} does not match the saved memory's d = {meta['dim']}.")
        arrays = mgr.restore(step, args=ocp.args.Composite(arrays=ocp.args.StandardRestore()))[
            "arrays"
        ]
    meta["vocab"] = tuple(meta["vocab"])
    return Memory(**{k: jnp.asarray(arrays[k]) for k in _ARRAYS}, meta=MemoryMeta(**meta))

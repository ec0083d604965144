"""Interchangeable search backends behind one protocol: ``build``, ``add``, ``remove``,
``search``.

- ``jax_exact``: :func:`~jaxlab.vision.visual_memory.search.search` over a :class:`Memory`
  (optionally row-sharded over a ``"mem"`` mesh);
- ``jax_approx``: the same scan with ``lax.approx_max_k`` per block (its reduction size the
  global memory size; on CPU and GPU XLA lowers it to exact top-k);
- ``faiss``: faiss-cpu ``IndexIDMap2(IndexFlatIP(d))`` (exact inner product; ``remove_ids``).

A backend object is a thin host-side adapter (it holds the current memory or index); the JAX
memory itself stays a pure pytree. ``search`` returns ``(sims [B, k], ids [B, k])`` as NumPy
arrays in every backend.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from jaxlab.core.checks import check_choice
from jaxlab.vision.visual_memory import memory as M
from jaxlab.vision.visual_memory.search import search

__all__ = ["BACKENDS", "Backend", "FaissBackend", "JaxBackend", "make_backend"]

BACKENDS = ("jax_exact", "jax_approx", "faiss")


class Backend(Protocol):
    def build(self, emb, labels, ids=None) -> None: ...
    def add(self, emb, labels, ids=None) -> None: ...
    def remove(self, ids) -> None: ...
    def search(self, queries, k: int) -> tuple[np.ndarray, np.ndarray]: ...


class JaxBackend:
    """``jax_exact`` / ``jax_approx`` over a :class:`~jaxlab.vision.visual_memory.Memory`."""

    def __init__(self, method: str = "exact", *, mesh=None, block: int = 1024, recall=0.95):
        self.method, self.mesh, self.block, self.recall = method, mesh, block, recall
        self.memory: M.Memory | None = None

    def build(self, emb, labels, ids=None) -> None:
        self.memory = M.build_memory(emb, labels, ids=ids)

    def add(self, emb, labels, ids=None) -> None:
        self.memory = M.add(self._mem(), emb, labels, ids=ids)

    def remove(self, ids) -> None:
        self.memory = M.remove(self._mem(), ids)

    def search(self, queries, k: int):
        s, i = search(queries, self._mem(), k, method=self.method, mesh=self.mesh,
                      block=self.block, recall=self.recall)  # fmt: skip
        return np.asarray(s), np.asarray(i)

    def _mem(self) -> M.Memory:
        if self.memory is None:
            raise ValueError("backend: call `build` before `add`, `remove` or `search`.")
        return self.memory


class FaissBackend:
    """faiss-cpu exact inner-product search with stable ids (``IndexIDMap2(IndexFlatIP)``)."""

    def __init__(self):
        import faiss

        self._faiss = faiss
        self.index = None
        self.next_id = 0

    def build(self, emb, labels, ids=None) -> None:
        emb = np.ascontiguousarray(emb, np.float32)
        self.index = self._faiss.IndexIDMap2(self._faiss.IndexFlatIP(emb.shape[1]))
        self.next_id = 0
        self.add(emb, labels, ids)

    def add(self, emb, labels, ids=None) -> None:
        del labels  # faiss stores no labels; callers keep them by id
        emb = np.ascontiguousarray(emb, np.float32)
        ids = np.arange(self.next_id, self.next_id + len(emb)) if ids is None else np.asarray(ids)
        self._idx().add_with_ids(emb, ids.astype(np.int64))
        self.next_id = int(ids.max()) + 1 if len(ids) else self.next_id

    def remove(self, ids) -> None:
        removed = self._idx().remove_ids(np.asarray(ids, np.int64))
        if removed != len(ids):
            raise ValueError(f"`ids`: only {removed} of {len(ids)} ids were in the index.")

    def search(self, queries, k: int):
        s, i = self._idx().search(np.ascontiguousarray(queries, np.float32), int(k))
        return s, i.astype(np.int32)

    def _idx(self):
        if self.index is None:
            raise ValueError("backend: call `build` before `add`, `remove` or `search`.")
        return self.index


def make_backend(name: str, **kwargs) -> Backend:
    """A backend by name (:data:`BACKENDS`); ``kwargs`` go to the JAX backends."""
    check_choice(name, "name", BACKENDS)
    if name == "faiss":
        return FaissBackend()
    return JaxBackend("exact" if name == "jax_exact" else "approx", **kwargs)

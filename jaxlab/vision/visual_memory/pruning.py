"""Memory pruning from leave-one-out memory-vs-memory neighbour lists.

Every live item queries the memory for its ``K`` (default 100) nearest *other* items (its own row
is excluded, not dropped after the fact). For item ``n``, ``W_n`` counts the queries of a
different label that retrieved it and ``C_n`` those of the same label, over the top-``K`` lists
(``W100``, ``C100``) and over their top-10 prefixes (``W10``, ``C10``).

- **Hard pruning** excludes items with ``W >= t`` (``variant="wrong"``) or ``W - C >= t``
  (``"net"``), on the top-100 or top-10 counts; :func:`neighbour_lookup` turns an item flag into
  per-neighbour exclusions for :func:`~jaxlab.vision.visual_memory.aggregate.aggregate`.
- **Soft pruning** weights items ``1.75 / (1 + W10)`` where ``W10 > 0``, else 1.

All of it is a pure function of the memory, so after an edit (a removal) it is recomputed and
unlearning stays exact.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.checks import check_choice, check_int, check_scalar
from jaxlab.vision.visual_memory.memory import Memory, _check_memory, live_rows
from jaxlab.vision.visual_memory.search import DEFAULT_BLOCK, search

__all__ = [
    "PRUNING_TOPS",
    "VARIANTS",
    "hard_exclusion",
    "neighbour_counts",
    "neighbour_lookup",
    "soft_weights",
]

VARIANTS = ("wrong", "net")
PRUNING_TOPS = (10, 100)
SOFT_NUMERATOR = 1.75


@jax.jit
def _lookup_positions(ids, valid, query):
    """Row positions of ``query`` ids (live ids are increasing along the valid rows)."""
    key = jnp.where(valid, ids, jnp.iinfo(jnp.int32).max)
    order = jnp.argsort(key, stable=True)
    at = jnp.searchsorted(key[order], query)
    return order[jnp.clip(at, 0, ids.shape[0] - 1)]


def neighbour_lookup(memory: Memory, nbr_ids) -> dict[str, jax.Array]:
    """``{"labels", "weights", "positions"}`` of the items ``nbr_ids [B, K]`` (any shape)."""
    memory = _check_memory(memory)
    nbr = jnp.asarray(nbr_ids, jnp.int32)
    pos = _lookup_positions(memory.ids, memory.valid, nbr)
    return {"labels": memory.labels[pos], "weights": memory.weights[pos], "positions": pos}


def neighbour_counts(memory: Memory, k: int = 100, *, block: int = DEFAULT_BLOCK,
                     chunk: int = 2048) -> dict[str, np.ndarray]:  # fmt: skip
    """Leave-one-out lists and the counts ``W`` / ``C`` of every live item (in id order).

    Returns host arrays ``{"ids", "W100", "C100", "W10", "C10", "neighbours"}``: ``W<top>`` counts
    over the first ``min(top, k)`` neighbours; ``neighbours`` is the ``[N, k]`` id lists.
    """
    memory = _check_memory(memory)
    check_int(k, "k", minimum=1)
    check_int(chunk, "chunk", minimum=1)
    rows = live_rows(memory)
    n = len(rows["ids"])
    if k > n - 1:
        raise ValueError(f"`k` = {k} exceeds the {n - 1} other live items of the memory.")
    lists = []
    for s in range(0, n, chunk):
        sl = slice(s, s + chunk)
        _, nb = search(rows["emb"][sl], memory, k, exclude_self=rows["ids"][sl], block=block)
        lists.append(np.asarray(nb))
    nbr = np.concatenate(lists)
    at = np.searchsorted(rows["ids"], nbr)  # neighbour -> index among live items
    same = rows["labels"][at] == rows["labels"][:, None]
    out = {"ids": rows["ids"], "neighbours": nbr}
    for top in PRUNING_TOPS:
        t = min(top, k)
        out[f"W{top}"] = np.bincount(at[:, :t][~same[:, :t]], minlength=n)
        out[f"C{top}"] = np.bincount(at[:, :t][same[:, :t]], minlength=n)
    return out


def hard_exclusion(counts: dict, t: float, *, top: int = 100, variant: str = "wrong") -> np.ndarray:
    """``[N]`` bool: items with ``W >= t`` (``"wrong"``) or ``W - C >= t`` (``"net"``)."""
    check_scalar(t, "t")
    check_choice(top, "top", PRUNING_TOPS)
    check_choice(variant, "variant", VARIANTS)
    w = np.asarray(counts[f"W{top}"])
    score = w if variant == "wrong" else w - np.asarray(counts[f"C{top}"])
    return score >= t


def soft_weights(counts: dict) -> np.ndarray:
    """``[N]`` float32: ``1.75 / (1 + W10)`` where ``W10 > 0``, else 1."""
    w10 = np.asarray(counts["W10"])
    return np.where(w10 > 0, SOFT_NUMERATOR / (1.0 + w10), 1.0).astype(np.float32)

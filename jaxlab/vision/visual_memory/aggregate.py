"""Neighbour-label aggregation: predictions for every ``k <= K`` in one jitted pass.

Given a query's ``K`` retrieved neighbours (labels, cosine distances ``d = 1 - sim`` ascending,
item weights, and an optional per-neighbour exclusion from hard pruning), the prediction at ``k``
is ``argmax_c sum_i weight_i 1[y_i = c]`` over the kept neighbours among the first ``k``
retrieved (``count="retrieved"``, the official ``PredictionAggregation.predict``); before the
first kept neighbour it is the nearest neighbour's label, as there. An excluded neighbour casts no
vote and consumes no rank (``i`` is the rank among kept neighbours); a query whose every
neighbour is excluded ignores the exclusion. ``count="kept"`` instead indexes ``k`` by kept
neighbours, as if the pruned items were absent from memory. Where the official code, with an
exclusion, reads the distance or item weight of the ``i``-th *retrieved* neighbour for the
``i``-th kept one, each neighbour's own is used here. Weights per rule (:data:`RULES`):

- ``plurality``: 1;  ``soft_plurality``: the item weight ``w``;
- ``distance``: ``exp(-d) ** gamma`` (``gamma = 0`` is plurality);
- ``softmax``: ``exp(s / T)`` with ``s = 1 - d`` (or, with ``dist_range=(lo, hi)``, the official
  evaluation-set min-max ``s = 1 - (d - lo) / (hi - lo)``); computed as
  ``exp((s - s_max) / T)`` per query, which changes no prediction and never overflows;
- ``rank``: ``1 / (i + alpha)``;  ``soft_rank``: ``w / (i + alpha)``.

**Tie rule** (the official code's, not its docstring's): neighbours are scanned in order and the
leader changes only when a class's running total becomes strictly greater than the current
maximum, so ``[1, 2, 2, 1]`` gives 2. One scan over ``K`` yields the prediction at every ``k``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxlab.core.checks import check_array, check_choice, check_int, check_scalar

__all__ = [
    "COUNTS",
    "QUERY_CHUNK",
    "RULES",
    "accuracy_at_k",
    "agreement",
    "aggregate",
    "attribution",
    "label_entropy",
    "ood_score",
    "rule_weights",
]

RULES = ("plurality", "distance", "softmax", "rank", "soft_rank", "soft_plurality")


def _kept_first(labels, dists, weights, excluded):
    """Reorder each row so kept neighbours come first (stable)."""
    order = jnp.argsort(excluded, axis=1, stable=True)

    def take(a):
        return jnp.take_along_axis(a, order, axis=1)

    return take(labels), take(dists), take(weights), ~take(excluded)


def rule_weights(rule, dists, weights, kept, *, alpha=2.0, gamma=1.0, temperature=0.07,
                 dist_range=None):  # fmt: skip
    """Per-neighbour voting weights ``[B, K]`` (ranks count kept neighbours; excluded get 0)."""
    rank = jnp.cumsum(kept, axis=1) - 1  # rank among kept neighbours
    if rule == "plurality":
        w = jnp.ones_like(dists)
    elif rule == "soft_plurality":
        w = weights
    elif rule == "distance":
        w = jnp.exp(-gamma * dists)
    elif rule == "softmax":
        d = (
            dists
            if dist_range is None
            else (dists - dist_range[0]) / (dist_range[1] - dist_range[0])
        )
        s = 1.0 - d
        s_max = jnp.max(jnp.where(kept, s, -jnp.inf), axis=1, keepdims=True)
        w = jnp.exp((s - s_max) / temperature)
    elif rule == "rank":
        w = 1.0 / (rank + alpha)
    elif rule == "soft_rank":
        w = weights / (rank + alpha)
    else:  # pragma: no cover - checked by the public wrapper
        raise ValueError(rule)
    return jnp.where(kept, w, 0.0).astype(jnp.float32)


COUNTS = ("retrieved", "kept")


@functools.partial(jax.jit, static_argnames=("n_classes", "rule", "count"))
def _aggregate(labels, dists, weights, excluded, alpha, gamma, temperature, dist_range, *,
               n_classes, rule, count="retrieved"):  # fmt: skip
    excluded = excluded & ~excluded.all(axis=1, keepdims=True)  # all excluded: ignore exclusion
    if count == "kept":
        labels, dists, weights, kept = _kept_first(labels, dists, weights, excluded)
    else:
        kept = ~excluded
    w = rule_weights(rule, dists, weights, kept, alpha=alpha, gamma=gamma,
                     temperature=temperature, dist_range=dist_range)  # fmt: skip
    return _leaders(labels, w, kept, n_classes)


QUERY_CHUNK = 256  # queries per scan: measured fastest on CPU (the carry stays in cache)


def _leaders(labels, w, kept, n_classes: int):
    """The running leader after each neighbour, ``[B, K]``: a ``lax.scan`` over neighbours with
    class totals ``[C, chunk]``, mapped over chunks of :data:`QUERY_CHUNK` queries.

    One-hot arithmetic, not a scatter: adding zeros leaves each class's float32 total exactly
    the sequential sum, so near-ties resolve as in a per-query loop."""
    b, k = labels.shape
    chunk = min(QUERY_CHUNK, b)
    pad = -b % chunk
    classes = jnp.arange(n_classes, dtype=labels.dtype)

    def one_chunk(xs):
        lab, wt, kp = xs  # [chunk, K]

        def body(carry, col):
            totals, lead, best = carry
            y, wi, ki = col
            hot = classes[:, None] == y[None, :]
            totals = totals + jnp.where(hot, wi[None, :], 0.0)
            new = jnp.max(jnp.where(hot, totals, -jnp.inf), axis=0)
            upd = ki & (new > best)
            lead = jnp.where(upd, y, lead)
            return (totals, lead, jnp.where(upd, new, best)), lead

        # before the first kept neighbour the prediction is the nearest one's label (official)
        init = (jnp.zeros((n_classes, chunk), jnp.float32), lab[:, 0],
                jnp.full((chunk,), -jnp.inf, jnp.float32))  # fmt: skip
        _, preds = jax.lax.scan(body, init, (lab.T, wt.T, kp.T))
        return preds.T

    def split(a):
        a = jnp.pad(a, ((0, pad), (0, 0)))
        return a.reshape(-1, chunk, k)

    out = jax.lax.map(one_chunk, (split(labels), split(w), split(kept)))
    return out.reshape(-1, k)[:b]


def _check_lists(labels, dists, weights, excluded):
    labels = check_array(labels, "labels", ndim=2, kind="int")
    b, k = labels.shape
    if b == 0 or k == 0:
        raise ValueError(f"`labels` must be a non-empty [B, K] array, got shape {labels.shape}.")
    dists = check_array(dists, "dists", shape=(b, k), kind="float")
    weights = (jnp.ones((b, k), jnp.float32) if weights is None
               else check_array(weights, "weights", shape=(b, k), kind="float"))  # fmt: skip
    excluded = (jnp.zeros((b, k), bool) if excluded is None
                else check_array(excluded, "excluded", shape=(b, k), kind="bool"))  # fmt: skip
    return labels, dists.astype(jnp.float32), weights.astype(jnp.float32), excluded


def aggregate(
    labels,
    dists,
    n_classes: int,
    rule: str = "rank",
    *,
    weights=None,
    excluded=None,
    alpha: float = 2.0,
    gamma: float = 1.0,
    temperature: float = 0.07,
    dist_range: tuple[float, float] | None = None,
    count: str = "retrieved",
) -> jax.Array:
    """Predictions ``[B, K]``: column ``k - 1`` is the prediction at ``k`` (see the module
    docstring for rules, ranks, exclusions, ``count`` and the tie rule).

    Args:
      labels: ``[B, K]`` neighbour labels in ``[0, n_classes)``, nearest first.
      dists: ``[B, K]`` cosine distances, ascending.
      n_classes: the number of classes.
      rule: one of :data:`RULES`.
      weights: ``[B, K]`` neighbour item weights (soft pruning; default 1).
      excluded: ``[B, K]`` bool, neighbours excluded by hard pruning.
      alpha, gamma, temperature: the rank offset, distance exponent and softmax temperature.
      dist_range: ``(lo, hi)`` distances mapped to ``[0, 1]`` before the softmax (the official
        evaluation-set min-max); ``None`` uses ``s = 1 - d``.
      count: ``"retrieved"`` (official): ``k`` counts retrieved neighbours, the excluded ones
        among them casting no vote; ``"kept"``: ``k`` counts kept neighbours (exclusion as if
        the pruned items were absent from memory; the last columns repeat the final leader).
    """
    labels, dists, weights, excluded = _check_lists(labels, dists, weights, excluded)
    check_int(n_classes, "n_classes", minimum=1)
    check_choice(rule, "rule", RULES)
    check_choice(count, "count", COUNTS)
    check_scalar(alpha, "alpha", 0.0, low_open=True)
    check_scalar(gamma, "gamma", 0.0)
    check_scalar(temperature, "temperature", 0.0, low_open=True)
    lo_lab, hi_lab = (int(v) for v in jax.device_get((jnp.min(labels), jnp.max(labels))))
    if lo_lab < 0 or hi_lab >= n_classes:
        raise ValueError(f"`labels` must lie in [0, {n_classes}), got [{lo_lab}, {hi_lab}].")
    if dist_range is None:
        dr = jnp.array([0.0, 1.0], jnp.float32)
    else:
        lo, hi = (check_scalar(v, "dist_range") for v in dist_range)
        if not hi > lo:
            raise ValueError(f"`dist_range` must be (lo, hi) with hi > lo, got {dist_range}.")
        dr = jnp.array([lo, hi], jnp.float32)
    return _aggregate(labels, dists, weights, excluded, jnp.float32(alpha), jnp.float32(gamma),
                      jnp.float32(temperature), None if dist_range is None else dr,
                      n_classes=int(n_classes), rule=rule, count=count)  # fmt: skip


def accuracy_at_k(preds, targets) -> jax.Array:
    """``[K]``: the fraction of queries whose prediction at ``k`` equals ``targets [B]``."""
    preds = check_array(preds, "preds", ndim=2, kind="int")
    targets = check_array(targets, "targets", shape=(preds.shape[0],), kind="int")
    return jnp.mean(preds == targets[:, None], axis=0)


def agreement(labels, preds, k: int) -> jax.Array:
    """``[B]``: the fraction of the first ``k`` neighbour labels equal to the prediction at
    ``k``."""
    labels = check_array(labels, "labels", ndim=2, kind="int")
    check_int(k, "k", minimum=1, maximum=labels.shape[1])
    preds = check_array(preds, "preds", shape=labels.shape, kind="int")
    return jnp.mean(labels[:, :k] == preds[:, k - 1 : k], axis=1)


def label_entropy(labels, k: int, n_classes: int) -> jax.Array:
    """``[B]``: the entropy (nats) of the label histogram of the first ``k`` neighbours."""
    labels = check_array(labels, "labels", ndim=2, kind="int")
    check_int(k, "k", minimum=1, maximum=labels.shape[1])
    check_int(n_classes, "n_classes", minimum=1)
    p = jax.nn.one_hot(labels[:, :k], n_classes).mean(axis=1)
    return -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.where(p > 0, p, 1.0)), 0.0), axis=1)


def ood_score(dists, k: int = 100) -> jax.Array:
    """``[B]``: the median cosine distance to the first ``k`` neighbours (larger = more OOD)."""
    dists = check_array(dists, "dists", ndim=2, kind="float")
    check_int(k, "k", minimum=1, maximum=dists.shape[1])
    return jnp.median(dists[:, :k], axis=1)


def attribution(labels, dists, preds, k: int, rule: str = "rank", *, weights=None,
                alpha: float = 2.0, gamma: float = 1.0, temperature: float = 0.07):  # fmt: skip
    """``[B, k]``: each of the first ``k`` neighbours' share of the vote for the prediction at
    ``k`` (0 for neighbours of another class; each row sums to 1)."""
    labels, dists, weights, _ = _check_lists(labels, dists, weights, None)
    check_int(k, "k", minimum=1, maximum=labels.shape[1])
    check_choice(rule, "rule", RULES)
    preds = check_array(preds, "preds", shape=labels.shape, kind="int")
    kept = jnp.ones(labels.shape, bool)
    w = rule_weights(rule, dists, weights, kept, alpha=alpha, gamma=gamma,
                     temperature=temperature)[:, :k]  # fmt: skip
    mine = jnp.where(labels[:, :k] == preds[:, k - 1 : k], w, 0.0)
    return mine / jnp.sum(mine, axis=1, keepdims=True)

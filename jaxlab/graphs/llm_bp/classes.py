"""Class embeddings (zero-shot from simulated-LLM labels, few-shot from labelled nodes) and the
evaluation metrics of the official scripts.

Zero-shot (official ``zero_shot.py``): ``20 C`` test nodes are labelled by the LLM; for every class
c that received at least one (parsed) prediction, the 10 members of its predicted set nearest to
their centroid (Euclidean) are averaged and normalised into ``q_c``. Classes nobody predicted are
dropped; ``class_ids`` maps a row of ``q`` back to its original class id, so a prediction never
names a dropped class. Few-shot (``few_shot.py``): ``q_c`` is the normalised mean of ``k``
labelled training embeddings of class c drawn with replacement (``torch.randint``).

Macro-F1 is computed on the mapped class ids (the official zero-shot script scores the unmapped
row indices, which differ from class ids whenever a class is dropped: not copied).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.metrics import f1_score

from jaxlab.core.checks import check_array, check_int

__all__ = [
    "accuracy",
    "few_shot_class_embeddings",
    "macro_f1",
    "predict",
    "zero_shot_class_embeddings",
]


def zero_shot_class_embeddings(
    pool: Any, predicted: Any, n_classes: int, *, top: int = 10
) -> tuple[np.ndarray, np.ndarray]:
    """``(q [K, d] unit rows, class_ids int32 [K])`` from pool embeddings ``[P, d]`` and their
    parsed LLM labels ``[P]`` (-1 / -2 = unparsed, ignored). Raises if no class was predicted."""
    check_int(n_classes, "n_classes", minimum=2)
    check_int(top, "top", minimum=1)
    x = np.asarray(check_array(pool, "pool", ndim=2, kind="float"), np.float64)
    y = np.asarray(check_array(predicted, "predicted", shape=(x.shape[0],), kind="int"))
    if np.any((y < -2) | (y >= n_classes)):
        raise ValueError(f"`predicted` must lie in [-2, {n_classes}), got {y.min()}..{y.max()}.")
    rows, ids = [], []
    for c in range(n_classes):
        members = x[y == c]
        if len(members) == 0:
            continue
        centroid = members.mean(axis=0)
        near = np.argsort(np.linalg.norm(members - centroid, axis=1), kind="stable")[:top]
        mean = members[near].mean(axis=0)
        rows.append(mean / np.linalg.norm(mean))
        ids.append(c)
    if not rows:
        raise ValueError("`predicted` names no class: no class embedding can be built.")
    return np.asarray(rows, np.float32), np.asarray(ids, np.int32)


def few_shot_class_embeddings(
    features: Any, labels: Any, train_ids: Any, k: int, rng: np.random.Generator
) -> np.ndarray:
    """``q [C, d]``: per class the normalised mean of ``k`` of its ``train_ids`` nodes' features,
    drawn with replacement (the official sampler)."""
    check_int(k, "k", minimum=1)
    x = np.asarray(check_array(features, "features", ndim=2, kind="float"))
    y = np.asarray(check_array(labels, "labels", shape=(x.shape[0],), kind="int"))
    tr = np.asarray(check_array(train_ids, "train_ids", ndim=1, kind="int"))
    n_classes = int(y.max()) + 1
    out = np.empty((n_classes, x.shape[1]), np.float32)
    for c in range(n_classes):
        pool = tr[y[tr] == c]
        if len(pool) == 0:
            raise ValueError(f"`train_ids` holds no node of class {c}.")
        mean = x[pool[rng.integers(len(pool), size=k)]].mean(axis=0)
        out[c] = mean / np.linalg.norm(mean)
    return out


def predict(scores: Any, class_ids: Any) -> np.ndarray:
    """Original class ids of the row-wise argmax of ``scores [..., n, K]``."""
    return np.asarray(class_ids)[np.argmax(np.asarray(scores), axis=-1)]


def accuracy(pred: Any, labels: Any, ids: Any) -> float:
    """Accuracy on the nodes ``ids``."""
    pred, labels, ids = np.asarray(pred), np.asarray(labels), np.asarray(ids)
    return float(np.mean(pred[ids] == labels[ids]))


def macro_f1(pred: Any, labels: Any, ids: Any) -> float:
    """Macro-F1 on the nodes ``ids`` (sklearn, over the classes in truth or prediction)."""
    pred, labels, ids = np.asarray(pred), np.asarray(labels), np.asarray(ids)
    return float(f1_score(labels[ids], pred[ids], average="macro"))

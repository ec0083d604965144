"""``class_cohesion_scores``: a labelled **stand-in** for the paper's Wasserstein Adjusted Score.

The paper proposes WAS to score how cohesive clusters are with respect to the clients' class
distributions under class imbalance, but WAS is not in the official code and its definition could
not be read (spec section 2.9), so this is *not* WAS. The stand-in: client ``k`` is its class
histogram ``p_k``; the distance between clients is the 1-Wasserstein distance between histograms
under the 0-1 ground metric, which equals the total variation ``TV(p, q) = 1/2 ||p - q||_1``. Two
internal scores of a clustering under that distance:

- silhouette (sklearn, precomputed TV distances; in ``[-1, 1]``, higher = more cohesive);
- Davies-Bouldin with TV: centroid ``c`` = mean histogram of its clients, scatter ``s_c`` = mean TV
  of its clients to the centroid, ``DB = mean_c max_{d != c} (s_c + s_d) / TV(centroid_c,
  centroid_d)`` (lower = better).

Both need at least two clusters (NaN otherwise); silhouette also needs fewer clusters than clients.
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import silhouette_score

from jaxlab.core.checks import check_array

__all__ = ["class_cohesion_scores", "tv_distances"]


def tv_distances(p: np.ndarray, q: np.ndarray | None = None) -> np.ndarray:
    """Total variation ``1/2 ||p_i - q_j||_1`` between the rows of ``p [n, C]`` and ``q [m, C]``."""
    check_array(p, "p", ndim=2, dims="[n, C]")
    if q is not None:
        check_array(q, "q", ndim=2, dims="[m, C]")
        if np.shape(q)[1] != np.shape(p)[1]:
            raise ValueError(f"`q` must have the C = {np.shape(p)[1]} columns of `p`, got shape "
                             f"{np.shape(q)}.")  # fmt: skip
    p = np.asarray(p)
    q = p if q is None else np.asarray(q)
    return 0.5 * np.abs(p[:, None, :] - q[None, :, :]).sum(-1)


def class_cohesion_scores(hist: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """Cohesion of the clustering ``labels [K]`` of clients with class histograms ``hist [K, C]``
    (counts or frequencies; rows are normalised). Returns ``{"silhouette", "davies_bouldin"}``."""
    check_array(hist, "hist", ndim=2, dims="[K, C]")
    check_array(labels, "labels", ndim=1, kind="int", dims="[K]")
    hist = np.asarray(hist, np.float64)
    labels = np.asarray(labels)
    if labels.shape != hist.shape[:1] or hist.shape[0] < 1:
        raise ValueError(f"`hist` must be [K, C] and `labels` [K] with K >= 1; got shapes "
                         f"{hist.shape}, {labels.shape}.")  # fmt: skip
    if (hist < 0).any() or (hist.sum(1) <= 0).any():
        raise ValueError("`hist` rows must be non-negative with a positive total.")
    p = hist / hist.sum(1, keepdims=True)
    ids = np.unique(labels)
    if len(ids) < 2:
        return {"silhouette": float("nan"), "davies_bouldin": float("nan")}
    d = tv_distances(p)
    sil = (
        float(silhouette_score(d, labels, metric="precomputed"))
        if len(ids) < len(labels)
        else float("nan")
    )
    cent = np.stack([p[labels == c].mean(0) for c in ids])
    scatter = np.array([tv_distances(p[labels == c], cent[i : i + 1]).mean()
                        for i, c in enumerate(ids)])  # fmt: skip
    sep = tv_distances(cent)
    with np.errstate(divide="ignore", invalid="ignore"):  # coincident centroids: DB = inf
        ratio = np.where(sep > 0, (scatter[:, None] + scatter[None, :]) / sep, np.inf)
    np.fill_diagonal(ratio, -np.inf)
    return {"silhouette": sil, "davies_bouldin": float(ratio.max(1).mean())}

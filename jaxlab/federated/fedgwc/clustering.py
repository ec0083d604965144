"""FedGWC's affinity, model selection and split rule (spec section 2.5).

1. ``M = R_c^T`` (the transpose: row ``j`` of ``M`` is how the others fared when sampled with
   ``j``), min-max normalised over the whole block.
2. ``A[i, j] = exp(-gamma sum_{l not in {i, j}} (M[i, l] - M[j, l])^2)``, ``A[i, i] = 0``;
   vectorised as ``||M_i - M_j||^2 - (M_ii - M_ji)^2 - (M_ij - M_jj)^2`` (one Gram matrix and two
   corrections instead of the official double loop over pairs).
3. For ``n in {2, ..., n_max - 1}``, ``n_max = min(floor(K_c / m) + 1, 5)``: an ``n``-dimensional
   spectral embedding of ``A`` and labels from spectral clustering with ``cluster_qr`` label
   assignment (both sklearn, precomputed affinity, fixed seed); score = Davies-Bouldin of the
   labels on the embedding. The best ``n`` splits the cluster only if its score is below 1.
   ``K_c < 2 m`` leaves no candidate, so such a cluster never splits.

Clustering is rare (when a patience counter reaches its target) and small (``K_c <= 100``), so
step 3 runs on the host.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
from sklearn.cluster import SpectralClustering
from sklearn.manifold import SpectralEmbedding
from sklearn.metrics import davies_bouldin_score

from jaxlab.core.checks import check_array, check_int, check_scalar, is_concrete
from jaxlab.federated.fedgwc._checks import arr

__all__ = ["affinity", "select_split"]


def _nonneg_scalar(x, name: str) -> None:
    """A real scalar ``>= 0`` (finite), value checked where concrete (``gamma`` may be traced)."""
    if isinstance(x, int | float | np.number) or (
        isinstance(x, np.ndarray | jax.Array) and is_concrete(x)
    ):
        check_scalar(x, name, 0.0)
    else:
        check_array(x, name, ndim=0)


def affinity(r_block: jax.Array, gamma: float = 0.1) -> jax.Array:
    """The affinity ``A [n, n]`` of a cluster's interaction block ``R_c [n, n]`` (module docstring).

    Symmetric, zero diagonal, off-diagonal entries in ``(0, 1]``; ``gamma -> 0`` gives all ones off
    the diagonal.
    """
    r_block = arr(r_block, "r_block", ndim=2, dims="[n, n]")
    if np.shape(r_block)[0] != np.shape(r_block)[1] or np.shape(r_block)[0] < 1:
        raise ValueError(f"`r_block` must be a non-empty square [n, n] block, got shape "
                         f"{np.shape(r_block)}.")  # fmt: skip
    _nonneg_scalar(gamma, "gamma")
    m = r_block.T
    lo, hi = m.min(), m.max()
    m = (m - lo) / jnp.maximum(hi - lo, 1e-8)
    sq = jnp.sum(m**2, axis=1)
    dist = sq[:, None] + sq[None, :] - 2.0 * m @ m.T  # ||M_i - M_j||^2
    d = jnp.diag(m)
    # drop the l = i and l = j terms: (M_ii - M_ji)^2 and (M_ij - M_jj)^2
    dist = dist - (d[:, None] - m.T) ** 2 - (m - d[None, :]) ** 2
    a = jnp.exp(-gamma * jnp.maximum(dist, 0.0))
    return jnp.where(jnp.eye(m.shape[0], dtype=bool), 0.0, a)


def select_split(a: np.ndarray, m: int, seed: int = 0, max_clusters: int = 5):
    """The official model selection: ``(labels [n] or None, {n_candidate: Davies-Bouldin})``.

    ``labels`` (values ``0..n-1``) when the best candidate's Davies-Bouldin score is below 1, else
    ``None`` (no split). Candidates ``n = 2 .. min(K_c // m + 1, max_clusters) - 1``.
    """
    check_array(a, "a", ndim=2, dims="[n, n]")
    a = np.asarray(a, np.float64)
    if a.shape[0] != a.shape[1] or a.shape[0] < 1:
        raise ValueError(f"`a` must be a non-empty square affinity [n, n], got shape {a.shape}.")
    if a.min() < 0 or not np.allclose(a, a.T):
        raise ValueError("`a` must be a symmetric affinity with entries >= 0.")
    check_int(m, "m", minimum=1)
    check_int(seed, "seed", minimum=0)
    check_int(max_clusters, "max_clusters", minimum=1)
    k_c = a.shape[0]
    n_max = min(k_c // m + 1, max_clusters)
    scores, labels_by_n = {}, {}
    for n in range(2, n_max):
        with warnings.catch_warnings():  # sklearn warns on graphs it deems not fully connected
            warnings.simplefilter("ignore", UserWarning)
            emb = SpectralEmbedding(n_components=n, affinity="precomputed",
                                    random_state=seed).fit_transform(a)  # fmt: skip
            labels = SpectralClustering(n_clusters=n, n_components=n, affinity="precomputed",
                                        assign_labels="cluster_qr",
                                        random_state=seed).fit_predict(a)  # fmt: skip
        if len(np.unique(labels)) < 2:
            continue
        scores[n] = float(davies_bouldin_score(emb, labels))
        labels_by_n[n] = labels
    if not scores:
        return None, scores
    best = min(scores, key=scores.get)
    if scores[best] >= 1.0:
        return None, scores
    _, labels = np.unique(labels_by_n[best], return_inverse=True)
    return labels, scores

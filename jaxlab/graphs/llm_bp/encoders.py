"""Node-text encoders: MiniLM (``jaxlab.core.text``), MiniLM with a class-aware prefix, and TF-IDF
with a Gaussian random projection.

The paper's task-adaptive encoder is a 7B instruction-following LLM2Vec model (bge-en-icl) whose
instruction names the classes; it cannot run here. The class-aware variant prefixes each text with
``"Classify into: c1, c2, ...: "`` before MiniLM, which is not instruction-following, so this
comparison is reported only (the paper's +8.1% encoder gain is not reproduced).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np

from jaxlab.core.checks import check_int
from jaxlab.core.text import encode

__all__ = ["ENCODERS", "class_aware_prefix", "encode_nodes", "tfidf_projection"]

ENCODERS = ("minilm", "minilm_class_aware", "tfidf")


def class_aware_prefix(class_names: Sequence[str]) -> str:
    """The prefix of the class-aware variant."""
    return "Classify into: " + ", ".join(class_names) + ": "


def tfidf_projection(texts: Sequence[str], dim: int = 384, seed: int = 0) -> np.ndarray:
    """Unit rows ``[N, dim]``: sklearn TF-IDF of the corpus times a seeded Gaussian projection."""
    from sklearn.exceptions import DataDimensionalityWarning
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.random_projection import GaussianRandomProjection

    check_int(dim, "dim", minimum=1)
    tf = TfidfVectorizer(token_pattern=r"(?u)\b\w+\b").fit_transform(list(texts))
    with warnings.catch_warnings():  # a vocabulary smaller than dim is fine: a random embedding
        warnings.simplefilter("ignore", DataDimensionalityWarning)
        z = GaussianRandomProjection(n_components=dim, random_state=seed).fit_transform(tf)
    z = np.asarray(z, np.float32)
    return z / np.maximum(np.linalg.norm(z, axis=1, keepdims=True), 1e-12)


def encode_nodes(
    texts: Sequence[str], encoder: str = "minilm", class_names: Sequence[str] = ()
) -> np.ndarray:
    """Unit-norm node features ``[N, d]`` by ``encoder`` (one of :data:`ENCODERS`)."""
    if encoder == "minilm":
        return encode(list(texts))
    if encoder == "minilm_class_aware":
        if not class_names:
            raise ValueError("`class_names` is required for encoder='minilm_class_aware'.")
        prefix = class_aware_prefix(class_names)
        return encode([prefix + t for t in texts])
    if encoder == "tfidf":
        return tfidf_projection(texts)
    raise ValueError(f"`encoder` must be one of {ENCODERS}, got {encoder!r}.")

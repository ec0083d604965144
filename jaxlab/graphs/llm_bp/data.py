"""Seeded synthetic text-attributed graphs: topic-word texts and a graph of chosen homophily.

A node of class c gets a text of ``U{15..30}`` words: each word is from topic c with probability
``rho_sig``, from the node's own *confuser* topic (one other class, drawn per node) with probability
``rho_conf``, else from a shared background list. Every topic and background word is a single
WordPiece of the MiniLM tokenizer (tested), so text length in tokens equals length in words + 2.
The default ``rho`` was calibrated once (``rho_sig = 0.14``, ``rho_conf = 0.10``: MiniLM Raw
zero-shot accuracy 55-70% at C = 5 with simulated-LLM class embeddings) and is then frozen.

The graph: each node proposes ``Poisson(mean_degree / 2)`` edges; a proposal's partner is uniform
among the other same-class nodes with probability ``h``, else uniform among the other classes'
nodes. Edges are symmetric, deduplicated, without self-loops, and stored once as ``(u, v)`` with
``u < v``; the realised edge homophily ``h_edge`` is the fraction joining same-class nodes. Texts
depend only on the classes, so a seed's corpus is encoded once for a whole sweep over ``h``.

Everything is NumPy with an explicit ``numpy.random.Generator`` (host-side data, like
``jaxlab.core.data``): a seed gives the same graph on every machine.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxlab.core.checks import check_in_range, check_int

__all__ = [
    "BACKGROUND",
    "DESCRIPTION",
    "TOPICS",
    "TextGraph",
    "balanced_labels",
    "class_names",
    "edge_homophily",
    "gaussian_features",
    "make_edges",
    "make_text_graph",
    "make_texts",
    "seeded_corpus",
    "seeded_edges",
    "test_split",
]

# Ten topics of 30 single-WordPiece words (no word in two topics or in the background).
TOPICS: dict[str, tuple[str, ...]] = {
    name: tuple(words.split())
    for name, words in {
        "astronomy": "star planet moon sun orbit galaxy comet telescope space earth mars venus "
        "jupiter saturn solar light sky night dark cosmic universe gravity rocket launch crater "
        "dust meteor eclipse nasa astronaut",
        "cooking": "food bread salt sugar butter cook kitchen oven grill soup meat fish rice "
        "pasta cheese sauce garlic onion pepper flour egg milk cream dinner lunch recipe chef "
        "taste fresh fry",
        "football": "ball goal team match league player coach score kick pass striker keeper "
        "penalty referee stadium fans season cup win defeat club captain injury transfer pitch "
        "tackle corner foul champion trophy",
        "finance": "money bank stock market price trade profit loss tax debt loan credit fund "
        "cash budget income cost investor share bond rate economy inflation dollar pay wealth "
        "asset capital finance revenue",
        "medicine": "doctor patient hospital disease health treatment drug nurse surgery blood "
        "heart cancer pain virus vaccine clinic therapy medical cure pill fever infection brain "
        "lung kidney dose care illness wound diagnosis",
        "music": "song music band guitar piano drum singer album concert rock jazz voice melody "
        "rhythm sound record tune chorus bass violin orchestra opera dance lyrics studio audio "
        "stage beat note pop",
        "law": "court judge law lawyer trial jury crime police prison sentence lawsuit legal "
        "rights justice appeal verdict guilty evidence witness contract attorney charge arrest "
        "rule statute suspect defense claim fine victim",
        "farming": "farm crop wheat corn cattle cow sheep pig horse field soil seed plant "
        "harvest grain barn tractor farmer wool hay rain land grass irrigation orchard fruit "
        "potato barley goat chicken",
        "computing": "computer software code program data network internet server chip memory "
        "keyboard screen file user password digital online web app algorithm machine processor "
        "linux windows email bug disk hardware robot laptop",
        "travel": "travel trip hotel flight airport ticket passport tour beach holiday journey "
        "road train bus map city visit guide luggage island coast cruise vacation resort "
        "tourist route border mountain camp hike",
    }.items()
}

BACKGROUND: tuple[str, ...] = tuple(
    (
        "the a an and or but of to in on at by for with from about as into like through after "
        "over between out against during without before under around among is was are were be "
        "been being have has had do does did will would can could should may might must shall "
        "this that these those it its they them their we our you your he she his her i my me "
        "time year day week people way thing man woman child life world hand part place case "
        "point group number fact good new first last long great little own other old right big "
        "high different small large next early young important few public bad same able make "
        "take come see know get give find think tell become leave feel put bring begin keep "
        "hold turn start show hear play run move live believe happen"
    ).split()
)

DESCRIPTION = "short news snippets"


def class_names(n_classes: int) -> tuple[str, ...]:
    """The first ``n_classes`` topic names (at most 10 text classes)."""
    check_int(n_classes, "n_classes", minimum=2, maximum=len(TOPICS))
    return tuple(list(TOPICS)[:n_classes])


def balanced_labels(n_nodes: int, n_classes: int, rng: np.random.Generator) -> np.ndarray:
    """``int32 [n_nodes]``: each class ``floor`` or ``ceil`` of ``n / C`` times, shuffled."""
    check_int(n_nodes, "n_nodes", minimum=n_classes)
    check_int(n_classes, "n_classes", minimum=2)
    return rng.permutation(np.arange(n_nodes) % n_classes).astype(np.int32)


def make_texts(
    labels: np.ndarray,
    n_classes: int,
    rng: np.random.Generator,
    *,
    rho_sig: float = 0.14,
    rho_conf: float = 0.10,
    length: tuple[int, int] = (15, 30),
) -> list[str]:
    """One text per node (see the module docstring); the confuser topic is another class's."""
    check_in_range(rho_sig, "rho_sig", 0.0, 1.0)
    check_in_range(rho_conf, "rho_conf", 0.0, 1.0)
    if rho_sig + rho_conf > 1:
        raise ValueError(f"`rho_sig + rho_conf` must be at most 1, got {rho_sig + rho_conf}.")
    lo, hi = length
    check_int(lo, "length[0]", minimum=1)
    check_int(hi, "length[1]", minimum=lo)
    topics = [TOPICS[name] for name in class_names(n_classes)]
    texts = []
    for y in np.asarray(labels):
        conf = (int(y) + 1 + rng.integers(n_classes - 1)) % n_classes
        n = int(rng.integers(lo, hi + 1))
        source = rng.choice(3, size=n, p=[rho_sig, rho_conf, 1 - rho_sig - rho_conf])
        words = []
        for s in source:
            pool = topics[int(y)] if s == 0 else topics[conf] if s == 1 else BACKGROUND
            words.append(pool[rng.integers(len(pool))])
        texts.append(" ".join(words))
    return texts


def make_edges(
    labels: np.ndarray, h: float, rng: np.random.Generator, *, mean_degree: float = 10.0
) -> np.ndarray:
    """``int32 [E, 2]`` undirected edges ``u < v``, sorted, of target homophily ``h``."""
    check_in_range(h, "h", 0.0, 1.0)
    if not mean_degree > 0:
        raise ValueError(f"`mean_degree` must be positive, got {mean_degree}.")
    labels = np.asarray(labels)
    n = len(labels)
    by_class = [np.flatnonzero(labels == c) for c in range(int(labels.max()) + 1)]
    proposals = rng.poisson(mean_degree / 2, size=n)
    src = np.repeat(np.arange(n), proposals)
    same = rng.random(len(src)) < h
    dst = np.empty_like(src)
    for c, members in enumerate(by_class):
        others = np.flatnonzero(labels != c)
        rows = np.flatnonzero(labels[src] == c)
        s = rows[same[rows]]
        dst[s] = members[rng.integers(len(members), size=len(s))]
        d = rows[~same[rows]]
        dst[d] = others[rng.integers(len(others), size=len(d))]
    keep = src != dst
    pairs = np.sort(np.stack([src[keep], dst[keep]], 1), axis=1)
    return np.unique(pairs, axis=0).astype(np.int32).reshape(-1, 2)


def seeded_edges(seed: int, labels: np.ndarray, h: float, *, mean_degree: float = 10.0):
    """:func:`make_edges` with the generator :func:`make_text_graph` uses for ``(seed, h)``."""
    check_int(seed, "seed", minimum=0)
    check_in_range(h, "h", 0.0, 1.0)
    rng = np.random.default_rng([seed, 1, int(round(h * 1e6))])
    return make_edges(labels, h, rng, mean_degree=mean_degree)


def edge_homophily(edges: np.ndarray, labels: np.ndarray) -> float:
    """Fraction of edges joining same-class nodes (NaN for an empty edge list)."""
    edges, labels = np.asarray(edges), np.asarray(labels)
    if len(edges) == 0:
        return float("nan")
    return float(np.mean(labels[edges[:, 0]] == labels[edges[:, 1]]))


def gaussian_features(
    labels: np.ndarray, dim: int, rng: np.random.Generator, *, sigma: float = 1.0
) -> tuple[np.ndarray, np.ndarray]:
    """``(features [n, dim], means [C, dim])``: ``normalize(mu_y + sigma eps)``, unit means."""
    check_int(dim, "dim", minimum=1)
    labels = np.asarray(labels)
    n_classes = int(labels.max()) + 1
    means = rng.normal(size=(n_classes, dim))
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    x = means[labels] + sigma / np.sqrt(dim) * rng.normal(size=(len(labels), dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32), means.astype(np.float32)


def test_split(n_nodes: int, rng: np.random.Generator, fraction: float = 0.5) -> np.ndarray:
    """Sorted ``int32`` ids of a seeded random ``fraction`` of the nodes (the test nodes)."""
    check_in_range(fraction, "fraction", 0.0, 1.0, low_open=True)
    n_test = max(1, int(round(fraction * n_nodes)))
    return np.sort(rng.permutation(n_nodes)[:n_test]).astype(np.int32)


test_split.__test__ = False  # not a pytest test despite its name


@dataclasses.dataclass(frozen=True)
class TextGraph:
    """A synthetic text-attributed graph (host arrays).

    Attributes:
        labels: ``int32 [n]`` classes.
        texts: ``n`` strings.
        edges: ``int32 [E, 2]``, ``u < v``, each undirected edge once.
        h: the target homophily; ``h_edge``: the realised one.
        class_names: ``C`` names; ``description``: the dataset description.
    """

    labels: np.ndarray
    texts: tuple[str, ...]
    edges: np.ndarray
    h: float
    h_edge: float
    class_names: tuple[str, ...]
    description: str = DESCRIPTION


def seeded_corpus(
    seed: int, n_nodes: int, n_classes: int, *, rho_sig: float = 0.14, rho_conf: float = 0.10
) -> tuple[np.ndarray, tuple[str, ...]]:
    """``(labels, texts)`` of :func:`make_text_graph` for ``seed`` (no edges drawn)."""
    check_int(seed, "seed", minimum=0)
    rng = np.random.default_rng([seed, 0])
    labels = balanced_labels(n_nodes, n_classes, rng)
    texts = make_texts(labels, n_classes, rng, rho_sig=rho_sig, rho_conf=rho_conf)
    return labels, tuple(texts)


def make_text_graph(
    seed: int,
    n_nodes: int,
    n_classes: int,
    h: float,
    *,
    mean_degree: float = 10.0,
    rho_sig: float = 0.14,
    rho_conf: float = 0.10,
) -> TextGraph:
    """Labels and texts from ``seed`` alone; edges from ``(seed, h)``. So one seed's texts are
    the same for every ``h`` (encode them once)."""
    labels, texts = seeded_corpus(seed, n_nodes, n_classes, rho_sig=rho_sig, rho_conf=rho_conf)
    edges = seeded_edges(seed, labels, h, mean_degree=mean_degree)
    return TextGraph(
        labels, texts, edges, float(h), edge_homophily(edges, labels), class_names(n_classes)
    )

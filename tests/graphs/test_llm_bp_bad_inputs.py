"""llm_bp: bad input at every public entry point is a clear error naming the argument."""

import numpy as np
import pytest

from jaxlab.graphs import llm_bp as L

RNG = np.random.default_rng(0)
Y = L.balanced_labels(20, 3, RNG)
X, MEANS = L.gaussian_features(Y, 4, RNG)
E = L.make_edges(Y, 0.7, RNG)
G = L.make_graph(E, 20)
LP = np.log(np.full((20, 3), 1 / 3, np.float32))
BP = L.make_bp(L.BPConfig(), G)
STATE = BP.init(LP, 0.5)

CASES = [
    (
        "graph: endpoint range",
        lambda: L.make_graph([[0, 20]], 20),
        ValueError,
        "`edges`.*\\[0, 20\\)",
    ),
    ("graph: negative endpoint", lambda: L.make_graph([[-1, 2]], 20), ValueError, "`edges`"),
    ("graph: self-loop", lambda: L.make_graph([[3, 3]], 20), ValueError, "`edges`.*self-loop"),
    (
        "graph: both directions",
        lambda: L.make_graph([[1, 2], [2, 1]], 20),
        ValueError,
        "`edges`.*more than once",
    ),
    ("graph: shape", lambda: L.make_graph([[1, 2, 3]], 20), ValueError, "`edges`.*\\[E, 2\\]"),
    ("graph: float edges", lambda: L.make_graph([[1.0, 2.0]], 20), TypeError, "`edges`"),
    ("graph: negative weight", lambda: L.make_graph([[1, 2]], 20, [-1.0]), ValueError, "`weight`"),
    ("graph: NaN weight", lambda: L.make_graph([[1, 2]], 20, [np.nan]), ValueError, "`weight`"),
    ("graph: n_nodes", lambda: L.make_graph([[1, 2]], 0), ValueError, "`n_nodes`"),
    (
        "directed: asymmetric",
        lambda: L.from_directed(np.array([[0, 1, 1], [1, 0, 2]]), 3),
        ValueError,
        "`edge_index` is not symmetric",
    ),
    (
        "directed: duplicate",
        lambda: L.reverse_edge_index(np.array([[0, 0, 1], [1, 1, 0]])),
        ValueError,
        "`edge_index`.*more than once",
    ),
    (
        "directed: shape",
        lambda: L.reverse_edge_index(np.zeros((3, 2), int)),
        ValueError,
        "`edge_index`",
    ),
    ("pad: fewer edges", lambda: L.pad_graph(G, 1), ValueError, "`n_edges`"),
    ("potential: r > 1", lambda: L.log_potential(1.5, 3), ValueError, "`r` must lie in"),
    ("potential: r < 0", lambda: L.log_potential(-0.1, 3), ValueError, "`r` must lie in"),
    ("potential: kind", lambda: L.log_potential(0.5, 3, "row"), ValueError, "`potential`"),
    ("potential: C", lambda: L.log_potential(0.5, 1), ValueError, "`n_classes`"),
    ("prior: tau 0", lambda: L.log_prior(X, MEANS, 0.0), ValueError, "`tau`"),
    ("prior: tau < 0", lambda: L.log_prior(X, MEANS, -1.0), ValueError, "`tau`"),
    (
        "prior: width",
        lambda: L.log_prior(X, MEANS[:, :3], 0.1),
        ValueError,
        "`class_emb` must have width 4",
    ),
    (
        "prior: norm",
        lambda: L.log_prior(X, 2 * MEANS, 0.1),
        ValueError,
        "`class_emb` rows must be unit-norm",
    ),
    (
        "prior: NaN",
        lambda: L.log_prior(np.full((2, 4), np.nan), MEANS, 0.1),
        ValueError,
        "`features`",
    ),
    ("config: L < 1", lambda: L.BPConfig(iterations=0), ValueError, "`iterations`"),
    ("config: message", lambda: L.BPConfig(message="fast"), ValueError, "`message`"),
    ("config: damping", lambda: L.BPConfig(damping=1.0), ValueError, "`damping`"),
    ("config: clip", lambda: L.BPConfig(clip=0.0), ValueError, "`clip`"),
    ("bp: r outside", lambda: L.belief_propagation(G, LP, 1.2), ValueError, "`r` must lie in"),
    (
        "bp: prior rows",
        lambda: L.belief_propagation(G, LP[:5], 0.5),
        ValueError,
        "`log_prior` must have 20 rows",
    ),
    (
        "bp: one class",
        lambda: L.belief_propagation(G, LP[:, :1], 0.5),
        ValueError,
        "`log_prior`.*2 classes",
    ),
    (
        "bp: matrix shape",
        lambda: L.belief_propagation(G, LP, np.ones((2, 2))),
        ValueError,
        "`coupling`",
    ),
    (
        "bp: matrix sign",
        lambda: L.belief_propagation(G, LP, -np.ones((3, 3)), L.BPConfig(message="dense")),
        ValueError,
        "`coupling` must be positive",
    ),
    (
        "bp: full matrix closed",
        lambda: L.belief_propagation(G, LP, np.arange(1.0, 10).reshape(3, 3)),
        ValueError,
        "`coupling` is not two-valued",
    ),
    ("bp: graph type", lambda: L.belief_propagation(E, LP, 0.5), TypeError, "`graph`"),
    (
        "bp: config type",
        lambda: L.belief_propagation(G, LP, 0.5, {"iterations": 5}),
        TypeError,
        "`config`",
    ),
    ("make_bp: mesh type", lambda: L.make_bp(L.BPConfig(), G, mesh="data"), TypeError, "`mesh`"),
    ("step: x", lambda: BP.step(STATE, x=np.zeros(3)), ValueError, "`x` must be None"),
    ("step: state", lambda: BP.step((1, 2)), TypeError, "`state`"),
    (
        "step: other graph",
        lambda: L.make_bp(L.BPConfig(), L.make_graph(E[:5], 20)).step(STATE),
        ValueError,
        "`state` does not belong",
    ),
    (
        "appr: aggregation",
        lambda: L.bp_appr_scores(np.exp(LP), G, 0.5, "max"),
        ValueError,
        "`aggregation`",
    ),
    ("na: features rank", lambda: L.na_features(np.zeros(20), G), ValueError, "`features`"),
    (
        "zero-shot: range",
        lambda: L.zero_shot_class_embeddings(X, np.full(20, 3), 3),
        ValueError,
        "`predicted`",
    ),
    (
        "zero-shot: length",
        lambda: L.zero_shot_class_embeddings(X, Y[:5], 3),
        ValueError,
        "`predicted`",
    ),
    (
        "few-shot: k",
        lambda: L.few_shot_class_embeddings(X, Y, np.arange(20), 0, RNG),
        ValueError,
        "`k`",
    ),
    (
        "few-shot: missing class",
        lambda: L.few_shot_class_embeddings(X, Y, np.flatnonzero(Y == 0), 2, RNG),
        ValueError,
        "`train_ids` holds no node of class 1",
    ),
    ("judge: m", lambda: L.judge_edges(E, Y, RNG, m=0), ValueError, "`m`"),
    ("judge: a_edge", lambda: L.judge_edges(E, Y, RNG, a_edge=1.5), ValueError, "`a_edge`"),
    (
        "judge: no edges",
        lambda: L.judge_edges(np.zeros((0, 2), int), Y, RNG),
        ValueError,
        "`edges`",
    ),
    ("predicted: h", lambda: L.predicted_r_hat(1.5, 0.9), ValueError, "`h`"),
    (
        "labeller: a_node",
        lambda: L.label_nodes(Y, ("a", "b", "c"), RNG, a_node=2.0),
        ValueError,
        "`a_node`",
    ),
    ("labeller: labels", lambda: L.label_nodes(Y, ("a", "b"), RNG), ValueError, "`labels`"),
    ("data: h", lambda: L.make_edges(Y, 1.1, RNG), ValueError, "`h`"),
    (
        "data: mean degree",
        lambda: L.make_edges(Y, 0.5, RNG, mean_degree=0),
        ValueError,
        "`mean_degree`",
    ),
    ("data: classes", lambda: L.class_names(11), ValueError, "`n_classes`"),
    (
        "data: rho",
        lambda: L.make_texts(Y, 3, RNG, rho_sig=0.7, rho_conf=0.5),
        ValueError,
        "`rho_sig \\+ rho_conf`",
    ),
    ("data: seed", lambda: L.make_text_graph(-1, 20, 3, 0.5), ValueError, "`seed`"),
    ("encoder: name", lambda: L.encode_nodes(["a"], "bert"), ValueError, "`encoder`"),
    (
        "encoder: class-aware names",
        lambda: L.encode_nodes(["a"], "minilm_class_aware"),
        ValueError,
        "`class_names`",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_a_clear_error(case):
    _, fn, exc, match = case
    with pytest.raises(exc, match=match):
        fn()


def test_good_inputs_pass():
    out = L.belief_propagation(G, LP, np.full((3, 3), 0.5) + 0.5 * np.eye(3))
    assert np.all(np.isfinite(np.asarray(out)))

"""LLM-BP: belief propagation with an LLM-estimated homophily on text-attributed graphs (Wang et
al., *Generalization Principles for Inference over Text-Attributed Graphs with Large Language
Models*, ICML 2025; issue 26).

Modules: :mod:`~jaxlab.graphs.llm_bp.data` (seeded synthetic text-attributed graphs of chosen
homophily, Gaussian features), :mod:`~jaxlab.graphs.llm_bp.oracles` (the simulated LLM labeller
and its official parser, the edge judge and ``r_hat``'s predicted bias),
:mod:`~jaxlab.graphs.llm_bp.classes` (zero-shot and few-shot class embeddings, metrics),
:mod:`~jaxlab.graphs.llm_bp.encoders` (MiniLM, a class-aware prefix, TF-IDF projection) and
:mod:`~jaxlab.graphs.llm_bp.bp` (priors, the two potentials, loopy BP with an O(C) closed form
and an O(C^2) path, edges sharded with ``shard_map``; BP (appr.), NA and a 2-hop control).

The 7B task-adaptive encoder and the GPT calls cannot run here: MiniLM encodes and the two LLM
roles are simulated oracles. Nothing is trained.

Example::

    import numpy as np
    from jaxlab.graphs import llm_bp

    rng = np.random.default_rng(0)
    y = llm_bp.balanced_labels(300, 4, rng)
    x, means = llm_bp.gaussian_features(y, 16, rng, sigma=2.0)
    g = llm_bp.make_graph(llm_bp.make_edges(y, 0.8, rng), 300)
    r_hat = llm_bp.judge_edges(np.stack([g.src, g.dst], 1), y, rng, m=100, a_edge=0.9)
    prior = llm_bp.log_prior(x, means, 0.025)                     # [300, 4]
    bp = llm_bp.make_bp(llm_bp.BPConfig(), g)
    state, metrics = bp.run(bp.init(prior, r_hat))                 # 5 iterations
    pred = np.asarray(state.log_belief).argmax(1)
    raw = np.asarray(prior).argmax(1)
    assert (pred == y).mean() > (raw == y).mean()
"""

from jaxlab.graphs.llm_bp.bp import (
    AGGREGATIONS,
    BP,
    MESSAGES,
    POTENTIALS,
    BPConfig,
    BPState,
    Graph,
    appr_kappa,
    belief_propagation,
    bp_appr_scores,
    degree,
    from_directed,
    log_potential,
    log_prior,
    make_bp,
    make_graph,
    na_features,
    neighbour_mean,
    neighbour_sum,
    neutral_r,
    pad_graph,
    reverse_edge_index,
    run_bp,
    two_hop_features,
)
from jaxlab.graphs.llm_bp.classes import (
    accuracy,
    few_shot_class_embeddings,
    macro_f1,
    predict,
    zero_shot_class_embeddings,
)
from jaxlab.graphs.llm_bp.data import (
    BACKGROUND,
    DESCRIPTION,
    TOPICS,
    TextGraph,
    balanced_labels,
    class_names,
    edge_homophily,
    gaussian_features,
    make_edges,
    make_text_graph,
    make_texts,
    seeded_corpus,
    seeded_edges,
    test_split,
)
from jaxlab.graphs.llm_bp.encoders import (
    ENCODERS,
    class_aware_prefix,
    encode_nodes,
    tfidf_projection,
)
from jaxlab.graphs.llm_bp.oracles import judge_edges, label_nodes, parse_answers, predicted_r_hat

__all__ = [
    "AGGREGATIONS", "BACKGROUND", "BP", "BPConfig", "BPState", "DESCRIPTION", "ENCODERS",
    "Graph", "MESSAGES", "POTENTIALS", "TOPICS", "TextGraph", "accuracy", "appr_kappa",
    "balanced_labels", "belief_propagation", "bp_appr_scores", "class_aware_prefix",
    "class_names", "degree", "edge_homophily", "encode_nodes", "few_shot_class_embeddings",
    "from_directed", "gaussian_features", "judge_edges", "label_nodes", "log_potential",
    "log_prior", "macro_f1", "make_bp", "make_edges", "make_graph", "make_text_graph",
    "make_texts", "na_features", "neighbour_mean", "neighbour_sum", "neutral_r", "pad_graph",
    "parse_answers", "predict", "predicted_r_hat", "reverse_edge_index", "run_bp",
    "seeded_corpus", "seeded_edges",
    "test_split", "tfidf_projection", "two_hop_features", "zero_shot_class_embeddings",
]  # fmt: skip

"""llm_bp: loopy BP against brute-force marginals and closed forms, the potentials' neutral points,
invariances, the simulated LLMs, class embeddings, the data generator, sharding and tracing."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.graphs import llm_bp as L
from tests.helpers import assert_compiles_once

RNG = np.random.default_rng(0)


def random_tree(n, rng):
    """Edges of a random tree on n nodes (node i > 0 joins a random earlier node)."""
    return np.array([[int(rng.integers(i)), i] for i in range(1, n)], np.int32)


def brute_marginals(log_phi, edges, h, weight=None):
    """Exact marginals of p(y) ∝ prod phi_i(y_i) prod H(y_u, y_v)^w by enumeration (float64)."""
    n, c = log_phi.shape
    w = np.ones(len(edges)) if weight is None else weight
    logp = []
    states = np.array(list(itertools.product(range(c), repeat=n)))
    lp = log_phi[np.arange(n)[None], states].sum(1)
    for (u, v), we in zip(edges, w, strict=True):
        lp = lp + we * np.log(h[states[:, u], states[:, v]])
    p = np.exp(lp - lp.max())
    p /= p.sum()
    logp = np.zeros((n, c))
    for i in range(n):
        for a in range(c):
            logp[i, a] = p[states[:, i] == a].sum()
    return logp


@pytest.mark.parametrize("message", ["dense", "closed"])
def test_bp_on_a_tree_equals_brute_force_marginals(message):
    rng = np.random.default_rng(1)
    with jax.enable_x64(True):
        n, c = 7, 3
        edges = random_tree(n, rng)
        log_phi = np.log(rng.dirichlet(np.ones(c), size=n))
        if message == "dense":
            a = rng.uniform(0.2, 2.0, size=(c, c))
            h = a + a.T  # any symmetric positive potential
            coupling = h
        else:
            h = np.exp(np.asarray(L.log_potential(np.float64(0.7), c), np.float64))
            coupling = np.float64(0.7)
        weight = rng.uniform(0.5, 1.5, size=len(edges))
        g = L.make_graph(edges, n, weight)
        cfg = L.BPConfig(iterations=n, message=message)  # >= the diameter
        got = np.exp(np.asarray(L.belief_propagation(g, log_phi, coupling, cfg)))
        want = brute_marginals(log_phi, edges, h, weight)
        np.testing.assert_allclose(got, want, atol=1e-5)
        # fewer iterations than the diameter is *not* exact (the test can fail)
        one = L.BPConfig(iterations=1, message=message)
        early = np.exp(np.asarray(L.belief_propagation(g, log_phi, coupling, one)))
        assert np.abs(early - want).max() > 1e-3


def test_one_edge_posterior_closed_form():
    rng = np.random.default_rng(2)
    c = 4
    phi = rng.dirichlet(np.ones(c), size=2).astype(np.float32)
    g = L.make_graph([[0, 1]], 2)
    for potential in L.POTENTIALS:
        cfg = L.BPConfig(potential=potential, iterations=3)
        h = np.exp(np.asarray(L.log_potential(0.8, c, potential)))
        want = phi[0] * (phi[1] @ h)  # phi_1(c) sum_a H(a, c) phi_2(a)
        want /= want.sum()
        got = np.exp(np.asarray(L.belief_propagation(g, np.log(phi), 0.8, cfg)))[0]
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_neutral_r_returns_the_prior_for_both_potentials():
    rng = np.random.default_rng(3)
    y = L.balanced_labels(60, 5, rng)
    g = L.make_graph(L.make_edges(y, 0.7, rng), 60)
    lp = jax.nn.log_softmax(jnp.asarray(rng.normal(size=(60, 5)) * 3, jnp.float32))
    for potential in L.POTENTIALS:
        r = L.neutral_r(5, potential)
        out = L.belief_propagation(g, lp, r, L.BPConfig(potential=potential))
        np.testing.assert_allclose(out, lp, atol=1e-5)
        off = L.belief_propagation(g, lp, r + 0.2, L.BPConfig(potential=potential))
        assert np.abs(np.asarray(off) - np.asarray(lp)).max() > 0.1
    assert L.neutral_r(5, "normalized") == 0.2 and L.neutral_r(5, "code") == 0.5


def test_isolated_nodes_and_weight_zero_edges_change_nothing():
    rng = np.random.default_rng(4)
    y = L.balanced_labels(40, 3, rng)
    edges = L.make_edges(y[:30], 0.8, rng)  # nodes 30..39 are isolated
    lp = jax.nn.log_softmax(jnp.asarray(rng.normal(size=(40, 3)), jnp.float32))
    g = L.make_graph(edges, 40)
    out = np.asarray(L.belief_propagation(g, lp, 0.8))
    np.testing.assert_allclose(out[30:], np.asarray(lp)[30:], atol=1e-6)
    extra = np.array([[30, 31], [0, 35], [5, 39]])
    w = np.concatenate([np.ones(len(edges)), np.zeros(3)])
    g2 = L.make_graph(np.concatenate([edges, extra]), 40, w)
    # equal up to float32 summation order (other edges share the segment sums)
    np.testing.assert_allclose(L.belief_propagation(g2, lp, 0.8), out, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(
        L.belief_propagation(L.pad_graph(g, g.n_edges + 7), lp, 0.8), out, rtol=1e-5, atol=1e-5
    )
    # and the edges do matter when they carry weight
    assert np.abs(out[:30] - np.asarray(lp)[:30]).max() > 0.1


def test_na_with_zero_weight_is_raw_and_two_hop_matches_a_dense_reference():
    rng = np.random.default_rng(5)
    y = L.balanced_labels(50, 3, rng)
    x, _ = L.gaussian_features(y, 8, rng)
    edges = L.make_edges(y, 0.6, rng)
    g = L.make_graph(edges, 50)
    np.testing.assert_allclose(L.na_features(x, g, 0.0), x, atol=1e-6)
    a = np.zeros((50, 50))
    a[edges[:, 0], edges[:, 1]] = a[edges[:, 1], edges[:, 0]] = 1
    deg = a.sum(1)
    mean = np.where(deg[:, None] > 0, a @ x / np.maximum(deg, 1)[:, None], 0)
    na = x + mean
    na /= np.linalg.norm(na, axis=1, keepdims=True)
    np.testing.assert_allclose(L.na_features(x, g), na, atol=1e-5)
    at = a + np.eye(50)
    s = 1 / np.sqrt(at.sum(1))
    an = s[:, None] * at * s[None]
    ref = an @ an @ x
    ref /= np.linalg.norm(ref, axis=1, keepdims=True)
    np.testing.assert_allclose(L.two_hop_features(x, g), ref, atol=1e-5)


def test_node_and_class_permutation_equivariance():
    rng = np.random.default_rng(6)
    n, c = 40, 4
    y = L.balanced_labels(n, c, rng)
    edges = L.make_edges(y, 0.7, rng)
    lp = jax.nn.log_softmax(jnp.asarray(rng.normal(size=(n, c)) * 2, jnp.float32))
    out = np.asarray(L.belief_propagation(L.make_graph(edges, n), lp, 0.75))
    perm = rng.permutation(n)
    inv = np.argsort(perm)  # new id of old node i is inv[i]
    g_p = L.make_graph(inv[edges], n)
    out_p = np.asarray(L.belief_propagation(g_p, np.asarray(lp)[perm], 0.75))
    np.testing.assert_allclose(out_p, out[perm], rtol=1e-5, atol=1e-5)
    cp = rng.permutation(c)
    out_c = np.asarray(L.belief_propagation(L.make_graph(edges, n), np.asarray(lp)[:, cp], 0.75))
    np.testing.assert_allclose(out_c, out[:, cp], rtol=1e-5, atol=1e-5)


def test_reverse_edge_index_is_an_involution_and_from_directed_matches():
    rng = np.random.default_rng(7)
    y = L.balanced_labels(30, 3, rng)
    e = L.make_edges(y, 0.5, rng)
    directed = np.concatenate([e, e[:, ::-1]])[rng.permutation(2 * len(e))].T
    rev = L.reverse_edge_index(directed)
    np.testing.assert_array_equal(rev[rev], np.arange(directed.shape[1]))
    np.testing.assert_array_equal(directed[:, rev], directed[::-1])
    g = L.from_directed(directed, 30)
    got = np.stack([g.src, g.dst], 1)
    assert np.all(got[:, 0] < got[:, 1])
    np.testing.assert_array_equal(np.unique(got, axis=0), e)  # each undirected edge once
    with pytest.raises(ValueError, match="`edge_index` is not symmetric"):
        L.reverse_edge_index(directed[:, 1:])


def test_closed_form_messages_equal_the_dense_path():
    rng = np.random.default_rng(8)
    with jax.enable_x64(True):
        from jaxlab.graphs.llm_bp.bp import _messages

        cav = rng.normal(size=(50, 6)) * 4
        w = rng.uniform(0, 2, size=50)
        for r, pot in [(0.9, "normalized"), (0.05, "normalized"), (0.3, "code"), (0.999, "code")]:
            lh = L.log_potential(np.float64(r), 6, pot)
            a = _messages(jnp.asarray(cav), jnp.asarray(w), lh, True)
            b = _messages(jnp.asarray(cav), jnp.asarray(w), lh, False)
            np.testing.assert_allclose(a, b, atol=1e-6)
    y = L.balanced_labels(80, 6, rng)
    g = L.make_graph(L.make_edges(y, 0.3, rng), 80)
    lp = jax.nn.log_softmax(jnp.asarray(rng.normal(size=(80, 6)) * 3, jnp.float32))
    a = L.belief_propagation(g, lp, 0.3, L.BPConfig(message="closed"))
    b = L.belief_propagation(g, lp, 0.3, L.BPConfig(message="dense"))
    np.testing.assert_allclose(a, b, atol=2e-4)


def test_one_step_linearisation_error_is_quadratic_in_kappa():
    """One BP step: log b = log phi + sum_j log(1 + kappa phi_j(c)) + const; to first order
    log phi + kappa sum_j phi_j. Halving kappa must cut the error about 4x."""
    rng = np.random.default_rng(9)
    with jax.enable_x64(True):
        c = 5
        y = L.balanced_labels(40, c, rng)
        g = L.make_graph(L.make_edges(y, 0.5, rng), 40)
        lp = jax.nn.log_softmax(jnp.asarray(rng.normal(size=(40, c))))
        phi = np.exp(np.asarray(lp))
        s = np.asarray(L.neighbour_sum(jnp.asarray(phi), g))

        def err(kappa):
            r = (1 + kappa) / (c + kappa)  # kappa = (rC - 1) / (1 - r) for the normalised psi
            exact = np.asarray(L.belief_propagation(g, lp, r, L.BPConfig(iterations=1)))
            lin = np.asarray(lp) + kappa * s
            lin -= np.log(np.exp(lin).sum(1, keepdims=True))
            return np.abs(exact - lin).max()

        e1, e2, e3 = err(0.2), err(0.1), err(0.05)
        assert 3.0 < e1 / e2 < 5.0 and 3.0 < e2 / e3 < 5.0


def test_bp_appr_and_kappa():
    g = L.make_graph([[0, 1], [1, 2]], 3)
    p = jnp.asarray([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    np.testing.assert_allclose(
        L.bp_appr_scores(p, g, 0.5), p + 0.5 * np.array([[0, 1], [1.5, 0.5], [0, 1]])
    )
    np.testing.assert_allclose(
        L.bp_appr_scores(p, g, -0.5, "mean"), p - 0.5 * np.array([[0, 1], [0.75, 0.25], [0, 1]])
    )
    assert float(L.appr_kappa(0.7, 5)) == 0.5 and float(L.appr_kappa(0.1, 5)) == -0.5
    assert float(L.appr_kappa(0.3, 5, "code")) == -0.5


def test_judge_perfect_gives_the_sampled_fraction_and_bias_matches_monte_carlo():
    rng = np.random.default_rng(10)
    y = L.balanced_labels(200, 4, rng)
    e = L.make_edges(y, 0.6, rng)
    picks = np.random.default_rng(11).integers(len(e), size=37)
    same = np.mean(y[e[picks, 0]] == y[e[picks, 1]])
    assert L.judge_edges(e, y, np.random.default_rng(11), m=37, a_edge=1.0) == same
    assert np.isclose(L.judge_edges(e, y, np.random.default_rng(11), m=37, a_edge=0.0), 1 - same)
    h = L.edge_homophily(e, y)
    for resample in (False, True):
        draws = [
            L.judge_edges(e, y, np.random.default_rng([12, i]), m=100, a_edge=0.7,
                          resample_per_trial=resample)
            for i in range(400)
        ]  # fmt: skip
        want = L.predicted_r_hat(h, 0.7, resample_per_trial=resample)
        se = np.std(draws) / np.sqrt(len(draws))
        assert abs(np.mean(draws) - want) < 3 * se
    assert abs(L.predicted_r_hat(0.8, 0.85) - (0.8 * 0.97339 + 0.2 * 0.02661)) < 1e-4


def test_parser_and_labeller():
    names = ("astronomy", "cooking (food)", "law")
    got = L.parse_answers(
        ["The category is Cooking.", "no idea", "astronomy or law", "LAW, clearly"], names
    )
    np.testing.assert_array_equal(got, [1, -1, -2, 2])
    rng = np.random.default_rng(13)
    y = rng.integers(0, 3, 4000)
    ans = L.label_nodes(y, ("astronomy", "cooking", "law"), rng, a_node=0.7, p_fail=0.1)
    parsed = L.parse_answers(ans, ("astronomy", "cooking", "law"))
    ok = parsed >= 0
    assert abs(np.mean(~ok) - 0.1) < 0.02
    assert set(np.unique(parsed)) == {-2, -1, 0, 1, 2}
    assert abs(np.mean(parsed[ok] == y[ok]) - 0.7) < 0.03


def test_class_embeddings_zero_shot_and_few_shot():
    rng = np.random.default_rng(14)
    y = L.balanced_labels(600, 5, rng)
    x, means = L.gaussian_features(y, 32, rng, sigma=0.5)
    q, ids = L.zero_shot_class_embeddings(x, y, 5)
    np.testing.assert_array_equal(ids, np.arange(5))
    assert np.min(np.sum(q * means, 1)) > 0.98
    # classes 1 and 3 never predicted: dropped, and predictions map back to original ids
    pred = np.where(np.isin(y, [1, 3]), -1, y)
    q2, ids2 = L.zero_shot_class_embeddings(x, pred, 5)
    np.testing.assert_array_equal(ids2, [0, 2, 4])
    out = L.predict(x @ q2.T, ids2)
    assert set(np.unique(out)) <= {0, 2, 4}
    np.testing.assert_allclose(np.linalg.norm(q2, axis=1), 1, atol=1e-6)
    qf = L.few_shot_class_embeddings(x, y, np.arange(300), 5, rng)
    assert qf.shape == (5, 32) and np.min(np.sum(qf * means, 1)) > 0.8
    with pytest.raises(ValueError, match="names no class"):
        L.zero_shot_class_embeddings(x, np.full(600, -1), 5)


def test_data_generator_graph_and_texts():
    tg = L.make_text_graph(3, 200, 4, 0.8)
    e = tg.edges
    assert np.all(e[:, 0] < e[:, 1]) and len(np.unique(e, axis=0)) == len(e)
    assert abs(tg.h_edge - 0.8) < 0.06 and 2 * len(e) / 200 > 7
    assert np.bincount(tg.labels).tolist() == [50] * 4
    lengths = [len(t.split()) for t in tg.texts]
    assert min(lengths) >= 15 and max(lengths) <= 30
    same = L.make_text_graph(3, 200, 4, 0.1)
    assert same.texts == tg.texts and abs(same.h_edge - 0.1) < 0.05
    assert not np.array_equal(same.edges, tg.edges)
    w = {c: set(ws) for c, ws in L.TOPICS.items()}
    for c, ws in w.items():
        assert len(ws) == 30 and not ws & set(L.BACKGROUND)
        assert all(not ws & o for d, o in w.items() if d != c)


def test_every_topic_and_background_word_is_one_wordpiece():
    from jaxlab.core.text import tokenize

    words = [w for ws in L.TOPICS.values() for w in ws] + list(L.BACKGROUND)
    ids = tokenize(words)
    bad = [w for w, i in zip(words, ids, strict=True) if len(i) != 3]  # [CLS] w [SEP]
    assert not bad


@functools.cache
def _setup():
    rng = np.random.default_rng(15)
    y = L.balanced_labels(64, 4, rng)
    x, means = L.gaussian_features(y, 8, rng, sigma=2.0)
    g = L.make_graph(L.make_edges(y, 0.8, rng), 64)
    return y, x, means, g, L.log_prior(x, means, 0.05)


def test_make_bp_step_run_jit_equals_no_jit_determinism_and_no_retrace():
    y, x, means, g, lp = _setup()
    bp = L.make_bp(L.BPConfig(), g)
    state = bp.init(lp, 0.8)
    final, metrics = bp.run(state)
    assert metrics["change"].shape == (5,) and bool(np.all(metrics["finite"]))
    np.testing.assert_allclose(final.log_belief, L.belief_propagation(g, lp, 0.8), atol=1e-6)
    s = state
    for _ in range(5):
        s, m = bp.step(s)
    np.testing.assert_array_equal(s.log_belief, final.log_belief)
    with jax.disable_jit():
        s2 = state
        for _ in range(5):
            s2, _ = bp.step(s2)
    np.testing.assert_allclose(s2.log_belief, final.log_belief, atol=1e-5)
    again, _ = bp.run(bp.init(lp, 0.8))
    np.testing.assert_array_equal(again.log_belief, final.log_belief)
    acc = (np.asarray(final.log_belief).argmax(1) == y).mean()
    assert acc > (np.asarray(lp).argmax(1) == y).mean()
    lp2 = lp + 0.1 * jnp.sin(jnp.arange(4.0))[None]
    calls = [(g, lp, s.log_h, bp.config), (g, lp2, s.log_h * 0.9, bp.config)]
    assert_compiles_once(L.run_bp, calls)


def test_sharded_bp_equals_unsharded(mesh):
    y, x, means, g, lp = _setup()
    for cfg in (L.BPConfig(), L.BPConfig(message="dense", damping=0.3)):
        bp = L.make_bp(cfg, g, mesh=mesh)
        assert bp.graph.n_edges % 4 == 0
        state = bp.init(lp, 0.8)
        out, m = bp.run(state)
        single = L.make_bp(cfg, g)
        want, _ = single.run(single.init(lp, 0.8))
        np.testing.assert_allclose(out.log_belief, want.log_belief, atol=1e-5)
        assert len(out.msg_fwd.sharding.device_set) == 4


def test_vmapped_sweep_equals_single_runs():
    y, x, means, g, lp = _setup()
    rs = jnp.asarray([0.1, 0.5, 0.9])
    log_h = L.log_potential(rs, 4)
    many = jax.vmap(lambda h: L.run_bp(g, lp, h, L.BPConfig()))(log_h)
    for i, r in enumerate([0.1, 0.5, 0.9]):
        np.testing.assert_allclose(many[i], L.belief_propagation(g, lp, r), atol=1e-6)

"""visual_memory: search against brute force, aggregation against a per-query loop, exact
unlearning, persistence, pruning counts, sharded == unsharded.

Shapes are tiny (d = 8, a few hundred items, block 64) and shared, so every jitted program
compiles once per capacity.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.vision import visual_memory as vm

D, N, B, K = 8, 300, 40, 12


def unit(rng, n, d=D):
    z = rng.normal(size=(n, d)).astype(np.float32)
    return z / np.linalg.norm(z, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    return {"mem": unit(rng, N), "labels": rng.integers(0, 4, N), "q": unit(rng, B)}


@pytest.fixture(scope="module")
def memory(data):
    return vm.build_memory(data["mem"], data["labels"], vocab=4, encoder="test", fingerprint="f0")


def brute(q, emb, ids, k):
    s = q @ emb.T
    order = np.lexsort((np.broadcast_to(ids, s.shape), -s), axis=1)[:, :k]
    return np.take_along_axis(s, order, 1), ids[order]


# ---------------------------------------------------------------- search


def test_search_equals_numpy_brute_force(data, memory):
    sims, ids = vm.search(data["q"], memory, K, block=64)
    ref_s, ref_i = brute(data["q"].astype(np.float64), data["mem"], np.arange(N), K)
    np.testing.assert_array_equal(np.asarray(ids), ref_i)
    np.testing.assert_allclose(np.asarray(sims), ref_s, atol=1e-5)


def test_blocked_equals_one_block_and_ties_go_to_the_lower_id():
    rng = np.random.default_rng(1)
    z = unit(rng, 70)
    z = np.concatenate([z, z[:60]])  # rows 70..129 duplicate rows 0..59: exact ties
    mem = vm.build_memory(z, np.zeros(130, int))
    q = z[:5]
    s1, i1 = vm.search(q, mem, 8, block=256)
    s2, i2 = vm.search(q, mem, 8, block=64)
    np.testing.assert_array_equal(np.asarray(i1), np.asarray(i2))
    np.testing.assert_array_equal(np.asarray(s1), np.asarray(s2))
    assert (np.asarray(i1)[:, 0] == np.arange(5)).all()  # the copy (id + 70) comes second
    assert (np.asarray(i1)[:, 1] == np.arange(5) + 70).all()


def test_grouped_selection_equals_brute_force_with_ties_tombstones_and_spare_capacity():
    rng = np.random.default_rng(5)
    z = np.round(unit(rng, 200, 3) * 2) / 2  # coarse rows: many exact ties
    z = z[np.linalg.norm(z, axis=1) > 0]
    z = z / np.linalg.norm(z, axis=1, keepdims=True)
    mem = vm.build_memory(z, np.zeros(len(z), int))
    gone = np.arange(0, len(z), 7)
    mem = vm.remove(mem, gone)
    assert mem.capacity > len(z)  # spare rows past the high-water mark
    q = unit(rng, 9, 3)
    assert vm.group_size(64, 4) > 0 and vm.group_size(16, 4) == 0  # grouped vs plain top_k
    keep = np.setdiff1d(np.arange(len(z)), gone)
    ref_s, ref_i = brute(q.astype(np.float64), z[keep].astype(np.float64), keep, 4)
    # memory-vs-memory: each query's own row (often its group's maximum) is excluded, duplicates
    # of it (exact ties) are not
    own = keep[::3][:9]
    z64 = z.astype(np.float64)
    ex_ref = [brute(z64[o][None], z64[keep[keep != o]], keep[keep != o], 4)[1][0] for o in own]
    for block in (64, 16):
        sims, ids = vm.search(q, mem, 4, block=block)
        np.testing.assert_array_equal(np.asarray(ids), ref_i)
        np.testing.assert_allclose(np.asarray(sims), ref_s, atol=1e-6)
        _, ex = vm.search(z[own], mem, 4, block=block, exclude_self=own)
        np.testing.assert_array_equal(np.asarray(ex), np.stack(ex_ref))


def test_self_retrieval_at_rank_zero_and_exclude_self(data, memory):
    sims, ids = vm.search(data["mem"][:20], memory, 3)
    assert (np.asarray(ids)[:, 0] == np.arange(20)).all()
    np.testing.assert_allclose(np.asarray(sims)[:, 0], 1.0, atol=1e-5)
    _, ex = vm.search(data["mem"][:20], memory, 3, exclude_self=np.arange(20))
    assert (np.asarray(ex) != np.arange(20)[:, None]).all()
    np.testing.assert_array_equal(np.asarray(ex)[:, :2], np.asarray(ids)[:, 1:])


@pytest.mark.parametrize("n_dev", [2, 4])
def test_sharded_rows_equal_unsharded(data, memory, n_dev):
    mesh = vm.memory_mesh(jax.devices()[:n_dev])
    s0, i0 = vm.search(data["q"], memory, K, block=64)
    s1, i1 = vm.search(data["q"], memory, K, block=64, mesh=mesh)
    np.testing.assert_array_equal(np.asarray(i1), np.asarray(i0))
    np.testing.assert_array_equal(np.asarray(s1), np.asarray(s0))


def test_approx_equals_exact_off_tpu(data, memory):
    s0, i0 = vm.search(data["q"], memory, K, block=64)
    s1, i1 = vm.search(data["q"], memory, K, block=64, method="approx")
    np.testing.assert_array_equal(np.asarray(i1), np.asarray(i0))
    np.testing.assert_allclose(np.asarray(s1), np.asarray(s0), atol=1e-6)


def test_backends_agree(data):
    out = {}
    for name in vm.BACKENDS:
        be = vm.make_backend(name, block=64) if name != "faiss" else vm.make_backend(name)
        be.build(data["mem"], data["labels"])
        be.remove(np.array([3, 7, 100]))
        be.add(data["q"][:5], np.zeros(5, int))
        out[name] = be.search(data["q"], K)
    for name in ("jax_approx", "faiss"):
        np.testing.assert_array_equal(out[name][1], out["jax_exact"][1])
        np.testing.assert_allclose(out[name][0], out["jax_exact"][0], atol=1e-5)
    assert not np.isin(out["faiss"][1], [3, 7, 100]).any()


# ---------------------------------------------------------------- edits


def predictions(mem, q, k=K):
    sims, ids = vm.search(q, mem, k, block=64)
    nb = vm.neighbour_lookup(mem, ids)
    return {r: np.asarray(vm.aggregate(nb["labels"], 1 - sims, 4, r, weights=nb["weights"]))
            for r in vm.RULES}, np.asarray(sims), np.asarray(ids)  # fmt: skip


def test_remove_equals_build_without_also_after_restore_and_compact(data, memory, tmp_path):
    gone = np.array([0, 5, 17, 42, 199, 299])
    keep = np.setdiff1d(np.arange(N), gone)
    removed = vm.remove(memory, gone)
    rebuilt = vm.build_memory(data["mem"][keep], data["labels"][keep], ids=keep, vocab=4)
    ref = predictions(rebuilt, data["q"])
    vm.save_memory(tmp_path, memory)
    vm.save_memory(tmp_path, removed)
    restored = vm.restore_memory(tmp_path, fingerprint="f0")
    compacted = vm.compact(removed)
    for mem in (removed, restored, compacted):
        got = predictions(mem, data["q"])
        for r in vm.RULES:
            np.testing.assert_array_equal(got[0][r], ref[0][r])
        # a row's float32 dot product may differ by an ulp between block shapes (the rows sit
        # at other positions in the two memories); the neighbours must be identical
        np.testing.assert_allclose(got[1], ref[1], rtol=0, atol=1e-6)
        np.testing.assert_array_equal(got[2], ref[2])
        assert not np.isin(got[2], gone).any()
    # the removed rows hold nothing in the saved arrays
    raw = vm.restore_memory(tmp_path, version=removed.meta.version)
    pos = np.arange(N)[np.isin(np.arange(N), gone)]
    assert (np.asarray(raw.emb)[pos] == 0).all() and (np.asarray(raw.ids)[pos] == -1).all()
    assert vm.saved_versions(tmp_path) == [memory.meta.version, removed.meta.version]
    vm.save_memory(tmp_path, compacted)  # a save after compaction deletes every older version
    assert vm.saved_versions(tmp_path) == [compacted.meta.version]
    np.testing.assert_array_equal(vm.live_rows(compacted)["ids"], keep)


def test_save_restore_round_trips_every_field(memory, tmp_path):
    mem = vm.reweight(vm.relabel(memory, [1, 2], [3, 3]), [4], [0.5])
    mem = vm.remove(mem, [9])
    vm.save_memory(tmp_path, mem)
    back = vm.restore_memory(tmp_path)
    assert back.meta == mem.meta
    for f in ("emb", "labels", "ids", "weights", "valid", "size"):
        np.testing.assert_array_equal(np.asarray(getattr(back, f)), np.asarray(getattr(mem, f)))
    with pytest.raises(ValueError, match="fingerprint"):
        vm.restore_memory(tmp_path, fingerprint="other")
    with pytest.raises(ValueError, match="dim"):
        vm.restore_memory(tmp_path, dim=D + 1)


def test_growth_past_capacity_changes_nothing_and_adds_within_do_not_retrace(data):
    first = vm.build_memory(data["mem"][:60], data["labels"][:60], vocab=4)  # capacity 64
    assert first.capacity == 64
    grown = vm.add(first, data["mem"][60:], data["labels"][60:])
    assert grown.capacity == 512
    whole = vm.build_memory(data["mem"], data["labels"], vocab=4)
    got, want = predictions(grown, data["q"])[2], predictions(whole, data["q"])[2]
    np.testing.assert_array_equal(got, want)
    m = vm.add(grown, data["q"][:3], [0, 1, 2])
    before = vm.memory._write._cache_size()
    for i in range(3, 12, 3):
        m = vm.add(m, data["q"][i : i + 3], [0, 1, 2])
    assert vm.memory._write._cache_size() == before
    s = vm.search_arrays._cache_size()
    for mm in (m, vm.add(m, data["q"][20:23], [0, 1, 2])):
        vm.search(data["q"], mm, 5, block=64)
    assert vm.search_arrays._cache_size() <= s + 1


def test_far_items_leave_predictions_unchanged(data, memory):
    sims, _ = vm.search(data["q"][:1], memory, K)
    kth = float(np.asarray(sims)[0, -1])
    # new items with similarity below the k-th neighbour's to query 0
    rng = np.random.default_rng(5)
    cand = unit(rng, 4000)
    far = cand[cand @ data["q"][0] < kth - 1e-3][:50]
    more = vm.add(memory, far, np.full(len(far), 2))
    a, b = predictions(memory, data["q"][:1]), predictions(more, data["q"][:1])
    for r in vm.RULES:
        np.testing.assert_array_equal(a[0][r], b[0][r])


# ---------------------------------------------------------------- aggregation


def one(labels, rule="plurality", **kw):
    lab = np.asarray([labels])
    d = np.linspace(0.1, 0.5, lab.shape[1])[None].astype(np.float32)
    return int(np.asarray(vm.aggregate(lab, d, 5, rule, **kw))[0, -1])


def test_plurality_tie_rule_of_the_official_code():
    assert one([0, 1, 1]) == 1
    assert one([0, 1]) == 0
    assert one([2, 3, 3, 1, 1]) == 3
    assert one([1, 2, 2, 1]) == 2


def reference(labels, dists, weights, excluded, n_classes, rule, alpha, gamma, temp, count):
    """A per-query loop written from the spec and the official ``predict``, independent of the
    jitted scan: with ``count="retrieved"`` an excluded neighbour repeats the current leader
    (the nearest label before any kept one); with ``"kept"`` excluded neighbours are skipped."""
    out = np.zeros(labels.shape, np.int64)
    for b in range(labels.shape[0]):
        ex = excluded[b] if not excluded[b].all() else np.zeros_like(excluded[b])
        s_max = max(1 - dists[b, i] for i in range(labels.shape[1]) if not ex[i])
        totals = np.zeros(n_classes, np.float32)
        lead, best, rank, preds = None, -np.inf, 0, []
        for i in range(labels.shape[1]):
            if ex[i]:
                if count == "retrieved":
                    preds.append(labels[b, 0] if lead is None else lead)
                continue
            w = {
                "plurality": 1.0,
                "soft_plurality": weights[b, i],
                "distance": np.exp(-gamma * dists[b, i]),
                "softmax": np.exp((1 - dists[b, i] - s_max) / temp),
                "rank": 1 / (rank + alpha),
                "soft_rank": weights[b, i] / (rank + alpha),
            }[rule]
            rank += 1
            totals[labels[b, i]] += np.float32(w)
            if totals[labels[b, i]] > best:
                lead, best = labels[b, i], totals[labels[b, i]]
            preds.append(lead)
        preds += [lead] * (labels.shape[1] - len(preds))
        out[b] = preds
    return out


@pytest.mark.parametrize("count", vm.COUNTS)
@pytest.mark.parametrize("rule", vm.RULES)
def test_all_k_equals_a_per_query_loop_with_ties_exclusions_and_fallback(rule, count):
    rng = np.random.default_rng(2)
    b, k, c = 30, 15, 3
    labels = rng.integers(0, c, (b, k))
    dists = np.sort(rng.choice([0.1, 0.2, 0.3, 0.5], (b, k)), axis=1).astype(np.float32)
    weights = rng.choice([0.5, 1.0, 1.75], (b, k)).astype(np.float32)
    excluded = rng.random((b, k)) < 0.3
    excluded[:3] = True  # all excluded: the exclusion is ignored
    excluded[3:8, :4] = True  # excluded nearest neighbours: the nearest label leads at first
    got = vm.aggregate(labels, dists, c, rule, weights=weights, excluded=excluded, alpha=2.0,
                       gamma=1.0, temperature=0.5, count=count)  # fmt: skip
    ref = reference(labels, dists, weights, excluded, c, rule, 2.0, 1.0, 0.5, count)
    np.testing.assert_array_equal(np.asarray(got), ref)


def test_all_k_over_several_query_chunks_equals_the_loop():
    rng = np.random.default_rng(4)
    b, k, c = 2 * vm.QUERY_CHUNK + 7, 6, 4  # padded last chunk
    labels = rng.integers(0, c, (b, k))
    dists = np.sort(rng.random((b, k)), axis=1).astype(np.float32)
    excluded = rng.random((b, k)) < 0.2
    ones = np.ones((b, k), np.float32)
    got = vm.aggregate(labels, dists, c, "rank", excluded=excluded)
    ref = reference(labels, dists, ones, excluded, c, "rank", 2.0, 1.0, 0.07, "retrieved")
    np.testing.assert_array_equal(np.asarray(got), ref)


def test_limits_of_the_rules_equal_plurality_or_the_nearest_label():
    rng = np.random.default_rng(3)
    b, k, c = 200, 9, 4
    labels = rng.integers(0, c, (b, k))
    dists = np.sort(rng.random((b, k)), axis=1).astype(np.float32)
    plur = np.asarray(vm.aggregate(labels, dists, c, "plurality"))
    np.testing.assert_array_equal(np.asarray(vm.aggregate(labels, dists, c, "distance",
                                                          gamma=0.0)), plur)  # fmt: skip
    # no plurality ties: count the winner's margin at every k
    counts = np.cumsum(np.eye(c)[labels], axis=1)
    top2 = np.sort(counts, axis=2)[..., -2:]
    clear = top2[..., 1] > top2[..., 0]
    for rule, kw in (("rank", {"alpha": 1e5}), ("softmax", {"temperature": 1e5})):
        got = np.asarray(vm.aggregate(labels, dists, c, rule, **kw))
        np.testing.assert_array_equal(got[clear], plur[clear])
    nearest = labels[:, 0]
    for rule in vm.RULES:
        np.testing.assert_array_equal(np.asarray(vm.aggregate(labels, dists, c, rule))[:, 0],
                                      nearest)  # fmt: skip
    cold = np.asarray(vm.aggregate(labels, dists, c, "softmax", temperature=1e-4))
    distinct = dists[:, 1] - dists[:, 0] > 1e-2
    np.testing.assert_array_equal(cold[distinct, -1], nearest[distinct])


def test_agreement_entropy_ood_and_attribution():
    labels = np.array([[1, 1, 2, 1], [0, 3, 2, 1]])
    d = np.array([[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.9]], np.float32)
    preds = np.asarray(vm.aggregate(labels, d, 4, "plurality"))
    np.testing.assert_allclose(np.asarray(vm.agreement(labels, preds, 4)), [0.75, 0.25])
    np.testing.assert_allclose(np.asarray(vm.label_entropy(labels, 4, 4)),
                               [-(0.75 * np.log(0.75) + 0.25 * np.log(0.25)), np.log(4)],
                               rtol=1e-6)  # fmt: skip
    np.testing.assert_allclose(np.asarray(vm.ood_score(d, 4)), [0.25, 0.65], rtol=1e-6)
    att = np.asarray(vm.attribution(labels, d, preds, 4, "rank"))
    np.testing.assert_allclose(att.sum(1), 1.0, rtol=1e-6)
    w = 1 / (np.arange(4) + 2.0)
    np.testing.assert_allclose(att[0], np.array([w[0], w[1], 0, w[3]]) / (w[0] + w[1] + w[3]),
                               rtol=1e-6)  # fmt: skip


# ---------------------------------------------------------------- pruning


def test_pruning_counts_exclude_self_and_match_a_loop(data, memory):
    counts = vm.neighbour_counts(memory, k=10)
    nbr = counts["neighbours"]
    assert (nbr != np.arange(N)[:, None]).all()
    lab = data["labels"]
    w = np.zeros(N, int)
    c = np.zeros(N, int)
    for m in range(N):
        for n in nbr[m]:
            (w if lab[n] != lab[m] else c)[n] += 1
    np.testing.assert_array_equal(counts["W10"], w)
    np.testing.assert_array_equal(counts["C10"], c)
    assert (counts["W10"] + counts["C10"]).sum() == N * 10
    soft = vm.soft_weights(counts)
    np.testing.assert_allclose(soft, np.where(w > 0, 1.75 / (1 + w), 1.0))
    hard = vm.hard_exclusion(counts, 3, top=10)
    np.testing.assert_array_equal(hard, w >= 3)
    np.testing.assert_array_equal(vm.hard_exclusion(counts, 1, top=10, variant="net"), w - c >= 1)


def test_pruning_after_removal_equals_pruning_of_the_rebuilt_memory(data, memory):
    gone = np.arange(0, N, 7)
    keep = np.setdiff1d(np.arange(N), gone)
    a = vm.neighbour_counts(vm.remove(memory, gone), k=10)
    b = vm.neighbour_counts(vm.build_memory(data["mem"][keep], data["labels"][keep], ids=keep,
                                            vocab=4), k=10)  # fmt: skip
    for key in ("ids", "W10", "C10", "W100", "neighbours"):
        np.testing.assert_array_equal(a[key], b[key])


# ---------------------------------------------------------------- encoders


def test_pca_whitening_is_white_and_unit_norm():
    rng = np.random.default_rng(4)
    x = rng.normal(size=(500, 12)) @ rng.normal(size=(12, 12))
    p = vm.encoders.fit_pca(x, dim=5)
    raw = (x - p["mean"]) @ p["components"] * p["scale"]
    np.testing.assert_allclose(np.cov(raw.T), np.eye(5), atol=1e-3)
    z = np.asarray(vm.encoders.pca_embed(p, x))
    np.testing.assert_allclose(np.linalg.norm(z, axis=1), 1.0, atol=1e-5)


def test_heads_learn_separable_data():
    rng = np.random.default_rng(6)
    z = unit(rng, 200)
    y = (z[:, 0] > 0).astype(int)
    head = vm.encoders.train_head(z, y, 2, steps=200)
    assert float(jnp.mean(vm.encoders.head_predict(head, z) == y)) > 0.95

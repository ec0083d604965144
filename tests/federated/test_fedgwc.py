"""FedGWC's reward, interaction matrix, convergence statistic, affinity and model selection."""

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from jaxlab.federated import fedgwc as F
from tests.federated.fedgwc_common import CFG, GWC, NET, K, gwc, problem
from tests.helpers import assert_traces_once, count_compilations

# One jit per module function (each test reuses the compiled program of its shapes).
_REWARDS = jax.jit(F.gaussian_rewards)
_UPDATE = jax.jit(F.update_interaction)
_AFFINITY = jax.jit(F.affinity)
_FEDAVG = jax.jit(F.fedavg)


def test_reward_closed_form_for_one_outlier():
    m, a, b = 10, 0.7, 1.9
    losses = np.full((m, 1), a, np.float32)
    losses[3, 0] = b
    r = np.asarray(_REWARDS(losses, np.ones(m, np.float32), np.ones(m, bool)))
    np.testing.assert_allclose(r[3], math.exp(-(m - 1) / 2), rtol=1e-4)
    inliers = np.delete(r, 3)
    np.testing.assert_allclose(inliers, math.exp(-1 / (2 * (m - 1))), rtol=1e-5)
    # identical losses: every reward ~1 despite float32 rounding of the mean (the relative floor)
    same = _REWARDS(np.full((m, 7), 2.3, np.float32), np.arange(1.0, m + 1, dtype=np.float32),
                    np.ones(m, bool))  # fmt: skip
    np.testing.assert_allclose(same, 1.0, atol=1e-3)


def test_reward_invariances_and_weighted_moments(key):
    k1, k2 = jax.random.split(key)
    losses = np.asarray(jax.random.uniform(k1, (6, 5), minval=0.5, maxval=2.5))
    n = np.asarray(jax.random.randint(k2, (6,), 10, 100)).astype(np.float32)
    mask = np.ones(6, bool)
    r = np.asarray(_REWARDS(losses, n, mask))
    mu = np.average(losses, axis=0, weights=n)
    var = np.average((losses - mu) ** 2, axis=0, weights=n)
    ref = np.exp(-((losses - mu) ** 2) / (2 * var)).mean(1)
    np.testing.assert_allclose(r, ref, rtol=1e-4)
    np.testing.assert_allclose(_REWARDS(-3.0 * losses + 5.0, n, mask), r, rtol=1e-4)
    perm = np.array([4, 2, 0, 5, 1, 3])
    np.testing.assert_allclose(_REWARDS(losses[perm], n[perm], mask), r[perm], rtol=1e-6)
    # a padding slot changes nothing for the real ones and gets reward 0
    pad = _REWARDS(np.concatenate([losses, np.full((1, 5), 99.0, np.float32)]),
                   np.concatenate([n, np.ones(1, np.float32)]),
                   np.concatenate([mask, np.zeros(1, bool)]))  # fmt: skip
    np.testing.assert_allclose(pad[:6], r, rtol=1e-6)
    assert pad[6] == 0.0


def test_interaction_update_block_and_fixed_point():
    k, alpha = 12, 0.25
    r0 = np.full((k, k), 1.0 / k**2, np.float32)
    idx = np.array([1, 4, 7, 9, 9])  # the last slot is padding repeating an index
    mask = np.array([True, True, True, True, False])
    rewards = np.array([0.9, 0.2, 0.6, 0.3, 0.0], np.float32)
    r1, sse = _UPDATE(r0, idx, mask, rewards, alpha)
    changed = np.asarray(r1) != r0
    expected = np.zeros((k, k), bool)
    expected[np.ix_([1, 4, 7, 9], [1, 4, 7, 9])] = True
    np.testing.assert_array_equal(changed, expected)
    block = np.asarray(r1)[np.ix_([1, 4, 7, 9], [1, 4, 7, 9])]
    assert np.allclose(block, block[:, :1])  # equal increments along each row from a flat start
    np.testing.assert_allclose(sse, np.sum((block - 1.0 / k**2) ** 2), rtol=1e-5)
    share = np.array([0.9, 0.2, 0.6, 0.3]) / 2.0
    r = r0
    for _ in range(20):  # constant rewards: R -> r_i / sum r geometrically with factor (1 - alpha)
        r, _ = _UPDATE(r, idx, mask, rewards, alpha)
    gap0 = share[:, None] - 1.0 / k**2
    got = np.asarray(r)[np.ix_([1, 4, 7, 9], [1, 4, 7, 9])]
    want = np.broadcast_to(gap0 * (1 - alpha) ** 20, got.shape)
    np.testing.assert_allclose(share[:, None] - got, want, rtol=1e-3)


def test_convergence_trigger_round():
    state = F.ConvergenceState.init()
    alpha, m, eps = 0.5, 2, 1e-5
    sses = [0.0] * 30
    rounds = []
    for sse in sses:
        state = F.convergence_step(state, sse, alpha, m, eps)
        rounds.append(int(state.patience))
    # mse = 0.5^t < 1e-5 from t = 17 (0-based round 16); patience 1, 2, ... from there
    first = next(t for t, p in enumerate(rounds) if p == 1)
    assert first == math.ceil(math.log(eps) / math.log(0.5)) - 1
    assert rounds[first + 4] == 5
    state = F.convergence_step(state, 1.0, alpha, m, eps)  # a jump resets the patience
    assert int(state.patience) == 0


def _affinity_loop(r, gamma):
    m = np.asarray(r, np.float64).T
    m = (m - m.min()) / max(m.max() - m.min(), 1e-8)
    n = m.shape[0]
    a = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            if i != j:
                keep = [c for c in range(n) if c not in (i, j)]
                a[i, j] = np.exp(-gamma * np.sum((m[i, keep] - m[j, keep]) ** 2))
    return a


def test_affinity_equals_the_double_loop(key):
    r = np.asarray(jax.random.uniform(key, (13, 13)))
    for gamma in (0.1, 4.0):  # gamma traced: one program
        a = _AFFINITY(r, gamma)
        np.testing.assert_allclose(a, _affinity_loop(r, gamma), atol=1e-5)
    a = np.asarray(_AFFINITY(r, 0.1))
    assert np.allclose(a, a.T, atol=1e-6) and np.all(np.diag(a) == 0)
    off = a[~np.eye(13, dtype=bool)]
    assert np.all((off > 0) & (off <= 1))
    np.testing.assert_allclose(_AFFINITY(r, 1e-9), 1 - np.eye(13), atol=1e-6)


def test_model_selection_finds_blocks_and_refuses_noise():
    rng = np.random.default_rng(0)
    truth = np.repeat([0, 1, 2], [12, 10, 8])
    a = np.where(truth[:, None] == truth[None, :], 0.9, 0.05) + 0.02 * rng.random((30, 30))
    a = (a + a.T) / 2
    np.fill_diagonal(a, 0.0)
    labels, scores = F.select_split(a, m=5, seed=0)
    assert set(scores) == {2, 3, 4}  # n_max = min(30 // 5 + 1, 5) = 5
    assert labels is not None and adjusted_rand_score(truth, labels) == 1.0
    flat = np.full((30, 30), 0.5) + 0.01 * rng.random((30, 30))
    flat = (flat + flat.T) / 2
    np.fill_diagonal(flat, 0.0)
    labels, scores = F.select_split(flat, m=5, seed=0)
    assert labels is None and min(scores.values()) >= 1.0
    labels, scores = F.select_split(a[:9, :9], m=5, seed=0)  # K_c < 2m: no candidate
    assert labels is None and scores == {}


# ---- rounds --------------------------------------------------------------------------------------

# NET, CFG, K and problem(key) (K clients) are shared with test_fedgwc_baselines.py.
_ROUND = jax.jit(F.federated_round, static_argnums=(0, 6, 7))
_LOCAL = jax.jit(F.local_train, static_argnums=(0, 7))


def _host(tree):
    return jax.tree_util.tree_map(np.asarray, jax.device_get(tree))


def test_vmapped_round_equals_a_per_client_loop(key):
    params, data = problem(key)
    idx, mask = np.array([4, 1, 3, 0]), np.array([True, True, True, False])
    k_round = jax.random.key(5)
    new, local, losses = _ROUND(NET.apply, params, data, idx, mask, k_round, CFG, None)
    keys = jax.random.split(k_round, 4)
    x, y, count, noise = _host((data.x, data.y, data.count, data.noise))
    loop = [_host(_LOCAL(NET.apply, params, x[i], y[i], count[i], noise[i], keys[s], CFG))
            for s, i in enumerate(idx)]  # fmt: skip
    for s in range(4):
        jax.tree_util.tree_map(lambda a, b, s=s: np.testing.assert_allclose(a[s], b, atol=1e-6),
                               local, loop[s][0])  # fmt: skip
        np.testing.assert_allclose(losses[s], loop[s][1], atol=1e-6)
    w = count[idx[:3]].astype(float)

    def weighted(*a):
        return sum(wi * ai for wi, ai in zip(w, a, strict=True)) / w.sum()

    want = jax.tree_util.tree_map(weighted, *(loop[s][0] for s in range(3)))
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6), new, want)


_EPOCH_ROWS = jax.jit(jax.vmap(F.epoch_batch, in_axes=(None, None, None, None, 0)),
                      static_argnums=(2, 3))  # fmt: skip
EPOCH_CFG = dataclasses.replace(CFG, steps=5, batching="epoch")


def test_epoch_batches_walk_one_shuffle_and_reshuffle(key):
    """The official loader (shuffle, drop_last, a fresh iterator per local training): with 500
    rows and batch 64 the 7 steps of an epoch are disjoint and skip the last 52 rows of the
    shuffle; step 7 starts a new shuffle; padding rows (>= count) are never read."""
    rows = np.asarray(_EPOCH_ROWS(key, 500, 520, 64, jnp.arange(14)))
    assert rows.shape == (14, 64) and rows.max() < 500
    first, second = rows[:7].ravel(), rows[7:].ravel()
    assert len(set(first)) == 448 and len(set(second)) == 448  # one epoch each, disjoint batches
    assert not np.array_equal(first, second)  # a new shuffle
    small = np.asarray(_EPOCH_ROWS(key, 100, 120, 64, jnp.arange(3)))  # one batch per epoch
    assert small.max() < 100 and all(len(set(r)) == 64 for r in small)
    assert not np.array_equal(small[0], small[1])
    # local_train (batches drawn up front) = local_step step by step with the keys split(key, T):
    # epoch mode on epoch_batch's rows (shuffle key fold_in(key, tag)), draw mode on its own draws
    params, data = problem(key, n=12)
    x, y, count, noise = _host((data.x[-1], data.y[-1], data.count[-1], data.noise[-1]))
    assert noise > 0  # a noisy client: the noise draws are compared too
    k = jax.random.key(3)
    for cfg in (EPOCH_CFG, dataclasses.replace(EPOCH_CFG, batching="draw")):
        got_params, got = _LOCAL(NET.apply, params, x, y, count, noise, k, cfg)
        p, s, want = params, cfg.optimizer().init(params), []
        shuffle = jax.random.fold_in(k, F.rounds._EPOCH_STREAM)
        for t, kt in enumerate(jax.random.split(k, cfg.steps)):
            r = None
            if cfg.batching == "epoch":
                r = F.epoch_batch(shuffle, count, y.shape[0], cfg.batch_size, t)
            p, s, loss = F.local_step(NET.apply, p, s, x, y, count, noise, kt, cfg, r)
            want.append(loss)
        np.testing.assert_allclose(got, want, rtol=1e-5)
        jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6),
                               got_params, p)  # fmt: skip
    with pytest.raises(ValueError, match="batching"):
        F.LocalConfig(batching="epochs")


def test_fedavg_identities(key):
    params = _host(problem(key)[0])
    stack = jax.tree_util.tree_map(lambda a: np.stack([a, 2 * a, -a]), params)
    w = np.array([1.0, 3.0, 2.0], np.float32)
    got = _FEDAVG(stack, w)
    jax.tree_util.tree_map(lambda g, a: np.testing.assert_allclose(g, a * 5 / 6, rtol=1e-6),
                           got, params)  # fmt: skip
    perm = np.array([2, 0, 1])
    swapped = _FEDAVG(jax.tree_util.tree_map(lambda a: a[perm], stack), w[perm])
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-7), got, swapped)
    same = jax.tree_util.tree_map(lambda a: np.stack([a, a, a]), params)  # identical clients
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6),
                           _FEDAVG(same, w), params)  # fmt: skip
    one = _FEDAVG(jax.tree_util.tree_map(lambda a: a[:1], stack), np.ones(1, np.float32))
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b), one, params)


def test_sharded_round_equals_unsharded(mesh, key):
    params, data = problem(key)
    idx, mask = np.array([5, 2, 0, 3]), np.ones(4, bool)
    a = _ROUND(NET.apply, params, data, idx, mask, jax.random.key(1), CFG, None)
    b = _ROUND(NET.apply, params, data, idx, mask, jax.random.key(1), CFG, mesh)
    jax.tree_util.tree_map(lambda u, v: np.testing.assert_allclose(u, v, atol=1e-6), a, b)
    assert len(b[2].sharding.device_set) == 4


def test_sampling_and_data_errors(key):
    members = jnp.zeros(20, bool).at[jnp.array([2, 5, 11, 17])].set(True)
    idx, mask = F.sample_clients(key, members, 6)
    real = np.asarray(idx)[np.asarray(mask)]
    assert sorted(real) == [2, 5, 11, 17] and mask.sum() == 4
    idx, mask = F.sample_clients(key, jnp.ones(20, bool), 6)
    assert mask.all() and len(set(np.asarray(idx))) == 6
    _, data = problem(key)
    with pytest.raises(ValueError, match="no data"):
        data.replace(count=data.count.at[2].set(0)).check(4)
    with pytest.raises(ValueError, match="batch_size"):
        data.check(20)
    with pytest.raises(ValueError, match="steps"):
        F.LocalConfig(steps=0)


# ---- FedGWC state ----------------------------------------------------------------------------
# gwc() = (params, data, fed) under GWC (K = 20, m = 4, eps = 1), shared with the baselines' tests.


@functools.cache
def _module_rounds():
    """The module-level ``run_rounds`` (key as an argument, a 50-round chunk) from ``F.init``,
    shown to trace once for two starts with new values; returns the first run's output."""
    params, data, _ = gwc()
    other = jax.tree_util.tree_map(lambda a: a + np.float32(0.1), _host(params))

    def run_rounds(state, key, data):
        return F.run_rounds(state, key, 50, NET.apply, data, GWC)

    calls = [(F.init(params, K, GWC), jax.random.key(0), data),
             (F.init(other, K, GWC), jax.random.key(1), data)]  # fmt: skip
    first, second = assert_traces_once(run_rounds, calls)
    assert not np.array_equal(first[0].r, second[0].r)  # the second start really ran
    return first


def test_rounds_stop_at_the_trigger_and_count_updates():
    params, _, _ = gwc()
    start = F.init(params, K, GWC)
    assert int(start.target[0]) == 5 and bool(start.splittable[0])  # m = 4
    # eps = 1: mse = 0.8 + ... < 1 after the first round, so patience reaches 5 at round 5
    state, losses = _module_rounds()
    assert int(state.rounds) == 5 and int(state.client_updates) == 20
    assert np.all(np.isfinite(losses[:5])) and np.all(np.isnan(losses[5:]))
    assert bool(F.triggered(state)[0])
    # only pairs sampled together changed (a symmetric pattern), and the diagonal of R moved for
    # every sampled client: between 4 (the same 4 every round) and 5 x 4 of them
    changed = np.asarray(state.r) != np.float32(1.0 / 400)
    np.testing.assert_array_equal(changed, changed.T)
    np.testing.assert_array_equal(np.diag(changed), changed.any(axis=1))
    assert 4 <= np.diag(changed).sum() <= 20
    inactive = jax.tree_util.tree_map(lambda a: a[1:], _host(state.params))
    first = jax.tree_util.tree_map(lambda a: np.broadcast_to(a, (3,) + a.shape), _host(params))
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_array_equal(a, b), inactive, first)


def test_split_children_inherit_parameters_and_blocks(key):
    params, _, fed = gwc()
    state, _ = fed.step(fed.init(key, params))  # the program test_factory_... also runs
    truth = np.array([0] * 12 + [1] * 8)
    rng = np.random.default_rng(0)
    # an interaction matrix whose transpose has two clear row groups
    r = np.where(truth[None, :] == 0, 0.9, 0.1) + 0.01 * rng.random((20, 20))
    state = state.replace(r=jnp.asarray(r, jnp.float32),
                          conv=F.ConvergenceState(state.conv.mse, state.target))  # fmt: skip
    before = state
    state, records = F.try_split(state, GWC)
    assert records[0]["split_sizes"] and sorted(records[0]["split_sizes"]) == [8, 12]
    labels = np.asarray(state.labels)
    assert adjusted_rand_score(truth, labels) == 1.0
    assert set(labels) == set(np.flatnonzero(np.asarray(state.active)))  # one cluster each
    new_params, old_params = _host(state.params), _host(before.params)
    for slot in set(labels):
        jax.tree_util.tree_map(lambda a, b, s=slot: np.testing.assert_array_equal(a[s], b[0]),
                               new_params, old_params)  # fmt: skip
        size = int(np.sum(labels == slot))
        assert int(state.target[slot]) == round(size / 4) and bool(state.splittable[slot])
        assert float(state.conv.mse[slot]) == 1.0 and int(state.conv.patience[slot]) == 0
    np.testing.assert_array_equal(state.r, before.r)  # children read their sub-blocks of R
    # a flat block does not split: the wait restarts
    flat_r = np.full((20, 20), 0.5) + 0.001 * rng.random((20, 20))
    state, records = F.try_split(before.replace(r=jnp.asarray(flat_r, jnp.float32)), GWC)
    assert records[0]["split_sizes"] == [] and int(state.active.sum()) == 1
    assert float(state.conv.mse[0]) == 1.0 and int(state.conv.patience[0]) == 0


def test_factory_rounds_equal_the_module_rounds_and_chunks_agree():
    params, _, fed = gwc()
    want, want_losses = _module_rounds()
    assert (fed.num_clients, fed.clients_per_round) == (20, 4)
    state = fed.init(jax.random.key(0), params)
    got, losses = fed.run_rounds(state, 50, until=50)
    # the factory's chunk does not trace again: `until` and the state are traced arguments
    with count_compilations("run_rounds") as counted:
        # rounds 0-1 then 2-4 (the key lives in the state: round t uses fold_in(key, t))
        half, _ = fed.run_rounds(state, 50, until=2)
        rest, _ = fed.run_rounds(half, 50, until=50)
        first, _ = fed.run_rounds(state, 50, until=1)
    assert counted.traces == [], f"the factory's run_rounds traced {len(counted.traces)} more times"
    np.testing.assert_array_equal(losses, want_losses)
    leaves = zip(jax.tree_util.tree_leaves(got.replace(key=None)), jax.tree_util.tree_leaves(want),
                 strict=True)  # fmt: skip
    for a, b in leaves:
        np.testing.assert_array_equal(a, b)
    assert jax.random.key_data(got.key).tolist() == jax.random.key_data(state.key).tolist()
    assert int(half.rounds) == 2 and int(first.rounds) == 1
    np.testing.assert_array_equal(rest.r, got.r)  # == one run
    np.testing.assert_array_equal(rest.params["params"]["Dense_0"]["kernel"],
                                  got.params["params"]["Dense_0"]["kernel"])  # fmt: skip
    # one step == one round of the scan
    one, metrics = fed.step(state)
    assert set(metrics) == {"loss", "finite"} and bool(metrics["finite"]) and int(one.rounds) == 1
    np.testing.assert_allclose(metrics["loss"], want_losses[0], rtol=1e-6)
    np.testing.assert_allclose(one.r, first.r, atol=1e-7)


def test_factory_boundary_errors(key):
    params, data, fed = gwc()
    with pytest.raises(ValueError, match="`config` must be a FedGWCConfig"):
        F.make_fedgwc(CFG, NET.apply, data)
    with pytest.raises(ValueError, match="`data` must be a ClientData"):
        F.make_ifca(GWC, NET.apply, (data.x, data.y))
    with pytest.raises(ValueError, match="batch_size"):
        F.make_fedgwc(GWC, NET.apply, data.replace(count=data.count.at[0].set(2)))
    with pytest.raises(ValueError, match="no key"):
        fed.run_rounds(F.init(params, 20, GWC), 5)
    with pytest.raises(ValueError, match="`max_rounds`"):
        fed.run_rounds(fed.init(key, params), 0)
    with pytest.raises(ValueError, match="`labels` must have shape"):
        fed.fixed_clusters(key, params, np.zeros(19, int))
    with pytest.raises(ValueError, match="`steps`"):
        fed.local_only(params, key, 0)
    assert F.active_slots(fed.init(key, params)) == 1
    with pytest.raises(ValueError, match="prefix"):
        F.active_slots(fed.init(key, params).replace(active=jnp.array([0, 1, 0, 0], bool)))


def test_config_errors():
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="`participation`"):
            F.FedGWCConfig(participation=bad)
    for name, value in (("gamma", 0.0), ("eps", -1.0), ("max_clusters", 0),
                        ("max_candidates", 2), ("seed", 1.5)):  # fmt: skip
        with pytest.raises(ValueError, match=f"`{name}`"):
            F.FedGWCConfig(**{name: value})
    with pytest.raises(ValueError, match="`local`"):
        F.FedGWCConfig(local={"steps": 3})
    for name, value in (("steps", 1.0), ("batch_size", 0), ("lr", 0.0), ("weight_decay", -1e-4),
                        ("momentum", 1.0)):  # fmt: skip
        with pytest.raises(ValueError, match=f"`{name}`"):
            F.LocalConfig(**{name: value})
    for name, value in (("eps1", 0.0), ("eps2", -1.0), ("check_every", 0), ("warmup", -1),
                        ("min_size", 1)):  # fmt: skip
        with pytest.raises(ValueError, match=f"`{name}`"):
            F.CFLConfig(**{"eps1": 1.0, "eps2": 1.0, name: value})
    with pytest.raises(dataclasses.FrozenInstanceError):
        F.FedGWCConfig().gamma = 1.0
    assert hash(F.FedGWCConfig()) == hash(F.FedGWCConfig(local=F.LocalConfig()))

"""SSAR's Pendulum stand-in data (issue 24, part 1): the expert's closed form, rollouts that follow
gymnax's dynamics without auto-reset, the datasets' composition, the spec's reference returns, the
`traj` trust mask on whole episodes, and bad input."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.rl import ssar

KEY = jax.random.key(0)


@functools.cache
def d_re():
    return ssar.make_dataset(KEY, "D-re")


def _obs(theta, theta_dot):
    theta, theta_dot = np.asarray(theta, np.float32), np.asarray(theta_dot, np.float32)
    return jnp.stack([jnp.cos(theta), jnp.sin(theta), theta_dot], axis=-1)


def test_expert_torque_closed_form():
    # at the top: the PD law -10 theta - 2 theta_dot, clipped to +-2
    np.testing.assert_allclose(ssar.expert_torque(_obs(0.0, 0.0)), 0.0, atol=1e-6)
    np.testing.assert_allclose(ssar.expert_torque(_obs(0.1, -0.2)), -1.0 + 0.4, rtol=1e-5)
    np.testing.assert_allclose(ssar.expert_torque(_obs(0.5, 0.0)), -2.0)  # clipped
    # away from the top: pump energy E = theta_dot^2 / 2 + 15 cos theta towards 15, along theta_dot
    theta, theta_dot = np.pi, 1.0  # hanging: E = 0.5 - 15, so full torque along theta_dot
    np.testing.assert_allclose(ssar.expert_torque(_obs(theta, theta_dot)), 2.0)
    np.testing.assert_allclose(ssar.expert_torque(_obs(theta, -theta_dot)), -2.0)
    e = 0.5 * 0.5**2 + 15 * np.cos(2.0)  # a small pump: 1.5 (15 - E) sign(theta_dot)
    np.testing.assert_allclose(
        ssar.expert_torque(_obs(2.0, 0.5)), np.clip(1.5 * (15 - e), -2, 2), rtol=1e-5
    )


def test_rollouts_follow_the_dynamics_without_reset():
    data, returns = ssar.rollout(jax.random.key(3), 2, "expert")
    n = 2 * ssar.EPISODE_LEN
    assert data.obs.shape == (n, 3) and data.action.shape == (n, 1) and returns.shape == (2,)
    assert float(jnp.max(jnp.abs(data.action))) <= 1.0
    np.testing.assert_array_equal(data.terminal, 0.0)  # truncation, never a terminal
    obs, nxt = np.asarray(data.obs), np.asarray(data.next_obs)
    within = np.ones(n - 1, bool)
    within[ssar.EPISODE_LEN - 1] = False  # between episodes the chain breaks
    np.testing.assert_array_equal(obs[1:][within], nxt[:-1][within])
    assert not np.array_equal(obs[ssar.EPISODE_LEN], nxt[ssar.EPISODE_LEN - 1])
    # one Euler step of theta'' = 15 sin theta + 3 u (dt 0.05, |theta_dot| <= 8)
    th = np.arctan2(obs[:, 1], obs[:, 0])
    u = 2.0 * np.asarray(data.action[:, 0])
    new_dot = np.clip(obs[:, 2] + (15 * np.sin(th) + 3 * u) * 0.05, -8, 8)
    np.testing.assert_allclose(nxt[:, 2], new_dot, atol=1e-4)
    reward = -(((th + np.pi) % (2 * np.pi) - np.pi) ** 2 + 0.1 * obs[:, 2] ** 2 + 0.001 * u**2)
    np.testing.assert_allclose(data.reward, reward, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(returns, np.asarray(data.reward).reshape(2, -1).sum(1), rtol=1e-5)


def test_references_match_the_spec_and_are_deterministic():
    refs = ssar.reference_returns(jax.random.key(11), episodes=500)
    assert -1290 <= refs["random"] <= -1170 and -180 <= refs["expert"] <= -130, refs
    np.testing.assert_allclose(ssar.normalised_score(np.array([refs["expert"]]), refs), [100.0])
    np.testing.assert_allclose(ssar.normalised_score(np.array([refs["random"]]), refs), [0.0])
    again = ssar.make_dataset(KEY, "D-re")
    np.testing.assert_array_equal(again.obs, d_re().obs)


def test_datasets_have_their_parts_and_d_re_trusts_the_expert_episodes():
    data = d_re()
    assert data.obs.shape == (100 * ssar.EPISODE_LEN, 3) and data.episode_return.shape == (100,)
    # the 15 expert episodes come last and all score above -400; no random one does
    assert bool(jnp.all(data.episode_return[85:] > -400))
    assert bool(jnp.all(data.episode_return[:85] < -400))
    w = ssar.traj_trust(data, -400.0)
    assert 0.14 <= float(w.mean()) <= 0.15
    np.testing.assert_array_equal(w.reshape(100, -1), np.repeat(w.reshape(100, -1)[:, :1], 200, 1))
    for name, parts in ssar.DATASETS.items():
        assert sum(episodes for _, _, episodes in parts) == 100, name


def test_traj_trust_cuts_episodes_at_breaks_terminals_and_max_len():
    data, _ = ssar.rollout(jax.random.key(5), 3, "eps", 0.5)
    ids = ssar.episode_ids(data)
    np.testing.assert_array_equal(ids, np.repeat(np.arange(3), ssar.EPISODE_LEN))
    np.testing.assert_array_equal(ssar.traj_trust(data, -np.inf), 1.0)
    np.testing.assert_array_equal(ssar.traj_trust(data, np.inf), 0.0)
    # a terminal at step 10 and a max length of 50 cut the same transitions
    cut = data._replace(terminal=data.terminal.at[10].set(1.0))
    ids = ssar.episode_ids(cut, max_len=50)
    assert ids[10] == 0 and ids[11] == 1 and ids[60] == 1 and ids[61] == 2
    # returns are summed per cut episode: trust one 11-step prefix with a lenient threshold
    first = float(np.asarray(data.reward[:11]).sum())
    w = np.asarray(ssar.traj_trust(cut, first - 1e-3, max_len=ssar.EPISODE_LEN))
    assert w[:11].all()


BAD = [
    (lambda: ssar.make_dataset(KEY, "D-x"), ValueError, "`name` must be one of"),
    (lambda: ssar.make_dataset(0, "D-re"), ValueError, "`key` must be a PRNG key"),
    (lambda: ssar.rollout(KEY, 0, "expert"), ValueError, "`episodes` must be >= 1"),
    (lambda: ssar.rollout(KEY, 2.5, "expert"), ValueError, "`episodes` must be an int"),
    (lambda: ssar.rollout(KEY, 2, "greedy"), ValueError, "`policy` must be one of"),
    (lambda: ssar.rollout(KEY, 2, "eps", 1.5), ValueError, "`param` must lie in [0.0, 1.0]"),
    (lambda: ssar.rollout(KEY, 2, "noisy", -1.0), ValueError, "`param` must lie in [0.0"),
    (lambda: ssar.rollout(np.zeros(3, np.uint32), 2, "expert"), ValueError, "`key` must be"),
    (lambda: ssar.policy_action(KEY, _obs(0.0, 0.0), "eps", float("nan")), ValueError, "`param`"),
    (lambda: ssar.expert_torque(jnp.ones((4, 2))), ValueError, "`obs` must be [..., 3]"),
    (lambda: ssar.expert_torque("obs"), TypeError, "`obs` must be an array"),
    (lambda: ssar.reference_returns(KEY, 0), ValueError, "`episodes` must be >= 1"),
    (lambda: ssar.normalised_score(np.ones(2), {"random": 0.0}), ValueError, "`references`"),
    (
        lambda: ssar.normalised_score(np.ones(2), {"random": 0.0, "expert": -1.0}),
        ValueError,
        "expert > random",
    ),
    (
        lambda: ssar.normalised_score(np.array([np.nan]), {"random": -1.0, "expert": 0.0}),
        ValueError,
        "`returns` must be finite",
    ),  # fmt: skip
    (lambda: ssar.traj_trust(d_re(), float("nan")), ValueError, "`ref_return`"),
    (lambda: ssar.traj_trust(d_re(), "-400"), TypeError, "`ref_return`"),
    (lambda: ssar.traj_trust({"obs": 1}, -400.0), TypeError, "`data` must be Transitions"),
    (
        lambda: ssar.traj_trust(d_re()._replace(reward=d_re().reward[:5]), -400.0),
        ValueError,
        "`data.reward` must have shape",
    ),
    (lambda: ssar.episode_ids(d_re(), max_len=0), ValueError, "`max_len` must be >= 1"),
]


@pytest.mark.parametrize(("call", "exc", "fragment"), BAD)
def test_bad_input_is_a_clear_error(call, exc, fragment):
    with pytest.raises(exc) as info:
        call()
    assert fragment in str(info.value), str(info.value)


# --------------------------------------------------------------------------- networks and losses

S_DIM, A_DIM, B = 3, 1, 16


def _batch(seed=0):
    ks = jax.random.split(jax.random.key(seed), 2)
    return jax.random.normal(ks[0], (B, S_DIM)), jnp.tanh(jax.random.normal(ks[1], (B, A_DIM)))


def test_beta_net_starts_at_beta0_and_stays_in_its_range():
    s, _ = _batch()
    net = ssar.BetaNet(beta0=0.4)
    params = net.init(KEY, s)
    zero_out = jax.tree_util.tree_map_with_path(
        lambda p, x: jnp.zeros_like(x) if "out" in jax.tree_util.keystr(p) and "kernel"
        in jax.tree_util.keystr(p) else x, params)  # fmt: skip
    # sigmoid(ln 2) = 2/3, times 1.5 beta0: exactly beta0
    np.testing.assert_allclose(net.apply(zero_out, s), 0.4, rtol=1e-6)
    big = jax.tree_util.tree_map(lambda x: 50.0 * x, params)
    beta = net.apply(big, 10 * s)
    assert bool(jnp.all((beta >= 0) & (beta <= 0.6)))
    paths = [(jax.tree_util.keystr(p), x) for p, x in jax.tree_util.tree_leaves_with_path(params)]
    hidden_biases = [x for p, x in paths if "bias" in p and "out" not in p]
    assert len(hidden_biases) == 3 and all(bool(jnp.all(b == 0)) for b in hidden_biases)


def test_critics_are_two_layernorm_mlps_and_the_actor_is_bounded():
    s, a = _batch()
    critic = ssar.TwinCritic()
    cp = critic.init(KEY, s, a)
    assert critic.apply(cp, s, a).shape == (2, B)
    assert set(cp["params"]) == {"q1", "q2"}
    layers = {"Dense_0", "LayerNorm_0", "Dense_1", "LayerNorm_1", "Dense_2"}
    assert set(cp["params"]["q1"]) == layers
    actor = ssar.Actor(A_DIM, max_action=1.0)
    ap = actor.init(KEY, s)
    out = actor.apply(jax.tree_util.tree_map(lambda x: 100 * x, ap), s)
    assert out.shape == (B, A_DIM) and float(jnp.max(jnp.abs(out))) <= 1.0


def test_frozen_beta_reduces_the_actor_loss_to_td3bc_over_alpha():
    s, a = _batch(1)
    actor, critic = ssar.Actor(A_DIM), ssar.TwinCritic()
    ap, cp = actor.init(jax.random.key(2), s), critic.init(jax.random.key(3), s, a)
    alpha = 2.5
    w = (jnp.arange(B) % 3 == 0).astype(jnp.float32)  # ignored: loosen = 0

    def ssar_loss(p):
        pi = actor.apply(p, s)
        beta_t = ssar.td3bc.coefficient_weights(jnp.full((B,), 1 / alpha), w, 0.0)
        return ssar.td3bc.actor_loss(pi, a, critic.apply(cp, s, pi)[0], beta_t)

    def td3bc_over_alpha(p):  # the original TD3+BC loss (Fujimoto & Gu), divided by alpha
        pi = actor.apply(p, s)
        q = critic.apply(cp, s, pi)[0]
        lam = alpha / jax.lax.stop_gradient(jnp.abs(q).mean())
        return (-lam * q.mean() + jnp.mean((pi - a) ** 2)) / alpha

    np.testing.assert_allclose(ssar_loss(ap), td3bc_over_alpha(ap), rtol=1e-6)
    g1, g2 = jax.grad(ssar_loss)(ap), jax.grad(td3bc_over_alpha)(ap)
    jax.tree_util.tree_map(lambda x, y: np.testing.assert_allclose(x, y, atol=1e-6), g1, g2)


def test_the_coefficient_falls_inside_the_bound_rises_outside_and_ignores_untrusted_rows():
    import optax

    s, a = _batch(4)
    net = ssar.BetaNet(beta0=0.4)
    params = net.init(KEY, s)
    opt = optax.adam(1e-3)
    w = (jnp.arange(B) < B // 2).astype(jnp.float32)

    def one_step(pi):
        slack = ssar.td3bc.constraint_slack(pi, a, n=1.0)
        loss = lambda p: ssar.td3bc.beta_loss(net.apply(p, s), slack, w, 1.0)  # noqa: E731
        grads = jax.grad(loss)(params)
        updates, _ = opt.update(grads, opt.init(params))
        return slack, net.apply(optax.apply_updates(params, updates), s) - net.apply(params, s)

    slack, change = one_step(a)  # pi(s) = a: d = 0 < C_1 = 0.01, slack > 0: beta falls
    np.testing.assert_allclose(slack, 0.01, rtol=1e-5)
    assert float(change[w > 0].mean()) < 0
    slack, change = one_step(a + 1.0)  # |pi - a| = 1: d = 1
    np.testing.assert_allclose(slack, 0.01 - 1.0, rtol=1e-5)
    assert float(change[w > 0].mean()) > 0
    # per-row: untrusted rows get exactly zero gradient through beta (select = 1)
    g = jax.grad(lambda beta: ssar.td3bc.beta_loss(beta, slack, w, 1.0))(jnp.ones(B))
    np.testing.assert_array_equal(g[w == 0], 0.0)
    np.testing.assert_allclose(g[w > 0], slack[w > 0] / B, rtol=1e-6)
    g_all = jax.grad(lambda beta: ssar.td3bc.beta_loss(beta, slack, w, 0.0))(jnp.ones(B))
    np.testing.assert_allclose(g_all, slack / B, rtol=1e-6)  # select = 0: every row


def test_the_slack_clips_each_dimension_at_one():
    pi, a = jnp.zeros((1, 2)), jnp.array([[3.0, 0.5]])
    np.testing.assert_allclose(
        ssar.td3bc.constraint_slack(pi, a, n=2.0), [0.04 - (1.0 + 0.25) / 2], rtol=1e-6
    )


def test_threshold_schedule_rises_by_delta_then_freezes_for_good():
    n, frozen = jnp.float32(1.0), jnp.bool_(False)
    slacks = [-0.1, -0.2, -0.05, 0.3, -1.0, -1.0]  # three periods outside, then inside, then out
    history = []
    for sl in slacks:
        n, frozen = ssar.td3bc.threshold_step(n, frozen, jnp.float32(sl), 1.0, 3.0)
        history.append(float(n))
    np.testing.assert_allclose(history, [1.2, 1.4, 1.6, 1.6, 1.6, 1.6], rtol=1e-6)
    n = jnp.float32(1.0)
    for _ in range(15):  # never above n_end
        n, _ = ssar.td3bc.threshold_step(n, jnp.bool_(False), jnp.float32(-1.0), 1.0, 3.0)
    np.testing.assert_allclose(n, 3.0, rtol=1e-6)


def test_td_target_on_a_two_state_toy():
    q_next = jnp.array([[1.0, 4.0], [2.0, 3.0]])  # [2 critics, B = 2]
    y = ssar.td3bc.td_target(q_next, jnp.array([0.5, -1.0]), jnp.array([0.0, 1.0]), 0.9)
    np.testing.assert_allclose(y, [0.5 + 0.9 * 1.0, -1.0], rtol=1e-6)
    a = ssar.td3bc.smoothed_target_action(KEY, jnp.full((1000, 1), 0.9))
    assert float(a.max()) <= 1.0 and float(jnp.abs(a - 0.9).max()) <= 0.5 + 1e-6


# --------------------------------------------------------------------------- the trainer

TINY = ssar.TD3BCConfig(steps=40, batch=32, hidden=(8, 8), beta_hidden=(8, 8, 8),
                        update_frac=0.25, beta_lr_budget=40 * 1e-3)  # fmt: skip


@functools.cache
def tiny_trainer():
    data = d_re()
    return ssar.make_trainer(TINY, data, ssar.traj_trust(data, -400.0), jax.random.key(9), 2)


@functools.cache
def _jit_step():
    return jax.jit(tiny_trainer().step)


def _runs():
    return [ssar.td3bc_run(2.5), ssar.ssar_run(TINY)]


def test_baseline_run_keeps_beta_frozen_and_ssar_moves_it():
    trainer, step = tiny_trainer(), _jit_step()
    for run, moves in zip(_runs(), (False, True), strict=True):
        state = trainer.init(jax.random.key(4), run)
        beta0 = state.beta
        for _ in range(10):
            state, metrics = step(state)
        assert bool(metrics["finite"])
        same = jax.tree_util.tree_all(
            jax.tree_util.tree_map(lambda a, b: bool(jnp.array_equal(a, b)), state.beta, beta0)
        )
        assert same != moves
        if not moves:  # the baseline's coefficient is exactly 1 / alpha on every row
            np.testing.assert_allclose(metrics["beta_trusted"], 0.4, rtol=1e-6)
            np.testing.assert_allclose(state.n, TINY.n_start)


def test_scan_equals_the_host_loop_and_is_deterministic():
    from jaxlab.core.training import scan_steps

    trainer, step = tiny_trainer(), _jit_step()
    state0 = trainer.init(jax.random.key(5), ssar.ssar_run(TINY))
    host = state0
    for _ in range(20):
        host, _ = step(host)
    scanned, metrics = jax.jit(lambda s: scan_steps(trainer.step, s, 20))(state0)
    jax.tree_util.tree_map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), host.actor,
        scanned.actor)  # fmt: skip
    again, metrics2 = jax.jit(lambda s: scan_steps(trainer.step, s, 20))(state0)
    np.testing.assert_array_equal(metrics["critic_loss"], metrics2["critic_loss"])
    assert metrics["n"].shape == (20,)


def test_runs_vmap_into_one_program_equal_to_separate_runs():
    trainer, step = tiny_trainer(), _jit_step()
    runs = ssar.RunSpec(*(jnp.stack(v) for v in zip(*_runs(), strict=True)))
    keys = jax.random.split(jax.random.key(6), 2)
    batched = jax.vmap(trainer.init)(keys, runs)
    batched, metrics = jax.jit(jax.vmap(trainer.step))(batched)
    for i, run in enumerate(_runs()):
        single, m = step(trainer.init(keys[i], run))
        np.testing.assert_allclose(metrics["actor_loss"][i], m["actor_loss"], rtol=1e-5)
    returns = jax.jit(jax.vmap(trainer.evaluate))(batched)
    assert returns.shape == (2, 2) and bool(jnp.all(jnp.isfinite(returns)))


def test_trainer_bad_input():
    trainer = tiny_trainer()
    with pytest.raises(ValueError, match="`steps` must be >= 1"):
        ssar.TD3BCConfig(steps=0)
    with pytest.raises(ValueError, match="`gamma` must lie in"):
        ssar.TD3BCConfig(gamma=1.0)
    with pytest.raises(ValueError, match="`n_end` must lie in"):
        ssar.TD3BCConfig(n_start=2.0, n_end=1.0)
    with pytest.raises(ValueError, match="`trust` must have shape"):
        ssar.make_trainer(TINY, d_re(), jnp.ones(5), KEY)
    with pytest.raises(ValueError, match="`key` must be a PRNG key"):
        trainer.init(0, ssar.td3bc_run())
    with pytest.raises(TypeError, match="`run` must be a RunSpec"):
        trainer.init(KEY, (2.5, 0, 0, 0))
    with pytest.raises(ValueError, match="`alpha` must lie in"):
        ssar.td3bc_run(-1.0)
    state = trainer.init(KEY, ssar.td3bc_run())
    with pytest.raises(ValueError, match="`x` must have shape"):
        trainer.step(state, x=jnp.zeros(3, jnp.int32))
    with pytest.raises(TypeError, match="`x` must be an array of int"):
        trainer.step(state, x=jnp.zeros(TINY.batch))
    with pytest.raises(ValueError, match=r"`x` row indices must lie in \[0, "):
        trainer.step(state, x=jnp.full(TINY.batch, 10**6, jnp.int32))
    with pytest.raises(ValueError, match="`trust` marks no transition"):
        ssar.make_trainer(TINY, d_re(), jnp.zeros(d_re().obs.shape[0]), KEY).init_runs(
            KEY, ssar.stack_runs([ssar.td3bc_run(), ssar.ssar_run(TINY)]))  # fmt: skip
    # a baseline does not select, so an all-zero mask is allowed there
    ssar.make_trainer(TINY, d_re(), jnp.zeros(d_re().obs.shape[0]), KEY).init(KEY, ssar.td3bc_run())


def test_host_chosen_rows_equal_the_trainers_own_draw():
    trainer, step = tiny_trainer(), _jit_step()
    state = trainer.init(jax.random.key(8), ssar.ssar_run(TINY))
    k_idx, _ = jax.random.split(jax.random.fold_in(state.key, state.step))
    idx = jax.random.randint(k_idx, (TINY.batch,), 0, d_re().obs.shape[0])
    _, m_own = step(state)
    _, m_given = jax.jit(trainer.step)(state, idx)
    # The two calls are separately compiled programs (rows gathered inside vs given), so XLA may
    # fuse the same arithmetic differently: equal up to float32 rounding (one ULP seen on AMD EPYC).
    for k in m_own:
        np.testing.assert_allclose(m_own[k], m_given[k], rtol=1e-6, atol=1e-7, err_msg=k)
    # other rows give another update, far outside that tolerance
    _, m_other = jax.jit(trainer.step)(state, (idx + 1) % d_re().obs.shape[0])
    assert not np.isclose(float(m_other["critic_loss"]), float(m_own["critic_loss"]), rtol=1e-3)


# --------------------------------------------------------------------------- the iql trust mask


def test_expectile_minimiser_is_the_mean_at_half_and_tends_to_the_max():
    q = jnp.array([0.0, 1.0, 2.0, 7.0])
    grid = jnp.linspace(-1.0, 8.0, 9001)
    loss = lambda tau: jax.vmap(lambda v: ssar.expectile_loss(q - v, tau))(grid)  # noqa: E731
    np.testing.assert_allclose(grid[jnp.argmin(loss(0.5))], q.mean(), atol=2e-3)
    assert float(grid[jnp.argmin(loss(0.99))]) > 6.0
    # tau = 0.5 is half the mean squared error
    np.testing.assert_allclose(ssar.expectile_loss(q - 1.0, 0.5), 0.5 * jnp.mean((q - 1.0) ** 2))


def test_iql_trust_ranks_the_graded_episodes():
    data = ssar.make_dataset(KEY, "D-graded")  # 20 episodes each of eps = 1, .75, .5, .25, 0
    w = np.asarray(ssar.iql_trust(jax.random.key(1), data, tau=0.7, steps=8000, batch=64))
    assert set(np.unique(w)) <= {0.0, 1.0}
    per_part = w.reshape(5, -1).mean(1)
    assert per_part[-1] > per_part[0] + 0.3, per_part  # expert rows trusted far more than random
    with pytest.raises(ValueError, match="`tau` must lie in"):
        ssar.iql_trust(KEY, data, tau=1.0)


def test_sharded_runs_equal_unsharded_runs():
    from jaxlab.core import sharding
    from jaxlab.core.training import scan_steps

    mesh = sharding.data_mesh(jax.devices()[:4])
    data = d_re()
    sharded = ssar.make_trainer(TINY, data, ssar.traj_trust(data, -400.0), jax.random.key(9), 2,
                                mesh=mesh)  # fmt: skip
    runs = ssar.stack_runs(_runs() * 2)
    st_s, st_u = sharded.init_runs(KEY, runs), tiny_trainer().init_runs(KEY, runs)
    leaf = jax.tree_util.tree_leaves(st_s.actor)[0]
    assert len(leaf.sharding.device_set) == 4 and leaf.addressable_shards[0].data.shape[0] == 1
    go = jax.jit(jax.vmap(lambda s: scan_steps(tiny_trainer().step, s, 3)))
    (out_s, m_s), (out_u, m_u) = go(st_s), go(st_u)
    np.testing.assert_allclose(m_s["actor_loss"], m_u["actor_loss"], rtol=1e-5, atol=1e-6)
    for a, b in zip(jax.tree_util.tree_leaves(out_s.critic),
                    jax.tree_util.tree_leaves(out_u.critic), strict=True):  # fmt: skip
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="`runs` has batch size 3"):
        sharded.init_runs(KEY, ssar.stack_runs(_runs() + _runs()[:1]))

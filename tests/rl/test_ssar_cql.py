"""CQL(+SSAR) pieces of issue 24: the tanh-Gaussian density against its closed form, the n-sigma
log-density's bounds, the CQL gap against NumPy, and a CQL baseline run keeping beta at
cql_alpha while CQL+SSAR moves it (tiny widths, a few steps)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.rl import ssar
from jaxlab.rl.ssar import cql


def _closed_form_log_prob(a, mean, log_std):
    x = np.arctanh(a.astype(np.float64))
    std = np.exp(log_std.astype(np.float64))
    log_n = -0.5 * ((x - mean) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)
    return log_n - np.log1p(-(a.astype(np.float64) ** 2))


def test_tanh_gaussian_density_matches_the_closed_form():
    rng = np.random.default_rng(0)
    mean, log_std = rng.normal(size=(5, 2)).astype(np.float32), rng.uniform(-2, 0.5, (5, 2))
    log_std = log_std.astype(np.float32)
    a = rng.uniform(-0.99, 0.99, (5, 2)).astype(np.float32)
    got = ssar.tanh_gaussian(jnp.asarray(mean), jnp.asarray(log_std)).log_prob(jnp.asarray(a))
    np.testing.assert_allclose(np.asarray(got), _closed_form_log_prob(a, mean, log_std),
                               rtol=1e-5, atol=1e-5)  # fmt: skip
    # reparameterised samples: their log-prob (through the intermediates) equals the closed form
    _, lp = cql._sample(jax.random.key(1), jnp.asarray(mean), jnp.asarray(log_std))
    assert lp.shape == (5,)


def test_n_sigma_log_density_is_below_the_mode_and_falls_with_n():
    mean = jnp.asarray([[0.3], [-0.5], [0.0]])
    log_std = jnp.asarray([[-1.5], [-1.0], [-2.0]])
    d = ssar.tanh_gaussian(mean, log_std)
    mode = d.log_prob(jnp.tanh(mean))
    ls = [cql.log_prob_away_from_mean(mean, log_std, n) for n in (0.5, 1.0, 2.0, 3.0)]
    for lo in ls:
        assert bool(jnp.all(lo <= mode + 1e-6))
    for a, b in zip(ls, ls[1:], strict=False):
        assert bool(jnp.all(b < a))


def test_the_width_clamp_binds_at_large_sigma():
    mean, log_std = jnp.zeros((1, 1)), jnp.full((1, 1), 1.5)  # sigma 4.5: tanh(+-n sigma) ~ +-1
    n = 1.0
    d = ssar.tanh_gaussian(mean, log_std)
    expect = jnp.minimum(d.log_prob(jnp.full((1, 1), 0.1 * n)), d.log_prob(jnp.full((1, 1), -0.1)))
    np.testing.assert_allclose(cql.log_prob_away_from_mean(mean, log_std, n), expect, rtol=1e-6)


def test_cql_gap_with_q_constant_in_the_action_matches_numpy():
    rng = np.random.default_rng(2)
    b, k, a_dim = 4, 10, 1
    q_s = rng.normal(size=(2, b)).astype(np.float32)  # Q depends on s only
    lp_c = rng.normal(size=(b, k)).astype(np.float32)
    lp_n = rng.normal(size=(b, k)).astype(np.float32)
    q_k = np.broadcast_to(q_s[..., None], (2, b, k))
    got = cql.cql_gap(jnp.asarray(q_s), jnp.asarray(q_k), jnp.asarray(q_k), jnp.asarray(q_k),
                      jnp.asarray(lp_c), jnp.asarray(lp_n), a_dim)  # fmt: skip
    cat = np.concatenate([np.full((b, k), a_dim * np.log(2.0)), -lp_n, -lp_c], -1)  # [B, 30]
    lse = np.log(np.exp(cat.astype(np.float64)).sum(-1))
    np.testing.assert_allclose(np.asarray(got), np.broadcast_to(lse, (2, b)), rtol=1e-5)
    # the data action holding the minimum Q gives a non-negative gap (no IS terms)
    zeros = jnp.zeros((b, k))
    q_hi = jnp.asarray(q_k) + 1.0
    assert bool(jnp.all(cql.cql_gap(jnp.asarray(q_s), q_hi, q_hi, q_hi, zeros, zeros, 0) >= 0))


def test_bad_config_and_runs_name_the_argument():
    with pytest.raises(ValueError, match="cql_alpha"):
        ssar.cql_run(0.0)
    with pytest.raises(ValueError, match="n_end"):
        ssar.CQLConfig(n_start=2.0, n_end=1.0)
    with pytest.raises(ValueError, match="n_actions"):
        ssar.CQLConfig(n_actions=0)


CFG = ssar.CQLConfig(steps=4, batch=16, hidden=(8, 8, 8), beta_hidden=(8, 8, 8), n_actions=3,
                     beta_lr_budget=4e3)  # fmt: skip


@functools.cache
def _setup():
    data = ssar.make_dataset(jax.random.key(0), "D-re")
    w = ssar.traj_trust(data, -400.0)
    return data, w, ssar.make_cql_trainer(CFG, data, w, jax.random.key(1), eval_episodes=1)


def test_cql_trainer_bad_input_names_the_argument():
    data, w, tr = _setup()
    key = jax.random.key(0)
    with pytest.raises(TypeError, match="`config` must be"):
        ssar.make_cql_trainer(ssar.TD3BCConfig(), data, w, key)
    with pytest.raises(ValueError, match="`trust` must have shape"):
        ssar.make_cql_trainer(CFG, data, w[:5], key)
    with pytest.raises(TypeError, match="`mesh` must be"):
        ssar.make_cql_trainer(CFG, data, w, key, mesh="cpu")
    with pytest.raises(ValueError, match="`eval_episodes` must be >= 1"):
        ssar.make_cql_trainer(CFG, data, w, key, eval_episodes=0)
    with pytest.raises(ValueError, match="`trust` marks no transition"):
        ssar.make_cql_trainer(CFG, data, jnp.zeros_like(w), key).init(key, ssar.cql_ssar_run(CFG))
    with pytest.raises(TypeError, match="`run` must be a RunSpec"):
        tr.init(key, (5.0, 1.0, 1.0, 1.0))
    state = tr.init(key, ssar.cql_run())
    with pytest.raises(ValueError, match="`x` must have shape"):
        tr.step(state, jnp.zeros(3, jnp.int32))
    with pytest.raises(TypeError, match="`state` must be a CQLState"):
        tr.evaluate(object())
    with pytest.raises(TypeError, match="`state` must be a CQLState"):
        tr.slack(object())


def test_cql_baseline_keeps_beta_at_cql_alpha_and_cql_ssar_moves_it():
    _, _, tr = _setup()
    cfg = CFG
    runs = ssar.stack_runs([ssar.cql_run(cfg.cql_alpha), ssar.cql_ssar_run(cfg)])
    st0 = tr.init_runs(jax.random.key(2), runs)
    step = jax.jit(jax.vmap(tr.step))
    st, m0 = step(st0)
    st, m1 = step(st)
    assert bool(jnp.all(m1["finite"]))
    beta = np.asarray([m0["beta_trusted"], m1["beta_trusted"]])
    np.testing.assert_array_equal(beta[:, 0], [5.0, 5.0])  # the baseline: frozen at cql_alpha
    assert abs(beta[1, 1] - beta[0, 1]) > 1e-4  # CQL+SSAR: beta trained
    assert jax.tree_util.tree_all(jax.tree_util.tree_map(
        lambda a, b: bool(jnp.all(a[0] == b[0])), st.beta, st0.beta))  # fmt: skip
    assert np.asarray(jax.vmap(tr.evaluate)(st)).shape == (2, 1)
    assert np.isfinite(np.asarray(jax.vmap(tr.q_overestimation)(st))).all()

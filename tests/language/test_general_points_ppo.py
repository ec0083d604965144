"""general_points PPO: the rollout's layout and its log-probabilities against a full forward (ratio
1 at the first epoch), GAE against hand computations, the clipped surrogate's gradient (zero where
clipped; finite differences in float64), the FLOP counters, sharded == unsharded."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.language.general_points import cards as C
from jaxlab.language.general_points import flops as F
from jaxlab.language.general_points import ppo as P
from jaxlab.language.general_points import tokens as T
from jaxlab.language.general_points import verifier as V
from jaxlab.language.general_points.model import ModelConfig, make_policy
from tests.helpers import assert_compiles_once

MC = ModelConfig(d_model=16, num_layers=2, num_heads=2, d_mlp=32, value_hidden=(8,))
E, VITER, TAU = 8, 2, 0.7


@functools.cache
def setup():
    policy = make_policy(MC)
    params = policy.init(jax.random.key(0))
    ranks = C.sample_id_hands(jax.random.key(1), E)
    return policy, params, ranks


@functools.cache
def _rollout_fn(greedy=False):
    policy, _, _ = setup()
    face = jnp.asarray(T.rule_values("id"))
    return jax.jit(
        lambda p, tables, r, k: P.rollout(
            policy, p, tables, r, face, k, viter=VITER, temperature=TAU, greedy=greedy
        )  # fmt: skip
    )


@functools.cache
def sampled():
    _, params, ranks = setup()
    return _rollout_fn()(params, C.device_tables(), ranks, jax.random.key(2))


def test_rollout_layout_and_feedback():
    ro = sampled()
    tok = np.asarray(ro.tokens)
    assert tok.shape == (E, P.sequence_length(VITER))
    _, _, ranks = setup()
    np.testing.assert_array_equal(tok[:, :15], np.asarray(T.gp_prompt(ranks, (10, 10, 10)))[:, :15])
    f = np.asarray(P.feed_positions(VITER))
    assert (tok[:, f[0]] == T.GP).all()  # the last prompt token emits the first attempt
    for a in range(VITER):
        np.testing.assert_array_equal(tok[:, f[a] + 1 : f[a] + 15], np.asarray(ro.response[:, a]))
    # the second attempt follows the first one's feedback token (untrained: nothing succeeds)
    valid, kind = np.asarray(ro.valid), np.asarray(ro.kind)
    assert valid.all() and not np.asarray(ro.success).any()
    np.testing.assert_array_equal(tok[:, f[1]], V.FEEDBACK[kind[:, 0]])
    # rewards are the verifier's on the stored responses
    want = V.verify(np.asarray(ro.numbers), np.asarray(ro.response[:, 0])).reward
    np.testing.assert_array_equal(np.asarray(ro.reward[:, 0]), np.asarray(want))
    # PAD only after EOS (never sampled)
    resp = np.asarray(ro.response)
    for row in resp.reshape(-1, T.RESPONSE_LEN):
        pads = np.flatnonzero(row == T.PAD)
        if len(pads):
            assert (row[: pads[0]] == T.EOS).any() and (row[pads[0] :] == T.PAD).all()


def test_first_epoch_ratio_is_one():
    policy, params, _ = setup()
    ro = sampled()
    logp, value = jax.jit(lambda p, t, r: P.evaluate_actions(policy, p, t, r, temperature=TAU))(
        params, ro.tokens, ro.response
    )
    np.testing.assert_allclose(np.asarray(logp), np.asarray(ro.logp), atol=2e-4, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(value), np.asarray(ro.value), atol=1e-5)
    # at temperature 1 the stored log-probabilities would differ: tau enters both places
    logp1, _ = P.evaluate_actions(policy, params, ro.tokens, ro.response, temperature=1.0)
    assert np.abs(np.asarray(logp1) - np.asarray(ro.logp)).max() > 1e-2


def test_gae_hand_computations():
    g, lam = 0.9, 0.95
    r = jnp.array([[2.0, 0.0, 0.0], [-1.0, -3.0, 5.0], [1.0, 5.0, 0.0]])
    v = jnp.array([[0.5, 9.0, 9.0], [0.2, -0.4, 1.0], [0.3, 0.6, 7.0]])
    valid = jnp.array([[True, False, False], [True, True, True], [True, True, False]])
    adv, ret = P.gae(r, v, valid, g, lam)
    adv = np.asarray(adv)
    assert adv[0, 0] == pytest.approx(2.0 - 0.5)  # one-step episode: r - V
    d2 = 5.0 - 1.0
    d1 = -3.0 + g * 1.0 - (-0.4)
    d0 = -1.0 + g * (-0.4) - 0.2
    a2, a1 = d2, d1 + g * lam * d2
    np.testing.assert_allclose(adv[1], [d0 + g * lam * a1, a1, a2], rtol=1e-6)
    e1 = 5.0 - 0.6  # success at the second attempt ends the episode
    np.testing.assert_allclose(adv[2], [1.0 + g * 0.6 - 0.3 + g * lam * e1, e1, 0.0], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ret), np.where(valid, adv + np.asarray(v), 0), rtol=1e-6)
    n = np.asarray(P.normalize(jnp.asarray(adv), valid))[np.asarray(valid)]
    assert n.mean() == pytest.approx(0, abs=1e-6) and n.std(ddof=1) == pytest.approx(1, abs=1e-4)


def _batch(ro, adv, old_shift=0.0):
    ret = ro.value + adv
    return P.Batch(ro.tokens, ro.response, ro.valid, ro.logp - old_shift, ro.value, adv, ret)


def test_clipped_surrogate_has_zero_gradient_beyond_the_clip():
    policy, params, _ = setup()
    ro = sampled()
    adv = jnp.ones_like(ro.reward)
    kw = dict(temperature=TAU, thought_coef=0.5, clip_eps=0.1, value_coef=0.0)

    @jax.jit
    def grad_norm(shift):
        g = jax.grad(lambda p: P.ppo_loss(policy, p, _batch(ro, adv, shift), **kw)[0])(params)
        return jnp.sqrt(sum(jnp.sum(x**2) for x in jax.tree_util.tree_leaves(g["lm"])))

    assert float(grad_norm(np.log(1.5))) == 0.0  # ratio 1.5 > 1 + eps, A > 0: clipped, no gradient
    assert float(grad_norm(0.0)) > 1e-3  # ratio 1: the surrogate's gradient


def test_surrogate_gradient_matches_finite_differences_in_float64():
    policy, params, _ = setup()
    ro = sampled()
    with jax.enable_x64(True):
        p64 = jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float64), params)
        adv = jnp.asarray(np.linspace(-1, 1, ro.reward.size).reshape(ro.reward.shape))
        batch = jax.tree_util.tree_map(
            lambda x: x.astype(jnp.float64) if jnp.issubdtype(x.dtype, jnp.floating) else x,
            _batch(ro, adv, 0.03),
        )
        kw = dict(temperature=TAU, thought_coef=0.5, clip_eps=0.1, value_coef=0.5)
        loss = jax.jit(lambda p: P.ppo_loss(policy, p, batch, **kw)[0])
        grads = jax.jit(jax.grad(lambda p: P.ppo_loss(policy, p, batch, **kw)[0]))(p64)
        rng = np.random.default_rng(0)
        u = jax.tree_util.tree_map(lambda x: jnp.asarray(rng.normal(size=x.shape)), p64)
        norm = np.sqrt(sum(float(jnp.sum(x**2)) for x in jax.tree_util.tree_leaves(u)))
        u = jax.tree_util.tree_map(lambda x: x / norm, u)  # a unit direction
        h = 1e-6
        shift = lambda s: jax.tree_util.tree_map(lambda x, d: x + s * d, p64, u)  # noqa: E731
        fd = (float(loss(shift(h))) - float(loss(shift(-h)))) / (2 * h)
        leaves = zip(jax.tree_util.tree_leaves(grads), jax.tree_util.tree_leaves(u), strict=True)
        an = sum(float(jnp.sum(g * d)) for g, d in leaves)
        assert fd == pytest.approx(an, rel=1e-6, abs=1e-9)


def test_flop_counters():
    policy, params, _ = setup()
    kernels = [
        x.size
        for path, x in jax.tree_util.tree_leaves_with_path(params)
        if "kernel" in jax.tree_util.keystr(path)
    ]
    n = F.matmul_params(MC)
    assert n == sum(kernels)  # every matmul weight, the embedding table excluded
    assert F.training_flops(MC, 10) == 60 * n and F.inference_flops(MC, 10) == 20 * n
    assert F.ppo_update_flops(MC, 10, 4) == (20 + 4 * 60) * n


def test_ppo_step_sharded_equals_unsharded_and_traces_once(mesh):
    policy, params, _ = setup()
    cfg = P.PPOConfig(updates=2, episodes=16, viter=1, minibatches=4, epochs=1)
    plain, sharded = P.make_ppo(MC, cfg), P.make_ppo(MC, cfg, mesh=mesh)
    state = plain.init(jax.random.key(3), params)
    step_a, step_b = jax.jit(plain.step), jax.jit(sharded.step)
    a, ma = step_a(state)
    b, mb = step_b(state)
    for k in ("reward", "success", "pg_loss", "value_loss"):
        np.testing.assert_allclose(float(ma[k]), float(mb[k]), rtol=1e-4, atol=1e-5)
    for x, y in zip(jax.tree_util.tree_leaves(a.train.params),
                    jax.tree_util.tree_leaves(b.train.params), strict=True):  # fmt: skip
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-5)
    assert bool(ma["finite"]) and int(a.train.step) == 1
    assert_compiles_once(step_a, [(state,), (a,)], name="ppo.step")

"""The general_points_rl benchmark times equal work: its per-episode Python rollout gives the
library's jitted rollout (greedy: the same tokens, rewards, log-probabilities and values), its
Python GAE the library's, and its minibatch-1 update runs to finite parameters."""

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import general_points_rl as bench
from jaxlab.language import general_points as G
from jaxlab.language.general_points import ppo as P
from jaxlab.language.general_points import tokens as T


def test_python_loop_equals_the_jitted_rollout_and_gae():
    ppo, state = bench.setup(8)
    ranks = np.asarray(G.sample_id_hands(jax.random.key(5), 4, "train"))
    params = state.train.params
    face = jnp.asarray(T.rule_values("id"))
    kw = dict(viter=1, temperature=0.7, greedy=True)
    roll = jax.jit(
        lambda p, r: P.rollout(ppo.policy, p, state.tables, r, face, jax.random.key(0), **kw)
    )
    ro = roll(params, ranks)
    loop = bench.loop_rollout(ppo, params, ranks, np.random.default_rng(0), greedy=True)
    np.testing.assert_array_equal(loop["response"], np.asarray(ro.response))
    np.testing.assert_array_equal(loop["tokens"], np.asarray(ro.tokens))
    np.testing.assert_array_equal(loop["reward"], np.asarray(ro.reward))
    np.testing.assert_allclose(loop["logp"], np.asarray(ro.logp), atol=1e-4)
    np.testing.assert_allclose(loop["value"], np.asarray(ro.value), atol=1e-5)
    rng = np.random.default_rng(1)
    r, v = rng.normal(size=(5, 3)), rng.normal(size=(5, 3))
    adv, ret = bench.python_gae(r, v, 0.9, 0.95)
    want, want_ret = P.gae(jnp.asarray(r), jnp.asarray(v), jnp.ones((5, 3), bool), 0.9, 0.95)
    np.testing.assert_allclose(adv, np.asarray(want), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ret, np.asarray(want_ret), rtol=1e-5, atol=1e-6)
    new = bench.loop_update(ppo, state.train, loop, np.random.default_rng(2))
    leaves = jax.tree_util.tree_leaves(new)
    assert all(np.isfinite(np.asarray(x)).all() for x in leaves)
    assert any(
        np.abs(np.asarray(a) - np.asarray(b)).max() > 0
        for a, b in zip(leaves, jax.tree_util.tree_leaves(params), strict=True)
    )


def test_verifier_rows_score_equal_work():
    nums, resp = bench._attempts(64)
    ref = np.array([G.verify_reference(n, r)[0] for n, r in zip(nums, resp, strict=True)])
    np.testing.assert_array_equal(np.asarray(G.verify(nums, resp).reward), ref)
    assert (ref == 5.0).any() and (ref < 0).any()

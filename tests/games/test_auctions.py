"""jaxlab.games.auctions: closed forms, KDE, the aBR step, sharding and input errors."""

import dataclasses
import functools
from typing import NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.sharding import data_mesh
from jaxlab.games import auctions as A
from tests.helpers import assert_compiles_once

# Budget: every check below runs inside one jitted program per (game, config) or per test; the
# learners and their jitted init / estimate are cached per module (``compiled``), so the gate,
# sharding and one-step tests share them. Eager ``jnp`` work would compile one program per op.


def power_market(k: int, top: float):
    """Market price = max of k iid U[0, top] bids: G(b) = (b/top)^k, with g and g'."""
    G = lambda b: jnp.clip(b / top, 0.0, 1.0) ** k
    g = lambda b: k * jnp.clip(b / top, 0.0, 1.0) ** (k - 1) / top
    dg = lambda b: k * (k - 1) * jnp.clip(b / top, 0.0, 1.0) ** (k - 2) / top**2
    return G, g, dg


def exact_derivs(mechanism, b, v, rho, G, g, dg):
    return A.interim_derivatives(mechanism, b, v, G(b), g(b), dg(b), rho)


# ----------------------------------------------------------------------------- closed forms


@functools.partial(jax.jit, static_argnums=(0, 1))
def _closed_form_and_autodiff(mechanism, rho, b, v):
    """Closed-form u', u'' and autodiff of the exact interim utility at the pairs (b_i, v_i)."""
    G, g, dg = power_market(3, 0.9)
    u = lambda bb, vv: A.interim_utility(mechanism, bb, vv, G, g, rho)
    u1, u2 = exact_derivs(mechanism, b, v, rho, G, g, dg)
    return u1, u2, jax.vmap(jax.grad(u))(b, v), jax.vmap(jax.grad(jax.grad(u)))(b, v)


@pytest.mark.parametrize("mechanism", A.MECHANISMS)
@pytest.mark.parametrize("rho", [1.0, 0.5])
def test_closed_form_derivatives_match_autodiff_of_interim_utility(mechanism, rho):
    rng = np.random.default_rng(0)
    vs, bs = [], []
    for _ in range(6):
        v = float(rng.uniform(0.3, 1.0))
        # b < v keeps the SP quadrature integrand smooth; all-pay/FP also probe b > v when neutral
        hi = v - 0.05 if (mechanism == "sp" or rho < 1) else 0.85
        vs.append(v)
        bs.append(float(rng.uniform(0.05, hi)))
    b, v = np.asarray(bs, np.float32), np.asarray(vs, np.float32)
    u1, u2, d1, d2 = _closed_form_and_autodiff(mechanism, rho, b, v)
    np.testing.assert_allclose(u1, d1, rtol=2e-3, atol=2e-4)
    np.testing.assert_allclose(u2, d2, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("n", [2, 5, 10])
def test_fp_bne_is_stationary_with_known_curvature(n):
    # Others at the BNE b = (n-1)v/n: market G(b) = (n b/(n-1))^(n-1).
    G, g, dg = power_market(n - 1, (n - 1) / n)
    v = jnp.linspace(0.2, 1.0, 9)
    u1, u2 = jax.jit(lambda v: exact_derivs("fp", A.symmetric_bne("fp", n)(v), v, 1.0, G, g, dg))(v)
    np.testing.assert_allclose(u1, 0.0, atol=1e-5)
    np.testing.assert_allclose(u2, -(n**2) * v ** (n - 2) / (n - 1), rtol=1e-4)


def test_sp_truthful_bid_is_stationary_for_any_market():
    G, g, dg = power_market(4, 0.7)
    v = jnp.linspace(0.1, 0.65, 7)
    u1s = jax.jit(lambda v: [exact_derivs("sp", v, v, rho, G, g, dg)[0] for rho in (1.0, 0.5)])
    for u1 in u1s(v):
        np.testing.assert_allclose(u1, 0.0, atol=1e-7)


@jax.jit
def _risk_averse_first_order_conditions():
    n, rho = 6, 0.5
    v = jnp.linspace(0.2, 1.0, 9)
    top = (n - 1) / (n - 1 + rho)
    fp_u1, _ = exact_derivs(
        "fp", A.symmetric_bne("fp", n, rho)(v), v, rho, *power_market(n - 1, top)
    )
    # all-pay: others bid (n-1)v^n/n, so G(b) = (n b/(n-1))^((n-1)/n).
    n = 4
    G = lambda b: (n * b / (n - 1)) ** ((n - 1) / n)
    g = jax.vmap(jax.grad(G))
    dg = jax.vmap(jax.grad(jax.grad(G)))
    b_star = A.symmetric_bne("allpay", n)(v)
    ap_u1, ap_u2 = A.interim_derivatives("allpay", b_star, v, G(b_star), g(b_star), dg(b_star))
    return fp_u1, ap_u1, ap_u2


def test_risk_averse_fp_and_allpay_bne_satisfy_their_first_order_conditions():
    fp_u1, ap_u1, ap_u2 = _risk_averse_first_order_conditions()
    np.testing.assert_allclose(fp_u1, 0.0, atol=1e-5)
    np.testing.assert_allclose(ap_u1, 0.0, atol=1e-4)
    assert bool(jnp.all(ap_u2 < 0))


def test_asymmetric_fp_bne_pair_is_mutual_best_response():
    weak_top, strong_top = 0.5, 1.0
    weak, strong = A.asymmetric_fp_bne(weak_top, strong_top)
    k = 1 / weak_top**2 - 1 / strong_top**2

    def market_of(kk, top):  # opponent plays beta_kk with values U[0, top]: invert the bid
        G = lambda b: jnp.clip(2 * b / (1 + kk * b**2) / top, 0.0, 1.0)
        return G, jax.vmap(jax.grad(G)), jax.vmap(jax.grad(jax.grad(G)))

    @jax.jit
    def first_order_conditions():
        u1s = []
        for own, own_top, (G, g, dg) in (
            (weak, weak_top, market_of(-k, strong_top)),  # weak faces the strong bidder
            (strong, strong_top, market_of(k, weak_top)),
        ):
            v = jnp.linspace(0.1, 0.95, 8) * own_top
            b = own(v)
            u1s.append(A.interim_derivatives("fp", b, v, G(b), g(b), dg(b))[0])
        return weak(jnp.float32(weak_top)), strong(jnp.float32(strong_top)), u1s

    top_weak, top_strong, u1s = first_order_conditions()
    np.testing.assert_allclose(top_weak, top_strong, 1e-5)  # both top out at the same bid
    for u1 in u1s:
        np.testing.assert_allclose(u1, 0.0, atol=1e-4)


def test_newton_step_lands_quadratically_close_to_the_bne():
    n, v = 5, jnp.float32(0.8)
    G, g, dg = power_market(n - 1, (n - 1) / n)
    b_star = A.symmetric_bne("fp", n)(v)
    for delta in (0.01, 0.005):
        b = b_star + delta
        u1, u2 = exact_derivs("fp", b, v, 1.0, G, g, dg)
        assert abs(float(b - u1 / u2 - b_star)) < 5 * delta**2


def test_l2_closed_forms():
    n = 4
    bne = A.symmetric_bne("fp", n)
    assert float(A.l2_distance(bne, bne, 0.0, 1.0)) == 0.0
    truthful = float(A.l2_distance(lambda v: v, bne, 0.0, 1.0))
    assert truthful == pytest.approx((1 / n) / np.sqrt(3), rel=1e-3)


def test_grid_utility_loss_is_small_at_the_bne_and_large_for_truthful_fp(key):
    n = 3
    bne = A.symmetric_bne("fp", n)

    @jax.jit
    def losses(key):
        others = jax.random.uniform(key, (50_000, n - 1))
        market = jnp.max(bne(others), axis=1)
        truthful_market = jnp.max(others, axis=1)
        return (
            A.grid_utility_loss("fp", bne, market, 0.0, 1.0),
            A.grid_utility_loss("fp", lambda v: v, truthful_market, 0.0, 1.0),
            A.grid_utility_loss("sp", lambda v: v, truthful_market, 0.0, 1.0),
        )

    at_bne, truthful, sp = (float(x) for x in losses(key))
    assert 0.0 <= at_bne < 2e-3
    assert truthful > 0.02  # bidding your value in FP wins nothing: a best response gains a lot
    assert 0.0 <= sp < 2e-3  # truthful is the SP equilibrium


# ----------------------------------------------------------------------------- KDE


def test_kde_matches_a_known_market_and_is_consistent(key):
    bids = jnp.linspace(0.3, 0.7, 9)
    h = 0.05

    @jax.jit
    def estimates(key):
        market = jnp.max(jax.random.uniform(key, (100_000, 2)), axis=1)  # G = b^2, g = 2b, g' = 2
        stats = A.kde_market_stats(bids, market, h, chunk_size=8192)
        g_of = lambda b: A.kde_market_stats(b[None], market, h)[1][0]
        grid = jnp.linspace(-0.2, 1.2, 200)
        return stats, jax.vmap(jax.grad(g_of))(bids), A.kde_market_stats(grid, market, h)

    (G, g, dg), dg_auto, (G_all, g_all, _) = estimates(key)
    np.testing.assert_allclose(G, bids**2, atol=0.01)
    np.testing.assert_allclose(g, 2 * bids, atol=0.06)
    np.testing.assert_allclose(dg, 2.0, atol=0.6)
    # dg is exactly the derivative of g; G is nondecreasing; g >= 0
    np.testing.assert_allclose(dg, dg_auto, rtol=1e-3, atol=1e-3)
    assert bool(jnp.all(jnp.diff(G_all) >= -1e-6)) and bool(jnp.all(g_all >= 0))


def test_kde_chunking_does_not_change_the_estimate(key):
    sizes = (1000, 3000, 100_000)  # several chunks with a padded last one; one chunk (K > S)

    @jax.jit
    def estimates(key):
        market = jax.random.uniform(key, (10_000,))
        bids = jnp.linspace(0.0, 1.0, 33)
        full = A.kde_market_stats(bids, market, 0.05, chunk_size=10_000)
        return full, [A.kde_market_stats(bids, market, 0.05, chunk_size=c) for c in sizes]

    full, chunked = estimates(key)
    for size, stats in zip(sizes, chunked, strict=True):
        for a, b in zip(full, stats, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=f"chunk {size}")


class KdeVariantsTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_jit_equals_no_jit(self):
        market = jax.random.uniform(jax.random.key(0), (5000,))
        bids = jnp.linspace(0.0, 1.0, 16)
        fn = self.variant(lambda b, m: A.kde_market_stats(b, m, 0.05, 1024))
        expected = jax.jit(lambda b, m: A.kde_market_stats(b, m, 0.05, 5000))(bids, market)
        for a, b in zip(fn(bids, market), expected, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_smoothed_derivatives_match_finite_differences(key):
    temp, eps = 0.05, 1e-2
    bids, values = np.array([0.3, 0.5, 0.7]), np.array([0.6, 0.9, 0.8])
    # central differences at b - eps, b, b + eps (offsets formed in float64, as Python floats)
    probes = np.stack([bids - eps, bids, bids + eps], 1).astype(np.float32)  # [3, 3]

    @jax.jit
    def derivatives_and_fd(key):
        others = jax.random.uniform(key, (4000, 3)) * 0.8
        soft = temp * jax.nn.logsumexp(others / temp, axis=1)
        hard = jnp.max(others, axis=1)
        out = {}
        for mech in A.MECHANISMS:
            b32, v32 = jnp.asarray(bids, jnp.float32), jnp.asarray(values, jnp.float32)
            u1, u2 = A.smoothed_derivatives(mech, b32, v32, soft, hard, temp, chunk_size=1500)
            mean_u = lambda b, v: jnp.mean(  # noqa: B023 (used inside this iteration)
                A.smoothed_ex_post_utility(mech, b, v, soft, hard, temp)  # noqa: B023
            )
            u = jax.vmap(jax.vmap(mean_u, (0, None)))(probes, v32)  # [3 bids, 3 offsets]
            out[mech] = (u1, u2, u)
        return out

    for mech, (u1, u2, u) in derivatives_and_fd(key).items():
        u = np.asarray(u, np.float32)
        fd1 = (u[:, 2] - u[:, 0]) / (2 * eps)
        fd2 = (u[:, 2] - 2 * u[:, 1] + u[:, 0]) / eps**2
        np.testing.assert_allclose(u1, fd1, rtol=0.02, atol=2e-3, err_msg=mech)
        np.testing.assert_allclose(u2, fd2, rtol=0.05, atol=0.05, err_msg=mech)


# ----------------------------------------------------------------------------- learner


def small_config(**kw):
    base = dict(ante_samples=64, market_samples=2048, chunk_size=1024)
    return A.LearnerConfig(**{**base, **kw})


class Compiled(NamedTuple):
    learner: A.Learner
    init: object  # jax.jit(learner.init)
    estimate: object  # jax.jit(learner.estimate)
    bids: object  # jax.jit: (params, values [T, V]) -> bids [T, V]


@functools.cache
def compiled(game, cfg, mesh=None) -> Compiled:
    """One learner and its jitted pieces per (game, config, mesh), shared by every test here."""
    learner = A.make_learner(game, cfg, mesh)
    bids = jax.jit(lambda params, values: jax.vmap(learner.net.apply)(params, values))
    return Compiled(learner, jax.jit(learner.init), jax.jit(learner.estimate), bids)


GAME3 = A.AuctionGame("fp", (3,))
# the gate and one-step tests share these (learning rate and warm-up as the one-step test needs)
ABR3 = small_config(method="abr", init_steps=10, learning_rate=0.01)
UG3 = small_config(method="ug", init_steps=10, learning_rate=0.01)


def linear_bne_params(learner, game, scale=1.0):
    """Network parameters that represent ``scale`` x the FP BNE (n-1)v/n (one ReLU path).

    Built in NumPy from the parameter shapes (no init program runs)."""
    n = game.n_bidders
    shapes = jax.eval_shape(learner.init, jax.random.key(0)).params
    params = jax.tree_util.tree_map(lambda s: np.zeros(s.shape, s.dtype), shapes)
    for name, entry in (("Dense_0", 1.0), ("Dense_1", 1.0), ("Dense_2", scale * (n - 1) / n)):
        params["params"][name]["kernel"][:, 0, 0] = entry
    return jax.tree_util.tree_map(jnp.asarray, params)


def test_bid_network_is_the_core_mlp_with_torch_init_at_its_own_level(key):
    net = A.BidNet(hidden=(8, 4), output="abs")
    p = jax.jit(net.init)(key, jnp.zeros((1,)))["params"]
    assert sorted(p) == ["Dense_0", "Dense_1", "Dense_2"]  # no MLP level in the path
    for name, fan_in in (("Dense_0", 1), ("Dense_1", 8), ("Dense_2", 4)):
        for leaf in (p[name]["kernel"], p[name]["bias"]):  # PyTorch default: U(+-1/sqrt(fan_in))
            assert np.abs(leaf).max() <= 1 / np.sqrt(fan_in)
        assert np.any(np.asarray(p[name]["bias"]) != 0)
    v = np.linspace(0.0, 1.0, 5, dtype=np.float32)
    w = jax.tree_util.tree_map(np.asarray, p)
    h = np.maximum(v[:, None] @ w["Dense_0"]["kernel"] + w["Dense_0"]["bias"], 0)
    h = np.maximum(h @ w["Dense_1"]["kernel"] + w["Dense_1"]["bias"], 0)
    raw = (h @ w["Dense_2"]["kernel"] + w["Dense_2"]["bias"])[:, 0]
    outputs = {"abs": np.abs, "relu": lambda x: np.maximum(x, 0), "exp": np.exp}
    apply_all = jax.jit(
        lambda p, v: {o: A.BidNet(hidden=(8, 4), output=o).apply({"params": p}, v) for o in outputs}
    )
    for output, out in apply_all(p, v).items():
        np.testing.assert_allclose(out, outputs[output](raw), rtol=1e-5, atol=1e-6)


def test_bid_network_can_represent_the_bne():
    game = A.AuctionGame("fp", (4,))
    learner = compiled(game, small_config()).learner
    params = linear_bne_params(learner, game)
    l2 = jax.jit(lambda p: A.l2_distance(learner.bid_fn(p, 0), game.bne()[0], 0.0, 1.0))
    assert float(l2(params)) < 1e-6
    # and the distance sees a wrong strategy: 10% overbidding is 0.1 * RMS(3v/4) = 0.075/sqrt(3)
    over = float(l2(linear_bne_params(learner, game, scale=1.1)))
    assert over == pytest.approx(0.075 / np.sqrt(3), rel=1e-3)


def test_gate_respects_warm_up_and_thresholds():
    abr, ug = compiled(GAME3, ABR3), compiled(GAME3, UG3)
    params = abr.init(jax.random.key(1)).params
    key = jax.random.key(2)
    before = abr.estimate(params, key, jnp.int32(9))
    assert not bool(before.gate.any())
    np.testing.assert_allclose(before.bid_grad, -before.u1)
    after = abr.estimate(params, key, jnp.int32(10))
    expected = (after.u2 < -ABR3.curvature_tol) & (jnp.abs(after.u1) < ABR3.first_order_tol)
    np.testing.assert_array_equal(after.gate, expected)
    grad = jnp.where(after.gate, after.u1 / after.u2, -after.u1)
    np.testing.assert_allclose(after.bid_grad, grad, rtol=1e-6)
    assert not bool(ug.estimate(params, key, jnp.int32(500)).gate.any())


def _fp_kde_utility(bids, values, market, h):
    G, _, _ = A.kde_market_stats(bids, market, h)
    return jnp.mean((values - bids) * G)


@functools.cache
def _jit_step(game, cfg):
    return jax.jit(compiled(game, cfg).learner.step)


def test_ug_step_increases_utility_and_abr_step_decreases_brd():
    import optax

    for cfg in (UG3, ABR3):
        c = compiled(GAME3, cfg)
        learner, step = c.learner, _jit_step(GAME3, cfg)
        state = c.init(jax.random.key(3))
        if cfg.method == "abr":  # near the BNE (overbidding by 3%), where the Newton gate opens
            params = linear_bne_params(learner, GAME3, scale=1.03)
            state = state.replace(params=params, opt_state=optax.sgd(0.01).init(params))
        for _ in range(30):  # aBR: 10 UG warm-up steps, then 20 aBR steps
            state, _ = step(state)
        # the hot step traces once: the 30 calls above, then two more states of the same shapes
        (new_state, _), _ = assert_compiles_once(
            step, [(state,), (c.init(jax.random.key(30)),)], name=f"{cfg.method} step"
        )
        assert step._cache_size() == 1, f"{cfg.method} step retraced over the 30 steps"
        assert int(new_state.step) == 31
        key = jax.random.fold_in(state.key, state.step)
        est = c.estimate(state.params, key, state.step)
        new_bids = c.bids(new_state.params, est.values)[0]
        if cfg.method == "ug":
            market = jax.jit(learner.sample_market)(state.params, jax.random.split(key)[0])[0]
            utility = jax.jit(functools.partial(_fp_kde_utility, h=cfg.bandwidth))
            old_u = utility(est.bids[0], est.values[0], market)
            new_u = utility(new_bids, est.values[0], market)
            assert float(new_u) > float(old_u)
        else:
            # The aBR objective: BRD 1/2 (b - sg[b_BR])^2 where the gate is open, the UG
            # surrogate -u' b elsewhere. One small step must decrease it.
            b0, u1, u2, gated = (np.asarray(a[0], np.float64) for a in est[1:5])
            gated = gated.astype(bool)
            target = b0 - np.where(gated, u1 / u2, 0.0)
            assert int(gated.sum()) > 10

            def objective(b):
                return np.sum(np.where(gated, 0.5 * (b - target) ** 2, -u1 * b))

            assert objective(np.asarray(new_bids, np.float64)) < objective(b0)


def test_abr_started_at_the_bne_stays_there():
    import optax

    game = A.AuctionGame("fp", (2,))
    cfg = small_config(method="abr", init_steps=0, bandwidth=0.02, market_samples=8192)
    c = compiled(game, cfg)
    params = linear_bne_params(c.learner, game)
    state = c.init(jax.random.key(4))
    state = state.replace(params=params, opt_state=optax.sgd(cfg.learning_rate).init(params))
    run = jax.jit(
        lambda s: A.l2_distance(
            c.learner.bid_fn(jax.lax.scan(c.learner.step, s, None, 100)[0].params, 0),
            game.bne()[0], 0.0, 1.0,
        )
    )  # fmt: skip
    assert float(run(state)) < 0.02


def test_learning_is_deterministic_and_vmaps_over_seeds():
    game = A.AuctionGame("fp", (2,))
    learner = compiled(game, small_config(method="abr", init_steps=5)).learner
    run = lambda key: jax.lax.scan(learner.step, learner.init(key), None, 10)[1]["mean_abs_u1"]
    keys = jax.random.split(jax.random.key(7), 3)
    batched_run = jax.jit(jax.vmap(run))
    # one compiled program for new keys of the same shape (the vmapped whole run traces once)
    batched, permuted, fresh = assert_compiles_once(
        batched_run, [(keys,), (keys[::-1],), (jax.random.split(jax.random.key(8), 3),)]
    )
    single_run = jax.jit(run)
    for i in range(3):
        np.testing.assert_allclose(batched[i], single_run(keys[i]), rtol=1e-5, atol=1e-7)
    # each seed's run depends on its own key only: permuting the keys permutes the runs
    np.testing.assert_allclose(permuted, batched[::-1], rtol=1e-6, atol=1e-8)
    assert not np.allclose(fresh, batched)  # and the runs do depend on the key
    assert not np.allclose(batched[0], batched[1])


def test_sharded_gradient_estimate_equals_unsharded(mesh):
    plain, sharded = compiled(GAME3, ABR3), compiled(GAME3, ABR3, mesh)
    params = plain.init(jax.random.key(5)).params
    key, step = jax.random.key(6), jnp.int32(12)  # past the warm-up: the gate can open
    a = plain.estimate(params, key, step)
    b = sharded.estimate(params, key, step)
    for x, y in zip(a, b, strict=True):  # same numbers; only the reduction order differs
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)
    assert b.u1.sharding.spec[1] == "data" or not b.u1.sharding.is_fully_replicated


def test_asymmetric_learner_updates_both_types():
    game = A.AuctionGame("fp", (1, 1), ((0.0, 0.5), (0.0, 1.0)))
    learner = A.make_learner(game, small_config(method="ug", learning_rate=0.2))

    @jax.jit
    def init_step_market(key):
        state = learner.init(key)
        new, metrics = learner.step(state)  # x defaults to None
        return state, new, metrics, learner.sample_market(state.params, jax.random.key(9))

    state, new, metrics, market = init_step_market(jax.random.key(8))
    assert state.step.shape == () and int(state.step) == 0
    assert int(new.step) == 1
    assert set(metrics) == {"abr_fraction", "mean_abs_u1", "brd", "finite"}
    assert bool(metrics["finite"])
    assert float(metrics["abr_fraction"]) == 0.0 and float(metrics["brd"]) == 0.0  # UG: no gate
    moved = jax.tree_util.tree_map(
        lambda a, b: np.abs(np.asarray(a) - np.asarray(b)).max(axis=tuple(range(1, a.ndim))),
        new.params, state.params,
    )  # fmt: skip
    per_type = sum(jax.tree_util.tree_leaves(moved))
    assert per_type.shape == (2,) and bool(np.all(per_type > 0))
    assert market.shape == (2, 2048)


def test_bad_input_raises_clear_errors():
    with pytest.raises(ValueError, match="n >= 2"):
        A.AuctionGame("fp", (1,))
    with pytest.raises(ValueError, match="`mechanism` must be one of"):
        A.AuctionGame("dutch", (2,))
    with pytest.raises(ValueError, match="`bandwidth` must be > 0"):
        A.LearnerConfig(bandwidth=0.0)
    with pytest.raises(ValueError, match="`bandwidth` must be > 0"):
        A.kde_market_stats(np.zeros(3), np.zeros(5), -0.1)
    with pytest.raises(ValueError, match="`value_ranges` needs 0 <= low < high"):
        A.AuctionGame("fp", (2,), ((-0.5, 1.0),))
    with pytest.raises(ValueError, match="values outside"):
        A.l2_distance(lambda v: v, lambda v: v, -1.0, 1.0)
    with pytest.raises(ValueError, match="`n_bidders` must be >= 2"):
        A.symmetric_bne("fp", 1)
    with pytest.raises(ValueError, match="`risk_aversion`"):
        A.AuctionGame("fp", (2,), risk_aversion=1.5)
    with pytest.raises(ValueError, match="`method` must be"):
        A.LearnerConfig(method="newton")
    with pytest.raises(ValueError, match="not a multiple"):  # raised while tracing
        game = A.AuctionGame("fp", (2,))
        sharded = A.make_learner(game, small_config(ante_samples=62), mesh=data_mesh())
        params = jax.eval_shape(sharded.init, jax.random.key(0)).params
        jax.eval_shape(sharded.estimate, params, jax.random.key(0), jnp.int32(0))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("estimator", "histogram"),
        ("output", "softplus"),
        ("learning_rate", 0.0),
        ("temperature", -1.0),
        ("first_order_tol", 0.0),
        ("curvature_tol", -1e-3),
        ("newton_clip", 0.0),
        ("ante_samples", 0),
        ("market_samples", 100.5),
        ("chunk_size", 0),
        ("forward_batch", 0),
        ("init_steps", -1),
        ("hidden", (32, 0)),
        ("ante_bidders", "some"),
        ("kde_bins_per_bandwidth", 0.0),
    ],
)
def test_learner_config_errors_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"`{field}`"):
        A.LearnerConfig(**{field: value})


def test_game_errors_name_the_field_and_lists_become_tuples():
    with pytest.raises(ValueError, match="`bidders_per_type`"):
        A.AuctionGame("fp", (2, 0), ((0.0, 1.0), (0.0, 1.0)))
    with pytest.raises(ValueError, match="`bidders_per_type` has 2 types but `value_ranges`"):
        A.AuctionGame("fp", (1, 1))
    with pytest.raises(ValueError, match="`value_ranges` must be"):
        A.AuctionGame("fp", (2,), ((0.0, 0.5, 1.0),))
    game = A.AuctionGame("fp", [1, 1], [[0.0, 0.5], [0.0, 1.0]])
    assert game.bidders_per_type == (1, 1) and game.value_ranges == ((0.0, 0.5), (0.0, 1.0))
    hash(game)
    assert A.LearnerConfig(hidden=[16]).hidden == (16,)


def test_config_is_hashable_and_frozen():
    cfg = small_config()
    hash(cfg)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.bandwidth = 0.1  # type: ignore[misc]


def test_product_estimator_matches_a_known_product_market(key):
    # Opponents: two iid U[0, 0.8] bidders and one U[0, 1] bidder: G(b) = (b/0.8)^2 * b.
    bids = jnp.linspace(0.3, 0.6, 7)
    exact = lambda b: (b / 0.8) ** 2 * b

    @jax.jit
    def estimates(key):
        k1, k2 = jax.random.split(key)
        columns = jnp.stack(
            [jax.random.uniform(k1, (100_000,)) * 0.8, jax.random.uniform(k2, (100_000,))]
        )
        stats = A.product_market_stats(bids, columns, (2, 1), 0.03, chunk_size=20_000)
        G_of = lambda b: A.product_market_stats(b[None], columns, (2, 1), 0.03, 20_000)[0][0]
        return (stats, jax.vmap(jax.grad(exact))(bids), jax.vmap(jax.grad(G_of))(bids),
                jax.vmap(jax.grad(jax.grad(G_of)))(bids), columns)  # fmt: skip

    (G, g, dg), g_exact, g_auto, dg_auto, columns = estimates(key)
    np.testing.assert_allclose(G, exact(bids), atol=0.01)
    np.testing.assert_allclose(g, g_exact, atol=0.08)
    # g and g' are the derivatives of the estimated G (product rule done right)
    np.testing.assert_allclose(g, g_auto, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(dg, dg_auto, rtol=1e-2, atol=1e-2)
    with pytest.raises(ValueError, match="`opponent_bids` must be"):
        A.product_market_stats(bids, columns, (2,), 0.03)


# ------------------------------------------------------------------------ every-bidder protocol


KNOT_CASES = (((32, 32), 0.0, 1.0), ((32, 32), 0.2, 0.7), ((8,), 0.0, 1.0))  # hidden, range


@jax.jit
def _knots_and_forward(key):
    """Per case: the knots, their interpolation and the network's raw output at 20k values."""
    out = []
    for i, (hidden, lo, hi) in enumerate(KNOT_CASES):
        net = A.BidNet(hidden=hidden)
        k_init, k_val = jax.random.split(jax.random.fold_in(key, i))
        params = net.init(k_init, jnp.zeros((1,)))
        values = jax.random.uniform(k_val, (20_000,), minval=lo, maxval=hi)
        knots, raw = A.bid_knots(net, params, lo, hi)
        forward = net.apply(params, values, method=A.BidNet.raw)
        out.append((knots, A.eval_knots(knots, raw, values), forward))
    return out


def test_bid_knots_reproduce_the_relu_network(key):
    for (knots, interp, forward), (hidden, lo, hi) in zip(
        _knots_and_forward(key), KNOT_CASES, strict=True
    ):
        h1 = hidden[0]
        size = h1 + 2 + ((h1 + 1) * hidden[1] if len(hidden) == 2 else 0)
        assert knots.shape == (size,)
        knots = np.asarray(knots)
        assert knots[0] == np.float32(lo) and np.all(np.diff(knots) >= 0) and knots[-1] <= hi
        # exact up to float rounding (without the layer-2 bends the error is 5e-4 to 3e-3 here)
        np.testing.assert_allclose(interp, forward, atol=2e-6 * (1 + np.abs(forward).max()))
    with pytest.raises(ValueError, match="1 or 2 hidden layers"):
        net = A.BidNet(hidden=(4, 4, 4))
        A.bid_knots(net, net.init(key, jnp.zeros((1,))), 0.0, 1.0)


def test_eval_knots_is_exact_for_clustered_knots_and_any_cell_count():
    """The cell table changes the time, never the interval: np.interp is the reference, with
    20 knots packed into one cell, padding at the upper end, values on knots and cell edges."""
    rng = np.random.default_rng(0)
    lo, hi = 0.2, 0.9
    inner = np.concatenate([rng.uniform(lo, hi, 30), 0.5 + 1e-4 * np.arange(20)])
    real = np.sort(np.concatenate([[lo], inner, [hi]])).astype(np.float32)
    raw_real = rng.normal(size=real.size).astype(np.float32)
    knots = np.concatenate([real, np.full(17, hi, np.float32)])  # padding slots hold `upper`
    raw = np.concatenate([raw_real, np.full(17, raw_real[-1], np.float32)])
    edges = lo + (hi - lo) * np.arange(64) / 64
    values = np.concatenate([rng.uniform(lo, hi, 5000), real, edges, [lo, hi]]).astype(np.float32)
    expected = np.interp(values.astype(np.float64), real, raw_real)
    for cells in (1, 3, 64, 2048):
        got = jax.jit(A.eval_knots, static_argnums=3)(knots, raw, values, cells)
        np.testing.assert_allclose(got, expected, atol=2e-6, err_msg=f"cells={cells}")


@jax.jit
def _binned_and_exact(key):
    market = 0.9 * jnp.max(jax.random.uniform(key, (10_000, 9)), axis=1)
    bids = jnp.linspace(0.0, 1.0, 257)
    out = {}
    for h in (0.02, 0.1):
        exact = A.kde_market_stats(bids, market, h)
        binned = [A.binned_kde_market_stats(bids, market, h, int(np.ceil(r / h)) + 1, r)
                  for r in (8.0, 16.0)]  # fmt: skip
        out[h] = (exact, binned)
    coarse = A.binned_kde_market_stats(jnp.array([-1.0, 10.0]), market, 0.02, 20, 16.0)
    # the windowed sum (the default at small h) against the full-grid sum, bids off the grid too
    wide = jnp.concatenate([bids, jnp.array([-0.5, 0.001, 0.95, 1.5])])
    window = {h: [A.binned_kde_market_stats(wide, market, h, int(np.ceil(16 / h)) + 1, 16.0,
                                            reach=r) for r in (6.0, None)]
              for h in (0.01, 0.02)}  # fmt: skip
    return out, coarse, window


def test_binned_kde_converges_to_the_exact_kde_at_second_order(key):
    out, coarse, window = _binned_and_exact(key)
    for h, (exact, (b8, b16)) in out.items():
        for name, e, x8, x16 in zip(("G", "g", "dg"), exact, b8, b16, strict=True):
            scale = float(np.abs(e).max())
            err8, err16 = (float(np.abs(x - e).max()) / scale for x in (x8, x16))
            assert err16 < 1e-3, (h, name, err16)  # far below a 10^4-sample KDE's MC error
            # linear binning is second order in the spacing: halving it quarters the error
            assert 3.0 < err8 / err16 < 5.0, (h, name, err8, err16)
    # a grid too small for the span widens its spacing: the binned weights still sum to S
    np.testing.assert_allclose(coarse[0], [0.0, 1.0], atol=1e-6)
    for h, (windowed, full) in window.items():  # float rounding apart (terms beyond 6h < 2e-8)
        for name, x, y in zip(("G", "g", "dg"), windowed, full, strict=True):
            scale = float(np.abs(y).max())
            np.testing.assert_allclose(x, y, atol=1e-5 * scale, err_msg=f"h={h} {name}")
        np.testing.assert_allclose(windowed[0][-4:], [0.0, 0.0, full[0][-2], 1.0], atol=1e-6)
    with pytest.raises(ValueError, match="`reach`"):
        A.binned_kde_market_stats(jnp.zeros(2), jnp.zeros(3), 0.1, 4, reach=0.0)
    with pytest.raises(ValueError, match="`grid_size`"):
        A.binned_kde_market_stats(jnp.zeros(2), jnp.zeros(3), 0.1, 1)


ALL3 = small_config(ante_bidders="all", ante_samples=16, market_samples=512, init_steps=0)


@jax.jit
def _every_bidder_reference(params, key):
    """Every bidder's u', u'' from first principles, with the learner's key splits."""
    net = A.BidNet()
    p0 = jax.tree_util.tree_map(lambda p: p[0], params)
    k_market, k_ante = jax.random.split(key)
    values = jax.random.uniform(k_ante, (3, ALL3.ante_samples))
    market_bids = net.apply(p0, jax.random.uniform(k_market, (ALL3.market_samples, 3)))
    rows = []
    for i in range(3):
        market = jnp.max(jnp.stack([market_bids[:, j] for j in range(3) if j != i], 1), 1)
        bids = net.apply(p0, values[i])
        stats = A.kde_market_stats(bids, market, ALL3.bandwidth)
        rows.append(A.interim_derivatives("fp", bids, values[i], *stats))
    return values, jnp.stack([r[0] for r in rows]), jnp.stack([r[1] for r in rows])


def test_every_bidder_estimate_matches_a_per_bidder_reference(key):
    exact = compiled(GAME3, ALL3)
    fast = compiled(GAME3, dataclasses.replace(ALL3, piecewise_market=True,
                                               kde_bins_per_bandwidth=16.0))  # fmt: skip
    params = exact.init(key).params
    k = jax.random.key(11)
    values, u1, u2 = _every_bidder_reference(params, k)
    est = exact.estimate(params, k, jnp.int32(5))
    assert est.u1.shape == (3, ALL3.ante_samples)  # one row per bidder, not per type
    np.testing.assert_allclose(est.values, values)
    np.testing.assert_allclose(est.u1, u1, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(est.u2, u2, rtol=1e-4, atol=1e-4)
    quick = fast.estimate(params, k, jnp.int32(5))  # breakpoints + binning: the same numbers
    np.testing.assert_allclose(quick.u1, u1, atol=2e-3 * float(np.abs(u1).max()))
    np.testing.assert_allclose(quick.u2, u2, atol=2e-3 * float(np.abs(u2).max()))
    # the parameter gradient is the mean over all 3 x 16 samples of dL/db db/dtheta
    grads, est = jax.jit(exact.learner.gradient)(params, k, jnp.int32(5))
    net = exact.learner.net

    def surrogate(p):  # the single type's network at every bidder's values
        bids = net.apply(jax.tree_util.tree_map(lambda x: x[0], p), est.values)
        return jnp.sum(est.bid_grad * bids) / (3 * ALL3.ante_samples)

    ref = jax.jit(jax.grad(surrogate))(params)
    chex.assert_trees_all_close(grads, ref, rtol=1e-5, atol=1e-7)


def test_every_bidder_options_reject_what_they_do_not_support():
    with pytest.raises(ValueError, match="`ante_bidders='all'` needs `estimator='kde'`"):
        A.LearnerConfig(ante_bidders="all", estimator="smooth")
    with pytest.raises(ValueError, match="`kde_bins_per_bandwidth` applies"):
        A.LearnerConfig(kde_bins_per_bandwidth=16.0, estimator="product_kde")
    with pytest.raises(ValueError, match="`piecewise_market` needs 1 or 2"):
        A.LearnerConfig(piecewise_market=True, hidden=(4, 4, 4))

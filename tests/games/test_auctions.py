"""jaxlab.games.auctions: closed forms, KDE, the aBR step, sharding and input errors."""

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.sharding import data_mesh
from jaxlab.games import auctions as A


def power_market(k: int, top: float):
    """Market price = max of k iid U[0, top] bids: G(b) = (b/top)^k, with g and g'."""
    G = lambda b: jnp.clip(b / top, 0.0, 1.0) ** k
    g = lambda b: k * jnp.clip(b / top, 0.0, 1.0) ** (k - 1) / top
    dg = lambda b: k * (k - 1) * jnp.clip(b / top, 0.0, 1.0) ** (k - 2) / top**2
    return G, g, dg


def exact_derivs(mechanism, b, v, rho, G, g, dg):
    return A.interim_derivatives(mechanism, b, v, G(b), g(b), dg(b), rho)


# ----------------------------------------------------------------------------- closed forms


@pytest.mark.parametrize("mechanism", A.MECHANISMS)
@pytest.mark.parametrize("rho", [1.0, 0.5])
def test_closed_form_derivatives_match_autodiff_of_interim_utility(mechanism, rho):
    G, g, dg = power_market(3, 0.9)
    rng = np.random.default_rng(0)
    for _ in range(6):
        v = float(rng.uniform(0.3, 1.0))
        # b < v keeps the SP quadrature integrand smooth; all-pay/FP also probe b > v when neutral
        hi = v - 0.05 if (mechanism == "sp" or rho < 1) else 0.85
        b = float(rng.uniform(0.05, hi))
        u = lambda bb: A.interim_utility(mechanism, bb, v, G, g, rho)
        u1, u2 = exact_derivs(mechanism, jnp.float32(b), jnp.float32(v), rho, G, g, dg)
        np.testing.assert_allclose(u1, jax.grad(u)(b), rtol=2e-3, atol=2e-4)
        np.testing.assert_allclose(u2, jax.grad(jax.grad(u))(b), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("n", [2, 5, 10])
def test_fp_bne_is_stationary_with_known_curvature(n):
    # Others at the BNE b = (n-1)v/n: market G(b) = (n b/(n-1))^(n-1).
    G, g, dg = power_market(n - 1, (n - 1) / n)
    v = jnp.linspace(0.2, 1.0, 9)
    b_star = A.symmetric_bne("fp", n)(v)
    u1, u2 = exact_derivs("fp", b_star, v, 1.0, G, g, dg)
    np.testing.assert_allclose(u1, 0.0, atol=1e-5)
    np.testing.assert_allclose(u2, -(n**2) * v ** (n - 2) / (n - 1), rtol=1e-4)


def test_sp_truthful_bid_is_stationary_for_any_market():
    G, g, dg = power_market(4, 0.7)
    v = jnp.linspace(0.1, 0.65, 7)
    for rho in (1.0, 0.5):
        u1, _ = exact_derivs("sp", v, v, rho, G, g, dg)
        np.testing.assert_allclose(u1, 0.0, atol=1e-7)


def test_risk_averse_fp_and_allpay_bne_satisfy_their_first_order_conditions():
    n, rho = 6, 0.5
    v = jnp.linspace(0.2, 1.0, 9)
    top = (n - 1) / (n - 1 + rho)
    u1, _ = exact_derivs("fp", A.symmetric_bne("fp", n, rho)(v), v, rho, *power_market(n - 1, top))
    np.testing.assert_allclose(u1, 0.0, atol=1e-5)
    # all-pay: others bid (n-1)v^n/n, so G(b) = (n b/(n-1))^((n-1)/n).
    n = 4
    G = lambda b: (n * b / (n - 1)) ** ((n - 1) / n)
    g = jax.vmap(jax.grad(G))
    dg = jax.vmap(jax.grad(jax.grad(G)))
    b_star = A.symmetric_bne("allpay", n)(v)
    u1, u2 = A.interim_derivatives("allpay", b_star, v, G(b_star), g(b_star), dg(b_star))
    np.testing.assert_allclose(u1, 0.0, atol=1e-4)
    assert bool(jnp.all(u2 < 0))


def test_asymmetric_fp_bne_pair_is_mutual_best_response():
    weak_top, strong_top = 0.5, 1.0
    weak, strong = A.asymmetric_fp_bne(weak_top, strong_top)
    np.testing.assert_allclose(weak(jnp.float32(weak_top)), strong(jnp.float32(strong_top)), 1e-5)
    k = 1 / weak_top**2 - 1 / strong_top**2

    def market_of(kk, top):  # opponent plays beta_kk with values U[0, top]: invert the bid
        G = lambda b: jnp.clip(2 * b / (1 + kk * b**2) / top, 0.0, 1.0)
        return G, jax.vmap(jax.grad(G)), jax.vmap(jax.grad(jax.grad(G)))

    for own, own_top, (G, g, dg) in (
        (weak, weak_top, market_of(-k, strong_top)),  # weak faces the strong bidder
        (strong, strong_top, market_of(k, weak_top)),
    ):
        v = jnp.linspace(0.1, 0.95, 8) * own_top
        b = own(v)
        u1, _ = A.interim_derivatives("fp", b, v, G(b), g(b), dg(b))
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
    others = jax.random.uniform(key, (50_000, n - 1))
    bne = A.symmetric_bne("fp", n)
    market = jnp.max(bne(others), axis=1)
    at_bne = float(A.grid_utility_loss("fp", bne, market, 0.0, 1.0))
    truthful = float(A.grid_utility_loss("fp", lambda v: v, jnp.max(others, axis=1), 0.0, 1.0))
    assert 0.0 <= at_bne < 2e-3
    assert truthful > 0.02  # bidding your value in FP wins nothing: a best response gains a lot
    sp = float(A.grid_utility_loss("sp", lambda v: v, jnp.max(others, axis=1), 0.0, 1.0))
    assert 0.0 <= sp < 2e-3  # truthful is the SP equilibrium


# ----------------------------------------------------------------------------- KDE


def test_kde_matches_a_known_market_and_is_consistent(key):
    market = jnp.max(jax.random.uniform(key, (100_000, 2)), axis=1)  # G = b^2, g = 2b, g' = 2
    bids = jnp.linspace(0.3, 0.7, 9)
    h = 0.05
    G, g, dg = A.kde_market_stats(bids, market, h, chunk_size=8192)
    np.testing.assert_allclose(G, bids**2, atol=0.01)
    np.testing.assert_allclose(g, 2 * bids, atol=0.06)
    np.testing.assert_allclose(dg, 2.0, atol=0.6)
    # dg is exactly the derivative of g; G is nondecreasing; g >= 0
    dg_auto = jax.vmap(jax.grad(lambda b: A.kde_market_stats(b[None], market, h)[1][0]))(bids)
    np.testing.assert_allclose(dg, dg_auto, rtol=1e-3, atol=1e-3)
    grid = jnp.linspace(-0.2, 1.2, 200)
    G_all, g_all, _ = A.kde_market_stats(grid, market, h)
    assert bool(jnp.all(jnp.diff(G_all) >= -1e-6)) and bool(jnp.all(g_all >= 0))


@pytest.mark.parametrize("chunk_size", [1000, 3000, 100_000])
def test_kde_chunking_does_not_change_the_estimate(key, chunk_size):
    market = jax.random.uniform(key, (10_000,))
    bids = jnp.linspace(0.0, 1.0, 33)
    full = A.kde_market_stats(bids, market, 0.05, chunk_size=10_000)
    chunked = A.kde_market_stats(bids, market, 0.05, chunk_size=chunk_size)
    for a, b in zip(full, chunked, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


class KdeVariantsTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_jit_equals_no_jit(self):
        market = jax.random.uniform(jax.random.key(0), (5000,))
        bids = jnp.linspace(0.0, 1.0, 16)
        fn = self.variant(lambda b, m: A.kde_market_stats(b, m, 0.05, 1024))
        expected = A.kde_market_stats(bids, market, 0.05, 5000)
        for a, b in zip(fn(bids, market), expected, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_smoothed_derivatives_match_finite_differences(key):
    others = jax.random.uniform(key, (4000, 3)) * 0.8
    temp = 0.05
    soft = temp * jax.nn.logsumexp(others / temp, axis=1)
    hard = jnp.max(others, axis=1)
    bids, values = jnp.array([0.3, 0.5, 0.7]), jnp.array([0.6, 0.9, 0.8])
    for mech in A.MECHANISMS:
        u1, u2 = A.smoothed_derivatives(mech, bids, values, soft, hard, temp, chunk_size=1500)
        mean_u = lambda b, v: jnp.mean(A.smoothed_ex_post_utility(mech, b, v, soft, hard, temp))
        eps = 1e-2
        for i in range(3):
            b, v = float(bids[i]), float(values[i])
            fd1 = (mean_u(b + eps, v) - mean_u(b - eps, v)) / (2 * eps)
            fd2 = (mean_u(b + eps, v) - 2 * mean_u(b, v) + mean_u(b - eps, v)) / eps**2
            np.testing.assert_allclose(u1[i], fd1, rtol=0.02, atol=2e-3)
            np.testing.assert_allclose(u2[i], fd2, rtol=0.05, atol=0.05)


# ----------------------------------------------------------------------------- learner


def small_config(**kw):
    base = dict(ante_samples=64, market_samples=2048, chunk_size=1024)
    return A.LearnerConfig(**{**base, **kw})


def linear_bne_params(learner, game):
    """Network parameters that represent the FP BNE (n-1)v/n exactly (one ReLU path)."""
    n = game.n_bidders
    params = learner.init(jax.random.key(0)).params

    def set_layer(p, name, kernel_entry):
        kernel = jnp.zeros_like(p["params"][name]["kernel"]).at[:, 0, 0].set(kernel_entry)
        bias = jnp.zeros_like(p["params"][name]["bias"])
        return {**p, "params": {**p["params"], name: {"kernel": kernel, "bias": bias}}}

    params = set_layer(params, "Dense_0", 1.0)
    params = set_layer(params, "Dense_1", 1.0)
    return set_layer(params, "Dense_2", (n - 1) / n)


def test_bid_network_is_the_core_mlp_with_torch_init_at_its_own_level(key):
    net = A.BidNet(hidden=(8, 4), output="abs")
    p = net.init(key, jnp.zeros((1,)))["params"]
    assert sorted(p) == ["Dense_0", "Dense_1", "Dense_2"]  # no MLP level in the path
    for name, fan_in in (("Dense_0", 1), ("Dense_1", 8), ("Dense_2", 4)):
        for leaf in (p[name]["kernel"], p[name]["bias"]):  # PyTorch default: U(+-1/sqrt(fan_in))
            assert np.abs(leaf).max() <= 1 / np.sqrt(fan_in)
        assert np.any(np.asarray(p[name]["bias"]) != 0)
    v = jnp.linspace(0.0, 1.0, 5)
    w = jax.tree_util.tree_map(np.asarray, p)
    h = np.maximum(np.asarray(v)[:, None] @ w["Dense_0"]["kernel"] + w["Dense_0"]["bias"], 0)
    h = np.maximum(h @ w["Dense_1"]["kernel"] + w["Dense_1"]["bias"], 0)
    raw = (h @ w["Dense_2"]["kernel"] + w["Dense_2"]["bias"])[:, 0]
    for output, fn in (("abs", np.abs), ("relu", lambda x: np.maximum(x, 0)), ("exp", np.exp)):
        out = A.BidNet(hidden=(8, 4), output=output).apply({"params": p}, v)
        np.testing.assert_allclose(out, fn(raw), rtol=1e-5, atol=1e-6)


def test_bid_network_can_represent_the_bne():
    game = A.AuctionGame("fp", (4,))
    learner = A.make_learner(game, small_config())
    params = linear_bne_params(learner, game)
    err = A.l2_distance(learner.bid_fn(params, 0), game.bne()[0], 0.0, 1.0)
    assert float(err) < 1e-6


def test_gate_respects_warm_up_and_thresholds():
    game = A.AuctionGame("fp", (3,))
    cfg = small_config(method="abr", init_steps=10)
    learner = A.make_learner(game, cfg)
    params = learner.init(jax.random.key(1)).params
    key = jax.random.key(2)
    before = learner.estimate(params, key, jnp.int32(9))
    assert not bool(before.gate.any())
    np.testing.assert_allclose(before.bid_grad, -before.u1)
    after = learner.estimate(params, key, jnp.int32(10))
    expected = (after.u2 < -cfg.curvature_tol) & (jnp.abs(after.u1) < cfg.first_order_tol)
    np.testing.assert_array_equal(after.gate, expected)
    grad = jnp.where(after.gate, after.u1 / after.u2, -after.u1)
    np.testing.assert_allclose(after.bid_grad, grad, rtol=1e-6)
    ug = A.make_learner(game, small_config(method="ug", init_steps=10))
    assert not bool(ug.estimate(params, key, jnp.int32(500)).gate.any())


def _fp_kde_utility(bids, values, market, h):
    G, _, _ = A.kde_market_stats(bids, market, h)
    return jnp.mean((values - bids) * G)


def test_ug_step_increases_utility_and_abr_step_decreases_brd():
    import optax

    game = A.AuctionGame("fp", (3,))
    for method in ("ug", "abr"):
        cfg = small_config(method=method, init_steps=0, learning_rate=0.01)
        learner = A.make_learner(game, cfg)
        state = learner.init(jax.random.key(3))
        if method == "abr":  # near the BNE (overbidding by 3%), where the Newton gate opens
            params = linear_bne_params(learner, game)
            params["params"]["Dense_2"]["kernel"] *= 1.03
            state = state.replace(params=params, opt_state=optax.sgd(0.01).init(params))
        state = jax.jit(lambda s: jax.lax.scan(learner.step, s, None, 30)[0])(state)
        est = learner.estimate(state.params, jax.random.fold_in(state.key, state.step), state.step)
        new_state, _ = learner.step(state)
        new_bids = learner.bid_fn(new_state.params, 0)(est.values[0])
        if method == "ug":
            market = learner.sample_market(
                state.params, jax.random.split(jax.random.fold_in(state.key, state.step))[0]
            )[0]
            old_u = _fp_kde_utility(est.bids[0], est.values[0], market, cfg.bandwidth)
            new_u = _fp_kde_utility(new_bids, est.values[0], market, cfg.bandwidth)
            assert float(new_u) > float(old_u)
        else:
            # The aBR objective: BRD 1/2 (b - sg[b_BR])^2 where the gate is open, the UG
            # surrogate -u' b elsewhere. One small step must decrease it.
            target = est.bids[0] - jnp.where(est.gate[0], est.u1[0] / est.u2[0], 0.0)
            gated = est.gate[0]
            assert int(gated.sum()) > 10

            def objective(b):
                return jnp.sum(jnp.where(gated, 0.5 * (b - target) ** 2, -est.u1[0] * b))

            assert float(objective(new_bids)) < float(objective(est.bids[0]))


def test_abr_started_at_the_bne_stays_there():
    import optax

    game = A.AuctionGame("fp", (2,))
    cfg = small_config(method="abr", init_steps=0, bandwidth=0.02, market_samples=8192)
    learner = A.make_learner(game, cfg)
    params = linear_bne_params(learner, game)
    state = learner.init(jax.random.key(4))
    state = state.replace(params=params, opt_state=optax.sgd(cfg.learning_rate).init(params))
    final = jax.jit(lambda s: jax.lax.scan(learner.step, s, None, 100)[0])(state)
    err = A.l2_distance(learner.bid_fn(final.params, 0), game.bne()[0], 0.0, 1.0)
    assert float(err) < 0.02


def test_learning_is_deterministic_and_vmaps_over_seeds():
    game = A.AuctionGame("fp", (2,))
    learner = A.make_learner(game, small_config(method="abr", init_steps=5))
    run = lambda key: jax.lax.scan(learner.step, learner.init(key), None, 10)
    keys = jax.random.split(jax.random.key(7), 3)
    batched = jax.jit(jax.vmap(run))(keys)
    for i in range(3):
        single = jax.jit(run)(keys[i])
        np.testing.assert_allclose(
            batched[1]["mean_abs_u1"][i], single[1]["mean_abs_u1"], rtol=1e-5, atol=1e-7
        )
    again = jax.jit(jax.vmap(run))(keys)
    np.testing.assert_array_equal(batched[1]["mean_abs_u1"], again[1]["mean_abs_u1"])


def test_sharded_gradient_estimate_equals_unsharded(mesh):
    game = A.AuctionGame("fp", (5,))
    cfg = small_config(method="abr", init_steps=0)
    plain = A.make_learner(game, cfg)
    sharded = A.make_learner(game, cfg, mesh=mesh)
    params = plain.init(jax.random.key(5)).params
    key, step = jax.random.key(6), jnp.int32(3)
    a = jax.jit(plain.estimate)(params, key, step)
    b = jax.jit(sharded.estimate)(params, key, step)
    for x, y in zip(a, b, strict=True):  # same numbers; only the reduction order differs
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-5)
    assert b.u1.sharding.spec[1] == "data" or not b.u1.sharding.is_fully_replicated


def test_asymmetric_learner_updates_both_types():
    game = A.AuctionGame("fp", (1, 1), ((0.0, 0.5), (0.0, 1.0)))
    learner = A.make_learner(game, small_config(method="ug", learning_rate=0.2))
    state = learner.init(jax.random.key(8))
    assert state.step.shape == () and int(state.step) == 0
    new, metrics = learner.step(state)  # x defaults to None
    assert int(new.step) == 1 and set(metrics) == {"abr_fraction", "mean_abs_u1", "brd"}
    moved = jax.tree_util.tree_map(
        lambda a, b: jnp.abs(a - b).max(axis=tuple(range(1, a.ndim))), new.params, state.params
    )
    per_type = sum(jax.tree_util.tree_leaves(moved))
    assert per_type.shape == (2,) and bool(jnp.all(per_type > 0))
    market = learner.sample_market(state.params, jax.random.key(9))
    assert market.shape == (2, 2048)


def test_bad_input_raises_clear_errors():
    with pytest.raises(ValueError, match="n >= 2"):
        A.AuctionGame("fp", (1,))
    with pytest.raises(ValueError, match="`mechanism` must be one of"):
        A.AuctionGame("dutch", (2,))
    with pytest.raises(ValueError, match="`bandwidth` must be > 0"):
        A.LearnerConfig(bandwidth=0.0)
    with pytest.raises(ValueError, match="`bandwidth` must be > 0"):
        A.kde_market_stats(jnp.zeros(3), jnp.zeros(5), -0.1)
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
    with pytest.raises(ValueError, match="not a multiple"):
        A.make_learner(
            A.AuctionGame("fp", (2,)), small_config(ante_samples=62), mesh=data_mesh()
        ).estimate(
            A.make_learner(A.AuctionGame("fp", (2,)), small_config())
            .init(jax.random.key(0))
            .params,
            jax.random.key(0),
            jnp.int32(0),
        )


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
    k1, k2 = jax.random.split(key)
    columns = jnp.stack(
        [jax.random.uniform(k1, (100_000,)) * 0.8, jax.random.uniform(k2, (100_000,))]
    )
    bids = jnp.linspace(0.3, 0.6, 7)
    G, g, dg = A.product_market_stats(bids, columns, (2, 1), 0.03, chunk_size=20_000)
    exact = lambda b: (b / 0.8) ** 2 * b
    np.testing.assert_allclose(G, exact(bids), atol=0.01)
    np.testing.assert_allclose(g, jax.vmap(jax.grad(exact))(bids), atol=0.08)
    # g and g' are the derivatives of the estimated G (product rule done right)
    G_of = lambda b: A.product_market_stats(b[None], columns, (2, 1), 0.03, 20_000)[0][0]
    np.testing.assert_allclose(g, jax.vmap(jax.grad(G_of))(bids), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(dg, jax.vmap(jax.grad(jax.grad(G_of)))(bids), rtol=1e-2, atol=1e-2)
    with pytest.raises(ValueError, match="`opponent_bids` must be"):
        A.product_market_stats(bids, columns, (2,), 0.03)

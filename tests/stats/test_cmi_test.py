"""jaxlab.stats.cmi_test: the statistic against a loop, exact zeros, bootstrap moments, invariances,
calibration, GCM by hand, cross-fitting, column blocks, sharding, config and input errors."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads
from scipy import stats

from jaxlab.stats import cmi_test as C
from jaxlab.stats.cmi_test import kernels as K
from jaxlab.stats.cmi_test import statistic as S
from tests.helpers import assert_compiles_once

TINY = C.CMIConfig(num_samples=8, num_boot=64)
# Budget: each test's arithmetic runs in one jitted program (eager jnp would compile one program
# per op); the fold matrix is jitted once per shape and kernel for the whole module.
fold_matrix = jax.jit(C.fold_matrix, static_argnames=("kernel", "centred"))


@functools.partial(jax.jit, static_argnames=("n", "m", "dx", "dy", "dz", "dtype"))
def random_fold(key, n=12, m=3, dx=2, dy=1, dz=2, dtype=jnp.float32):
    ks = jax.random.split(key, 5)
    x = jax.random.normal(ks[0], (n, dx), dtype)
    xt = jax.random.normal(ks[1], (n, m, dx), dtype)
    y = jax.random.normal(ks[2], (n, dy), dtype)
    mh = 0.5 * jax.random.normal(ks[3], (n, dy), dtype)
    z = jax.random.normal(ks[4], (n, dz), dtype)
    return x, xt, y, mh, z, jnp.ones((n,), bool)


def loop_statistic(x, xt, y, mh, z):
    """The fold statistic by explicit loops (NumPy, float64), standardising as the spec says."""
    x, xt, y, mh, z = (np.asarray(a, np.float64) for a in (x, xt, y, mh, z))
    n, m, _ = xt.shape

    def std(a):
        return (a - a.mean(0)) / a.std(0, ddof=1)

    xs, zs = std(x), std(z)
    xts = np.stack([std(xt[:, j]) for j in range(m)], 1)
    r = (y - mh) / y.std(0, ddof=1)

    def med(a):
        d = [np.abs(a[i] - a[j]).sum() for i in range(n) for j in range(n) if i != j]
        return np.median(d)

    sx, sz = med(xs), med(zs)

    def k(a, b, s):
        return np.exp(-np.abs(a - b).sum() / s)

    total = 0.0
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            u = k(xs[i], xs[j], sx)
            u -= np.mean([k(xs[i], xts[j, q], sx) for q in range(m)])
            u -= np.mean([k(xts[i, q], xs[j], sx) for q in range(m)])
            u += np.mean([k(xts[i, q], xts[j, q], sx) for q in range(m)])
            total += u * (r[i] @ r[j]) * k(zs[i], zs[j], sz)
    return total / (n - 1)


def test_fold_statistic_matches_double_loop(key):
    with jax.enable_x64(True):
        fold = random_fold(key, dtype=jnp.float64)
        f = fold_matrix(*fold)
        assert float(f.sum()) / 11 == pytest.approx(loop_statistic(*fold[:5]), rel=1e-6)
        np.testing.assert_array_equal(np.diag(f), 0.0)
        np.testing.assert_allclose(f, C.fold_matrix(*fold), rtol=1e-10)  # jit == no jit


def test_degenerate_nuisances_give_zero_statistic(key):
    x, xt, y, mh, z, mask = random_fold(key)
    copies = np.broadcast_to(np.asarray(x)[:, None, :], xt.shape)
    assert float(np.abs(fold_matrix(x, copies, y, mh, z, mask)).max()) < 1e-6
    assert float(np.abs(fold_matrix(x, xt, y, y, z, mask)).max()) == 0.0
    assert float(np.abs(fold_matrix(x, xt, y, mh, z, mask)).max()) > 1e-3  # but not in general


def test_bootstrap_draws_have_zero_mean_and_the_analytic_variance():
    key = jax.random.key(0)  # a fixed seed: a 3-SE check fails on 0.3% of seeds by design
    x, xt, y, mh, z, mask = random_fold(key, n=10)
    cfg = dataclasses.replace(TINY, num_boot=20000)
    gauss = dataclasses.replace(cfg, multiplier="gaussian")

    @jax.jit
    def draws(fold, key):
        f = C.fold_matrix(*fold)
        rad = C.bootstrap_draws(f[None], mask[None], jax.random.fold_in(key, 1), cfg)
        _, normal = C.bootstrap_draws(f[None], mask[None], jax.random.fold_in(key, 2), gauss)
        return f, rad, normal

    f, (t, boot), gauss_boot = draws((x, xt, y, mh, z, mask), key)
    f = np.asarray(f, np.float64)
    assert float(t) == pytest.approx(float(f.sum()) / 9, rel=1e-5)
    boot = np.asarray(boot, np.float64)
    var = 2.0 * float(np.sum(f**2)) / 81.0
    se_mean = np.sqrt(var / boot.size)
    assert abs(boot.mean()) < 3 * se_mean
    fourth = np.mean((boot - boot.mean()) ** 4)
    se_var = np.sqrt((fourth - boot.var() ** 2) / boot.size)
    assert abs(boot.var() - var) < 3 * se_var
    # Gaussian multipliers: Var(e^T F e) = 2 tr(F^2) as well (F symmetric, zero diagonal)
    boot = np.asarray(gauss_boot, np.float64)
    se_var = np.sqrt((np.mean((boot - boot.mean()) ** 4) - boot.var() ** 2) / boot.size)
    assert abs(boot.var() - var) < 3 * se_var


def test_statistic_invariances(key):
    x, xt, y, mh, z, mask = random_fold(key, n=16)
    perm = jax.random.permutation(jax.random.fold_in(key, 1), 16)

    @jax.jit
    def statistics(x, xt, y, mh, z, perm):
        t = lambda *a, kernel="laplace": C.fold_matrix(*a, mask, kernel).sum()
        y3, m3 = jnp.tile(y, (1, 3)), jnp.tile(mh, (1, 3))
        return {
            "t": t(x, xt, y, mh, z),
            "perm": t(x[perm], xt[perm], y[perm], mh[perm], z[perm]),
            "sign": t(x, xt, -y, -mh, z),
            "tiled": t(x, xt, y3, m3, z),
            "scaled": t(7.0 * x, 7.0 * xt, y, mh, z),
            "gauss": t(x, xt, y, mh, z, kernel="gaussian"),
            "gauss_perm": t(x[perm], xt[perm], y[perm], mh[perm], z[perm], kernel="gaussian"),
        }

    s = {k: float(v) for k, v in statistics(x, xt, y, mh, z, perm).items()}
    t = s["t"]
    assert s["perm"] == pytest.approx(t, rel=1e-5)
    assert s["sign"] == pytest.approx(t, rel=1e-5)
    assert s["tiled"] == pytest.approx(3 * t, rel=1e-5)
    assert s["scaled"] == pytest.approx(t, rel=1e-5)
    assert s["gauss_perm"] == pytest.approx(s["gauss"], rel=1e-4)
    assert s["gauss"] != pytest.approx(t, rel=1e-3)  # the kernel argument is used


def test_median_bandwidth_uses_off_diagonal_pairs_only():
    @jax.jit
    def bandwidths(a):
        dist = K.pairwise_distance(a, a, "laplace")
        mask = jnp.ones(3, bool)
        return (K.median_bandwidth(dist, mask, "laplace"),
                K.median_bandwidth(dist**2, mask, "gaussian"))  # fmt: skip

    laplace, gaussian = bandwidths(np.asarray([[0.0], [1.0], [3.0]], np.float32))
    # off-diagonal distances 1, 3, 2 (each twice): median 2, not the 1 a zero diagonal would give
    assert float(laplace) == pytest.approx(2.0)
    assert float(gaussian) == pytest.approx(8.0)


def test_exact_conditional_draws_centre_the_kernel(key):
    design = C.gaussian_design("h0", dz=3, dx=5, rho=0.6)
    gen = design.oracle_generator()

    @jax.jit
    @jax.vmap
    def off_diagonal_mean(r):  # one replicate r = 0..11, keys as fold_in(key, r)
        x, _, z = design.sample(jax.random.fold_in(key, r), 24)
        xt = gen.sample(gen.fit(None, x, z, None), jax.random.fold_in(key, 100 + r), z, 400)
        u = C.centred_gram(x, xt, jnp.asarray(5.0), "laplace")
        kxx = K.kernel_from_distance(K.pairwise_distance(x, x, "laplace"), jnp.asarray(5.0))
        off = 1 - jnp.eye(24)
        return jnp.sum(u * off) / (24 * 23), jnp.sum(kxx * off) / (24 * 23)

    means, uncentred = (np.asarray(a, np.float64) for a in off_diagonal_mean(jnp.arange(12)))
    se = means.std(ddof=1) / np.sqrt(len(means))
    assert abs(means.mean()) < 3 * se
    assert means.std() > 0
    assert uncentred.mean() > 10 * 3 * se  # without the centring the kernel mean is far from 0


def test_oracle_null_p_values_are_uniform(key):
    design = C.gaussian_design("h0", dz=3, dx=5)
    cfg = C.CMIConfig(num_samples=10, num_boot=200)
    keys = jax.random.split(key, 300)
    xs, ys, zs = jax.jit(jax.vmap(lambda k: design.sample(k, 40)))(keys)
    out = C.replicate_tests(
        xs, ys, zs, jax.random.split(jax.random.fold_in(key, 1), 300),
        generator=design.oracle_generator(), regressor=design.oracle_mean(), config=cfg,
        tests=("cmi", "gcm"),
    )  # fmt: skip
    p = np.asarray(out["cmi"].p_value)
    assert stats.kstest(p, "uniform").pvalue > 1e-3
    assert stats.kstest(np.asarray(out["gcm"].p_value), "uniform").pvalue > 1e-3


def test_alternative_is_rejected_and_replicates_match_single_calls(key):
    design = C.gaussian_design("a1_dense", dz=3, dx=5)

    @jax.jit
    def simulate(keys):
        xs, ys, zs = jax.vmap(lambda k: design.sample(k, 200))(keys)
        xs = xs * 10.0  # a strong effect: y's X-part is 0.2 / sqrt(5) * sum(x) before scaling
        return xs, ys + xs.sum(-1, keepdims=True) * 0.1, zs

    xs, ys, zs = simulate(jax.random.split(key, 4))
    gen, reg = C.LinearGaussianGenerator(), C.RidgeRegressor()
    tkeys = jax.random.split(jax.random.fold_in(key, 1), 4)
    batch = C.replicate_tests(xs, ys, zs, tkeys, generator=gen, regressor=reg, config=TINY)
    assert np.all(np.asarray(batch["cmi"].p_value) < 0.05)
    # single calls on two replicates (new data, same shapes): one compiled core, and each equals
    # its replicate in the vmapped batch
    ones = assert_compiles_once(
        S._jit_core,
        [(xs[i], ys[i], zs[i], tkeys[i], gen, reg, TINY, C.TESTS, None) for i in (2, 3)],
        name="compare_tests core",
    )
    for i, one in zip((2, 3), ones, strict=True):
        for name in C.TESTS:
            assert float(one[name].statistic) == pytest.approx(
                float(batch[name].statistic[i]), rel=1e-4
            )
    # the public entry point runs the same compiled core
    size = S._jit_core._cache_size()
    via_api = C.compare_tests(xs[3], ys[3], zs[3], tkeys[3], generator=gen, regressor=reg,
                              config=TINY)  # fmt: skip
    assert S._jit_core._cache_size() == size
    assert float(via_api["cmi"].statistic) == float(ones[1]["cmi"].statistic)


def test_gcm_matches_a_hand_computation(key):
    @jax.jit
    def gcm(key):
        ks = jax.random.split(key, 4)
        folds = C.FoldData(
            x=jax.random.normal(ks[0], (2, 5, 2)),
            x_tilde=jax.random.normal(ks[1], (2, 5, 3, 2)),
            y=jax.random.normal(ks[2], (2, 5, 1)),
            m_hat=jax.random.normal(ks[3], (2, 5, 1)),
            z=jnp.zeros((2, 5, 1)),
            mask=jnp.asarray([[True] * 5, [True] * 4 + [False]]),
        )
        return folds, C.gcm_from_folds(folds, jax.random.fold_in(key, 9), 50)

    folds, res = gcm(key)
    f = {k: np.asarray(v, np.float64) for k, v in folds._asdict().items()}
    rows = []
    for k in range(2):
        for i in range(5):
            if f["mask"][k, i]:
                rx = f["x"][k, i] - f["x_tilde"][k, i].mean(0)
                rows.append(rx * (f["y"][k, i, 0] - f["m_hat"][k, i, 0]))
    r = np.asarray(rows)
    tau = np.sqrt(len(r)) * r.mean(0) / r.std(0, ddof=1)
    assert float(res.statistic) == pytest.approx(np.abs(tau).max(), rel=1e-4)
    assert res.bootstrap.shape == (50,)
    assert float(res.p_value) == pytest.approx(
        np.mean(np.asarray(res.bootstrap) >= tau.__abs__().max())
    )


class SpyRegressor:
    """Remembers which training rows it saw: ``y`` is the identity, so the weighted column sum
    is the indicator of the training rows."""

    def fit(self, key, y, z, w):
        return (w[:, None] * y).sum(0)

    def predict(self, params, z):
        return jnp.broadcast_to(params, (z.shape[0], params.shape[0]))


jax.tree_util.register_static(SpyRegressor)


@pytest.mark.parametrize("n,folds", [(10, 2), (11, 3)])
def test_cross_fitting_never_trains_on_the_evaluated_fold(n, folds):
    cfg = dataclasses.replace(TINY, folds=folds)
    eye = np.eye(n, dtype=np.float32)
    x, z = np.arange(n, dtype=np.float32)[:, None], np.ones((n, 1), np.float32)
    fit = jax.jit(C.cross_fit, static_argnames=("config",))
    data = fit(x, eye, z, jax.random.key(0), C.LinearGaussianGenerator(), SpyRegressor(), cfg)
    seen = np.asarray(data.m_hat[:, 0, :])  # [K, n]: training-row indicator of each fold
    eval_idx, eval_mask, _, _ = C.fold_indices(n, folds)
    for k in range(folds):
        evaluated = eval_idx[k][eval_mask[k]]
        assert np.all(seen[k, evaluated] == 0)
        assert np.all(np.delete(seen[k], evaluated) == 1)
    assert sorted(eval_idx[eval_mask].tolist()) == list(range(n))


def test_sharded_bootstrap_equals_unsharded_and_cmi_test_compiles_once(mesh, key):
    design = C.gaussian_design("a2_sparse", dz=3, dx=5)
    x, y, z = design.sample(key, 64)
    kw = dict(generator=C.LinearGaussianGenerator(), regressor=C.RidgeRegressor(), config=TINY)
    a = C.cmi_test(x, y, z, key, **kw)
    b = C.cmi_test(x, y, z, key, mesh=mesh, **kw)
    boot_a, boot_b = np.asarray(a.bootstrap), np.asarray(b.bootstrap)
    scale = np.abs(boot_a).max()  # only the reduction order differs: float32 noise of this size
    np.testing.assert_allclose(boot_b, boot_a, rtol=1e-5, atol=1e-6 * scale)
    # the p-values agree except for draws within that noise of the statistic (none, usually)
    ties = np.sum(np.abs(boot_a - float(a.statistic)) <= 1e-5 * scale)
    assert abs(float(b.p_value) - float(a.p_value)) <= ties / boot_a.size
    # trace once: cmi_test on new data of the same shapes (and a new key) adds no cache entry
    size = S._jit_core._cache_size()
    x2, y2, z2 = design.sample(jax.random.fold_in(key, 1), 64)
    c = C.cmi_test(x2, y2, z2, jax.random.fold_in(key, 2), **kw)
    assert S._jit_core._cache_size() == size, "cmi_test retraced for new data of the same shapes"
    assert float(c.statistic) != float(a.statistic)  # it did run on the new data


def test_conditional_mmd_gradient_matches_finite_differences(key):
    with jax.enable_x64(True):
        x, xt, _, _, z, _ = random_fold(key, n=6, m=2, dtype=jnp.float64)
        w = np.ones(6)

        @jax.jit  # check_grads calls it many times: one program, not one per op and call
        def loss(xt):
            return C.conditional_mmd(x, xt, z, w, jnp.asarray(2.0), jnp.asarray(3.0), "gaussian")

        check_grads(loss, (xt,), order=1, modes=("rev",), rtol=1e-4)


def test_l1_distance_vjp_equals_autodiff_and_finite_differences(key):
    """The hand-written VJP (signs recomputed in the backward) against autodiff of the broadcast
    form, on both forward paths (coordinate planes for d <= 32, one broadcast sum above)."""

    def reference(a, b):
        return jnp.abs(a[:, None, :] - b[None, :, :]).sum(-1)

    @jax.jit
    def both(a, b, g):
        got, vjp = jax.vjp(K.l1_distance, a, b)
        want, vjp_ref = jax.vjp(reference, a, b)
        return got, want, vjp(g), vjp_ref(g)

    for d in (3, 40):
        ka, kb, kg = jax.random.split(jax.random.fold_in(key, d), 3)
        a, b = jax.random.normal(ka, (7, d)), jax.random.normal(kb, (5, d))
        got, want, grads, grads_ref = both(a, b, jax.random.normal(kg, (7, 5)))
        np.testing.assert_allclose(got, want, rtol=1e-5)
        for g, r in zip(grads, grads_ref, strict=True):
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)
    with jax.enable_x64(True):
        a = np.linspace(-1.0, 1.3, 8).reshape(4, 2)
        b = np.array([[0.05, -0.4], [0.7, 0.33], [-0.9, 0.2]])
        check_grads(jax.jit(lambda a, b: jnp.exp(-K.l1_distance(a, b)).sum()), (a, b), order=1,
                    modes=("rev",), rtol=1e-5)  # fmt: skip


def test_optimiser_decay_coupled_is_torch_adam_and_decoupled_is_adamw():
    """With a zero loss gradient, torch's coupled decay feeds ``wd theta`` to Adam, whose first
    step is then ``-lr sign(theta)``; AdamW's first step is ``-lr wd theta``."""
    theta = {"w": jnp.array([2.0, -0.5, 1e-3])}
    zero = jax.tree_util.tree_map(jnp.zeros_like, theta)
    for decay, want in (
        ("coupled", -0.1 * np.sign(theta["w"])),
        ("decoupled", -0.1 * 0.3 * theta["w"]),
    ):
        fitter = C.MLPRegressor(lr=0.1, weight_decay=0.3, decay=decay)
        opt = C.nuisance._optimiser(fitter)
        upd, _ = opt.update(zero, opt.init(theta), theta)
        np.testing.assert_allclose(upd["w"], want, rtol=1e-4)
    with pytest.raises(ValueError, match="`decay`"):
        C.GMMNGenerator(decay="adamw")


def test_gmmn_epoch_batching_is_the_official_loader(key):
    """``batching="epoch"``: each epoch one shuffle of the weighted rows, cut into full batches and
    a last smaller one (200 rows at 128: 128 + 72); equals a hand loop over those batches."""
    gen = C.GMMNGenerator(hidden=8, noise_dim=3, steps=4, batch_size=4, train_samples=2)
    assert gen.epoch_batches(200) == (4,) * 50
    big = dataclasses.replace(gen, batch_size=128)
    assert big.epoch_batches(200) == (128, 72) and big.epoch_batches(256) == (128, 128)
    assert dataclasses.replace(gen, batch_size=None).epoch_batches(10) == (10,)
    design = C.gaussian_design("h0", dz=2, dx=5)
    x, _, z = design.sample(key, 6)
    w = jnp.ones(6).at[5].set(0.0)  # one padded row: an epoch is batches of 4 + 2 real rows
    gen = dataclasses.replace(gen, batch_size=4)
    with pytest.raises(ValueError, match="`steps`=3 is not a whole number of epochs of 2 batches"):
        dataclasses.replace(gen, steps=3).fit(key, x, z, w)  # 6 rows (5 real) at 4: 4 + 2
    got = jax.jit(gen.fit)(key, x, z, w)
    # the hand loop: the same moments, bandwidths, init and keys as `fit`
    z_mean, z_sd = K.masked_moments(z, w)
    x_mean, x_sd = K.masked_moments(x, w)
    xs, zs = (x - x_mean[None]) / x_sd[None], (z - z_mean[None]) / z_sd[None]
    bw = tuple(K.median_bandwidth(K.pairwise_distance(a, a, kind), w > 0, kind)
               for kind in ("gaussian", "laplace") for a in (xs, zs))  # fmt: skip
    k_init, k_train = jax.random.split(key)
    p = gen.network(5).init(k_init, jnp.zeros((1, 2 + 3)))["params"]
    opt = C.nuisance._optimiser(gen)
    s = opt.init(p)
    grad = jax.jit(jax.grad(gen.loss), static_argnums=6)
    for k in jax.random.split(k_train, 2):  # 2 epochs of 2 steps
        k_perm, *k_steps = jax.random.split(k, 3)
        order = np.argsort(np.where(w > 0, jax.random.uniform(k_perm, (6,)), 2.0), kind="stable")
        assert set(order[:5]) == set(range(5))  # the padded row is last
        for idx, k_t in zip((order[:4], order[4:]), k_steps, strict=True):
            g = grad(p, k_t, xs[idx], zs[idx], w[idx], bw, 5)
            u, s = opt.update(g, s, p)
            p = jax.tree_util.tree_map(lambda a, b: a + b, p, u)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-6),
                           got.net, p)  # fmt: skip


def test_perturbed_regressor_error_directions():
    z = jnp.array([[0.5, -1.0, 3.0], [2.0, 0.25, -1.0]])
    base = C.LinearMean(jnp.zeros(1), jnp.zeros((1, 3)))
    sin = C.PerturbedRegressor(base, 0.5)
    np.testing.assert_allclose(
        sin.predict(base.fit(None, None, None, None), z)[:, 0], 0.5 * np.sin(3 * z[:, 0]), rtol=1e-6
    )
    lin = C.PerturbedRegressor(base, 2.0, (1.0, -2.0))
    np.testing.assert_allclose(
        lin.predict(base.fit(None, None, None, None), z)[:, 0],
        2.0 * (z[:, 0] - 2 * z[:, 1]),
        rtol=1e-6,
    )
    with pytest.raises(ValueError, match="`direction`"):
        C.PerturbedRegressor(base, 1.0, ())
    with pytest.raises(ValueError, match=r"`direction\[1\]`"):
        C.PerturbedRegressor(base, 1.0, (1.0, float("nan")))


def test_gmmn_learns_a_gaussian_conditional(key):
    design = C.gaussian_design("h0", dz=2, dx=5, rho=0.8)
    # full batch (80 rows < the default batch of 128) on 80 rows, 100 Adam steps (this test's seed:
    # err 0.075, ratio 0.99; 96 rows and 150 steps gave 0.07 and 1.03 at 2.5x the run time)
    gen = C.GMMNGenerator(hidden=32, noise_dim=8, steps=100, train_samples=8)

    @jax.jit
    def fit_and_check(key):
        x, _, z = design.sample(key, 80)
        params = gen.fit(jax.random.fold_in(key, 1), x, z, jnp.ones(80))
        zt = design.sample(jax.random.fold_in(key, 2), 200)[2]
        xt = gen.sample(params, jax.random.fold_in(key, 3), zt, 100)
        true_mean = zt @ design.coef.T
        err = jnp.mean((xt.mean(1) - true_mean) ** 2) / jnp.mean(true_mean**2)
        return err, jnp.mean(xt.var(1)) / jnp.mean(jnp.diag(design.cond_cov))

    err, var_ratio = (float(v) for v in fit_and_check(key))
    assert err < 0.3, err
    assert 0.5 < var_ratio < 1.5, var_ratio  # not collapsed onto the conditional mean


def test_bad_inputs_raise_clear_errors(key):
    x, y, z = jnp.ones((20, 2)), jnp.ones((20, 1)), jnp.ones((19, 3))
    kw = dict(generator=C.LinearGaussianGenerator(), regressor=C.RidgeRegressor(), config=TINY)
    with pytest.raises(ValueError, match="sample counts differ"):
        C.cmi_test(x, y, z, key, **kw)
    with pytest.raises(ValueError, match="`y` must be finite"):
        C.cmi_test(x, y.at[3, 0].set(jnp.nan), z[:1].repeat(20, 0), key, **kw)
    with pytest.raises(ValueError, match="`x` must be"):
        C.cmi_test(jnp.ones((20, 2, 2)), y, jnp.ones((20, 3)), key, **kw)
    with pytest.raises(ValueError, match="`tests`"):
        C.compare_tests(x, y, jnp.ones((20, 3)), key, tests=("kci",), **kw)
    with pytest.raises(ValueError, match="`folds`"):
        C.CMIConfig(folds=1)
    with pytest.raises(ValueError, match="`kernel`"):
        C.CMIConfig(kernel="rbf")
    with pytest.raises(ValueError, match="`setting`"):
        C.gaussian_design("a3")


def test_column_blocks_fit_each_block_and_the_statistic_adds_over_blocks(key):
    n, dz = 24, 3
    ks = jax.random.split(key, 5)
    z = jax.random.normal(ks[0], (n, dz))
    weight, bias = jax.random.normal(ks[1], (dz, 3)), jnp.array([0.1, -0.2, 0.3])
    exact, ridge = C.SoftmaxMean(weight, bias), C.RidgeRegressor(0.5)
    reg = C.ColumnBlocks((ridge, exact), (2, 3))
    y = jax.random.normal(ks[2], (n, 5))
    x = jax.random.normal(ks[3], (n, 2))
    w = jnp.ones(n)

    @jax.jit  # one compiled program: the fitters are pytree arguments
    def run(reg, x, y, z, key):
        pred = reg.predict(reg.fit(key, y, z, w), z)
        k0 = jax.random.split(key, 2)[0]
        first = ridge.predict(ridge.fit(k0, y[:, :2], z, w), z)
        by_hand = jnp.concatenate([first, jax.nn.softmax(z @ weight + bias[None, :])], -1)
        folds = C.cross_fit(x, y, z, key, C.LinearGaussianGenerator(), reg, TINY)
        blocks = C.response_blocks(folds, (2, 3))
        assert [b.y.shape[-1] for b in blocks] == [2, 3] and blocks[1].x is folds.x
        stats = [C.kernel_test_from_folds(f, key, TINY).statistic for f in (folds, *blocks)]
        return pred, by_hand, stats

    pred, by_hand, (full, first, second) = run(reg, x, y, z, ks[4])
    np.testing.assert_allclose(pred, by_hand, rtol=1e-5, atol=1e-6)
    # F = U * (r r^T) * W and r r^T sums over y's columns: the statistic of y is the sum of the
    # statistics of its column blocks (one cross-fit, one generator, shared by the blocks)
    assert float(full) == pytest.approx(float(first) + float(second), rel=1e-5)
    folds = C.FoldData(*(jnp.zeros((2, 4, 5)),) * 5, jnp.ones((2, 4), bool))
    with pytest.raises(ValueError, match="`sizes`"):
        C.response_blocks(folds, (2, 2))
    with pytest.raises(ValueError, match="`sizes`"):
        reg.fit(ks[3], y[:, :4], z, w)
    with pytest.raises(ValueError, match="`regressors`"):
        C.ColumnBlocks((ridge,), (2, 3))
    with pytest.raises(ValueError, match=r"`sizes\[1\]`"):
        C.ColumnBlocks((ridge, exact), (2, 0))


def test_configs_are_frozen_hashable_and_name_the_bad_field():
    cfg = C.CMIConfig()
    assert hash(cfg) == hash(C.CMIConfig()) and hash(C.GMMNGenerator()) == hash(C.GMMNGenerator())
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.num_boot = 5
    bad = [
        (C.CMIConfig, {"num_samples": 0}, "num_samples"),
        (C.CMIConfig, {"num_boot": 2.5}, "num_boot"),
        (C.CMIConfig, {"multiplier": "normal"}, "multiplier"),
        (C.GMMNGenerator, {"dropout": 1.0}, "dropout"),
        (C.GMMNGenerator, {"batch_size": 0}, "batch_size"),
        (C.GMMNGenerator, {"noise_std": 0.0}, "noise_std"),
        (C.GMMNGenerator, {"lambda_l1": -1.0}, "lambda_l1"),
        (C.MLPRegressor, {"lr": 0.0}, "lr"),
        (C.MLPRegressor, {"b2": 1.0}, "b2"),
        (C.MLPRegressor, {"hidden": 0}, "hidden"),
        (C.SoftmaxRegressor, {"steps": -1}, "steps"),
        (C.RidgeRegressor, {"alpha": -1.0}, "alpha"),
        (C.LinearGaussianGenerator, {"jitter": -1.0}, "jitter"),
    ]
    for cls, kwargs, field in bad:
        with pytest.raises(ValueError, match=f"`{field}`"):
            cls(**kwargs)


def test_networks_are_core_mlps_with_the_hand_written_layer_names(key):
    from jaxlab.core.nn import MLP

    net = C.GMMNGenerator(hidden=7, dropout=0.1).network(3)
    assert isinstance(net, MLP) and tuple(net.features) == (7, 3)
    params = jax.jit(net.init)(jax.random.key(0), jnp.zeros((1, 4)))["params"]
    assert set(params) == {"Dense_0", "Dense_1"}
    assert params["Dense_0"]["kernel"].shape == (4, 7) and params["Dense_1"]["bias"].shape == (3,)
    h = np.linspace(-2.0, 2.0, 4, dtype=np.float32)[None, :]

    @jax.jit
    def apply(params, h, key):
        out = net.apply({"params": params}, h)
        drop = net.apply({"params": params}, h, deterministic=False, rngs={"dropout": key})
        return out, drop

    out, drop = apply(params, h, key)
    k0, k1 = (jax.tree_util.tree_map(np.asarray, params[k]) for k in ("Dense_0", "Dense_1"))
    pre = h @ k0["kernel"] + k0["bias"][None, :]
    hand = np.where(pre > 0, pre, 0.8 * pre) @ k1["kernel"] + k1["bias"][None, :]  # slope 0.8
    np.testing.assert_allclose(out, hand, rtol=1e-5, atol=1e-6)
    assert drop.shape == out.shape
    assert not np.allclose(drop, out)  # dropout is applied when not deterministic

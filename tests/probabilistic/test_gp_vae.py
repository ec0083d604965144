"""jaxlab.probabilistic.gp_vae: basis approximations, fused latents, ELBO, SVI, input checks.

Compile budget: every check runs inside a few jitted programs built once per module
(``functools.cache``d builders); the ELBO checks share one float64 model, one data set of 12 rows
and its jitted ``init`` / ``loss``; test data come from NumPy (no eager ``jax.random`` ops).
"""

import dataclasses
import functools
import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import optax
import pytest
from numpyro.infer import TraceMeanField_ELBO

from jaxlab.probabilistic import gp_vae as G
from jaxlab.probabilistic.gp_vae import baselines as B
from tests.helpers import assert_traces_once


def se_kernel(x, x2, lengthscale, alpha=1.0):
    return alpha**2 * np.exp(-((x[:, None] - x2[None, :]) ** 2) / (2 * lengthscale**2))


@functools.cache
def hs_kernel_fn(num_basis, boundary):
    """``x, lengthscale -> hs_kernel(x, x)``, jitted once per basis (lengthscale traced)."""
    return jax.jit(lambda x, ell: G.hs_kernel(x, x, num_basis, boundary, 1.0, ell))


@pytest.mark.parametrize("lengthscale", [0.5, 1.0])
def test_hs_kernel_converges_to_the_se_kernel(lengthscale):
    x = np.linspace(-1.7, 1.7, 41)
    with jax.enable_x64(True):
        approx = np.asarray(hs_kernel_fn(32, 4.0)(jnp.asarray(x), lengthscale))
    assert np.abs(approx - se_kernel(x, x, lengthscale)).max() < 1e-4


def test_official_boundary_is_too_small_for_long_lengthscales():
    x = np.linspace(-1.7, 1.7, 41)
    with jax.enable_x64(True):
        for m in (32, 64):
            approx = np.asarray(hs_kernel_fn(m, 2.55)(jnp.asarray(x), 1.0))
            assert np.abs(approx - se_kernel(x, x, 1.0)).max() > 0.1


def test_hs_basis_is_orthonormal_and_density_integrates_to_alpha_squared():
    @jax.jit
    def gram_and_total():
        x = jnp.linspace(-3.0, 3.0, 20001)
        phi = G.hs_basis(x, 6, 3.0)
        dx = x[1] - x[0]
        weights = jnp.full(x.shape, dx).at[0].set(dx / 2).at[-1].set(dx / 2)  # trapezoid rule
        w = jnp.linspace(-60.0, 60.0, 200001)
        total = jnp.trapezoid(G.se_spectral_density(w, 1.7, 0.4), w) / (2 * math.pi)
        return (phi * weights[:, None]).T @ phi, total

    with jax.enable_x64(True):
        gram, total = gram_and_total()
        np.testing.assert_allclose(gram, np.eye(6), atol=1e-4)
        assert float(total) == pytest.approx(1.7**2, rel=1e-6)


def test_prior_predictive_variance_is_alpha_squared(key):
    comp = G.se("t", 0, num_basis=40, boundary=4.0)
    alpha, ell = 1.3, 0.7
    cov = G.Covariates(jnp.array([[-1.0], [0.0], [0.8]]), jnp.zeros((3, 0), jnp.int32))

    @jax.jit
    def prior_variance(key):
        scales = G.prior_scales(comp, alpha, ell, 1)
        a = scales[None] * jax.random.normal(key, (10_000, *scales.shape))
        f = jax.vmap(lambda w: G.latent({"t": w}, cov, [comp]))(a)[..., 0]
        return jnp.var(f, axis=0)

    np.testing.assert_allclose(prior_variance(key), alpha**2, rtol=0.05)


def tiny_components(n_subjects=5):
    return (
        G.se("t", 0, num_basis=8, boundary=4.0),
        G.se("age", 1, num_basis=6, boundary=4.0),
        G.binary("sex", 0),
        G.categorical("id", 2, n_subjects, subject=True),
        G.categorical("site", 1, 3),
        G.se_x_categorical("t_x_disease", 0, 3, 2, num_basis=8, boundary=4.0),
        G.se_x_categorical("t_x_id", 0, 2, n_subjects, num_basis=8, boundary=4.0, subject=True),
    )


def tiny_covariates(seed=0, n=12, n_subjects=5, masks=False):
    """Covariates from NumPy (float64 continuous: float32 arrays unless x64 is on)."""
    rng = np.random.default_rng(seed)
    cont = rng.uniform(-2.0, 2.0, (n, 2))
    cat = np.stack(
        [rng.integers(0, 2, n), rng.integers(0, 3, n), rng.integers(0, n_subjects, n),
         rng.integers(0, 2, n)],
        axis=1,
    ).astype(np.int32)  # fmt: skip
    if not masks:
        return G.Covariates(jnp.asarray(cont), jnp.asarray(cat))
    cm = np.ones_like(cont)
    cm[::3, 1] = 0.0
    dm = np.ones(cat.shape, np.float32)
    dm[1::4, 3] = 0.0
    return G.Covariates(jnp.asarray(cont), jnp.asarray(cat), jnp.asarray(cm), jnp.asarray(dm))


def random_weights(seed, comps, latent_dim=3):
    rng = np.random.default_rng(seed)
    return {c.name: jnp.asarray(rng.normal(size=c.weight_shape(latent_dim)), jnp.float32)
            for c in comps}  # fmt: skip


@functools.cache
def latents_fn():
    """``(w, cov) -> {new_subjects: (fused, dense, parts)}`` of :func:`tiny_components`, jitted."""
    comps = tiny_components()

    def all_forms(w, cov):
        return {
            new: (G.latent(w, cov, comps, new), G.latent_dense(w, cov, comps, new),
                  G.component_latents(w, cov, comps, new))
            for new in (False, True)
        }  # fmt: skip

    return jax.jit(all_forms)


def test_fused_gather_latent_equals_dense_one_hot():
    comps = tiny_components()
    cov = tiny_covariates(1, masks=True)
    out = latents_fn()(random_weights(1, comps), cov)
    for new_subjects, (fused, dense, parts) in out.items():
        np.testing.assert_allclose(fused, dense, atol=1e-5)
        np.testing.assert_allclose(sum(parts.values()), dense, atol=1e-5)
        if new_subjects:
            assert (
                float(jnp.abs(parts["id"]).max()) == 0.0
                and float(jnp.abs(parts["t_x_id"]).max()) == 0.0
            )
        else:  # the subject components do contribute for seen subjects
            assert float(jnp.abs(parts["id"]).min(axis=1).max()) > 0.0
    assert not np.allclose(out[False][0], out[True][0])


def test_masked_covariate_contributes_nothing():
    comps = tiny_components()
    cov = tiny_covariates(2, masks=True)
    parts = latents_fn()(random_weights(2, comps), cov)[False][2]
    assert float(jnp.abs(parts["age"][::3]).max()) == 0.0  # continuous column 1 masked
    assert float(jnp.abs(parts["t_x_disease"][1::4]).max()) == 0.0  # categorical column 3 masked
    assert float(jnp.abs(parts["t"]).min(axis=1).max()) > 0.0
    assert float(jnp.abs(parts["age"][1::3]).min(axis=1).max()) > 0.0  # unmasked rows count


def test_interaction_basis_reproduces_se_times_delta_kernel():
    comp = G.se_x_categorical("tc", 0, 0, 3, num_basis=32, boundary=4.0)
    ell = 0.6
    c = np.array([0, 1, 2, 0, 1, 2, 0, 0, 1])

    @jax.jit
    def basis_kernel(t, c):
        cov = G.Covariates(t[:, None], c[:, None])
        s = G.prior_scales(comp, 1.0, ell, 1) ** 2  # [C, M, 1] prior variances
        jac = jax.jacobian(lambda w: G.latent({"tc": w}, cov, [comp])[:, 0])(jnp.zeros((3, 32, 1)))
        feats = jac.reshape(9, -1)
        return feats @ (s.reshape(-1)[:, None] * feats.T)

    with jax.enable_x64(True):
        t = np.linspace(-1.5, 1.5, 9)
        kernel = basis_kernel(jnp.asarray(t), jnp.asarray(c))
        exact = se_kernel(t, t, ell) * (c[:, None] == c[None, :])
        np.testing.assert_allclose(kernel, exact, atol=1e-4)


def test_conjugate_special_case_recovers_the_bayesian_linear_regression_posterior(key):
    # identity decoder (L = D = 1), one SE component, fixed (alpha, l, v_y): the model is Bayesian
    # linear regression on the basis weights, whose mean-field optimum has the exact posterior
    # mean and variances 1 / diag(posterior precision)
    m, ell, v, n = 8, 0.6, 0.05, 60
    comp = G.se("t", 0, num_basis=m, boundary=4.0)
    cfg = G.GPVAEConfig((comp,), latent_dim=1, output_dim=1, decoder_hidden=(), dropout=0.0)
    model = G.make_model(cfg)
    t = jnp.linspace(-3.5, 3.5, n)[:, None]  # spread over the domain: well-conditioned features
    cov = G.Covariates(t, jnp.zeros((n, 0), jnp.int32))
    hyper = {"t/log_alpha": 0.0, "t/log_lengthscale": math.log(ell)}
    fixed = {  # identity decoder and v_y = v; blocked so that SVI neither sees nor trains them
        "decoder$params": {"Dense_0": {"kernel": jnp.ones((1, 1)), "bias": jnp.zeros(1)}},
        "vy_raw": jnp.full(1, math.log(math.expm1(v - cfg.vy_floor))),
    }
    H = numpyro.handlers
    fixed_model = H.block(H.substitute(H.condition(model.model, hyper), fixed), hide=list(fixed))
    hyper_params = [f"t/log_{h}_{s}" for h in ("alpha", "lengthscale") for s in ("loc", "scale")]
    fixed_guide = H.block(model.guide, hide=[*hyper, *hyper_params])
    lr = optax.exponential_decay(0.05, 3000, 0.01)
    opt = numpyro.optim.optax_to_numpyro(optax.adam(lr))
    svi = numpyro.infer.SVI(fixed_model, fixed_guide, opt, TraceMeanField_ELBO(num_particles=16))

    @jax.jit
    def fit_and_posterior(key):
        y = jnp.sin(2.0 * t) + math.sqrt(v) * jax.random.normal(key, (n, 1))
        params = svi.run(jax.random.fold_in(key, 1), 3000, cov, y, None, n, False,
                         progress_bar=False).params  # fmt: skip
        phi = jax.jacobian(lambda w: G.latent({"t": w}, cov, (comp,))[:, 0])(jnp.zeros((m, 1)))
        phi = phi.reshape(n, m)
        prior_var = G.prior_scales(comp, 1.0, ell, 1, cfg.spectral_jitter).reshape(-1) ** 2
        precision = phi.T @ phi / v + jnp.diag(1.0 / prior_var)
        post_mean = jnp.linalg.solve(precision, phi.T @ y[:, 0] / v)
        return params, post_mean, jnp.diag(precision)

    params, post_mean, precision_diag = fit_and_posterior(key)
    assert sorted(params) == ["t/w_loc", "t/w_rho"]
    q_mean = params["t/w_loc"][:, 0]
    q_var = jax.nn.softplus(params["t/w_rho"][:, 0]) ** 2
    assert float(jnp.linalg.norm(q_mean - post_mean) / jnp.linalg.norm(post_mean)) < 0.02
    np.testing.assert_allclose(q_var, 1.0 / precision_diag, rtol=0.05)


def test_exact_baseline_kernel_is_the_basis_models_prior_covariance():
    # the exact GP-prior VAE baseline uses the kernel that the basis model approximates
    comps = (
        G.se("t", 0, num_basis=32, boundary=4.0),
        G.binary("sex", 0),
        G.categorical("site", 1, 3),
        G.se_x_categorical("t_x_site", 0, 1, 3, num_basis=32, boundary=4.0),
    )
    n, ell = 10, 0.6
    rng = np.random.default_rng(3)
    hyper = {c.name: (0.0, math.log(ell)) for c in comps if c.has_hyperparameters}

    @jax.jit
    def basis_and_exact(cov):
        zeros = {c.name: jnp.zeros(c.weight_shape(1)) for c in comps}
        jac = jax.jacobian(lambda w: G.latent(w, cov, comps)[:, 0])(zeros)
        basis = 0.0
        for c in comps:
            feats = jac[c.name].reshape(n, -1)
            var = G.prior_scales(c, 1.0, ell, 1).reshape(-1) ** 2
            basis = basis + feats @ (var[:, None] * feats.T)
        return basis, B.exact_kernel(comps, cov, cov, hyper)

    with jax.enable_x64(True):
        cov = G.Covariates(
            jnp.asarray(rng.uniform(-1.5, 1.5, (n, 1))),
            jnp.asarray(np.stack([rng.integers(0, 2, n), rng.integers(0, 3, n)], 1), jnp.int32),
        )
        basis, exact = basis_and_exact(cov)
        np.testing.assert_allclose(basis, exact, atol=2e-4)


def test_gp_prior_kl_matches_the_dense_formula():
    n, latent = 7, 2
    rng = np.random.default_rng(4)
    x = rng.normal(size=(n, n))
    kern = x @ x.T + 0.5 * np.eye(n)
    mu = rng.normal(size=(n, latent))
    log_sd = 0.3 * rng.normal(size=(n, latent))
    want = 0.0
    k_inv = np.linalg.inv(kern)
    for j in range(latent):
        s = np.diag(np.exp(2 * log_sd[:, j]))
        m = mu[:, j]
        want += 0.5 * (np.trace(k_inv @ s) + m @ k_inv @ m - n
                       + np.linalg.slogdet(kern)[1] - np.linalg.slogdet(s)[1])  # fmt: skip
    with jax.enable_x64(True):
        got = jax.jit(B.gp_prior_kl)(jnp.asarray(kern), jnp.asarray(mu), jnp.asarray(log_sd))
        np.testing.assert_allclose(got, want, rtol=1e-10)


# ---- the ELBO (float64): one model, one data set, jitted init / loss shared by the checks ----

ELBO_N, ELBO_SUBJECTS = 12, 3
ELBO_COMPONENTS = (
    G.se("t", 0, num_basis=6, boundary=4.0),
    G.categorical("id", 2, ELBO_SUBJECTS, subject=True),
    G.se_x_categorical("t_x_id", 0, 2, ELBO_SUBJECTS, num_basis=6, boundary=4.0, subject=True),
)
# every subject has 4 of the 12 observations (column 2 = arange(12) % 3)
ELBO_COUNTS = {"id": np.full(ELBO_SUBJECTS, 4), "t_x_id": np.full(ELBO_SUBJECTS, 4)}


@functools.cache
def elbo_model(local=False):
    cfg = G.GPVAEConfig(ELBO_COMPONENTS, latent_dim=2, output_dim=4, decoder_hidden=(8,),
                        dropout=0.0, num_particles=1, local_subject_samples=local)  # fmt: skip
    return G.make_model(cfg)


@functools.cache
def elbo_fns(local=False):
    """Jitted ``init(key, cov, y) -> params`` and ``loss(params, rng, cov, y, mask, counts)`` of
    :func:`elbo_model` (``n_total = 12``, no dropout, one particle)."""
    model = elbo_model(local)
    elbo = TraceMeanField_ELBO(num_particles=1)
    svi = numpyro.infer.SVI(model.model, model.guide, numpyro.optim.Adam(1e-3), elbo)

    def init(key, cov, y):
        return svi.get_params(svi.init(key, cov, y, None, ELBO_N, False))

    def loss(params, rng, cov, y, mask, counts):
        return elbo.loss(rng, params, model.model, model.guide, cov, y, mask, ELBO_N, False,
                         level_counts=counts)  # fmt: skip

    return jax.jit(init), jax.jit(loss)


@functools.cache
def elbo_data():
    """``(cov, y, params)`` in float64 (call under ``jax.enable_x64``; shared, do not mutate)."""
    cov = tiny_covariates(5, n=ELBO_N, n_subjects=ELBO_SUBJECTS)
    cat = np.array(cov.categorical)
    cat[:, 2] = np.arange(ELBO_N) % 3
    cov = cov._replace(categorical=jnp.asarray(cat))
    y = jnp.asarray(np.random.default_rng(6).normal(size=(ELBO_N, 4)))
    init, _ = elbo_fns()
    return cov, y, init(jax.random.key(0), cov, y)


def test_elbo_equals_a_hand_computed_value():
    model = elbo_model()
    comps = {c.name: c for c in model.config.components}

    @jax.jit
    def by_hand(params, rng, cov, y):
        # the single-particle estimate by hand: the guide draw that ELBO uses, then
        # log N(y | g(z), vy) + closed-form KLs
        _, guide_key = jax.random.split(rng)
        guide = numpyro.handlers.substitute(numpyro.handlers.seed(model.guide, guide_key), params)
        tr = numpyro.handlers.trace(guide).get_trace(cov, y, None, ELBO_N, False)
        draws = {name: site["value"] for name, site in tr.items() if site["type"] == "sample"}
        z = G.latent({name: draws[f"{name}/w"] for name in comps}, cov, tuple(comps.values()))
        mean = model.decoder.apply({"params": params["decoder$params"]}, z)
        vy = jax.nn.softplus(params["vy_raw"]) + model.config.vy_floor
        vy = vy[None, :]
        loglik = jnp.sum(-0.5 * ((y - mean) ** 2 / vy + jnp.log(2 * jnp.pi * vy)))

        def kl(mu, s, prior_var):
            return jnp.sum(0.5 * ((s**2 + mu**2) / prior_var - 1.0 - jnp.log(s**2 / prior_var)))

        kls = 0.0
        for name, comp in comps.items():
            alpha = ell = None
            if comp.has_hyperparameters:
                alpha = jnp.exp(draws[f"{name}/log_alpha"])
                ell = jnp.exp(draws[f"{name}/log_lengthscale"])
                for hyper in ("alpha", "lengthscale"):
                    loc, scale = (params[f"{name}/log_{hyper}_{s}"] for s in ("loc", "scale"))
                    kls += kl(loc, scale, 1.0)
            prior_var = G.prior_scales(comp, alpha, ell, 2, model.config.spectral_jitter) ** 2
            kls += kl(params[f"{name}/w_loc"], jax.nn.softplus(params[f"{name}/w_rho"]), prior_var)
        return kls - loglik

    with jax.enable_x64(True):
        cov, y, params = elbo_data()
        _, loss = elbo_fns()
        rng = jax.random.key(7)
        got = loss(params, rng, cov, y, None, ELBO_COUNTS)
        assert float(got) == pytest.approx(float(by_hand(params, rng, cov, y)), rel=1e-10)


def test_masked_targets_do_not_change_the_loss():
    with jax.enable_x64(True):
        cov, y, params = elbo_data()
        _, loss = elbo_fns()
        mask = jnp.ones((ELBO_N, 4)).at[2, 1].set(0.0).at[4].set(0.0)
        y2 = y.at[2, 1].set(100.0).at[4].set(-50.0)
        rng = jax.random.key(8)
        masked = [float(loss(params, rng, cov, yy, mask, ELBO_COUNTS)) for yy in (y, y2)]
        assert masked[0] == pytest.approx(masked[1], rel=1e-12)
        # the mask does remove terms: unmasked, the outliers change the loss
        assert float(loss(params, rng, cov, y2, None, ELBO_COUNTS)) > masked[0] + 100.0


def test_minibatch_elbo_is_unbiased_over_a_partition():
    # same guide draw (same key) per batch: the N/|b|-scaled batch losses average to the full one
    with jax.enable_x64(True):
        cov, y, params = elbo_data()
        _, loss = elbo_fns()
        rng = jax.random.key(11)
        full = loss(params, rng, cov, y, None, ELBO_COUNTS)
        parts = [
            loss(params, rng, cov.take(idx), y[idx], None, ELBO_COUNTS)
            for idx in np.arange(ELBO_N).reshape(3, 4)
        ]
        assert float(np.mean(parts)) == pytest.approx(float(full), rel=1e-10)


def test_elbo_gradient_matches_finite_differences():
    with jax.enable_x64(True):
        cov, y, params = elbo_data()
        _, loss = elbo_fns()
        rng = jax.random.key(5)
        grads = jax.jit(jax.grad(loss))(params, rng, cov, y, None, ELBO_COUNTS)
        eps = 1e-6
        for name, index in (
            ("t/w_loc", (2, 1)),
            ("id/w_loc", (1, 0)),
            ("t_x_id/w_loc", (2, 3, 1)),
            ("t/log_lengthscale_loc", ()),
            ("t_x_id/log_alpha_loc", ()),
        ):

            def bump(d, name=name, index=index):
                value = np.array(params[name])
                value[index] += d
                return {**params, name: jnp.asarray(value)}

            fd = [float(loss(bump(d), rng, cov, y, None, ELBO_COUNTS)) for d in (eps, -eps)]
            fd = (fd[0] - fd[1]) / (2 * eps)
            assert float(grads[name][index]) == pytest.approx(fd, rel=1e-4, abs=1e-8), name


def test_local_subject_samples_give_the_same_elbo_on_a_full_batch():
    # full batch: sum_i KL_{p_i} / n_{p_i} = sum_p KL_p exactly, so both estimators agree
    with jax.enable_x64(True):
        cov, y, params = elbo_data()
        rng = np.random.default_rng(9)
        params = dict(params)
        # every posterior nearly a point mass, so the draws do not depend on the site order
        for name in ("t", "id", "t_x_id"):
            shape = params[f"{name}/w_loc"].shape
            params[f"{name}/w_loc"] = jnp.asarray(rng.normal(size=shape))
            params[f"{name}/w_rho"] = jnp.full(shape, -30.0)
        for name in ("t", "t_x_id"):
            for hyper in ("alpha", "lengthscale"):
                params[f"{name}/log_{hyper}_scale"] = jnp.asarray(1e-12)
        losses = [
            float(elbo_fns(local)[1](params, jax.random.key(3), cov, y, None, ELBO_COUNTS))
            for local in (False, True)
        ]
        assert losses[1] == pytest.approx(losses[0], rel=1e-6)
        with pytest.raises(ValueError, match="level_counts"):
            elbo_fns(True)[1](params, jax.random.key(3), cov, y, None, None)


# ---- SVI training (float32) --------------------------------------------------------------------


def shard_components(n_subjects=5):
    """One component of each code path of :func:`~jaxlab.probabilistic.gp_vae.latent` (dense
    GEMM: SE and binary; gathers: categorical and SE x categorical), both one-hot ones subject
    effects (the rows that ``local_subject_samples`` draws per observation)."""
    return (
        G.se("t", 0, num_basis=8, boundary=4.0),
        G.binary("sex", 0),
        G.categorical("id", 2, n_subjects, subject=True),
        G.se_x_categorical("t_x_id", 0, 2, n_subjects, num_basis=8, boundary=4.0, subject=True),
    )


@functools.cache
def svi_setup(local):
    """A model, its trainer on 64 rows (batches of 16) and the data: all seven components
    without ``local_subject_samples``; with it, the four of :func:`shard_components` (the other
    three are unaffected by the flag and trained without it)."""
    comps = shard_components() if local else tiny_components()
    cfg = G.GPVAEConfig(comps, latent_dim=3, output_dim=4, decoder_hidden=(16,), num_particles=2,
                        local_subject_samples=local)  # fmt: skip
    model = G.make_model(cfg)
    cov = tiny_covariates(7, n=64)
    y = (
        jnp.tanh(cov.continuous[:, :1] * jnp.arange(1.0, 5.0)[None, :])
        + 0.1 * cov.categorical[:, :1]
    )
    trainer = G.make_trainer(model, 64, batch_size=16, learning_rate=1e-2)
    return model, trainer, cov, y


@pytest.mark.parametrize("local", [False, True])
def test_svi_epochs_reduce_the_loss_and_predict_is_finite(key, local):
    model, trainer, cov, y = svi_setup(local)
    state = trainer.init(key, cov, y)
    assert isinstance(state, G.GPVAEState) and int(state.step) == 0
    other = trainer.init(jax.random.fold_in(key, 1), cov, y)  # new values, same shapes
    assert not np.allclose(trainer.params(state)["t/w_rho"], trainer.params(other)["t/w_rho"])
    # the 40-epoch program (40 SVI epochs of 4 minibatch steps) traces the step once
    (state, metrics), (other, _) = assert_traces_once(
        lambda s: jax.lax.scan(trainer.step, s, None, length=40), [(state,), (other,)],
        name="40 SVI epochs",
    )  # fmt: skip
    assert int(state.step) == 40 and int(other.step) == 40 and set(metrics) == {"loss", "finite"}
    losses = np.asarray(metrics["loss"])
    assert np.asarray(metrics["finite"]).all()
    assert losses[-5:].mean() < losses[:5].mean() - 0.5
    predict = jax.jit(lambda p, c: (G.predict(model, p, c), G.predict(model, p, c, True)))
    pred, pred_new = predict(trainer.params(state), cov)
    assert pred.shape == (64, 4) and bool(jnp.all(jnp.isfinite(pred)))
    assert not np.allclose(pred, pred_new)  # subject effects were learned and can be dropped
    assert float(jnp.mean((pred - y) ** 2)) < float(jnp.mean((y - y.mean(0, keepdims=True)) ** 2))


def test_sharded_svi_step_equals_unsharded(key, mesh):
    from jaxlab.core import sharding

    cfg = G.GPVAEConfig(shard_components(), latent_dim=3, output_dim=4, decoder_hidden=(8,),
                        dropout=0.0, num_particles=2)  # fmt: skip
    model = G.make_model(cfg)
    cov = tiny_covariates(8, n=16)
    y = jnp.asarray(np.random.default_rng(8).normal(size=(16, 4)), jnp.float32)
    trainer = G.make_trainer(model, 16, batch_size=16)
    state = trainer.init(key, cov, y)
    update = jax.jit(lambda s, c, yy: trainer.svi.update(s, c, yy, None, 16, True))
    ref_state, ref_loss = update(state.svi_state, cov, y)
    c_s, y_s = sharding.shard_batch((cov, y), mesh)
    s_state, s_loss = update(sharding.replicate(state.svi_state, mesh), c_s, y_s)
    assert len(y_s.sharding.device_set) == 4  # the batch really was split over the devices
    assert float(s_loss) == pytest.approx(float(ref_loss), rel=1e-5)
    ref_p, s_p = trainer.svi.get_params(ref_state), trainer.svi.get_params(s_state)
    for a, b in zip(jax.tree_util.tree_leaves(s_p), jax.tree_util.tree_leaves(ref_p), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


def test_bad_covariates_and_config_raise(key):
    comps = tiny_components()
    cov = tiny_covariates(9)
    cat, cont = np.array(cov.categorical), np.array(cov.continuous)
    cat[0, 2], cont[0, 0] = 9, 4.5
    with pytest.raises(ValueError, match="unknown level"):
        G.check_covariates(cov._replace(categorical=jnp.asarray(cat)), comps)
    with pytest.raises(ValueError, match="outside the basis domain"):
        G.check_covariates(cov._replace(continuous=jnp.asarray(cont)), comps)
    with pytest.raises(ValueError, match="unique names"):
        G.GPVAEConfig((G.se("a", 0), G.se("a", 1)))
    with pytest.raises(ValueError, match="objective"):
        G.GPVAEConfig((G.se("a", 0),), objective="map")
    model = G.make_model(G.GPVAEConfig(comps, latent_dim=3, output_dim=4))
    with pytest.raises(ValueError, match="batch_size"):
        G.make_trainer(model, 12, batch_size=13)
    with pytest.raises(ValueError, match="`y` must have shape"):
        G.make_trainer(model, 12, batch_size=4).init(key, cov, jnp.zeros((12, 5)))
    with pytest.raises(ValueError, match="num_basis"):
        G.hs_sqrt_eigenvalues(0, 1.0)
    trainer = G.make_trainer(model, 12, batch_size=4)
    with pytest.raises(ValueError, match="`y_mask` must have shape"):
        trainer.init(key, cov, jnp.zeros((12, 4)), jnp.ones((12, 3)))
    with pytest.raises(ValueError, match="n_total=12"):
        trainer.init(key, cov.take(np.arange(8)), jnp.zeros((8, 4)))
    with pytest.raises(ValueError, match="`x` must be None"):
        trainer.step(None, jnp.zeros(3))
    with pytest.raises(ValueError, match="`learning_rate`"):
        G.make_trainer(model, 12, batch_size=4, learning_rate=0.0)
    with pytest.raises(ValueError, match="`cov.continuous` must have rank 2"):
        G.check_covariates(cov._replace(continuous=cov.continuous[:, 0]), comps)
    with pytest.raises(ValueError, match="`cov.categorical_mask` must have shape"):
        G.check_covariates(cov._replace(categorical_mask=jnp.ones((12, 1))), comps)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("latent_dim", 0),
        ("output_dim", 2.5),
        ("decoder_hidden", (8, 0)),
        ("dropout", 1.0),
        ("alpha_init", -1.0),
        ("lengthscale_init", 0.0),
        ("hyper_scale_init", 0.0),
        ("spectral_jitter", -1e-3),
        ("vy_floor", 0.0),
        ("kl_weight", -0.1),
        ("num_particles", 0),
        ("fused", 1),
        ("local_subject_samples", "yes"),
    ],
)
def test_config_errors_name_the_field(field, value):
    with pytest.raises(ValueError, match=f"`{field}`"):
        G.GPVAEConfig((G.se("t", 0),), **{field: value})


def test_config_is_frozen_hashable_and_components_are_validated():
    cfg = G.GPVAEConfig([G.se("t", 0), G.binary("sex", 0)], decoder_hidden=[16])
    assert isinstance(cfg.components, tuple) and cfg.decoder_hidden == (16,)
    hash(cfg)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.latent_dim = 3  # type: ignore[misc]
    with pytest.raises(ValueError, match="`kind` must be one of"):
        G.Component("a", "periodic", continuous=0)
    with pytest.raises(ValueError, match="component 'a': `levels` must be >= 1"):
        G.categorical("a", 0, 0)
    with pytest.raises(ValueError, match="`num_basis` must be >= 1"):
        G.se("a", 0, num_basis=0)
    with pytest.raises(ValueError, match="`boundary` must be > 0"):
        G.se("a", 0, boundary=0.0)
    with pytest.raises(ValueError, match="needs a column index `continuous`"):
        G.Component("a", "se")
    with pytest.raises(ValueError, match="`subject` needs a one-hot kind"):
        G.Component("a", "se", continuous=0, subject=True)
    with pytest.raises(ValueError, match="`components` must not be empty"):
        G.GPVAEConfig(())


class HandWrittenDecoder(nn.Module):
    """The decoder gp_vae used to define itself: Dense -> ReLU -> Dropout per hidden width."""

    hidden: tuple
    output_dim: int
    dropout: float

    @nn.compact
    def __call__(self, z, deterministic=True):
        for h in self.hidden:
            z = nn.Dropout(self.dropout, deterministic=deterministic)(nn.relu(nn.Dense(h)(z)))
        return nn.Dense(self.output_dim)(z)


def test_decoder_is_the_core_mlp_with_the_same_params_and_dropout_stream(key):
    cfg = G.GPVAEConfig((G.se("t", 0),), latent_dim=3, output_dim=5, decoder_hidden=(16, 8),
                        dropout=0.3)  # fmt: skip
    dec, ref = cfg.decoder(), HandWrittenDecoder((16, 8), 5, 0.3)

    @jax.jit
    def both(key):  # one program: the inits and the applies of both decoders
        z = jax.random.normal(key, (7, 3))
        p, p_ref = dec.init(key, z), ref.init(key, z)
        rng = {"dropout": jax.random.fold_in(key, 1)}
        out = dec.apply(p, z, deterministic=False, rngs=rng)
        out_ref = ref.apply(p_ref, z, deterministic=False, rngs=rng)
        return p, p_ref, out, out_ref, dec.apply(p, z)

    p, p_ref, out, out_ref, out_eval = both(key)
    assert sorted(p["params"]) == ["Dense_0", "Dense_1", "Dense_2"]
    jax.tree_util.tree_map(np.testing.assert_array_equal, p, p_ref)
    np.testing.assert_array_equal(out, out_ref)
    assert not np.allclose(out, out_eval)  # dropout was active


def test_health_digits_components_and_config():
    comps = G.health_digits_components(7, num_basis=5, boundary=3.0)
    assert tuple(c.name for c in comps) == G.HEALTH_DIGITS_COMPONENTS
    by_name = {c.name: c for c in comps}
    assert by_name["id"].subject and by_name["t_x_id"].subject and by_name["t_x_id"].levels == 7
    assert by_name["t"].num_basis == 5 and by_name["t"].boundary == 3.0
    assert (by_name["age"].continuous, by_name["disease"].categorical) == (1, 1)
    cfg = G.health_digits_config(7, exclude=("t_x_id",), latent_dim=4, num_particles=1)
    assert "t_x_id" not in {c.name for c in cfg.components} and len(cfg.components) == 6
    assert (cfg.output_dim, cfg.latent_dim, cfg.num_particles) == (64, 4, 1)
    data = G.health_digits(jax.random.key(0), 3, 4)
    G.check_covariates(data.covariates(), G.health_digits_components(3))  # columns and levels fit
    with pytest.raises(ValueError, match="`exclude` names unknown components"):
        G.health_digits_components(3, exclude=("time",))
    with pytest.raises(ValueError, match="`n_subjects`"):
        G.health_digits_components(0)


def test_kl_matches_numpyro_closed_form():
    q = dist.Normal(jnp.array([0.3, -1.0]), jnp.array([0.2, 0.5]))
    p = dist.Normal(0.0, jnp.array([0.7, 1.5]))
    mine = 0.5 * ((q.scale**2 + q.loc**2) / p.scale**2 - 1 - jnp.log(q.scale**2 / p.scale**2))
    np.testing.assert_allclose(dist.kl_divergence(q, p), mine, rtol=1e-6)

"""Bad input to every public entry point of ``jaxlab.probabilistic.gp_vae`` gets a clear error.

One table of ``(entry point, bad argument, call, exception type, message fragment)``: wrong types,
ranks, shapes and dtypes, out-of-range values, NaN / inf data, empty data, parameters of another
model size and wrong PRNG keys. Every error is raised at the boundary, before anything is
compiled; the last test checks that a diverged (non-finite) epoch is flagged, not reported.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.probabilistic import gp_vae as G
from jaxlab.probabilistic.gp_vae import baselines as B

KEY = jax.random.key(0)
N, D, L = 6, 4, 2
SE = G.se("t", 0, num_basis=3, boundary=3.0)
COMPS = (SE, G.binary("sex", 0), G.categorical("id", 1, 3, subject=True))
CFG = G.GPVAEConfig(COMPS, latent_dim=L, output_dim=D, decoder_hidden=(4,), num_particles=1)
U32_3 = jnp.zeros(3, jnp.uint32)
F32_2 = jnp.zeros(2, jnp.float32)


@functools.cache
def v():
    """The valid inputs, built once (nothing here compiles a training program)."""
    cov = G.Covariates(
        jnp.linspace(-1.0, 1.0, N)[:, None],
        jnp.stack([jnp.arange(N) % 2, jnp.arange(N) % 3], axis=1).astype(jnp.int32),
    )
    model = G.make_model(CFG)
    trainer = G.make_trainer(model, N, batch_size=3)
    weights = {c.name: jnp.zeros(c.weight_shape(L)) for c in COMPS}
    dec = model.decoder.init(jax.random.key(1), jnp.zeros((1, L)))["params"]
    params = {**{f"{c.name}/w_loc": w for c, w in zip(COMPS, weights.values(), strict=True)},
              "decoder$params": dec}  # fmt: skip
    data = G.health_digits(KEY, 2, 2)
    return dict(cov=cov, y=jnp.zeros((N, D)), model=model, trainer=trainer, weights=weights,
                params=params, data=data)  # fmt: skip


def cov_with(**fields):
    return v()["cov"]._replace(**fields)


def cont(value, row=0):
    return v()["cov"].continuous.at[row, 0].set(value)


def cat(value, col=1):
    return v()["cov"].categorical.at[0, col].set(value)


def init(**kw):
    args = dict(key=KEY, cov=v()["cov"], y=v()["y"])
    return v()["trainer"].init(**{**args, **kw})


def config(**kw):
    return G.GPVAEConfig(COMPS, **kw)


def latent(fn=G.latent, **kw):
    args = dict(weights=v()["weights"], cov=v()["cov"], components=COMPS)
    return fn(**{**args, **kw})


def predict(**kw):
    args = dict(model=v()["model"], params=v()["params"], cov=v()["cov"])
    return G.predict(**{**args, **kw})


def weights_with(name, value):
    return {**v()["weights"], name: value}


def other_decoder():
    net = G.GPVAEConfig(COMPS, latent_dim=L, output_dim=D + 1, decoder_hidden=(4,)).decoder()
    return net.init(jax.random.key(2), jnp.zeros((1, L)))["params"]


def feats():
    return B.covariate_features(v()["cov"], 3, 1)


def kl(**kw):
    args = dict(kern=jnp.eye(N), mu=jnp.zeros((N, L)), log_sd=jnp.zeros((N, L)))
    return B.gp_prior_kl(**{**args, **kw})


def params_without(name):
    return {k: p for k, p in v()["params"].items() if k != name}


# (entry point / argument, call, exception, message fragment)
CASES = [
    # ---- components ----
    ("Component.name empty", lambda: G.Component("", "se", continuous=0), ValueError, "`name`"),
    ("Component.name int", lambda: G.Component(3, "se", continuous=0), ValueError, "`name`"),
    ("Component.kind", lambda: G.Component("a", "periodic", continuous=0), ValueError, "`kind`"),
    ("Component.kind list", lambda: G.Component("a", ["se"], continuous=0), ValueError, "`kind`"),
    ("se.column negative", lambda: G.se("a", -1), ValueError, "`continuous`"),
    ("se.column float", lambda: G.se("a", 1.5), ValueError, "`continuous`"),
    ("se.column str", lambda: G.se("a", "0"), ValueError, "`continuous`"),
    ("se.num_basis 2.5", lambda: G.se("a", 0, num_basis=2.5), ValueError, "`num_basis`"),
    ("se.num_basis 0", lambda: G.se("a", 0, num_basis=0), ValueError, "`num_basis`"),
    ("se.boundary nan", lambda: G.se("a", 0, boundary=float("nan")), ValueError, "`boundary`"),
    ("se.boundary str", lambda: G.se("a", 0, boundary="4"), ValueError, "`boundary`"),
    ("se.boundary negative", lambda: G.se("a", 0, boundary=-1.0), ValueError, "`boundary`"),
    ("categorical.levels 2.5", lambda: G.categorical("a", 0, 2.5), ValueError, "`levels`"),
    ("categorical.levels 0", lambda: G.categorical("a", 0, 0), ValueError, "`levels`"),
    (
        "categorical.subject str",
        lambda: G.categorical("a", 0, 3, subject="yes"),
        ValueError,
        "`subject`",
    ),
    (
        "Component.subject on se",
        lambda: G.Component("a", "se", continuous=0, subject=True),
        ValueError,
        "`subject`",
    ),
    ("binary.column None", lambda: G.binary("a", None), ValueError, "`categorical`"),
    (
        "binary.levels 3",
        lambda: G.Component("a", "binary", categorical=0, levels=3),
        ValueError,
        "`levels`",
    ),
    (
        "se_x_categorical.column -1",
        lambda: G.se_x_categorical("a", 0, -1, 2),
        ValueError,
        "`categorical`",
    ),
    # ---- GPVAEConfig ----
    ("GPVAEConfig.latent_dim 0", lambda: config(latent_dim=0), ValueError, "`latent_dim`"),
    ("GPVAEConfig.latent_dim 2.5", lambda: config(latent_dim=2.5), ValueError, "`latent_dim`"),
    ("GPVAEConfig.output_dim -1", lambda: config(output_dim=-1), ValueError, "`output_dim`"),
    (
        "GPVAEConfig.decoder_hidden int",
        lambda: config(decoder_hidden=64),
        ValueError,
        "`decoder_hidden`",
    ),
    (
        "GPVAEConfig.decoder_hidden 2.5",
        lambda: config(decoder_hidden=(8, 2.5)),
        ValueError,
        "`decoder_hidden`",
    ),
    ("GPVAEConfig.dropout 1.5", lambda: config(dropout=1.5), ValueError, "`dropout`"),
    ("GPVAEConfig.dropout str", lambda: config(dropout="0.1"), TypeError, "`dropout`"),
    ("GPVAEConfig.dropout nan", lambda: config(dropout=float("nan")), ValueError, "`dropout`"),
    ("GPVAEConfig.alpha_init 0", lambda: config(alpha_init=0.0), ValueError, "`alpha_init`"),
    (
        "GPVAEConfig.lengthscale_init inf",
        lambda: config(lengthscale_init=float("inf")),
        ValueError,
        "`lengthscale_init`",
    ),
    (
        "GPVAEConfig.hyper_scale_init -1",
        lambda: config(hyper_scale_init=-1.0),
        ValueError,
        "`hyper_scale_init`",
    ),
    (
        "GPVAEConfig.spectral_jitter -1e-3",
        lambda: config(spectral_jitter=-1e-3),
        ValueError,
        "`spectral_jitter`",
    ),
    ("GPVAEConfig.vy_floor 0", lambda: config(vy_floor=0.0), ValueError, "`vy_floor`"),
    ("GPVAEConfig.objective", lambda: config(objective="map"), ValueError, "`objective`"),
    ("GPVAEConfig.objective list", lambda: config(objective=["elbo"]), ValueError, "`objective`"),
    ("GPVAEConfig.kl_weight -1", lambda: config(kl_weight=-1.0), ValueError, "`kl_weight`"),
    ("GPVAEConfig.num_particles 0", lambda: config(num_particles=0), ValueError, "`num_particles`"),
    (
        "GPVAEConfig.num_particles 1.5",
        lambda: config(num_particles=1.5),
        ValueError,
        "`num_particles`",
    ),
    ("GPVAEConfig.fused int", lambda: config(fused=1), ValueError, "`fused`"),
    (
        "GPVAEConfig.local_subject_samples str",
        lambda: config(local_subject_samples="yes"),
        ValueError,
        "`local_subject_samples`",
    ),
    ("GPVAEConfig.components empty", lambda: G.GPVAEConfig(()), ValueError, "`components`"),
    ("GPVAEConfig.components one", lambda: G.GPVAEConfig(SE), ValueError, "`components`"),
    ("GPVAEConfig.components str", lambda: G.GPVAEConfig(("t",)), ValueError, "`components`"),
    ("GPVAEConfig.components names", lambda: G.GPVAEConfig((SE, SE)), ValueError, "`components`"),
    # ---- make_model / make_trainer ----
    ("make_model cfg", lambda: G.make_model("cfg"), TypeError, "`cfg`"),
    ("make_trainer model", lambda: G.make_trainer("model", N), TypeError, "`model`"),
    ("make_trainer n_total 0", lambda: G.make_trainer(v()["model"], 0), ValueError, "`n_total`"),
    (
        "make_trainer n_total float",
        lambda: G.make_trainer(v()["model"], 6.0),
        ValueError,
        "`n_total`",
    ),
    (
        "make_trainer batch_size > n_total",
        lambda: G.make_trainer(v()["model"], N, 7),
        ValueError,
        "`batch_size`",
    ),
    (
        "make_trainer batch_size 0",
        lambda: G.make_trainer(v()["model"], N, 0),
        ValueError,
        "`batch_size`",
    ),
    (
        "make_trainer learning_rate negative",
        lambda: G.make_trainer(v()["model"], N, 3, learning_rate=-1e-3),
        ValueError,
        "`learning_rate`",
    ),
    (
        "make_trainer learning_rate str",
        lambda: G.make_trainer(v()["model"], N, 3, learning_rate="fast"),
        TypeError,
        "`learning_rate`",
    ),
    (
        "make_trainer learning_rate nan",
        lambda: G.make_trainer(v()["model"], N, 3, learning_rate=float("nan")),
        ValueError,
        "`learning_rate`",
    ),
    # ---- trainer.init / trainer.step ----
    ("init key int", lambda: init(key=3), ValueError, "`key`"),
    ("init key float[2]", lambda: init(key=F32_2), ValueError, "`key`"),
    ("init key uint32[3]", lambda: init(key=U32_3), ValueError, "`key`"),
    ("init cov tuple", lambda: init(cov=(1, 2)), TypeError, "`cov`"),
    ("init y None", lambda: init(y=None), TypeError, "`y`"),
    ("init y str", lambda: init(y="images"), TypeError, "`y`"),
    ("init y shape", lambda: init(y=jnp.zeros((N, D + 1))), ValueError, "`y`"),
    ("init y nan", lambda: init(y=v()["y"].at[0, 0].set(jnp.nan)), ValueError, "`y`"),
    ("init y_mask shape", lambda: init(y_mask=jnp.ones((N, D - 1))), ValueError, "`y_mask`"),
    ("init y_mask values", lambda: init(y_mask=jnp.full((N, D), 2.0)), ValueError, "`y_mask`"),
    (
        "init cov rows != n_total",
        lambda: init(cov=v()["cov"].take(np.arange(4)), y=jnp.zeros((4, D))),
        ValueError,
        "n_total",
    ),
    (
        "init cov.categorical float",
        lambda: init(cov=cov_with(categorical=v()["cov"].categorical.astype(jnp.float32))),
        TypeError,
        "`cov.categorical`",
    ),
    (
        "init cov.continuous nan",
        lambda: init(cov=cov_with(continuous=cont(jnp.nan))),
        ValueError,
        "`cov.continuous`",
    ),
    (
        "init cov.continuous outside the basis domain",
        lambda: init(cov=cov_with(continuous=cont(3.5))),
        ValueError,
        "`cov.continuous`",
    ),
    (
        "init cov.categorical unknown level",
        lambda: init(cov=cov_with(categorical=cat(5))),
        ValueError,
        "`cov.categorical`",
    ),
    (
        "init cov.categorical negative",
        lambda: init(cov=cov_with(categorical=cat(-1, col=0))),
        ValueError,
        "`cov.categorical`",
    ),
    (
        "init cov.continuous rank 1",
        lambda: init(cov=cov_with(continuous=v()["cov"].continuous[:, 0])),
        ValueError,
        "`cov.continuous`",
    ),
    (
        "init cov.continuous no column",
        lambda: init(cov=cov_with(continuous=jnp.zeros((N, 0)))),
        ValueError,
        "`cov.continuous`",
    ),
    (
        "init cov.categorical rows",
        lambda: init(cov=cov_with(categorical=v()["cov"].categorical[:4])),
        ValueError,
        "`cov.continuous`",
    ),
    ("step state str", lambda: v()["trainer"].step("state"), TypeError, "`state`"),
    ("step x", lambda: v()["trainer"].step(None, jnp.zeros(3)), ValueError, "`x`"),
    # ---- check_covariates ----
    (
        "check_covariates components str",
        lambda: G.check_covariates(v()["cov"], "comps"),
        TypeError,
        "`components`",
    ),
    (
        "check_covariates components empty",
        lambda: G.check_covariates(v()["cov"], []),
        ValueError,
        "`components`",
    ),
    (
        "check_covariates N = 0",
        lambda: G.check_covariates(v()["cov"].take(np.arange(0)), COMPS),
        ValueError,
        "`cov`",
    ),
    (
        "check_covariates categorical_mask shape",
        lambda: G.check_covariates(cov_with(categorical_mask=jnp.ones((N, 1))), COMPS),
        ValueError,
        "`cov.categorical_mask`",
    ),
    (
        "check_covariates continuous_mask values",
        lambda: G.check_covariates(cov_with(continuous_mask=jnp.full((N, 1), 0.5)), COMPS),
        ValueError,
        "`cov.continuous_mask`",
    ),
    (
        "check_covariates continuous str",
        lambda: G.check_covariates(cov_with(continuous="t"), COMPS),
        TypeError,
        "`cov.continuous`",
    ),
    # ---- latent / latent_dense / component_latents ----
    (
        "latent weights missing",
        lambda: latent(weights={"t": v()["weights"]["t"]}),
        ValueError,
        "`weights`",
    ),
    (
        "latent weights shape",
        lambda: latent(weights=weights_with("t", jnp.zeros((3, L + 1)))),
        ValueError,
        "`weights",
    ),
    (
        "latent weights list",
        lambda: latent(weights=list(v()["weights"].values())),
        TypeError,
        "`weights`",
    ),
    (
        "latent weights int dtype str",
        lambda: latent(weights=weights_with("sex", "w")),
        TypeError,
        "`weights",
    ),
    (
        "latent_dense new_subjects str",
        lambda: latent(G.latent_dense, new_subjects="no"),
        TypeError,
        "`new_subjects`",
    ),
    (
        "latent_dense cov nan",
        lambda: latent(G.latent_dense, cov=cov_with(continuous=cont(jnp.inf))),
        ValueError,
        "`cov.continuous`",
    ),  # fmt: skip
    (
        "component_latents weights nan",
        lambda: latent(G.component_latents, weights=weights_with("id", jnp.full((3, L), jnp.nan))),
        ValueError,
        "`weights",
    ),
    (
        "component_latents components str",
        lambda: latent(G.component_latents, components="t"),
        TypeError,
        "`components`",
    ),
    # ---- prior_scales ----
    ("prior_scales alpha -1", lambda: G.prior_scales(SE, -1.0, 1.0, L), ValueError, "`alpha`"),
    (
        "prior_scales lengthscale 0",
        lambda: G.prior_scales(SE, 1.0, 0.0, L),
        ValueError,
        "`lengthscale`",
    ),
    ("prior_scales alpha None", lambda: G.prior_scales(SE, None, 1.0, L), TypeError, "`alpha`"),
    (
        "prior_scales latent_dim 0",
        lambda: G.prior_scales(SE, 1.0, 1.0, 0),
        ValueError,
        "`latent_dim`",
    ),
    (
        "prior_scales jitter -1",
        lambda: G.prior_scales(SE, 1.0, 1.0, L, -1.0),
        ValueError,
        "`jitter`",
    ),
    ("prior_scales c str", lambda: G.prior_scales("se", 1.0, 1.0, L), TypeError, "`c`"),
    # ---- predict / posterior_mean_weights ----
    (
        "predict params missing",
        lambda: predict(params=params_without("t/w_loc")),
        ValueError,
        "`params`",
    ),
    (
        "predict params of another latent size",
        lambda: predict(params={**v()["params"], "t/w_loc": jnp.zeros((3, L + 1))}),
        ValueError,
        "`params",
    ),
    ("predict params str", lambda: predict(params="params"), TypeError, "`params`"),
    (
        "predict no decoder",
        lambda: predict(params=params_without("decoder$params")),
        ValueError,
        "`params`",
    ),
    (
        "predict decoder of another size",
        lambda: predict(params={**v()["params"], "decoder$params": other_decoder()}),
        ValueError,
        "`params",
    ),
    (
        "predict cov unknown level",
        lambda: predict(cov=cov_with(categorical=cat(3))),
        ValueError,
        "`cov.categorical`",
    ),
    ("predict new_subjects int", lambda: predict(new_subjects=1), TypeError, "`new_subjects`"),
    ("predict model", lambda: predict(model="model"), TypeError, "`model`"),
    (
        "posterior_mean_weights model",
        lambda: G.posterior_mean_weights(None, v()["params"]),
        TypeError,
        "`model`",
    ),
    # ---- bases ----
    (
        "hs_sqrt_eigenvalues num_basis 2.5",
        lambda: G.hs_sqrt_eigenvalues(2.5, 1.0),
        ValueError,
        "`num_basis`",
    ),
    (
        "hs_sqrt_eigenvalues boundary nan",
        lambda: G.hs_sqrt_eigenvalues(3, float("nan")),
        ValueError,
        "`boundary`",
    ),
    (
        "hs_sqrt_eigenvalues boundary -1",
        lambda: G.hs_sqrt_eigenvalues(3, -1.0),
        ValueError,
        "`boundary`",
    ),
    (
        "hs_sqrt_eigenvalues boundary str",
        lambda: G.hs_sqrt_eigenvalues(3, "1"),
        TypeError,
        "`boundary`",
    ),
    ("hs_basis x outside", lambda: G.hs_basis(jnp.array([0.0, 2.5]), 3, 2.0), ValueError, "`x`"),
    ("hs_basis x nan", lambda: G.hs_basis(jnp.array([0.0, jnp.nan]), 3, 2.0), ValueError, "`x`"),
    ("hs_basis x str", lambda: G.hs_basis("x", 3, 2.0), TypeError, "`x`"),
    ("hs_basis boundary 0", lambda: G.hs_basis(jnp.zeros(2), 3, 0.0), ValueError, "`boundary`"),
    (
        "hs_kernel x rank 2",
        lambda: G.hs_kernel(jnp.zeros((2, 2)), jnp.zeros(2), 3, 2.0),
        ValueError,
        "`x`",
    ),
    (
        "hs_kernel alpha -1",
        lambda: G.hs_kernel(jnp.zeros(2), jnp.zeros(2), 3, 2.0, alpha=-1.0),
        ValueError,
        "`alpha`",
    ),
    (
        "hs_kernel lengthscale 0",
        lambda: G.hs_kernel(jnp.zeros(2), jnp.zeros(2), 3, 2.0, lengthscale=0.0),
        ValueError,
        "`lengthscale`",
    ),
    (
        "se_spectral_density omega nan",
        lambda: G.se_spectral_density(jnp.array([jnp.nan]), 1.0, 1.0),
        ValueError,
        "`omega`",
    ),
    (
        "se_spectral_density lengthscale -1",
        lambda: G.se_spectral_density(jnp.ones(2), 1.0, -1.0),
        ValueError,
        "`lengthscale`",
    ),
    ("binary_features x 2", lambda: G.binary_features(jnp.array([0, 2])), ValueError, "`x`"),
    ("binary_features x 0.5", lambda: G.binary_features(jnp.array([0.5])), ValueError, "`x`"),
    ("binary_features None", lambda: G.binary_features(None), TypeError, "`x`"),
    (
        "default_boundary max_abs_x -1",
        lambda: G.default_boundary(-1.0, 1.0),
        ValueError,
        "`max_abs_x`",
    ),
    (
        "default_boundary max_lengthscale 0",
        lambda: G.default_boundary(1.0, 0.0),
        ValueError,
        "`max_lengthscale`",
    ),
    ("default_boundary str", lambda: G.default_boundary("1", 1.0), TypeError, "`max_abs_x`"),
    # ---- baselines (jaxlab.probabilistic.gp_vae.baselines) ----
    ("covariate_features cov", lambda: B.covariate_features("cov", 3, 1), TypeError, "`cov`"),
    (
        "covariate_features n_subjects 0",
        lambda: B.covariate_features(v()["cov"], 0, 1),
        ValueError,
        "`n_subjects`",
    ),
    (
        "covariate_features subject_column 5",
        lambda: B.covariate_features(v()["cov"], 3, 5),
        ValueError,
        "`subject_column`",
    ),
    (
        "covariate_features id >= n_subjects",
        lambda: B.covariate_features(v()["cov"], 2, 1),
        ValueError,
        "`cov.categorical`",
    ),
    ("fit_regression key", lambda: B.fit_regression(3, feats(), v()["y"]), ValueError, "`key`"),
    (
        "fit_regression feats rows",
        lambda: B.fit_regression(KEY, feats()[:3], v()["y"]),
        ValueError,
        "`feats`",
    ),
    (
        "fit_regression hidden int",
        lambda: B.fit_regression(KEY, feats(), v()["y"], hidden=64),
        ValueError,
        "`hidden`",
    ),
    (
        "fit_regression epochs -1",
        lambda: B.fit_regression(KEY, feats(), v()["y"], epochs=-1),
        ValueError,
        "`epochs`",
    ),
    (
        "fit_regression y nan",
        lambda: B.fit_regression(KEY, feats(), v()["y"].at[0, 0].set(jnp.nan)),
        ValueError,
        "`y`",
    ),  # fmt: skip
    (
        "fit_regression learning_rate 0",
        lambda: B.fit_regression(KEY, feats(), v()["y"], learning_rate=0.0),
        ValueError,
        "`learning_rate`",
    ),
    (
        "fit_cvae latent_dim 0",
        lambda: B.fit_cvae(KEY, feats(), v()["y"], latent_dim=0),
        ValueError,
        "`latent_dim`",
    ),
    (
        "fit_cvae dropout 1",
        lambda: B.fit_cvae(KEY, feats(), v()["y"], dropout=1.0),
        ValueError,
        "`dropout`",
    ),
    (
        "fit_exact_gpvae rows",
        lambda: B.fit_exact_gpvae(KEY, COMPS, v()["cov"], v()["y"][:3]),
        ValueError,
        "`cov`",
    ),
    (
        "fit_exact_gpvae jitter 0",
        lambda: B.fit_exact_gpvae(KEY, COMPS, v()["cov"], v()["y"], jitter=0.0),
        ValueError,
        "`jitter`",
    ),
    (
        "fit_exact_gpvae components str",
        lambda: B.fit_exact_gpvae(KEY, "c", v()["cov"], v()["y"]),
        TypeError,
        "`components`",
    ),
    (
        "exact_kernel hyper missing",
        lambda: B.exact_kernel(COMPS, v()["cov"], v()["cov"], {}),
        ValueError,
        "`hyper`",
    ),
    ("gp_prior_kl kern shape", lambda: kl(kern=jnp.eye(N + 1)), ValueError, "`kern`"),
    ("gp_prior_kl kern not PD", lambda: kl(kern=-jnp.eye(N)), ValueError, "positive definite"),
    ("gp_prior_kl log_sd shape", lambda: kl(log_sd=jnp.zeros((N, L + 1))), ValueError, "`log_sd`"),
    ("gp_prior_kl mu nan", lambda: kl(mu=jnp.full((N, L), jnp.nan)), ValueError, "`mu`"),
    # ---- data ----
    ("health_digits key int", lambda: G.health_digits(3, 2), ValueError, "`key`"),
    ("health_digits n_subjects 0", lambda: G.health_digits(KEY, 0), ValueError, "`n_subjects`"),
    ("health_digits n_times 2.5", lambda: G.health_digits(KEY, 2, 2.5), ValueError, "`n_times`"),
    (
        "health_digits noise -0.1",
        lambda: G.health_digits(KEY, 2, 2, noise=-0.1),
        ValueError,
        "`noise`",
    ),
    ("splits data str", lambda: G.splits("data", KEY), TypeError, "`data`"),
    ("splits key int", lambda: G.splits(v()["data"], 0), ValueError, "`key`"),
    (
        "splits new_fraction 1.5",
        lambda: G.splits(v()["data"], KEY, new_fraction=1.5),
        ValueError,
        "`new_fraction`",
    ),
    (
        "splits future_fraction -0.1",
        lambda: G.splits(v()["data"], KEY, future_fraction=-0.1),
        ValueError,
        "`future_fraction`",
    ),
    (
        "splits leave no training data",
        lambda: G.splits(v()["data"], KEY, new_fraction=0.9),
        ValueError,
        "`new_fraction`",
    ),
    (
        "health_digits_components n_subjects 2.5",
        lambda: G.health_digits_components(2.5),
        ValueError,
        "`n_subjects`",
    ),
    (
        "health_digits_components exclude str",
        lambda: G.health_digits_components(3, exclude="age"),
        ValueError,
        "`exclude`",
    ),
    (
        "health_digits_components exclude unknown",
        lambda: G.health_digits_components(3, exclude=("time",)),
        ValueError,
        "`exclude`",
    ),
    (
        "health_digits_components num_basis 0",
        lambda: G.health_digits_components(3, num_basis=0),
        ValueError,
        "`num_basis`",
    ),
    (
        "health_digits_config latent_dim 0",
        lambda: G.health_digits_config(3, latent_dim=0),
        ValueError,
        "`latent_dim`",
    ),
    (
        "health_digits_config boundary -1",
        lambda: G.health_digits_config(3, boundary=-1.0),
        ValueError,
        "`boundary`",
    ),
]

CASES += [
    (
        "health_digits_config unknown field",
        lambda: G.health_digits_config(3, latent=4),
        TypeError,
        "`fields`",
    ),
    (
        "hs_kernel lengthscale array",
        lambda: G.hs_kernel(jnp.zeros(2), jnp.zeros(2), 3, 2.0, lengthscale=[1.0, 2.0]),
        ValueError,
        "`lengthscale`",
    ),
    ("trainer.params state", lambda: v()["trainer"].params(None), TypeError, "`state`"),
]


@pytest.mark.parametrize(("call", "exc", "fragment"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_bad_input_gets_a_clear_error(call, exc, fragment):
    with pytest.raises(exc, match=fragment.replace("[", r"\[").replace(".", r"\.")):
        call()


def test_the_table_is_large_and_names_are_unique():
    assert len(CASES) >= 80
    assert len({c[0] for c in CASES}) == len(CASES)


def test_valid_tiny_inputs_pass_the_checks():
    # the valid inputs of the table are accepted (so each case fails on its bad argument only)
    G.check_covariates(v()["cov"], COMPS)
    assert latent().shape == (N, L)
    assert predict().shape == (N, D)
    assert G.prior_scales(SE, 1.0, 1.0, L).shape == (3, L)
    train, future, new = G.splits(v()["data"], KEY)
    assert len(train) and len(new)


def test_a_diverged_epoch_is_flagged_not_reported():
    trainer = v()["trainer"]
    state = init()
    nan = state.replace(y=state.y.at[0, 0].set(jnp.nan))  # past the boundary: NaN likelihood
    step = jax.jit(trainer.step)
    _, ok = step(state)
    _, bad = step(nan)  # the same compiled epoch
    assert bool(ok["finite"]) and np.isfinite(float(ok["loss"]))
    assert not bool(bad["finite"])
    with pytest.raises(ValueError, match="`state`"):  # a state of another trainer
        G.make_trainer(v()["model"], N + 2, batch_size=3).step(state)
    # the same data sizes, another latent width: the SVI parameters do not fit this trainer
    wide = G.make_model(dataclasses.replace(CFG, latent_dim=L + 1))
    with pytest.raises(ValueError, match=r"`state\.svi_state.*` must have shape"):
        G.make_trainer(wide, N, batch_size=3).step(state)

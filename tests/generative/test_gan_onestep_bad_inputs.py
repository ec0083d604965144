"""Bad input to jaxlab.generative.gan_onestep gets a clear error at the API boundary (issue 23).

One table of cases (entry point, argument, bad value, exception type, message fragment), run by
one parametrised test; every error is raised before anything compiles, so the file is fast. Then
the loops' ``finite`` flags: a run that became non-finite is flagged, never a silent number.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.generative import gan_onestep as G

NAN = float("nan")
KEY = jax.random.key(0)
X = jnp.asarray(np.random.default_rng(0).uniform(-1, 1, (4, 8, 8, 1)), jnp.float32)
X_NAN = X.at[0, 0, 0, 0].set(NAN)
X_INT = jnp.zeros((4, 8, 8, 1), jnp.int32)
F = jnp.asarray(np.random.default_rng(1).normal(size=(6, 2)), jnp.float32)  # features [N, D]
F4 = F.reshape(1, 1, 6, 2)  # [S, V, N, D]
REF = F.reshape(1, 6, 2)  # [S, M, D]
LABELS = jnp.array([0, 1, 2, 1], jnp.int32)
PROBS = jnp.full((4, 2), 0.5)
SIGMAS = jnp.array([2.0, 1.0, 0.0])
CFG = G.EDMConfig()
PARAMS = {"w": jnp.zeros(())}


def inner(p, x, c):
    return p["w"] * x


def disc(w, x):
    return [jnp.einsum("bhwc,hwc->b", x, w)[:, None, None, None]]


DEN = G.gaussian_denoiser(0.0, 0.5)
D_PARAMS = jnp.zeros((8, 8, 1))
PRE = G.make_pretrainer(inner, X, CFG, G.PretrainConfig(batch=2))
FT = G.make_finetuner(inner, PARAMS, disc, X, 0.5, G.FinetuneConfig(batch=2, r1_gamma=0.0))
FT_STATE = FT.init(KEY, PARAMS, D_PARAMS)
CLS = G.Classifier(G.ClassifierConfig(stages=(2,), width=2, epochs=1, batch=2))
HEADS = G.ProjectedHeads(hidden=2)
UNET = G.UNet(G.UNetConfig(channels=(4,), n_blocks=1, groups=4))


def kd_finetuner(pairs):
    return G.make_finetuner(inner, PARAMS, disc, X, 0.5, G.FinetuneConfig(batch=2, kd_weight=1.0),
                            kd_pairs=pairs)  # fmt: skip


# (id, call, exception, message fragment)
CASES = [
    # EDMConfig
    ("edm_sigma_data_negative", lambda: G.EDMConfig(sigma_data=-1.0), ValueError, "`sigma_data`"),
    ("edm_sigma_data_str", lambda: G.EDMConfig(sigma_data="0.5"), TypeError, "`sigma_data`"),
    ("edm_rho_nan", lambda: G.EDMConfig(rho=NAN), ValueError, "`rho`"),
    ("edm_p_std_bool", lambda: G.EDMConfig(p_std=True), TypeError, "`p_std`"),
    ("edm_p_mean_inf", lambda: G.EDMConfig(p_mean=float("inf")), ValueError, "`p_mean`"),
    ("edm_sigma_min_array", lambda: G.EDMConfig(sigma_min=np.array([0.1, 0.2])), ValueError,
     "`sigma_min`"),
    ("edm_sigma_max_below_min", lambda: G.EDMConfig(sigma_max=1e-3), ValueError, "`sigma_max`"),
    # check_images / check_sigma / precond
    ("images_str", lambda: G.check_images("abc"), TypeError, "`x`"),
    ("images_int", lambda: G.check_images(X_INT), TypeError, "`x`"),
    ("images_empty", lambda: G.check_images(jnp.zeros((0, 8, 8, 1))), ValueError, "`x`"),
    ("images_nan", lambda: G.check_images(X_NAN), ValueError, "`x` must be finite"),
    ("sigma_nan", lambda: G.check_sigma(jnp.array([NAN])), ValueError, "`sigma`"),
    ("sigma_negative", lambda: G.check_sigma(-1.0), ValueError, "`sigma`"),
    ("sigma_str", lambda: G.check_sigma("a"), TypeError, "`sigma`"),
    ("precond_sigma_data", lambda: G.precond(1.0, -0.5), ValueError, "`sigma_data`"),
    ("precond_sigma_zero", lambda: G.precond(0.0, 0.5), ValueError, "`sigma`"),
    ("precond_eps_negative", lambda: G.precond(1.0, 0.5, -0.1), ValueError, "`eps`"),
    # denoise / edm_loss
    ("denoise_inner", lambda: G.denoise("f", PARAMS, X, 1.0, 0.5), TypeError, "`inner`"),
    ("denoise_sigma_len", lambda: G.denoise(inner, PARAMS, X, jnp.ones(3), 0.5), ValueError,
     "`sigma`"),
    ("denoise_sigma_rank", lambda: G.denoise(inner, PARAMS, X, jnp.ones((4, 1)), 0.5), ValueError,
     "`sigma`"),
    ("denoise_sigma_data_nan", lambda: G.denoise(inner, PARAMS, X, 1.0, NAN), ValueError,
     "`sigma_data`"),
    ("denoise_x_list", lambda: G.denoise(inner, PARAMS, [[1.0]], 1.0, 0.5), TypeError, "`x`"),
    ("edm_loss_key_int", lambda: G.edm_loss(inner, PARAMS, X, 0, CFG), ValueError, "`key`"),
    ("edm_loss_key_u32x3", lambda: G.edm_loss(inner, PARAMS, X, jnp.zeros(3, jnp.uint32), CFG),
     ValueError, "`key`"),
    ("edm_loss_config", lambda: G.edm_loss(inner, PARAMS, X, KEY, {"sigma_data": 0.5}), TypeError,
     "`config`"),
    ("edm_loss_x0_rank", lambda: G.edm_loss(inner, PARAMS, X[..., 0], KEY, CFG), ValueError,
     "`x0`"),
    # Karras grid and Heun
    ("karras_sigma_r", lambda: G.karras_sigma(1.5, 0.002, 80.0, 7.0), ValueError, "`r`"),
    ("karras_sigma_order", lambda: G.karras_sigma(0.5, 80.0, 0.002, 7.0), ValueError,
     "`sigma_max`"),
    ("karras_sigma_rho", lambda: G.karras_sigma(0.5, 0.002, 80.0, -7.0), ValueError, "`rho`"),
    ("karras_steps_float", lambda: G.karras_steps(2.5, CFG), ValueError, "`n_steps`"),
    ("karras_steps_zero", lambda: G.karras_steps(0, CFG), ValueError, "`n_steps`"),
    ("karras_steps_bool", lambda: G.karras_steps(True, CFG), ValueError, "`n_steps`"),
    ("karras_steps_config", lambda: G.karras_steps(3, None), TypeError, "`config`"),
    ("heun_ascending", lambda: G.heun_sample(DEN, X, jnp.array([0.0, 1.0, 2.0])), ValueError,
     "`sigmas`"),
    ("heun_negative", lambda: G.heun_sample(DEN, X, jnp.array([1.0, -1.0, 0.0])), ValueError,
     "`sigmas`"),
    ("heun_nan", lambda: G.heun_sample(DEN, X, jnp.array([NAN, 1.0, 0.0])), ValueError,
     "`sigmas`"),
    ("heun_inf", lambda: G.heun_sample(DEN, X, jnp.array([np.inf, 1.0, 0.0])), ValueError,
     "`sigmas`"),
    ("heun_str", lambda: G.heun_sample(DEN, X, "abc"), TypeError, "`sigmas`"),
    ("heun_x_int", lambda: G.heun_sample(DEN, X_INT, SIGMAS), TypeError, "`x_init`"),
    ("heun_x_nan", lambda: G.heun_sample(DEN, X_NAN, SIGMAS), ValueError, "`x_init`"),
    ("heun_denoiser", lambda: G.heun_sample(None, X, SIGMAS), TypeError, "`denoiser`"),
    ("gaussian_std", lambda: G.gaussian_denoiser(0.0, -1.0), ValueError, "`std`"),
    ("gaussian_mean_nan", lambda: G.gaussian_denoiser(jnp.array([NAN]), 1.0), ValueError,
     "`mean`"),
    # metrics
    ("fd_nan", lambda: G.frechet_distance(F.at[0, 0].set(NAN), F), ValueError, "`feats_a`"),
    ("fd_one_sample", lambda: G.frechet_distance(F[:1], F), ValueError, "`feats_a`"),
    ("fd_dims", lambda: G.frechet_distance(F, F[:, :1]), ValueError, "`feats_b`"),
    ("fd_str", lambda: G.frechet_distance("a", F), TypeError, "`feats_a`"),
    ("fd_bool", lambda: G.frechet_distance(F > 0, F), TypeError, "`feats_a`"),
    ("gaussian_stats_rank", lambda: G.gaussian_stats(jnp.zeros(5)), ValueError, "`feats`"),
    ("sqrtm_not_square", lambda: G.sqrtm_psd(jnp.zeros((2, 3))), ValueError, "`a`"),
    ("fd_stats_mean_dim", lambda: G.frechet_distance_stats(F[0], jnp.eye(2), F[0, :1], jnp.eye(2)),
     ValueError, "`m_b`"),
    ("fd_boot_key", lambda: G.fd_bootstrap(0, F4, REF, 4), ValueError, "`key`"),
    ("fd_boot_n_zero", lambda: G.fd_bootstrap(KEY, F4, REF, 0), ValueError, "`n_boot`"),
    ("fd_boot_n_float", lambda: G.fd_bootstrap(KEY, F4, REF, 2.5), ValueError, "`n_boot`"),
    ("fd_boot_nan", lambda: G.fd_bootstrap(KEY, F4.at[0, 0, 0, 0].set(NAN), REF, 4), ValueError,
     "`feats`"),
    ("fd_boot_dims", lambda: G.fd_bootstrap(KEY, F4, REF[:, :, :1], 4), ValueError,
     "`reference`"),
    ("fd_contrast_weights_list", lambda: G.fd_contrast_bootstrap(KEY, F4, REF, [1.0, 2.0], 4),
     ValueError, "`weights`"),
    ("fd_contrast_weights_nan", lambda: G.fd_contrast_bootstrap(KEY, F4, REF, jnp.array([NAN])),
     ValueError, "`weights`"),
    ("score_rows", lambda: G.classifier_score(jnp.full((4, 3), 0.5)), ValueError, "`probs`"),
    ("score_range", lambda: G.classifier_score(jnp.array([[1.5, -0.5]])), ValueError, "`probs`"),
    ("score_empty", lambda: G.classifier_score(jnp.zeros((0, 3))), ValueError, "`probs`"),
    ("coverage_float_labels", lambda: G.class_coverage(jnp.array([0.0, 1.0]), 10), TypeError,
     "`labels`"),
    ("coverage_label_range", lambda: G.class_coverage(jnp.array([0, 12]), 10), ValueError,
     "`labels`"),
    ("coverage_n_classes", lambda: G.class_coverage(LABELS, 0), ValueError, "`n_classes`"),
    ("coverage_threshold", lambda: G.class_coverage(LABELS, 10, 1.5), ValueError, "`threshold`"),
    ("coverage_empty", lambda: G.class_coverage(jnp.zeros((0,), jnp.int32), 10), ValueError,
     "`labels`"),
    ("spectrum_rank", lambda: G.radial_power_spectrum(jnp.zeros((8, 8))), ValueError, "`images`"),
    ("spectrum_nan", lambda: G.radial_power_spectrum(X_NAN), ValueError, "`images`"),
    ("hf_ratio_shapes", lambda: G.high_band_power_ratio(X, jnp.zeros((4, 4, 4, 1))), ValueError,
     "`generated`"),
    ("hf_ratio_nan", lambda: G.high_band_power_ratio(X, X_NAN), ValueError, "`data`"),
    ("swd_shapes", lambda: G.sliced_wasserstein(F, F[:3], KEY), ValueError, "`x`"),
    ("swd_key", lambda: G.sliced_wasserstein(F, F, 0), ValueError, "`key`"),
    ("swd_n_proj", lambda: G.sliced_wasserstein(F, F, KEY, 0), ValueError, "`n_proj`"),
    ("swd_nan", lambda: G.sliced_wasserstein(F.at[0, 0].set(NAN), F, KEY), ValueError, "`x`"),
    ("mmd_bandwidth_negative", lambda: G.mmd_rbf(F, F, -1.0), ValueError, "`bandwidth`"),
    ("mmd_bandwidth_zero", lambda: G.mmd_rbf(F, F, 0.0), ValueError, "`bandwidth`"),
    ("mmd_dims", lambda: G.mmd_rbf(F, F[:, :1]), ValueError, "`y`"),
    ("mmd_nan", lambda: G.mmd_rbf(F, F.at[0, 0].set(NAN)), ValueError, "`y`"),
    # nets
    ("cls_stages_float", lambda: G.ClassifierConfig(stages=(4, 2.5)), ValueError, "`stages`"),
    ("cls_n_classes", lambda: G.ClassifierConfig(n_classes=1), ValueError, "`n_classes`"),
    ("cls_lr", lambda: G.ClassifierConfig(lr=-1e-3), ValueError, "`lr`"),
    ("cls_train_key", lambda: G.train_classifier(0, CLS, X, LABELS), ValueError, "`key`"),
    ("cls_train_float_labels", lambda: G.train_classifier(KEY, CLS, X, LABELS.astype(float)),
     TypeError, "`y`"),
    ("cls_train_label_range", lambda: G.train_classifier(KEY, CLS, X, LABELS + 20), ValueError,
     "`y`"),
    ("cls_train_nan", lambda: G.train_classifier(KEY, CLS, X_NAN, LABELS), ValueError, "`x`"),
    ("cls_train_classifier", lambda: G.train_classifier(KEY, "cls", X, LABELS), TypeError,
     "`classifier`"),
    ("accuracy_y_len", lambda: G.accuracy(CLS, {}, X, LABELS[:3]), ValueError, "`y`"),
    ("proj_d_classifier", lambda: G.projected_discriminator("c", {}, HEADS), TypeError,
     "`classifier`"),
    ("proj_d_pixels", lambda: G.projected_discriminator(CLS, {}, HEADS, "yes"), TypeError,
     "`pixels`"),
    ("spectral_kernel_rank", lambda: G.spectral_normalise(jnp.zeros(3)), TypeError, "`kernel`"),
    ("spectral_n_iter", lambda: G.spectral_normalise(jnp.ones((3, 3)), 0), ValueError, "`n_iter`"),
    ("unet_channels_float", lambda: G.UNetConfig(channels=(8, 2.5)), ValueError, "`channels`"),
    ("unet_channels_empty", lambda: G.UNetConfig(channels=()), ValueError, "`channels`"),
    ("unet_groups_zero", lambda: G.UNetConfig(groups=0), ValueError, "`groups`"),
    ("unet_n_heads", lambda: G.UNetConfig(n_heads=3), ValueError, "`n_heads`"),
    ("unet_out_channels", lambda: G.UNetConfig(out_channels=0), ValueError, "`out_channels`"),
    ("cls_call_tiny_image", lambda: CLS.init(KEY, jnp.zeros((4, 1, 1, 1))), ValueError, "`x`"),
    ("cls_config", lambda: G.Classifier("cfg").init(KEY, X), TypeError, "`config`"),
    ("unet_c_noise", lambda: UNET.init(KEY, X, jnp.zeros(3)), ValueError, "`c_noise`"),
    ("unet_x_int", lambda: UNET.init(KEY, X_INT, jnp.zeros(4)), TypeError, "`x`"),
    ("unet_x_size", lambda: G.UNet(G.UNetConfig(channels=(4,) * 5, groups=4)).init(
        KEY, X, jnp.zeros(4)), ValueError, "`x`"),
    ("heads_layout", lambda: G.ProjectedHeads(layout="x").init(KEY, [X]), ValueError, "`layout`"),
    ("heads_maps_array", lambda: HEADS.init(KEY, X), TypeError, "`maps`"),
    ("snconv_features", lambda: G.SNConv(0, 3).init(KEY, X), ValueError, "`features`"),
    ("batch_norm_eps", lambda: G.BatchStatNorm(eps=-1.0).init(KEY, X), ValueError, "`eps`"),
    ("sqrtm_not_psd", lambda: G.sqrtm_psd(-jnp.eye(2)), ValueError, "`a`"),
    ("sqrtm_asymmetric", lambda: G.sqrtm_psd(jnp.array([[1.0, 2.0], [0.0, 1.0]])), ValueError,
     "`a`"),
    ("fd_stats_cov_not_psd", lambda: G.frechet_distance_stats(F[0], -jnp.eye(2), F[0],
                                                              jnp.eye(2)), ValueError, "`s_a`"),
    ("adam_eps", lambda: G.masked_adam(1e-3, 0.0, 0.99, eps=-1.0), ValueError, "`eps`"),
    # training configs
    ("pre_lr", lambda: G.PretrainConfig(lr=-1.0), ValueError, "`lr`"),
    ("pre_batch_float", lambda: G.PretrainConfig(batch=2.5), ValueError, "`batch`"),
    ("pre_rampup_nan", lambda: G.PretrainConfig(ema_rampup=NAN), ValueError, "`ema_rampup`"),
    ("ft_lr_g", lambda: G.FinetuneConfig(lr_g=-1e-4), ValueError, "`lr_g`"),
    ("ft_beta2", lambda: G.FinetuneConfig(beta2=1.5), ValueError, "`beta2`"),
    ("ft_r1_interval", lambda: G.FinetuneConfig(r1_interval=0), ValueError, "`r1_interval`"),
    ("ft_kd_weight_nan", lambda: G.FinetuneConfig(kd_weight=NAN), ValueError, "`kd_weight`"),
    ("ft_freeze_str", lambda: G.FinetuneConfig(freeze="yes"), TypeError, "`freeze`"),
    ("ft_sigma_max", lambda: G.FinetuneConfig(sigma_max=0.0), ValueError, "`sigma_max`"),
    # make_pretrainer / Pretrainer
    ("pre_data_int", lambda: G.make_pretrainer(inner, X_INT, CFG), TypeError, "`data`"),
    ("pre_data_nan", lambda: G.make_pretrainer(inner, X_NAN, CFG), ValueError, "`data`"),
    ("pre_edm_config", lambda: G.make_pretrainer(inner, X, "cfg"), TypeError, "`edm_config`"),
    ("pre_config", lambda: G.make_pretrainer(inner, X, CFG, G.FinetuneConfig()), TypeError,
     "`config`"),
    ("pre_inner", lambda: G.make_pretrainer("inner", X, CFG), TypeError, "`inner`"),
    ("pre_init_key_int", lambda: PRE.init(0, PARAMS), ValueError, "`key`"),
    ("pre_init_params_none", lambda: PRE.init(KEY, None), ValueError, "`params` must be the"),
    ("pre_init_params_other", lambda: PRE.init(KEY, {"v": 1.0}), ValueError, "do not fit `inner`"),
    ("ft_init_d_params_none", lambda: FT.init(KEY, PARAMS, None), ValueError, "`d_params` must"),
    (
        "ft_init_d_params_other_size",
        lambda: FT.init(KEY, PARAMS, jnp.zeros((4, 4, 1))),
        ValueError,
        "`d_params` do not fit `discriminator`",
    ),
    ("pre_init_key_float", lambda: PRE.init(jnp.zeros(2), PARAMS), ValueError, "`key`"),
    ("pre_init_key_u32x3", lambda: PRE.init(jnp.zeros(3, jnp.uint32), PARAMS), ValueError,
     "`key`"),
    ("pre_init_params_nan", lambda: PRE.init(KEY, {"w": jnp.array(NAN)}), ValueError,
     "`params"),
    ("pre_step_state", lambda: PRE.step("state"), TypeError, "`state`"),
    # make_finetuner / Finetuner
    ("ft_sigma_data", lambda: G.make_finetuner(inner, PARAMS, disc, X, -0.5), ValueError,
     "`sigma_data`"),
    ("ft_discriminator", lambda: G.make_finetuner(inner, PARAMS, "d", X, 0.5), TypeError,
     "`discriminator`"),
    ("ft_kd_pairs_shape", lambda: kd_finetuner((X, X[:, :4, :4])), ValueError, "kd_pairs"),
    ("ft_kd_pairs_nan", lambda: kd_finetuner((X_NAN, X)), ValueError, "`kd_pairs[0]`"),
    ("ft_kd_pairs_array", lambda: kd_finetuner(X), TypeError, "`kd_pairs`"),
    ("ft_init_key", lambda: FT.init(0, PARAMS, D_PARAMS), ValueError, "`key`"),
    ("ft_init_d_params_nan", lambda: FT.init(KEY, PARAMS, D_PARAMS.at[0].set(NAN)), ValueError,
     "`d_params"),
    ("proj_d_init_key", lambda: G.projected_discriminator(CLS, {}, HEADS)[1](0, X), ValueError,
     "`key`"),
    ("heun_int_sigmas_ok_but_x_list", lambda: G.heun_sample(DEN, [[1.0]], jnp.array([2, 1, 0])),
     TypeError, "`x_init`"),
    ("score_int_rows", lambda: G.classifier_score(jnp.array([[1, 1]])), ValueError, "`probs`"),
    ("ft_init_other_size", lambda: FT.init(KEY, {"w": jnp.zeros(3)}, D_PARAMS), ValueError,
     "`g_params"),
    ("ft_init_other_tree", lambda: FT.init(KEY, {"v": jnp.zeros(())}, D_PARAMS), ValueError,
     "`g_params`"),
    ("ft_generate_z", lambda: FT.generate(PARAMS, X[..., 0]), ValueError, "`z`"),
    ("ft_step_other_size", lambda: FT.step(FT_STATE.replace(g_params={"w": jnp.zeros(2)})),
     ValueError, "`state.g_params"),
    # pieces
    ("gen_loss_array", lambda: G.generator_loss(jnp.zeros((4, 1))), TypeError, "`fake_logits`"),
    ("gen_loss_empty", lambda: G.generator_loss([]), TypeError, "`fake_logits`"),
    ("disc_loss_heads", lambda: G.discriminator_loss([X], [X, X]), ValueError, "`real_logits`"),
    ("r1_gamma", lambda: G.r1_penalty(disc, D_PARAMS, X, -1.0), ValueError, "`gamma`"),
    ("r1_interval", lambda: G.r1_penalty(disc, D_PARAMS, X, 1.0, 0), ValueError, "`interval`"),
    ("ema_beta_batch", lambda: G.ema_beta(0, 100.0), ValueError, "`batch`"),
    ("ema_beta_halflife", lambda: G.ema_beta(4, -1.0), ValueError, "`halflife_images`"),
    ("ema_beta_nan", lambda: G.ema_beta(4, NAN), ValueError, "`halflife_images`"),
    ("ema_update_size", lambda: G.ema_update(PARAMS, {"w": jnp.zeros(3)}, 0.5), ValueError,
     "`params"),
    ("ema_update_beta", lambda: G.ema_update(PARAMS, PARAMS, 1.5), ValueError, "`beta`"),
    ("adam_lr", lambda: G.masked_adam(-1.0, 0.0, 0.99), ValueError, "`lr`"),
    ("adam_b2", lambda: G.masked_adam(1e-3, 0.0, 1.0), ValueError, "`b2`"),
    ("adam_b1", lambda: G.masked_adam(1e-3, -0.1, 0.99), ValueError, "`b1`"),
    ("l2_shapes", lambda: G.l2_distance(X, X[:2]), ValueError, "`pred`"),
    ("frozen_empty", lambda: G.frozen_fraction({}, {}), ValueError, "`params`"),
    ("frozen_mask_tree", lambda: G.frozen_fraction(PARAMS, {"w": True, "x": False}), ValueError,
     "`mask`"),
    ("freeze_rule", lambda: G.freeze_mask(PARAMS, "x"), TypeError, "`rule`"),
    ("freeze_names_str", lambda: G.d2o_freeze_rule("enc0_block0/conv0/kernel"), TypeError,
     "`names`"),
    ("teacher_n_steps", lambda: G.teacher_sample(inner, PARAMS, X, 0, CFG), ValueError,
     "`n_steps`"),
    ("teacher_config", lambda: G.teacher_sample(inner, PARAMS, X, 2, "cfg"), TypeError,
     "`config`"),
    ("onestep_sigma_max", lambda: G.one_step_generate(inner, PARAMS, X, 0.5, -1.0), ValueError,
     "`sigma_max`"),
    ("onestep_eps", lambda: G.one_step_generate(inner, PARAMS, X, 0.5, 80.0, 100.0), ValueError,
     "`eps`"),
    ("run_loop_negative", lambda: G.run_loop(FT.step, FT_STATE, -1), ValueError, "`n_steps`"),
    ("run_loop_float", lambda: G.run_loop(FT.step, FT_STATE, 2.5), ValueError, "`n_steps`"),
    ("run_loop_step", lambda: G.run_loop("step", FT_STATE, 1), TypeError, "`step`"),
    ("run_loop_scan", lambda: G.run_loop(FT.step, FT_STATE, 1, scan="yes"), TypeError, "`scan`"),
    ("images_seen_batch", lambda: G.images_seen(FT_STATE, 0), ValueError, "`batch`"),
    ("images_seen_state", lambda: G.images_seen("s", 4), TypeError, "`state`"),
]  # fmt: skip


@pytest.mark.parametrize(("call", "exc", "fragment"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_bad_input_raises_a_clear_error(call, exc, fragment):
    with pytest.raises(exc, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        call()


def test_case_table_is_large_and_unique():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 80


def test_valid_tiny_inputs_pass_the_checks():
    """The boundary accepts what it should: ints where floats are fine, legacy keys, inf EMA."""
    G.check_images(X)
    G.FinetuneConfig(ema_halflife_images=float("inf"))
    assert G.karras_steps(np.int64(2), CFG).shape == (3,)
    legacy = jax.random.PRNGKey(0)
    assert PRE.init(legacy, PARAMS).key.dtype == KEY.dtype
    np.testing.assert_allclose(G.classifier_score(jnp.eye(2, dtype=jnp.int32)), 2.0, rtol=1e-6)


def test_non_finite_training_is_flagged():
    """A run that turned NaN says so in its metrics (``finite``), next to the losses."""
    step = jax.jit(PRE.step)
    _, good = step(PRE.init(KEY, PARAMS))
    nan = {"w": jnp.array(NAN)}  # NaN weights are refused by init: poison a valid state
    _, bad = step(PRE.init(KEY, PARAMS).replace(params=nan, ema=nan))
    assert bool(good["finite"]) and not bool(bad["finite"])
    ft_step = jax.jit(FT.step)
    _, good = ft_step(FT_STATE)
    _, bad = ft_step(FT_STATE.replace(g_params={"w": jnp.array(NAN)}))
    assert bool(good["finite"]) and not bool(bad["finite"])

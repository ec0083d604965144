"""Training: EDM pre-training, and one fine-tuning loop for D2O, D2O-F and the baselines.

**Pre-training** (:func:`make_pretrainer`): Adam on :func:`.edm.edm_loss` with a linear warm-up,
EMA of the weights with half-life ``min(ema_halflife_images, ema_rampup * images_seen)``.

**Fine-tuning** (:func:`make_finetuner`): the one-step generator of D2O,

    G(z) = D_eps(sigma_max z; sigma_max),   z ~ N(0, I),

is :func:`.edm.denoise` with the shifted (``eps = 0.002``) preconditioning, initialised from the
pre-trained inner network (or randomly: the scratch-GAN baseline). Per iteration (spec 2.5):

1. G step: ``L_G = w_gan sum_k E softplus(-l_k(G(z))) + w_kd E dist(G(z_i), T(z_i))``
   (``T`` = teacher multi-step outputs for precomputed noises ``z_i``; with ``w_kd > 0`` the GAN
   term uses the same ``z_i``). Adam(b1 = 0, b2 = 0.99); frozen leaves get no update at all
   (``optax.multi_transform`` with ``set_to_zero``, no Adam state for them).
2. D step (skipped when ``w_gan = 0``): a fresh ``stop_gradient(G(z'))`` with the new weights;
   ``L_D = sum_k E softplus(l_k(fake)) + E softplus(-l_k(x))``.
3. Lazy R1 every ``r1_interval`` steps (not at step 0), as its own D update:
   ``r1_interval * (gamma / 2) E_x ||grad_x sum_k sum l_k(x)||^2``. D's Adam uses
   ``lr_d c`` and ``b2^c`` with ``c = interval / (interval + 1)`` (StyleGAN2's lazy-R1 fix).
4. EMA of G: ``beta = 0.5^(batch / max(h, 1e-8))``, ``h = min(ema_halflife_images,
   ema_rampup * images_seen)`` (D2O: 5% of the images seen), applied with
   ``optax.incremental_update``.

Variants are configurations of the same loop: D2O (``gan_weight=1, kd_weight=0``), D2O-F (plus
``freeze=True``), KD (``gan_weight=0, kd_weight=1``), KD+GAN (both), scratch GAN (D2O from a random
init). The batch axis of every step can be sharded over a mesh (``mesh=...``): the real batch and
the noises are constrained to ``P("data")`` and XLA averages the gradients across devices.

Both factories follow the jaxlab contract: ``init(key, ...) -> state`` and ``step(state, x=None)
-> (state, metrics)``, where the state (a ``flax.struct.dataclass``) carries the run's key and
step ``t`` draws from ``fold_in(state.key, t)``; since ``fold_in(key, t)`` equals
``jax.random.split(key, n)[t]`` (JAX's partitionable threefry, the default), a run is the same as
one driven by a pre-split key per step. :func:`run_loop` runs ``n`` steps as a host loop over the
jitted step (its default on CPU) or as one jitted ``lax.scan`` (its default elsewhere).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from jax.sharding import Mesh

from jaxlab.core import checks
from jaxlab.core.sharding import constrain_batch
from jaxlab.core.training import all_finite, scan_steps
from jaxlab.generative.gan_onestep import _checks, edm
from jaxlab.generative.gan_onestep.nets import Discriminator

PyTree = Any
KDDistance = Callable[[jax.Array, jax.Array], jax.Array]  # (pred, target) [B, ...] -> [B]

__all__ = [
    "FinetuneConfig",
    "FinetuneState",
    "Finetuner",
    "PretrainConfig",
    "PretrainState",
    "Pretrainer",
    "d2o_freeze_rule",
    "discriminator_loss",
    "ema_beta",
    "ema_update",
    "freeze_mask",
    "frozen_fraction",
    "generator_loss",
    "l2_distance",
    "make_finetuner",
    "make_pretrainer",
    "masked_adam",
    "r1_penalty",
    "run_loop",
    "teacher_sample",
    "images_seen",
]


# --------------------------------------------------------------------------------------------
# Pieces: losses, R1, EMA, freezing


def generator_loss(fake_logits: list[jax.Array]) -> jax.Array:
    """Non-saturating generator loss ``sum_k mean softplus(-l_k)`` (= ``-log sigmoid(l)``)."""
    fake_logits = _checks.check_logit_list(fake_logits, "fake_logits")
    return sum(jnp.mean(jax.nn.softplus(-lg)) for lg in fake_logits)


def discriminator_loss(real_logits: list[jax.Array], fake_logits: list[jax.Array]) -> jax.Array:
    """``sum_k mean softplus(l_k(fake)) + mean softplus(-l_k(real))``; ``2 log 2`` per head at 0."""
    real_logits = _checks.check_logit_list(real_logits, "real_logits")
    fake_logits = _checks.check_logit_list(fake_logits, "fake_logits")
    if len(real_logits) != len(fake_logits):
        raise ValueError(
            f"`real_logits` ({len(real_logits)} heads) and `fake_logits` ({len(fake_logits)}) "
            "must have one logit map per head each."
        )
    fake = sum(jnp.mean(jax.nn.softplus(lg)) for lg in fake_logits)
    real = sum(jnp.mean(jax.nn.softplus(-lg)) for lg in real_logits)
    return fake + real


def r1_penalty(
    logits: Discriminator, d_params: PyTree, x: jax.Array, gamma: float, interval: int = 1
) -> jax.Array:
    """Lazy R1: ``interval * (gamma / 2) * mean_b ||grad_x sum_k sum l_k(x_b)||^2``.

    For a linear ``l(x) = w . x`` this is ``interval * gamma / 2 * ||w||^2`` for every ``x``.
    """
    _checks.check_callable(logits, "logits")
    edm.check_images(x, "x")
    checks.check_scalar(gamma, "gamma", 0.0)
    interval = checks.check_int(interval, "interval", minimum=1)

    def total(xx):
        return sum(jnp.sum(lg) for lg in logits(d_params, xx))

    g = jax.grad(total)(x)
    per_example = jnp.sum(jnp.square(g).reshape(g.shape[0], -1), axis=1)
    return interval * 0.5 * gamma * jnp.mean(per_example)


def ema_beta(batch: int, halflife_images: jax.Array) -> jax.Array:
    """``0.5 ** (batch / max(halflife_images, 1e-8))``: after ``halflife_images / batch`` steps the
    old weights' share has halved."""
    checks.check_int(batch, "batch", minimum=1)
    _checks.check_number(halflife_images, "halflife_images", 0.0)
    return 0.5 ** (batch / jnp.maximum(halflife_images, 1e-8))


def ema_update(ema: PyTree, params: PyTree, beta: jax.Array) -> PyTree:
    """``beta * ema + (1 - beta) * params``, leafwise, by ``optax.incremental_update``.

    optax computes ``step_size * new + (1 - step_size) * old``; called as
    ``incremental_update(ema, params, beta)`` that is the formula above term by term, so it is
    bit-identical to it. (The reading ``incremental_update(params, ema, 1 - beta)`` is the same
    average but differs in the last bit: ``1 - (1 - beta)`` rounds for ``beta < 0.5`` and XLA
    fuses the multiply-adds in the other order; measured 1-2 ulp on every step.)
    """
    _checks.check_same_tree(params, "params", ema, "`ema`")
    _checks.check_number(beta, "beta", 0.0, 1.0)
    return optax.incremental_update(ema, params, beta)


def _ramped_ema(ema, params, step, batch, halflife_images, rampup):
    """The EMA after update ``step`` (0-based): half-life ``min(halflife_images, rampup * seen)``
    with ``seen = (step + 1) * batch`` images."""
    seen = (step + 1).astype(jnp.float32) * batch
    return ema_update(ema, params, ema_beta(batch, jnp.minimum(halflife_images, rampup * seen)))


def _path_names(path) -> tuple[str, ...]:
    return tuple(str(getattr(k, "key", getattr(k, "name", getattr(k, "idx", k)))) for k in path)


def d2o_freeze_rule(names: tuple[str, ...]) -> bool:
    """D2O-F's rule (``--freeze=1``) in this package's naming: freeze the two 3x3 convolutions of
    every residual block (``*block*``, and the resampling/bottom blocks ``*_down``, ``*_up``,
    ``*_in0``, ``*_in1``: the official rule matches "block", "up", "down" and "in" in the
    parameter name) and every attention output projection (``*attn*/proj``). Norms, the noise
    ``affine``, ``qkv``, 1x1 ``skip``, the embedding MLP, the auxiliary residual convs and
    ``conv_in``/``conv_out`` stay trainable."""
    if not isinstance(names, tuple | list) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"`names` must be a tuple of str (a parameter path), got {names!r:.80}.")
    modules = names[:-1]  # the last name is the leaf (kernel / bias / scale)
    if len(modules) < 2:
        return False
    parent, layer = modules[-2], modules[-1]
    if re.search(r"attn", parent):
        return layer == "proj"
    if re.search(r"block|_down$|_up$|_in\d+$", parent):
        return layer in ("conv0", "conv1")
    return False


def freeze_mask(params: PyTree, rule: Callable[[tuple[str, ...]], bool] = d2o_freeze_rule):
    """A bool pytree like ``params``: ``True`` where ``rule(path names)`` freezes the leaf."""
    _checks.check_callable(rule, "rule")
    return jax.tree_util.tree_map_with_path(lambda p, _: bool(rule(_path_names(p))), params)


def frozen_fraction(params: PyTree, mask: PyTree) -> float:
    """Fraction of scalar parameters that ``mask`` freezes (``mask``: :func:`freeze_mask` of
    ``params``)."""
    if jax.tree_util.tree_structure(mask) != jax.tree_util.tree_structure(params):
        raise ValueError("`mask` must have the pytree structure of `params` (freeze_mask(params)).")
    if not all(isinstance(f, bool | np.bool_) for f in jax.tree_util.tree_leaves(mask)):
        raise TypeError("`mask` leaves must be bools (freeze_mask(params)).")
    sizes = jax.tree_util.tree_leaves(jax.tree_util.tree_map(lambda p: p.size, params))
    flags = jax.tree_util.tree_leaves(mask)
    total = sum(sizes)
    if total == 0:
        raise ValueError("`params` has no parameters: the frozen fraction is undefined.")
    return float(sum(s for s, f in zip(sizes, flags, strict=True) if f) / total)


def masked_adam(
    lr: float | optax.Schedule, b1: float, b2: float, mask: PyTree | None = None, eps=1e-8
) -> optax.GradientTransformation:
    """Adam that leaves the leaves where ``mask`` is ``True`` untouched (zero update and no Adam
    moments allocated: ``optax.multi_transform`` with ``set_to_zero``). ``mask=None``: plain
    Adam."""
    if not callable(lr):
        checks.check_scalar(lr, "lr", 0.0, low_open=True)
    checks.check_scalar(b1, "b1", 0.0, 1.0, high_open=True)
    checks.check_scalar(b2, "b2", 0.0, 1.0, high_open=True)
    checks.check_scalar(eps, "eps", 0.0)
    adam = optax.adam(lr, b1=b1, b2=b2, eps=eps)
    if mask is None:
        return adam
    labels = jax.tree_util.tree_map(lambda f: "frozen" if f else "trainable", mask)
    return optax.multi_transform({"trainable": adam, "frozen": optax.set_to_zero()}, labels)


def l2_distance(pred: jax.Array, target: jax.Array) -> jax.Array:
    """Mean squared pixel difference per example, ``[B]`` (``pred`` and ``target``: ``[B, ...]``
    of the same shape)."""
    checks.check_real(pred, "pred")
    checks.check_real(target, "target")
    if np.shape(pred) != np.shape(target) or np.ndim(pred) < 1:
        raise ValueError(
            f"`pred` {np.shape(pred)} and `target` {np.shape(target)} must be [B, ...] arrays of "
            "the same shape."
        )
    return jnp.mean(jnp.square(pred - target).reshape(pred.shape[0], -1), axis=1)


def teacher_sample(
    inner: edm.InnerFn,
    params: PyTree,
    z: jax.Array,
    n_steps: int,
    config: edm.EDMConfig,
    final_sigma_min: bool = True,
) -> jax.Array:
    """The teacher's ODE solution ``T_k(z)``: Heun from ``sigma_max z`` on the ``k = n_steps``
    Karras grid (``2k - 1`` network evaluations; ``k = 1`` is one Euler step, i.e. the
    pre-trained model used one-step). ``final_sigma_min``: see :func:`.edm.karras_steps`
    (``False`` for few-step teachers)."""
    _checks.check_callable(inner, "inner")
    edm.check_images(z, "z")
    denoiser = lambda x, s: edm.denoise(inner, params, x, s, config.sigma_data)  # noqa: E731
    sigmas = edm.karras_steps(n_steps, config, final_sigma_min)
    return edm.heun_sample(denoiser, config.sigma_max * z, sigmas.astype(z.dtype))


# --------------------------------------------------------------------------------------------
# Pre-training


@dataclasses.dataclass(frozen=True)
class PretrainConfig:
    """EDM pre-training: ``batch``, Adam ``lr`` with ``warmup`` linear steps, EMA half-life in
    images (with ``ema_rampup``: the half-life is at most that fraction of the images seen)."""

    batch: int = 128
    lr: float = 2e-3
    warmup: int = 200
    ema_halflife_images: float = 50_000.0
    ema_rampup: float = 0.05

    def __post_init__(self):
        checks.check_int(self.batch, "batch", minimum=1)
        checks.check_scalar(self.lr, "lr", 0.0, low_open=True)
        checks.check_int(self.warmup, "warmup", minimum=0)
        _check_ema(self.ema_halflife_images, self.ema_rampup)


def _check_ema(halflife_images: float, rampup: float) -> None:
    _checks.check_number(halflife_images, "ema_halflife_images", 0.0, np.inf, low_open=True)
    checks.check_scalar(rampup, "ema_rampup", 0.0, low_open=True)


@struct.dataclass
class PretrainState:
    """EDM pre-training state (a pytree).

    Attributes:
      step: ``[]`` int32, optimiser steps taken.
      params: the inner network's parameters (the pytree given to ``init``, same shapes).
      opt_state: Adam's state for ``params`` (moments shaped like ``params``, a ``[]`` count).
      ema: the EMA of ``params`` (same pytree and shapes): the teacher.
      key: ``[]`` typed PRNG key of the run; step ``t`` draws from ``fold_in(key, t)``.
    """

    step: jax.Array
    params: PyTree
    opt_state: PyTree
    ema: PyTree
    key: jax.Array


class Pretrainer(NamedTuple):
    """``init(key, params) -> state``; ``step(state, x=None) -> (state, {"loss": [], "finite":
    []})`` (pure; scan it or :func:`run_loop` it; ``finite``: the loss and the new parameters
    and EMA are free of NaN / inf). ``x`` must be ``None``: minibatches come from the data."""

    init: Callable[[jax.Array, PyTree], PretrainState]
    step: Callable[..., tuple[PretrainState, dict]]


def _no_input(x: Any, name: str) -> None:
    if x is not None:
        raise ValueError(
            f"{name}.step: `x` must be None (minibatches and noise are drawn from the state's "
            f"key), got {type(x).__name__}."
        )


def _fits(fn, params, name: str, net: str) -> None:
    """Trace ``fn(params)`` abstractly (nothing runs or compiles): parameters that do not fit the
    network are a ``ValueError`` naming them here, not a deep error at the first step."""
    leaves = jax.tree_util.tree_leaves(params)
    if not leaves:
        raise ValueError(f"`{name}` must be the parameters of `{net}`, got {params!r:.60}.")
    what = f"`{name}` do not fit `{net}` (built for another network or image size?)"
    checks.check_abstract_call(fn, (params,), what)


def make_pretrainer(
    inner: edm.InnerFn,
    data: jax.Array,
    edm_config: edm.EDMConfig,
    config: PretrainConfig = PretrainConfig(),
    mesh: Mesh | None = None,
) -> Pretrainer:
    """EDM pre-training on ``data`` ``[N, H, W, C]`` (minibatches drawn with replacement).

    ``init(key, params)``: step 0, Adam's state, the EMA equal to ``params``. ``step(state)``:
    one Adam step on :func:`.edm.edm_loss` of ``config.batch`` images drawn with
    ``fold_in(state.key, state.step)``, then the ramped EMA; metrics ``{"loss": []}``.
    ``mesh`` shards the minibatch axis. Metrics also carry ``finite`` (``[]`` bool): the loss, the
    new parameters and the EMA are free of NaN / inf; a run is valid only where it is ``True``.
    """
    _checks.check_callable(inner, "inner")
    edm.check_images(data, "data")
    _checks.check_instance(edm_config, "edm_config", edm.EDMConfig)
    _checks.check_instance(config, "config", PretrainConfig)
    if mesh is not None:
        _checks.check_instance(mesh, "mesh", Mesh)
    schedule = optax.linear_schedule(0.0, config.lr, max(config.warmup, 1))
    opt = optax.adam(schedule)

    def init(key, params):
        key = checks.check_key(key)
        _checks.check_tree_finite(params, "params")
        loss = lambda p: edm.edm_loss(inner, p, data[:2], key, edm_config)  # noqa: E731
        _fits(loss, params, "params", "inner")
        return PretrainState(jnp.zeros((), jnp.int32), params, opt.init(params), params, key)

    def step(state, x=None):
        _no_input(x, "Pretrainer")
        _checks.check_instance(state, "state", PretrainState)
        k_idx, k_loss = jax.random.split(jax.random.fold_in(state.key, state.step))
        x0 = constrain_batch(data[jax.random.randint(k_idx, (config.batch,), 0, data.shape[0])],
                             mesh)  # fmt: skip
        loss, g = jax.value_and_grad(lambda p: edm.edm_loss(inner, p, x0, k_loss, edm_config))(
            state.params
        )
        updates, opt_state = opt.update(g, state.opt_state, state.params)
        params = optax.apply_updates(state.params, updates)
        ema = _ramped_ema(state.ema, params, state.step, config.batch,
                          config.ema_halflife_images, config.ema_rampup)  # fmt: skip
        new = state.replace(step=state.step + 1, params=params, opt_state=opt_state, ema=ema)
        return new, {"loss": loss, "finite": all_finite(loss, params, ema)}

    return Pretrainer(init, step)


# --------------------------------------------------------------------------------------------
# Fine-tuning (D2O and baselines)


@dataclasses.dataclass(frozen=True)
class FinetuneConfig:
    """One configuration of the shared fine-tuning loop (see the module docstring).

    Attributes:
      batch: images per step (generator and discriminator).
      lr_g, lr_d, beta2: Adam settings (``b1 = 0``).
      gan_weight, kd_weight: weights of the GAN and instance-distillation terms of ``L_G``.
      r1_gamma, r1_interval: lazy R1 (``r1_gamma = 0`` disables it).
      freeze: apply :func:`d2o_freeze_rule` (D2O-F).
      ema_halflife_images, ema_rampup: EMA half-life ``min(halflife, rampup * seen)``.
      sigma_max, eps: the generator's noise level and boundary shift.
    """

    batch: int = 128
    lr_g: float = 1e-4
    lr_d: float = 1e-4
    beta2: float = 0.99
    gan_weight: float = 1.0
    kd_weight: float = 0.0
    r1_gamma: float = 1e-4
    r1_interval: int = 16
    freeze: bool = False
    ema_halflife_images: float = float("inf")
    ema_rampup: float = 0.05
    sigma_max: float = 80.0
    eps: float = edm.D2O_EPS

    def __post_init__(self):
        checks.check_int(self.batch, "batch", minimum=1)
        for name in ("lr_g", "lr_d", "sigma_max"):
            checks.check_scalar(getattr(self, name), name, 0.0, low_open=True)
        checks.check_scalar(self.beta2, "beta2", 0.0, 1.0, high_open=True)
        for name in ("gan_weight", "kd_weight", "r1_gamma"):
            checks.check_scalar(getattr(self, name), name, 0.0)
        _checks.check_bool(self.freeze, "freeze")
        if self.gan_weight == 0 and self.kd_weight == 0:
            raise ValueError("FinetuneConfig: `gan_weight` and `kd_weight` are both 0: no loss.")
        checks.check_int(self.r1_interval, "r1_interval", minimum=1)
        _check_ema(self.ema_halflife_images, self.ema_rampup)
        checks.check_scalar(self.eps, "eps", 0.0, self.sigma_max, high_open=True)


@struct.dataclass
class FinetuneState:
    """Fine-tuning state of one variant (a pytree).

    Attributes:
      step: ``[]`` int32, generator updates taken.
      g_params: the generator's inner-network parameters (the pytree of ``g_params_template``).
      g_opt: the generator's Adam state (moments only for trainable leaves when frozen).
      d_params: the discriminator heads' parameters.
      d_opt: the discriminator's Adam state.
      ema: the EMA of ``g_params`` (same pytree and shapes): the generator that is scored.
      key: ``[]`` typed PRNG key of the run; step ``t`` draws from ``fold_in(key, t)``.
    """

    step: jax.Array
    g_params: PyTree
    g_opt: PyTree
    d_params: PyTree
    d_opt: PyTree
    ema: PyTree
    key: jax.Array


class Finetuner(NamedTuple):
    """The pure pieces of one fine-tuning variant.

    ``init(key, g_params, d_params) -> state``; ``step(state, x=None) -> (state, metrics)``
    (``x`` must be ``None``); ``generate(g_params, z [B, H, W, C]) -> images``; ``mask``: the
    freeze mask (``None`` when nothing is frozen).
    """

    init: Callable[[jax.Array, PyTree, PyTree], FinetuneState]
    step: Callable[..., tuple[FinetuneState, dict]]
    generate: Callable[[PyTree, jax.Array], jax.Array]
    mask: PyTree | None


def one_step_generate(
    inner: edm.InnerFn,
    g_params: PyTree,
    z: jax.Array,
    sigma_data: float,
    sigma_max: float = 80.0,
    eps: float = edm.D2O_EPS,
) -> jax.Array:
    """D2O's one-step generator ``G(z) = D(sigma_max z; sigma_max)``: the preconditioned denoiser
    applied once to unit noise ``z [B, H, W, C]`` scaled to ``sigma_max`` (the same map as
    ``Finetuner.generate``; with the pre-trained parameters it is the no-fine-tuning baseline)."""
    edm.check_images(z, "z")
    checks.check_scalar(sigma_max, "sigma_max", 0.0, low_open=True)
    high = sigma_max if checks.is_concrete(sigma_max) else np.inf
    checks.check_scalar(eps, "eps", 0.0, high, high_open=True)
    return edm.denoise(inner, g_params, sigma_max * z, sigma_max, sigma_data, eps)


def make_finetuner(
    inner: edm.InnerFn,
    g_params_template: PyTree,
    discriminator: Discriminator,
    data: jax.Array,
    sigma_data: float,
    config: FinetuneConfig = FinetuneConfig(),
    *,
    kd_pairs: tuple[jax.Array, jax.Array] | None = None,
    kd_distance: KDDistance = l2_distance,
    mesh: Mesh | None = None,
) -> Finetuner:
    """Build one variant of the fine-tuning loop.

    ``step(state)`` is one iteration of the module docstring's loop with keys from
    ``fold_in(state.key, state.step)``; its metrics are the scalars ``loss_g`` (total generator
    loss), ``gan_g`` (its GAN term), ``kd`` (its distillation term), ``loss_d`` and ``r1`` (the
    lazy R1 penalty, 0 on steps without it), and ``finite`` (``[]`` bool: every loss and the new
    generator, discriminator and EMA parameters are free of NaN / inf; scores of a run are valid
    only where it is ``True``).

    Args:
      inner: the generator's inner network ``F(params, x_in, c_noise)``.
      g_params_template: generator parameters (structure for the freeze mask).
      discriminator: ``logits(d_params, x) -> list of logit maps``.
      data: real images ``[N, H, W, C]`` (minibatches drawn with replacement).
      sigma_data: the data std of the preconditioning.
      config: the variant.
      kd_pairs: ``(z [P, H, W, C], T(z) [P, H, W, C])`` teacher pairs, required if
        ``kd_weight > 0``.
      kd_distance: ``dist(pred, target) -> [B]`` (default per-pixel MSE).
      mesh: shard the batch axis over this mesh (``None``: no constraint).
    """
    _checks.check_callable(inner, "inner")
    _checks.check_callable(discriminator, "discriminator")
    edm.check_images(data, "data")
    checks.check_scalar(sigma_data, "sigma_data", 0.0, low_open=True)
    _checks.check_instance(config, "config", FinetuneConfig)
    _checks.check_callable(kd_distance, "kd_distance")
    if mesh is not None:
        _checks.check_instance(mesh, "mesh", Mesh)
    if config.kd_weight > 0 and kd_pairs is None:
        raise ValueError("make_finetuner: `kd_weight` > 0 needs `kd_pairs` (z, T(z)).")
    if kd_pairs is not None:
        if not isinstance(kd_pairs, tuple | list) or len(kd_pairs) != 2:
            raise TypeError(
                f"`kd_pairs` must be a pair (z [P, H, W, C], T(z) [P, H, W, C]), got "
                f"{type(kd_pairs).__name__}."
            )
        edm.check_images(kd_pairs[0], "kd_pairs[0]")
        edm.check_images(kd_pairs[1], "kd_pairs[1]")
        if kd_pairs[0].shape != kd_pairs[1].shape or kd_pairs[0].shape[1:] != data.shape[1:]:
            raise ValueError(
                f"make_finetuner: `kd_pairs` shapes {kd_pairs[0].shape}, {kd_pairs[1].shape} "
                f"must match each other and the images {data.shape[1:]}."
            )
    mask = freeze_mask(g_params_template) if config.freeze else None
    opt_g = masked_adam(config.lr_g, 0.0, config.beta2, mask)
    c = config.r1_interval / (config.r1_interval + 1) if config.r1_gamma > 0 else 1.0
    opt_d = optax.adam(config.lr_d * c, b1=0.0, b2=config.beta2**c, eps=1e-8)
    use_gan = config.gan_weight > 0
    shape = data.shape[1:]

    def check_g_params(g_params, name):
        _checks.check_same_tree(g_params, name, g_params_template, "`g_params_template`")

    def generate(g_params, z):
        check_g_params(g_params, "g_params")
        return one_step_generate(inner, g_params, z, sigma_data, config.sigma_max, config.eps)

    def init(key, g_params, d_params):
        key = checks.check_key(key)
        check_g_params(g_params, "g_params")
        _checks.check_tree_finite(g_params, "g_params")
        _checks.check_tree_finite(d_params, "d_params")
        _fits(lambda dp: discriminator(dp, data[:2]), d_params, "d_params", "discriminator")
        return FinetuneState(
            jnp.zeros((), jnp.int32), g_params, opt_g.init(g_params), d_params,
            opt_d.init(d_params), g_params, key,
        )  # fmt: skip

    def step(state, x=None):
        _no_input(x, "Finetuner")
        _checks.check_instance(state, "state", FinetuneState)
        check_g_params(state.g_params, "state.g_params")
        key = jax.random.fold_in(state.key, state.step)
        k_real, k_z, k_z2, k_kd = jax.random.split(key, 4)
        b = config.batch
        real = data[jax.random.randint(k_real, (b,), 0, data.shape[0])]
        if config.kd_weight > 0:
            i = jax.random.randint(k_kd, (b,), 0, kd_pairs[0].shape[0])
            z, target = kd_pairs[0][i], kd_pairs[1][i]
        else:
            z, target = jax.random.normal(k_z, (b, *shape), data.dtype), None
        z2 = jax.random.normal(k_z2, (b, *shape), data.dtype)
        real, z, z2, target = constrain_batch((real, z, z2, target), mesh)

        # 1. generator step (D's parameters are constants here)
        def g_loss_fn(gp):
            fake = generate(gp, z)
            gan = generator_loss(discriminator(state.d_params, fake)) if use_gan else 0.0
            kd = jnp.mean(kd_distance(fake, target)) if config.kd_weight > 0 else 0.0
            total = config.gan_weight * gan + config.kd_weight * kd
            return total, (jnp.asarray(gan, jnp.float32), jnp.asarray(kd, jnp.float32))

        (loss_g, (gan_g, kd)), grads = jax.value_and_grad(g_loss_fn, has_aux=True)(state.g_params)
        updates, g_opt = opt_g.update(grads, state.g_opt, state.g_params)
        g_params = optax.apply_updates(state.g_params, updates)

        # 2-3. discriminator step on a fresh fake, then lazy R1
        d_params, d_opt = state.d_params, state.d_opt
        loss_d = r1 = jnp.zeros((), jnp.float32)
        if use_gan:
            fake = jax.lax.stop_gradient(generate(g_params, z2))

            def d_loss_fn(dp):
                return discriminator_loss(discriminator(dp, real), discriminator(dp, fake))

            loss_d, dg = jax.value_and_grad(d_loss_fn)(d_params)
            upd, d_opt = opt_d.update(dg, d_opt, d_params)
            d_params = optax.apply_updates(d_params, upd)
            if config.r1_gamma > 0:
                do_r1 = (state.step % config.r1_interval == 0) & (state.step > 0)

                def apply_r1(carry):
                    dp, do = carry
                    pen, rg = jax.value_and_grad(
                        lambda p: r1_penalty(
                            discriminator, p, real, config.r1_gamma, config.r1_interval
                        )  # fmt: skip
                    )(dp)
                    u, do = opt_d.update(rg, do, dp)
                    return (optax.apply_updates(dp, u), do), pen

                (d_params, d_opt), r1 = jax.lax.cond(
                    do_r1, apply_r1, lambda cr: (cr, jnp.zeros((), jnp.float32)), (d_params, d_opt)
                )

        # 4. EMA of the generator
        ema = _ramped_ema(state.ema, g_params, state.step, b, config.ema_halflife_images,
                          config.ema_rampup)  # fmt: skip
        new = state.replace(step=state.step + 1, g_params=g_params, g_opt=g_opt,
                            d_params=d_params, d_opt=d_opt, ema=ema)  # fmt: skip
        finite = all_finite(loss_g, loss_d, r1, g_params, d_params, ema)
        metrics = {"loss_g": loss_g, "gan_g": gan_g, "kd": kd, "loss_d": loss_d, "r1": r1}
        return new, {**metrics, "finite": finite}

    return Finetuner(init, step, generate, mask)


def run_loop(
    step: Callable[..., tuple[PyTree, dict]],
    state: PyTree,
    n_steps: int,
    *,
    scan: bool | None = None,
) -> tuple[PyTree, dict]:
    """Run ``n_steps`` of ``step(state) -> (state, metrics)``: ``(final_state, metrics stacked
    [n_steps, ...])``.

    ``scan=True``: one jitted ``lax.scan`` (:func:`jaxlab.core.training.scan_steps`);
    ``scan=False``: a host loop over ``step`` (pass it already jitted: it is called as given);
    ``None`` picks the loop on CPU and the scan elsewhere. Both give the same numbers up to float
    rounding (XLA fuses the scanned body differently: 1 ulp in a loss after 5 D2O steps on
    XLA:CPU), and host-loop runs split into several calls give the same numbers exactly (the
    step's keys come from the state).
    """
    _checks.check_callable(step, "step")
    n_steps = checks.check_int(n_steps, "n_steps", minimum=0)
    if scan is not None:
        _checks.check_bool(scan, "scan")
    if scan is None:
        scan = jax.default_backend() != "cpu"
    if scan:
        return jax.jit(scan_steps, static_argnums=(0, 2))(step, state, n_steps)
    history = []
    for _ in range(n_steps):
        state, metrics = step(state)
        history.append(metrics)
    stacked = jax.tree_util.tree_map(lambda *m: jnp.stack(m), *history) if history else {}
    return state, stacked


def images_seen(state: FinetuneState | PretrainState, batch: int) -> int:
    """Images consumed so far by the loop that produced ``state``."""
    _checks.check_instance(state, "state", (FinetuneState, PretrainState))
    batch = checks.check_int(batch, "batch", minimum=1)
    return int(np.asarray(state.step)) * batch

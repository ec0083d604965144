"""Benchmark of D2O's hot cores: one generator + discriminator update, and one teacher sampling
pass (Heun, 18 steps = 35 NFE), against unjitted / per-step baselines, with device scaling.

(a) GAN step (G update, fresh-fake D update, lazy R1 on its schedule) at batch ``B``: the jitted
    step vs the same step run eagerly (no ``jit``) as a Python loop over micro-batches of 64
    (equal images; ``B / 64`` updates instead of one, the same per-image work).
(b) Teacher sampling of ``B`` images: the library's jitted sampler (diffrax ``Heun`` with
    ``StepTo`` on the Karras grid, then the Euler step to 0) vs a Python loop over the 18 steps
    calling a jitted denoiser (host-driven sampling).
(c) The GAN step at the largest batch with the batch axis sharded over 1, 2, 4, ... devices
    (forced host devices check correctness, not speed; on an accelerator this is the scaling row).
Network: the experiment's U-Net (channels 16/32, one block per level) on 8x8 images.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxlab.core import sharding
from jaxlab.core.timing import result_row, time_call
from jaxlab.generative import gan_onestep as G

NAME = "distillation_step"
DESCRIPTION = "D2O GAN step and 35-NFE teacher sampling: jit vs eager micro-batch / host loops"
SIZES = {"small": {"batch": (64, 256)}, "large": {"batch": (64, 256, 1024)}}
MICRO = 64


def _setup(batch: int, mesh=None):
    # the experiment presets' (first landed) nets: compact U-Net, simple heads with a pixel head
    net = G.UNet(G.UNetConfig(channels=(16, 32), n_blocks=1, groups=4, layout="compact",
                              affine="scale_shift", emb_dim=16))  # fmt: skip
    inner = lambda p, x, c: net.apply(p, x, c)  # noqa: E731
    data = jax.random.uniform(jax.random.key(0), (2048, 8, 8, 1), minval=-1.0, maxval=1.0)
    params = net.init(jax.random.key(1), data[:1], jnp.zeros(1))
    cls = G.Classifier(G.ClassifierConfig(stages=(16, 32), width=32))
    disc, d_init = G.projected_discriminator(
        cls, cls.init(jax.random.key(2), data[:1]),
        G.ProjectedHeads(hidden=64, layout="simple", spectral_norm=False), pixels=True,
    )  # fmt: skip
    cfg = G.FinetuneConfig(batch=batch, lr_g=2e-4, lr_d=2e-3)
    ft = G.make_finetuner(inner, params, disc, data, 0.5, cfg, mesh=mesh)
    state = ft.init(jax.random.key(4), params, d_init(jax.random.key(3), data[:2]))
    return inner, params, ft, state


def host_heun(denoiser, x, sigmas: list[float]):
    """Heun on ``sigmas`` as a Python loop over steps (one dispatched denoiser call per NFE)."""
    for s, s_next in zip(sigmas[:-1], sigmas[1:], strict=True):
        d = (x - denoiser(x, s)) / s
        x_next = x + (s_next - s) * d
        if s_next > 0:
            x_next = x + (s_next - s) * 0.5 * (d + (x_next - denoiser(x_next, s_next)) / s_next)
        x = x_next
    return x


def _host_teacher(denoiser, params, z, *, sigmas, sigma_max):
    return host_heun(lambda x, s: denoiser(params, x, s), sigma_max * z, sigmas)


def run(size: str) -> list[dict]:
    rows, spec = [], SIZES[size]
    edm_cfg = G.EDMConfig(sigma_data=0.5)
    for b in spec["batch"]:
        inner, params, ft, state = _setup(b)
        timing = time_call(jax.jit(ft.step), state, n_runs=5)
        rows.append(result_row(NAME, "gan step jit", size, timing, work=b, unit="images", batch=b))

        _, _, ft_micro, state_micro = _setup(MICRO)

        def eager_loop(s, n=b // MICRO, step=ft_micro.step):
            for _ in range(n):
                s, m = step(s)
            return s

        timing = time_call(eager_loop, state_micro, n_warmup=1, n_runs=2)
        rows.append(result_row(NAME, "gan step eager micro-batch loop", size, timing, work=b,
                               unit="images", batch=b, micro_batch=MICRO))  # fmt: skip

        z = jax.random.normal(jax.random.key(5), (b, 8, 8, 1))
        sampler = jax.jit(functools.partial(G.teacher_sample, inner, n_steps=18, config=edm_cfg))
        timing = time_call(sampler, params, z, n_runs=5)
        rows.append(result_row(NAME, "teacher heun diffrax jit", size, timing, work=b,
                               unit="samples", batch=b, nfe=35))  # fmt: skip

        denoiser = jax.jit(functools.partial(G.denoise, inner, sigma_data=edm_cfg.sigma_data))
        sigmas = [float(s) for s in G.karras_steps(18, edm_cfg)]
        host = functools.partial(
            _host_teacher, denoiser, sigmas=sigmas, sigma_max=edm_cfg.sigma_max
        )
        timing = time_call(host, params, z, n_runs=5)
        rows.append(result_row(NAME, "teacher heun host loop", size, timing, work=b,
                               unit="samples", batch=b, nfe=35))  # fmt: skip

    b = spec["batch"][-1]
    n_dev = jax.device_count()
    for d in (1, 2, 4, 8):
        if d > n_dev or b % d:
            continue
        mesh = sharding.data_mesh(jax.devices()[:d])
        _, _, ft, state = _setup(b, mesh=mesh)
        step = jax.jit(ft.step)
        timing = time_call(step, sharding.replicate(state, mesh), n_runs=3)
        rows.append(result_row(NAME, "gan step jit sharded", size, timing, work=b,
                               unit="images", devices=d, batch=b))  # fmt: skip
    return rows

"""Benchmark of the DGBFGP hot path: basis-function GP prior vs the exact GP prior, fused vs naive.

(a) Seconds per epoch vs ``N`` (subjects added with ``N``, 20 times each) for the basis model
    (``N / 128`` SVI steps) and the exact GP-prior VAE (one full-batch step with an ``N x N``
    Cholesky). Equal work: one pass over the ``N`` observations.
(b) One SVI step (batch 128) of the fused latent (one GEMM for the dense bases, row gathers for the
    one-hot and subject-interaction components) vs the naive per-component loop with dense one-hot
    matmuls, at ``P`` subjects, both with every subject's weights sampled each step (the official
    estimator); and the fused step with ``local_subject_samples`` (only the batch's subjects).
(c) The same fused step on a larger batch with the batch axis sharded over 1, 2, 4, ... devices.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from experiments.gp_vae import Config, components, model_config
from jaxlab.core import sharding
from jaxlab.core.timing import result_row, time_call
from jaxlab.probabilistic import gp_vae as G
from jaxlab.probabilistic.gp_vae import baselines as B
from jaxlab.probabilistic.gp_vae.data import health_digits

NAME = "gp_prior_basis"
DESCRIPTION = "DGBFGP epoch time vs N against the exact GP prior; fused vs naive SVI step; sharding"
SIZES = {
    "small": {"N": (1000, 2000, 4000), "P": (200,), "shard_batch": 512},
    "large": {"N": (1000, 2000, 4000, 8000, 16000), "P": (200, 800), "shard_batch": 4096},
}
TIMES = 20


def _problem(n_subjects: int, seed: int = 0):
    data = health_digits(jax.random.key(seed), n_subjects, TIMES)
    return data.covariates(), jnp.asarray(data.images)


def _model(cfg: Config, comps, fused: bool = True, local: bool = False):
    return G.make_model(model_config(cfg, comps, fused=fused, local_subject_samples=local))


def run(size: str) -> list[dict]:
    cfg, spec, rows = Config(), SIZES[size], []

    for n in spec["N"]:  # (a) epoch time vs N
        p = n // TIMES
        cov, y = _problem(p, seed=n)
        comps = components(cfg, p)
        model = _model(cfg, comps, local=cfg.local_subject_samples)
        trainer = G.make_trainer(model, n, cfg.batch_size, cfg.learning_rate)
        state = trainer.init(jax.random.key(1), cov, y)
        epoch = jax.jit(lambda s, t=trainer: t.epoch(s)[0])
        timing = time_call(epoch, state, n_runs=3)
        rows.append(result_row(NAME, "basis epoch", size, timing, work=n, unit="observations",
                               N=n, P=p))  # fmt: skip
        exact, _, (step, opt) = B.fit_exact_gpvae(jax.random.key(2), comps, cov, y, cfg.latent_dim,
                                                  cfg.hidden, epochs=0)  # fmt: skip
        args = (exact.params, opt.init(exact.params), jax.random.key(3))
        timing = time_call(step, *args, n_runs=3)
        rows.append(result_row(NAME, "exact GP epoch", size, timing, work=n, unit="observations",
                               N=n, P=p))  # fmt: skip

    for p in spec["P"]:  # (b) fused vs naive SVI step
        cov, y = _problem(p, seed=p)
        comps = components(cfg, p)
        n = cov.num_rows
        batch = jnp.arange(cfg.batch_size)
        variants = {
            "fused gather/GEMM step": (True, False),
            "naive dense one-hot step": (False, False),
            "fused step, local subject samples": (True, True),
        }
        for impl, (fused, local) in variants.items():
            trainer = G.make_trainer(_model(cfg, comps, fused, local), n, cfg.batch_size)
            state = trainer.init(jax.random.key(1), cov, y)
            counts = state.data[3]
            update = jax.jit(
                lambda s, c, yy, t=trainer, n=n, k=counts: t.svi.update(
                    s, c, yy, None, n, True, level_counts=k
                )[0]
            )
            timing = time_call(update, state.svi_state, cov.take(batch), y[batch])
            rows.append(result_row(NAME, impl, size, timing, work=cfg.batch_size,
                                   unit="observations", P=p, batch=cfg.batch_size))  # fmt: skip

    # (c) the fused step with the batch sharded over devices
    p = spec["P"][0]
    cov, y = _problem(p, seed=p)
    comps = components(cfg, p)
    b = spec["shard_batch"]
    trainer = G.make_trainer(_model(cfg, comps), b, b)
    state = trainer.init(jax.random.key(1), cov.take(jnp.arange(b)), y[:b])
    update = jax.jit(lambda s, c, yy: trainer.svi.update(s, c, yy, None, b, True)[0])  # global
    n_dev = 1
    while n_dev <= jax.device_count() and b % n_dev == 0:
        mesh = sharding.data_mesh(jax.devices()[:n_dev])
        c_b, y_b = sharding.shard_batch((cov.take(jnp.arange(b)), y[:b]), mesh)
        svi_state = sharding.replicate(state.svi_state, mesh)
        timing = time_call(update, svi_state, c_b, y_b)
        rows.append(result_row(NAME, "fused step, sharded batch", size, timing, work=b,
                               unit="observations", devices=n_dev, P=p, batch=b))  # fmt: skip
        n_dev *= 2
    return rows

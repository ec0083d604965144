"""Benchmark of the DGBFGP hot path: basis-function GP prior vs the exact GP prior, fused vs naive.

(a) Seconds per epoch vs ``N`` (subjects added with ``N``, 20 times each) for the basis model
    (``N / 128`` SVI steps) and the exact GP-prior VAE (one full-batch step with an ``N x N``
    Cholesky). Equal work: one pass over the ``N`` observations.
(b) One SVI step (batch 128) of the fused latent (one GEMM for the dense bases, row gathers for the
    one-hot and subject-interaction components) vs the naive per-component loop with dense one-hot
    matmuls, at ``P`` subjects, both with every subject's weights sampled each step (the official
    estimator); and the fused step with ``local_subject_samples`` (only the batch's subjects).
(c) The same fused step on a larger batch with the batch axis sharded over 1, 2, 4, ... devices.

Model: the Health-Digits prior of :func:`jaxlab.probabilistic.gp_vae.health_digits_config` with the
library defaults (``M = 24``, ``J = 4``, ``L = 8``, decoder 64-64, 3 particles; batch 128, Adam
5e-3), the settings of the ``gp_vae`` experiment's quick preset.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

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
BATCH = 128


def _problem(n_subjects: int, seed: int = 0):
    data = health_digits(jax.random.key(seed), n_subjects, TIMES)
    return data.covariates(), jnp.asarray(data.images)


def _model(n_subjects: int, fused: bool = True, local: bool = False):
    config = G.health_digits_config(n_subjects, fused=fused, local_subject_samples=local)
    return G.make_model(config)


def run(size: str) -> list[dict]:
    spec, rows = SIZES[size], []

    for n in spec["N"]:  # (a) epoch time vs N
        p = n // TIMES
        cov, y = _problem(p, seed=n)
        model = _model(p, local=True)
        trainer = G.make_trainer(model, n, BATCH)
        state = trainer.init(jax.random.key(1), cov, y)
        epoch = jax.jit(lambda s, t=trainer: t.step(s)[0])
        timing = time_call(epoch, state, n_runs=3)
        rows.append(result_row(NAME, "basis epoch", size, timing, work=n, unit="observations",
                               N=n, P=p))  # fmt: skip
        exact, _, exact_epoch = B.fit_exact_gpvae(
            jax.random.key(2), model.config.components, cov, y, epochs=0
        )  # fmt: skip  (build, not train)
        timing = time_call(exact_epoch, exact.params, jax.random.key(3), n_runs=3)
        rows.append(result_row(NAME, "exact GP epoch", size, timing, work=n, unit="observations",
                               N=n, P=p))  # fmt: skip

    for p in spec["P"]:  # (b) fused vs naive SVI step
        cov, y = _problem(p, seed=p)
        n = cov.num_rows
        batch = jnp.arange(BATCH)
        variants = {
            "fused gather/GEMM step": (True, False),
            "naive dense one-hot step": (False, False),
            "fused step, local subject samples": (True, True),
        }
        for impl, (fused, local) in variants.items():
            trainer = G.make_trainer(_model(p, fused, local), n, BATCH)
            state = trainer.init(jax.random.key(1), cov, y)
            counts = state.level_counts
            update = jax.jit(
                lambda s, c, yy, t=trainer, n=n, k=counts: t.svi.update(
                    s, c, yy, None, n, True, level_counts=k
                )[0]
            )
            timing = time_call(update, state.svi_state, cov.take(batch), y[batch])
            rows.append(result_row(NAME, impl, size, timing, work=BATCH,
                                   unit="observations", P=p, batch=BATCH))  # fmt: skip

    # (c) the fused step with the batch sharded over devices
    p = spec["P"][0]
    cov, y = _problem(p, seed=p)
    b = spec["shard_batch"]
    trainer = G.make_trainer(_model(p), b, b)
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

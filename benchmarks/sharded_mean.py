"""Benchmark of the shared sharding core: a Monte Carlo mean of a per-example kernel sum.

Work: ``mean_i (1/M) sum_j exp(-(x_i - c_j)^2 / (2 h^2))`` over ``B`` samples and ``M`` centres
(``B * M`` Gaussian kernel evaluations), the shape of every KDE/Monte Carlo hot core in jaxlab.
Implementations on equal work: a per-sample Python loop (small size only), a NumPy broadcast,
an unsharded ``jit(vmap)``, and :func:`jaxlab.core.sharding.sharded_mean` on meshes of 1, 2, 4, ...
devices (device scaling; on forced CPU host devices this checks plumbing, not speed).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core import sharding
from jaxlab.core.timing import result_row, time_call

NAME = "sharded_mean"
DESCRIPTION = (
    "Monte Carlo kernel mean: Python loop vs NumPy vs jit(vmap) vs sharded_mean over devices"
)
SIZES = {"small": (4096, 256), "large": (65536, 1024)}
BANDWIDTH = 0.1


def kernel_mean(centres: jax.Array, x: jax.Array) -> jax.Array:
    """(1/M) sum_j N(x; c_j, h^2) up to the normalising constant; x: [] one sample, centres: [M]."""
    return jnp.mean(jnp.exp(-0.5 * ((x - centres) / BANDWIDTH) ** 2))


def numpy_mean(centres: np.ndarray, xs: np.ndarray) -> float:
    return float(np.mean(np.exp(-0.5 * ((xs[:, None] - centres[None, :]) / BANDWIDTH) ** 2)))


def loop_mean(centres: np.ndarray, xs: np.ndarray) -> float:
    total = 0.0
    for x in xs:
        total += float(np.mean(np.exp(-0.5 * ((x - centres) / BANDWIDTH) ** 2)))
    return total / len(xs)


def run(size: str) -> list[dict]:
    n_samples, n_centres = SIZES[size]
    k_x, k_c = jax.random.split(jax.random.key(0))
    xs = jax.random.uniform(k_x, (n_samples,))
    centres = jax.random.uniform(k_c, (n_centres,))
    xs_np, centres_np = np.asarray(xs), np.asarray(centres)
    rows = []

    def add(impl, fn, centres, xs, devices=1, n_runs=5):
        timing = time_call(fn, centres, xs, n_runs=n_runs)
        b = xs.shape[0]
        rows.append(
            result_row(
                NAME,
                impl,
                size,
                timing,
                work=b * n_centres,
                unit="kernel evals",
                devices=devices,
                B=b,
                M=n_centres,
            )
        )

    if size == "small":  # the loop is too slow for the full batch; throughput stays comparable
        add("python loop", loop_mean, centres_np, xs_np[:512], n_runs=3)
    add("numpy broadcast", numpy_mean, centres_np, xs_np)
    unsharded = jax.jit(lambda c, x: jnp.mean(jax.vmap(kernel_mean, in_axes=(None, 0))(c, x)))
    add("jit(vmap), 1 device", unsharded, centres, xs)
    n = 1
    while n <= jax.device_count() and n_samples % n == 0:
        mesh = sharding.data_mesh(jax.devices()[:n])
        fn = sharding.sharded_mean(kernel_mean, mesh)
        add(
            "sharded_mean",
            fn,
            sharding.replicate(centres, mesh),
            sharding.shard_batch(xs, mesh),
            devices=n,
        )
        n *= 2
    return rows

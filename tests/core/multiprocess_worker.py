"""One process of the multi-process check (``tests/core/test_multiprocess.py``).

``python -m tests.core.multiprocess_worker OUT`` under :func:`jaxlab.launch.launch` joins the run,
builds the global ``"data"`` mesh (every process's devices) and runs :func:`compute` on it: three
hot cores through ``jaxlab.core.sharding``. Each process writes ``OUT.<process id>.npz``; the test
compares them with :func:`compute` on a single-process mesh of the same size.
"""

from __future__ import annotations

import sys

import numpy as np


def _local_rows(mesh, n_rows: int) -> slice:
    """The rows of a ``[n_rows]`` batch whose shards live on this process's devices."""
    from jaxlab.core.sharding import batch_sharding

    index_map = batch_sharding(mesh).addressable_devices_indices_map((n_rows,))
    starts = sorted(idx[0].start or 0 for idx in index_map.values())
    stops = sorted(idx[0].stop or n_rows for idx in index_map.values())
    return slice(starts[0], stops[-1])


def _fetch(tree) -> dict:
    """Every leaf as a NumPy array on every process (gathered when it spans processes)."""
    import jax
    from jax.experimental import multihost_utils

    def fetch(x):
        if isinstance(x, jax.Array) and not x.is_fully_addressable:
            return np.asarray(multihost_utils.process_allgather(x, tiled=True))
        return np.asarray(x)

    return jax.tree_util.tree_map(fetch, tree)


def compute(mesh) -> dict[str, np.ndarray]:
    """Three hot cores on ``mesh``; the same numbers on any mesh of the same device count.

    1. ``core.sharding.sharded_mean`` and its gradient over a sharded batch (one ``psum``);
    2. three steps of the auction learner (aBR after step 1), ante samples sharded;
    3. the CMI test, bootstrap draws sharded.
    """
    import jax
    import jax.numpy as jnp

    from jaxlab.core.sharding import shard_batch, sharded_mean
    from jaxlab.games.auctions import AuctionGame, LearnerConfig, make_learner
    from jaxlab.stats.cmi_test import (
        CMIConfig,
        LinearGaussianGenerator,
        RidgeRegressor,
        cmi_test,
        gaussian_design,
    )

    out = {}
    rng = np.random.default_rng(0)
    xs = rng.normal(size=(8, 3)).astype(np.float32)
    params = {"w": np.array([0.5, -1.0, 2.0], np.float32)}
    batch = shard_batch(xs[_local_rows(mesh, len(xs))], mesh, name="xs")
    mean = sharded_mean(lambda p, x: jnp.sum((p["w"] * x) ** 2), mesh)
    value, grad = jax.value_and_grad(mean)(params, batch)
    out["mean"], out["mean_grad"] = _fetch((value, grad["w"]))

    game = AuctionGame("fp", (3,))
    config = LearnerConfig(
        method="abr", init_steps=1, ante_samples=64, market_samples=512, chunk_size=512
    )
    learner = make_learner(game, config, mesh=mesh)
    step = jax.jit(learner.step)
    state = learner.init(jax.random.key(3))
    brd = []
    for _ in range(3):
        state, metrics = step(state)
        brd.append(metrics["brd"])
    leaves = _fetch(jax.tree_util.tree_leaves(state.params))
    for i, leaf in enumerate(leaves):
        out[f"auction_param_{i}"] = leaf
    out["auction_brd"] = np.stack(_fetch(brd))

    design = gaussian_design("a2_sparse", dz=3, dx=5)
    x, y, z = (np.asarray(a) for a in design.sample(jax.random.key(7), 64))
    res = cmi_test(
        x, y, z, jax.random.key(8), generator=LinearGaussianGenerator(),
        regressor=RidgeRegressor(), config=CMIConfig(num_samples=8, num_boot=64), mesh=mesh,
    )  # fmt: skip
    out["cmi_statistic"], out["cmi_p_value"], out["cmi_bootstrap"] = _fetch(
        (res.statistic, res.p_value, res.bootstrap)
    )
    return out


def main(path: str) -> None:
    from jaxlab import launch

    joined = launch.initialize()
    import jax

    from jaxlab.core.sharding import data_mesh

    assert joined and jax.process_count() > 1, "run this under jaxlab.launch with -n >= 2"
    mesh = data_mesh()
    print(
        f"process {jax.process_index()} of {jax.process_count()}: "
        f"{jax.local_device_count()} local of {jax.device_count()} devices",
        flush=True,
    )
    np.savez(f"{path}.{jax.process_index()}.npz", **compute(mesh))


if __name__ == "__main__":
    main(sys.argv[1])

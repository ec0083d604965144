"""Benchmark of SSAR's training loop: TD3+BC+SSAR gradient steps per second on D-re.

Equal work in every row: ``R`` runs x ``K`` steps of batch 256 (work = ``R K`` run-steps), at
actor/critic widths ``w`` (the coefficient net 3 x ``w``):

(a) ``scan vmap``: the library's way: the whole ``K``-step run as one ``lax.scan``
    (:func:`jaxlab.core.training.scan_steps`) inside ``jit``, the ``R`` runs ``vmap`` ped;
(b) ``host loop``: the official code's structure: a Python loop over steps, the minibatch rows
    drawn on the host with NumPy and passed to one jitted step per call (``step(state, rows)``),
    and the step's metrics pulled to the host every step (as its logger does); ``R`` runs are
    one vmapped step, so (b) differs from (a) in the loop only;
(c) ``sequential runs``: (a) for one run, called ``R`` times one after another.

Compile time is reported apart (``compile_s``); medians are over warm calls, blocked until
ready. Rows ``scan vmap sharded`` split the runs axis over 1, 2, 4, ... devices
(:func:`jaxlab.core.sharding.data_mesh`; on forced host devices they check the plumbing, not
speed; on an accelerator the ``large`` size adds 32 runs, the scaling row).
"""

from __future__ import annotations

import functools

import jax
import numpy as np

from jaxlab.core import sharding
from jaxlab.core.timing import result_row, time_call
from jaxlab.core.training import scan_steps
from jaxlab.rl import ssar

NAME = "ssar_steps"
DESCRIPTION = "TD3+BC+SSAR steps/s: scan+vmap vs host loop with NumPy sampling vs sequential runs"
SIZES = {
    "small": {"widths": (16, 64, 256), "runs": (1, 8), "steps": 100},
    "large": {"widths": (16, 64, 256), "runs": (1, 8, 32), "steps": 500},
}
BATCH = 256


@functools.cache
def _data():
    data = ssar.make_dataset(jax.random.key(0), "D-re")
    return data, ssar.traj_trust(data, -400.0)


def _trainer(width: int, mesh=None, batch: int = BATCH):
    data, trust = _data()
    cfg = ssar.TD3BCConfig(steps=10_000, batch=batch, hidden=(width, width),
                           beta_hidden=(width,) * 3)  # fmt: skip
    return ssar.make_trainer(cfg, data, trust, jax.random.key(1), 2, mesh=mesh)


def _state(trainer, runs: int):
    specs = [ssar.ssar_run(ssar.TD3BCConfig()) if i % 2 else ssar.td3bc_run(2.5)
             for i in range(runs)]  # fmt: skip
    return trainer.init_runs(jax.random.key(2), ssar.stack_runs(specs))


def scanned(trainer, steps: int):
    """(a): ``jit(vmap(scan))`` over ``steps``; returns the final state and the last metrics."""

    def run(state):
        state, metrics = jax.vmap(lambda s: scan_steps(trainer.step, s, steps))(state)
        return state, jax.tree_util.tree_map(lambda m: m[:, -1], metrics)

    return jax.jit(run)


def host_loop(trainer, steps: int, n_rows: int, batch: int = BATCH, seed: int = 0):
    """(b): a Python loop of jitted vmapped steps on host-drawn NumPy rows, metrics pulled to
    the host each step."""
    step = jax.jit(jax.vmap(trainer.step))
    rng = np.random.default_rng(seed)

    def run(state):
        runs = jax.tree_util.tree_leaves(state.step)[0].shape[0]
        for _ in range(steps):
            rows = rng.integers(0, n_rows, size=(runs, batch), dtype=np.int32)
            state, metrics = step(state, rows)
            logged = {k: np.asarray(v).tolist() for k, v in metrics.items()}  # noqa: F841
        return state

    return run


def sequential(trainer, steps: int, runs: int):
    """(c): (a) for one run at a time."""
    one = scanned(trainer, steps)

    def run(state):
        out = []
        for i in range(runs):
            s, _ = one(jax.tree_util.tree_map(lambda x, i=i: x[i : i + 1], state))
            out.append(s)
        return out

    return run


def rows_for(size: str, widths, runs_list, steps: int, n_runs: int = 3) -> list[dict]:
    rows = []
    n_rows = _data()[0].obs.shape[0]
    for w in widths:
        trainer = _trainer(w)
        for r in runs_list:
            state = _state(trainer, r)
            params = {"width": w, "runs": r, "steps": steps, "batch": BATCH}
            work = r * steps
            t = time_call(scanned(trainer, steps), state, n_warmup=1, n_runs=n_runs)
            rows.append(result_row(NAME, "scan vmap", size, t, work=work, unit="run-steps",
                                   **params))  # fmt: skip
            t = time_call(host_loop(trainer, steps, n_rows), state, n_warmup=1, n_runs=n_runs)
            rows.append(result_row(NAME, "host loop", size, t, work=work, unit="run-steps",
                                   **params))  # fmt: skip
            if r > 1:
                t = time_call(sequential(trainer, steps, r), state, n_warmup=1, n_runs=n_runs)
                rows.append(result_row(NAME, "sequential runs", size, t, work=work,
                                       unit="run-steps", **params))  # fmt: skip
    return rows


def sharded_rows(size: str, width: int, runs: int, steps: int, n_runs: int = 3) -> list[dict]:
    rows = []
    for d in (1, 2, 4, 8):
        if d > jax.device_count() or runs % d:
            continue
        trainer = _trainer(width, mesh=sharding.data_mesh(jax.devices()[:d]))
        state = _state(trainer, runs)
        t = time_call(scanned(trainer, steps), state, n_warmup=1, n_runs=n_runs)
        rows.append(result_row(NAME, "scan vmap sharded", size, t, work=runs * steps,
                               unit="run-steps", devices=d, width=width, runs=runs,
                               steps=steps))  # fmt: skip
    return rows


def run(size: str) -> list[dict]:
    spec = SIZES[size]
    rows = rows_for(size, spec["widths"], spec["runs"], spec["steps"])
    return rows + sharded_rows(size, 64, max(spec["runs"]), spec["steps"])

"""The ssar_steps benchmark times equal work: its sequential runs reach the vmapped scan's final
states, and its host loop advances every run by the given number of steps."""

import jax
import numpy as np

from benchmarks import ssar_steps as bench


def test_sequential_runs_equal_the_vmapped_scan_and_the_host_loop_counts_steps():
    trainer = bench._trainer(8, batch=16)
    state = bench._state(trainer, 2)
    scanned, _ = bench.scanned(trainer, 4)(state)
    singles = bench.sequential(trainer, 4, 2)(state)
    for i, single in enumerate(singles):
        for a, b in zip(jax.tree_util.tree_leaves(single.actor),
                        jax.tree_util.tree_leaves(scanned.actor), strict=True):  # fmt: skip
            np.testing.assert_allclose(a[0], b[i], rtol=1e-5, atol=1e-6)
    n_rows = bench._data()[0].obs.shape[0]
    looped = bench.host_loop(trainer, 3, n_rows, batch=16)(state)
    np.testing.assert_array_equal(looped.step, [3, 3])

"""Scale-out across processes: hot cores on a 4-device mesh over 2 processes == one process.

Two processes on 127.0.0.1 (``jaxlab.launch``), each with 2 forced CPU devices and gloo
collectives, run :func:`tests.core.multiprocess_worker.compute` on the global mesh; this process
runs the same function unsharded (a 1-device mesh). A reduction that stays inside one process (a
missing ``psum``, a mean over local rows only) gives each process its own partial answer and fails
here.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

from jaxlab import launch
from tests.core import multiprocess_worker

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def multiprocess_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("multiprocess") / "out"
    results = launch.launch(
        [sys.executable, "-m", "tests.core.multiprocess_worker", str(out)],
        num_processes=2,
        local_devices=2,
        timeout_s=240,
        cwd=str(ROOT),
    )
    assert [r.returncode for r in results] == [0, 0]
    assert all("2 local of 4 devices" in r.stdout for r in results), [r.stdout for r in results]
    return [dict(np.load(f"{out}.{i}.npz")) for i in range(2)]


def test_two_processes_agree_with_one(multiprocess_results):
    import jax

    from jaxlab.core.sharding import data_mesh

    # the reference is unsharded (a 1-device mesh): a partial reduction that a same-size
    # single-process mesh would share cannot pass
    single = multiprocess_worker.compute(data_mesh(jax.devices()[:1]))
    for got in multiprocess_results:
        assert got.keys() == single.keys()
        for name, want in single.items():
            # same programs, same keys: only the order of floating-point reductions may differ
            np.testing.assert_allclose(got[name], want, rtol=2e-5, atol=1e-6, err_msg=name)
    np.testing.assert_array_equal(multiprocess_results[0]["cmi_p_value"], single["cmi_p_value"])
    # the answer is not trivially shared: the two processes' outputs are bit-identical copies
    for name in single:
        np.testing.assert_array_equal(multiprocess_results[0][name], multiprocess_results[1][name])


def test_launch_reaps_a_failed_run_and_reports_it(tmp_path):
    # process 1 exits at once; process 0 would wait forever to join: both must come back fast
    code = (
        "import os, sys, time\n"
        "if os.environ['JAXLAB_PROCESS_ID'] == '1': sys.exit(3)\n"
        "time.sleep(60)\n"
    )
    with pytest.raises(launch.LaunchError, match="failed") as info:
        launch.launch([sys.executable, "-c", code], num_processes=2, timeout_s=30)
    codes = [r.returncode for r in info.value.results]
    assert codes[1] == 3 and codes[0] != 0  # the sleeper was killed, not left running
    with pytest.raises(launch.LaunchError, match="limit"):
        launch.launch([sys.executable, "-c", "import time; time.sleep(60)"], 1, timeout_s=0.5)


def test_launch_and_initialize_reject_bad_arguments(monkeypatch):
    with pytest.raises(ValueError, match="num_processes"):
        launch.launch([sys.executable, "-c", "pass"], num_processes=0)
    with pytest.raises(ValueError, match="argv"):
        launch.launch([])
    monkeypatch.setenv(launch.ENV_COORDINATOR, "127.0.0.1:1")
    monkeypatch.delenv(launch.ENV_NUM_PROCESSES, raising=False)
    monkeypatch.delenv(launch.ENV_PROCESS_ID, raising=False)
    with pytest.raises(ValueError, match="go together"):
        launch.initialize()
    with pytest.raises(ValueError, match="process_id"):
        launch.initialize("127.0.0.1:1", 2, 2)
    monkeypatch.delenv(launch.ENV_COORDINATOR)
    assert launch.initialize() is False  # nothing set: a single-process run, JAX untouched

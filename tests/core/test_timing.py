"""The shared benchmark timing helper and the sharding-core benchmark's equal-work baselines."""

import json
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import sharded_mean as bench
from benchmarks.__main__ import main
from jaxlab.core import sharding
from jaxlab.core.timing import Timing, result_row, time_call


def test_jitted_function_reports_compile_apart_from_steady_state():
    fn = jax.jit(lambda x: jnp.sin(x) @ jnp.cos(x).T)
    timing = time_call(fn, jnp.ones((64, 64)), n_warmup=1, n_runs=3)
    assert timing.n_runs == 3
    assert timing.compile_s > 0 and timing.median_s > 0
    assert timing.min_s <= timing.median_s


def test_plain_callable_is_timed_blocked_with_steady_median():
    def slow(x):
        time.sleep(0.01)
        return x

    timing = time_call(slow, np.ones(3), n_warmup=1, n_runs=3)
    assert 0.009 < timing.median_s < 0.5
    with pytest.raises(ValueError, match="`n_runs` must be >= 1"):
        time_call(slow, np.ones(3), n_runs=0)


def test_result_row_throughput():
    row = result_row(
        "core",
        "impl",
        "small",
        Timing(0.5, 0.6, 0.25, 0.2, 5),
        work=1000,
        unit="samples",
        devices=2,
        B=10,
    )
    assert row["throughput"] == 4000 and row["unit"] == "samples/s"
    assert row["params"] == {"B": 10} and row["devices"] == 2


def test_benchmark_implementations_do_equal_work(mesh):
    k1, k2 = jax.random.split(jax.random.key(1))
    xs, centres = jax.random.uniform(k1, (64,)), jax.random.uniform(k2, (16,))
    expected = bench.numpy_mean(np.asarray(centres), np.asarray(xs))
    assert bench.loop_mean(np.asarray(centres), np.asarray(xs)) == pytest.approx(expected, rel=1e-6)
    sharded = sharding.sharded_mean(bench.kernel_mean, mesh)(centres, xs)
    assert float(sharded) == pytest.approx(expected, rel=1e-5)


def test_benchmark_cli_writes_json(tmp_path, monkeypatch):
    monkeypatch.setitem(bench.SIZES, "small", (256, 32))
    out = tmp_path / "bench.json"
    assert main(["run", "sharded_mean", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    impls = {row["impl"] for row in report["rows"]}
    assert {"python loop", "numpy broadcast", "jit(vmap), 1 device", "sharded_mean"} <= impls
    assert {row["devices"] for row in report["rows"]} == {1, 2, 4}
    assert report["device_count"] == 4
    assert main(["run", "nope"]) == 2


def test_benchmark_cli_output_problems_are_one_line_errors(tmp_path, capsys, monkeypatch):
    # caught before the benchmark runs: a folder as --out, a path below a file
    ran = []
    monkeypatch.setattr(bench, "run", lambda size: ran.append(size) or [])
    assert main(["run", "sharded_mean", "--out", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err
    (tmp_path / "f").write_text("x")
    assert main(["run", "sharded_mean", "--out", str(tmp_path / "f" / "b.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write there" in err
    assert ran == []

    def interrupted(size):
        raise KeyboardInterrupt

    monkeypatch.setattr(bench, "run", interrupted)
    assert main(["run", "sharded_mean", "--out", str(tmp_path / "b.json")]) == 130
    assert capsys.readouterr().err == (
        "error: interrupted during benchmark sharded_mean; nothing written\n"
    )

"""Timing for benchmarks and experiments: compile apart from steady state, after warm-up, blocked.

Used by ``benchmarks/`` and by experiments that report wall times, so neither imports the other.
A benchmark module ``benchmarks/<name>.py`` (no leading underscore) defines ``NAME``,
``DESCRIPTION`` and ``run(size: str) -> list[dict]`` for ``size`` in ``("small", "large")``; each
row comes from :func:`result_row` so every benchmark's JSON has the same columns.

Timing rules (see :func:`time_call`):

- a jitted function (anything with ``.lower``) is compiled ahead of time and that compile is
  timed on its own; the compiled executable is then what gets timed;
- any other callable (NumPy, a Python loop, a wrapper around jitted code) reports
  ``compile_s = first_call_s - median_s`` (about 0 for NumPy);
- ``n_warmup`` untimed calls, then ``n_runs`` timed calls, each ending in
  ``jax.block_until_ready`` on the output; the median is the steady-state figure.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax

from jaxlab.core.checks import check_int

__all__ = ["Timing", "result_row", "time_call"]


@dataclasses.dataclass(frozen=True)
class Timing:
    """Seconds: ``compile_s`` (AOT compile, or first call minus median), steady-state median/min."""

    compile_s: float
    first_call_s: float
    median_s: float
    min_s: float
    n_runs: int


def _blocked_call(fn: Callable, args: tuple) -> float:
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - start


def time_call(fn: Callable, *args: Any, n_warmup: int = 2, n_runs: int = 5) -> Timing:
    """Time ``fn(*args)``; see the module docstring for what is measured."""
    check_int(n_runs, "n_runs", minimum=1)
    check_int(n_warmup, "n_warmup", minimum=0)
    if not callable(fn):
        raise TypeError(f"time_call: `fn` must be callable, got {type(fn).__name__}.")
    compile_s = None
    if hasattr(fn, "lower"):
        start = time.perf_counter()
        fn = fn.lower(*args).compile()
        compile_s = time.perf_counter() - start
    first = _blocked_call(fn, args)
    for _ in range(max(n_warmup - 1, 0)):
        _blocked_call(fn, args)
    runs = [_blocked_call(fn, args) for _ in range(n_runs)]
    median = statistics.median(runs)
    if compile_s is None:
        compile_s = max(first - median, 0.0)
    return Timing(compile_s, first, median, min(runs), n_runs)


def result_row(
    core: str,
    impl: str,
    size: str,
    timing: Timing,
    *,
    work: float,
    unit: str,
    devices: int = 1,
    **params: Any,
) -> dict:
    """One JSON row: timings plus throughput ``work / median_s`` in ``unit`` per second."""
    return {
        "core": core,
        "impl": impl,
        "size": size,
        "devices": devices,
        "params": params,
        "compile_s": timing.compile_s,
        "first_call_s": timing.first_call_s,
        "median_s": timing.median_s,
        "min_s": timing.min_s,
        "n_runs": timing.n_runs,
        "throughput": work / timing.median_s if timing.median_s > 0 else float("inf"),
        "unit": f"{unit}/s",
    }

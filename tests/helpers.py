"""Shared test helpers: one-trace-per-shape checks.

A hot step must compile once per shape: calling it again with new *values* of the same shapes and
dtypes must not trace again (a retrace means a Python value leaked into the trace, a config that
hashes differently per call, or a shape that depends on data, and it costs a compile per call).

- :func:`assert_traces_once` wraps a plain function in a trace counter under ``jax.jit``;
- :func:`assert_compiles_once` checks a function the library already jitted (its own cache), so
  that library-level retraces (a fresh closure or an unhashable static argument per call) show;
- :func:`count_compilations` counts the traces and XLA compiles inside a block (of every function,
  or of one by name) from ``jax.monitoring``, for jits the library keeps private.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import Callable, Iterable, Sequence

import jax

_TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"
_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def assert_traces_once(
    fn: Callable, calls: Iterable[Sequence], *, static_argnums: Sequence[int] = (), name: str = ""
) -> list:
    """``jax.jit(fn)`` called with each argument tuple traces exactly once; returns the outputs.

    ``calls`` should hold at least two argument tuples with equal shapes and different values.
    """
    count = 0

    def counted(*args):
        nonlocal count
        count += 1
        return fn(*args)

    jitted = jax.jit(counted, static_argnums=tuple(static_argnums))
    outs = [jax.block_until_ready(jitted(*args)) for args in calls]
    label = name or getattr(fn, "__name__", repr(fn))
    assert len(outs) >= 2, f"{label}: give at least two calls to check retracing"
    assert count == 1, f"{label} traced {count} times for {len(outs)} calls of one shape"
    return outs


def assert_compiles_once(jitted: Callable, calls: Iterable[Sequence], *, name: str = "") -> list:
    """A function jitted by the library adds at most one entry to its own cache over ``calls``.

    ``jitted`` must be a ``jax.jit`` object (it has ``_cache_size``). Entries already in the cache
    (other tests' shapes) do not count.
    """
    label = name or getattr(jitted, "__name__", repr(jitted))
    if not hasattr(jitted, "_cache_size"):
        raise TypeError(f"{label} is not a jax.jit function; use assert_traces_once")
    before = jitted._cache_size()
    outs = [jax.block_until_ready(jitted(*args)) for args in calls]
    assert len(outs) >= 2, f"{label}: give at least two calls to check retracing"
    grown = jitted._cache_size() - before
    assert grown <= 1, f"{label} compiled {grown} times for {len(outs)} calls of one shape"
    return outs


@dataclasses.dataclass
class Compilations:
    """The function names traced and compiled inside a :func:`count_compilations` block."""

    traces: list[str] = dataclasses.field(default_factory=list)
    compiles: list[str] = dataclasses.field(default_factory=list)


_PROBES = itertools.count(1)


@contextlib.contextmanager
def count_compilations(fun_name: str | None = None):
    """``with count_compilations("run_rounds") as c: ...`` -> ``c.traces`` / ``c.compiles`` list
    one entry per jaxpr trace / XLA backend compile inside the block, of the function named
    ``fun_name`` (``jax.jit(run_rounds)`` traces as ``run_rounds``, compiles as
    ``jit(run_rounds)``) or, with ``None``, of every function.

    On entry a fresh probe function is jitted and its trace and compile must be seen, so empty
    lists mean "nothing traced or compiled", not "the counter saw nothing" (e.g. after a renamed
    ``jax.monitoring`` event). The probe is not counted.
    """
    offset = next(_PROBES)  # a new constant each time: a new program, never in a cache

    def _count_compilations_probe(x):
        return x + offset

    probe, wanted = _count_compilations_probe.__name__, fun_name
    counted, seen_probe = Compilations(), Compilations()

    def listen(event, duration, fun_name=None, **_):
        into = {_TRACE_EVENT: "traces", _COMPILE_EVENT: "compiles"}.get(event)
        if into is None:
            return
        name = str(fun_name)
        if name in (probe, f"jit({probe})"):
            getattr(seen_probe, into).append(name)
        elif wanted is None or name in (wanted, f"jit({wanted})"):
            getattr(counted, into).append(name)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        jax.jit(_count_compilations_probe)(0)  # a new function and program: traced and compiled
        assert seen_probe.traces and seen_probe.compiles, (
            "count_compilations: jax.monitoring reported no trace or compile; the counter is broken"
        )
        yield counted
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)

"""Shared test helpers: one-trace-per-shape checks.

A hot step must compile once per shape: calling it again with new *values* of the same shapes and
dtypes must not trace again (a retrace means a Python value leaked into the trace, a config that
hashes differently per call, or a shape that depends on data, and it costs a compile per call).

- :func:`assert_traces_once` wraps a plain function in a trace counter under ``jax.jit``;
- :func:`assert_compiles_once` checks a function the library already jitted (its own cache), so
  that library-level retraces (a fresh closure or an unhashable static argument per call) show.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import jax


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

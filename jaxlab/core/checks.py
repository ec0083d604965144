"""Argument checks at the public API boundary: clear ``ValueError``s that name the argument.

Value checks (finite, positive, in a range) run only on **concrete** values: under ``jit`` /
``vmap`` / ``grad`` an argument is a tracer and the check passes it through unchanged (shapes and
dtypes are still checked, they are static). Call them where a user's array first enters a method,
before any tracing, so the message names the user's argument rather than an internal one.

Every check returns its (possibly converted) argument, so it can be used inline::

    r = check_in_range(r, "r_hat", 0.0, 1.0)
    n = check_int(n, "num_steps", minimum=1)

Config dataclasses validate their fields in ``__post_init__`` with the scalar checks
(:func:`check_int`, :func:`check_positive`, :func:`check_choice`, ...), naming the field.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "check_choice",
    "check_finite",
    "check_in_range",
    "check_int",
    "check_key",
    "check_positive",
    "check_probability",
    "check_rank",
    "check_shape",
    "is_concrete",
]


def is_concrete(x: Any) -> bool:
    """True unless ``x`` (or a leaf of it) is a JAX tracer, i.e. its value is known on the host."""
    return not any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(x))


def _host(x: Any) -> np.ndarray:
    return np.asarray(jax.device_get(x))


def _describe(a: np.ndarray) -> str:
    if a.size == 1:
        return repr(a.reshape(()).item())
    finite = a[np.isfinite(a)] if np.issubdtype(a.dtype, np.floating) else a
    span = f"[{finite.min():.4g}, {finite.max():.4g}]" if finite.size else "no finite values"
    return f"shape {a.shape}, finite values in {span}"


def check_finite(x: Any, name: str) -> Any:
    """Raise unless every entry of a concrete ``x`` is finite (no NaN, no inf)."""
    if is_concrete(x):
        a = _host(x)
        if np.issubdtype(a.dtype, np.inexact) and not np.all(np.isfinite(a)):
            bad = int(np.sum(~np.isfinite(a)))
            raise ValueError(f"`{name}` must be finite; it has {bad} NaN/inf entries.")
    return x


def check_positive(x: Any, name: str, *, strict: bool = True) -> Any:
    """Raise unless a concrete ``x`` is finite and ``> 0`` (``>= 0`` unless ``strict``)."""
    if is_concrete(x):
        a = _host(x)
        ok = np.all(a > 0) if strict else np.all(a >= 0)
        if not ok or (np.issubdtype(a.dtype, np.inexact) and not np.all(np.isfinite(a))):
            raise ValueError(f"`{name}` must be {'> 0' if strict else '>= 0'}; got {_describe(a)}.")
    return x


def check_in_range(
    x: Any,
    name: str,
    low: float = -np.inf,
    high: float = np.inf,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> Any:
    """Raise unless a concrete ``x`` lies in the interval from ``low`` to ``high`` everywhere.

    The ends are closed unless ``low_open`` / ``high_open``; NaN is always out of range.
    """
    if is_concrete(x):
        a = _host(x)
        above = a > low if low_open else a >= low
        below = a < high if high_open else a <= high
        if not np.all(above & below):
            lo, hi = "(" if low_open else "[", ")" if high_open else "]"
            raise ValueError(f"`{name}` must lie in {lo}{low}, {high}{hi}; got {_describe(a)}.")
    return x


def check_probability(x: Any, name: str, *, open_interval: bool = True) -> Any:
    """``x`` in ``(0, 1)`` (or ``[0, 1]`` with ``open_interval=False``), where concrete."""
    return check_in_range(x, name, 0.0, 1.0, low_open=open_interval, high_open=open_interval)


def check_int(value: Any, name: str, *, minimum: int | None = None, maximum: int | None = None):
    """A Python/NumPy int (not a bool or float) within ``[minimum, maximum]``; returns an int."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"`{name}` must be an int, got {value!r} ({type(value).__name__}).")
    if minimum is not None and value < minimum:
        raise ValueError(f"`{name}` must be >= {minimum}, got {value}.")
    if maximum is not None and value > maximum:
        raise ValueError(f"`{name}` must be <= {maximum}, got {value}.")
    return int(value)


def check_choice(value: Any, name: str, choices: Sequence[Any]) -> Any:
    """``value`` must be one of ``choices``."""
    if value not in tuple(choices):
        raise ValueError(f"`{name}` must be one of {tuple(choices)}, got {value!r}.")
    return value


def check_rank(x: Any, name: str, rank: int | Sequence[int]) -> Any:
    """``x.ndim`` must be ``rank`` (or one of several ranks). Static: also checks tracers."""
    ranks = (rank,) if isinstance(rank, int) else tuple(rank)
    ndim = np.ndim(x)
    if ndim not in ranks:
        want = ranks[0] if len(ranks) == 1 else f"one of {ranks}"
        raise ValueError(f"`{name}` must have rank {want}, got shape {np.shape(x)}.")
    return x


def check_shape(x: Any, name: str, shape: Sequence[int | None], dims: str = "") -> Any:
    """``x.shape`` must match ``shape``, where ``None`` matches any size. Static: checks tracers.

    ``dims`` (e.g. ``"[B, T]"``) only documents the expected layout in the message.
    """
    got = tuple(np.shape(x))
    ok = len(got) == len(shape) and all(
        s is None or s == g for s, g in zip(shape, got, strict=True)
    )
    if not ok:
        want = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ")"
        layout = f" {dims}" if dims else ""
        raise ValueError(f"`{name}` must have shape {want}{layout}, got {got}.")
    return x


def check_key(key: Any, name: str = "key", *, batched: bool = False) -> jax.Array:
    """A typed PRNG key (``jax.random.key``) or a legacy ``uint32[2]`` key; returns a typed key.

    ``batched``: also accept a leading axis of keys (``[S]`` typed or ``[S, 2]`` legacy).
    """
    if isinstance(key, jax.Array | jax.ShapeDtypeStruct) and jax.dtypes.issubdtype(
        key.dtype, jax.dtypes.prng_key
    ):
        if key.ndim not in ((0, 1) if batched else (0,)):
            want = "a key or a [S] key array" if batched else "a single PRNG key"
            raise ValueError(f"`{name}` must be {want}, got a key array of shape {key.shape}.")
        return key
    shape, dtype = np.shape(key), getattr(key, "dtype", None)
    if dtype == jnp.uint32 and shape[-1:] == (2,) and len(shape) in ((1, 2) if batched else (1,)):
        return jax.random.wrap_key_data(key)
    raise ValueError(
        f"`{name}` must be a PRNG key from jax.random.key(seed), got {type(key).__name__} "
        f"with shape {shape} and dtype {dtype}."
    )

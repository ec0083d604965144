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

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

__all__ = [
    "check_abstract_call",
    "check_array",
    "check_bool",
    "check_callable",
    "check_choice",
    "check_count",
    "check_distribution",
    "check_descending",
    "check_finite",
    "check_float_dtype",
    "check_in_range",
    "check_instance",
    "check_int",
    "check_ints",
    "check_key",
    "check_number",
    "check_positive",
    "check_positive_scalar",
    "check_probability",
    "check_rank",
    "check_real",
    "check_scalar",
    "check_same_tree",
    "check_shape",
    "check_simplex",
    "check_static_float",
    "check_tree_finite",
    "is_concrete",
]


def is_concrete(x: Any) -> bool:
    """True unless ``x`` (or a leaf of it) is a JAX tracer, i.e. its value is known on the host."""
    return not any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(x))


def _host(x: Any) -> np.ndarray:
    return np.asarray(jax.device_get(x))


def _dtype(x: Any):
    """The dtype ``x`` would have as an array, or ``None`` when it is not array-like."""
    dtype = getattr(x, "dtype", None)
    if dtype is not None:
        return dtype
    try:
        return np.asarray(x).dtype
    except (TypeError, ValueError):
        return None


def check_real(x: Any, name: str) -> Any:
    """Raise ``TypeError`` unless ``x`` is real-valued numbers (int or float, not bool / str /
    complex / object / PRNG key). Static: also checks tracers."""
    dtype = _dtype(x)
    ok = (
        dtype is not None
        and not jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
        and (np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating))
        and not np.issubdtype(dtype, np.bool_)
    )
    if not ok:
        got = f"dtype {dtype}" if dtype is not None else type(x).__name__
        raise TypeError(f"`{name}` must be real numbers (int or float), got {got}: {x!r:.80}.")
    return x


def _describe(a: np.ndarray) -> str:
    if a.size == 1:
        return repr(a.reshape(()).item())
    finite = a[np.isfinite(a)] if np.issubdtype(a.dtype, np.floating) else a
    span = f"[{finite.min():.4g}, {finite.max():.4g}]" if finite.size else "no finite values"
    return f"shape {a.shape}, finite values in {span}"


def check_finite(x: Any, name: str) -> Any:
    """Raise unless every entry of a concrete ``x`` is finite (no NaN, no inf)."""
    check_real(x, name)
    if is_concrete(x):
        a = _host(x)
        if np.issubdtype(a.dtype, np.inexact) and not np.all(np.isfinite(a)):
            bad = int(np.sum(~np.isfinite(a)))
            raise ValueError(f"`{name}` must be finite; it has {bad} NaN/inf entries.")
    return x


def check_positive(x: Any, name: str, *, strict: bool = True) -> Any:
    """Raise unless a concrete ``x`` is finite and ``> 0`` (``>= 0`` unless ``strict``)."""
    check_real(x, name)
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
    check_real(x, name)
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
    """``value`` must be one of ``choices`` (an array or an incomparable value is a
    ``ValueError`` naming ``name``, not NumPy's "truth value is ambiguous")."""
    try:
        ok = not isinstance(value, np.ndarray | jax.Array) and value in tuple(choices)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"`{name}` must be one of {tuple(choices)}, got {value!r:.60}.")
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


def check_scalar(
    value: Any,
    name: str,
    low: float = -np.inf,
    high: float = np.inf,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> Any:
    """A finite real scalar (Python / NumPy number or a 0-d array) in the range from ``low`` to
    ``high``; a Python number is returned as ``float``, an array unchanged (tracers pass the
    value check). Bools, strings and arrays of rank > 0 are rejected."""
    if isinstance(value, int | float | np.number) and not isinstance(value, bool | np.bool_):
        if not math.isfinite(float(value)):
            raise ValueError(f"`{name}` must be finite, got {value!r}.")
    check_number(value, name, low, high, low_open=low_open, high_open=high_open)
    return float(value) if isinstance(value, int | float | np.number) else value


_KINDS = {
    "real": (np.integer, np.floating),
    "float": (np.floating,),
    "int": (np.integer,),
    "bool": (np.bool_,),
}


def check_array(
    x: Any,
    name: str,
    *,
    ndim: int | Sequence[int] | None = None,
    shape: Sequence[int | None] | None = None,
    dims: str = "",
    kind: str = "real",
    finite: bool = True,
) -> jax.Array:
    """``x`` as a ``jax.Array`` after checking it: convertible to an array, of dtype ``kind``
    (``"real"``: int or float; ``"float"``; ``"int"``; ``"bool"``; ints are accepted where floats
    are expected and converted), of rank ``ndim`` or shape ``shape`` (``None`` = any size), and
    (``finite``, floats only) free of NaN / inf where concrete. Raises ``TypeError`` for the dtype,
    ``ValueError`` for rank, shape and values, each naming ``name``."""
    check_choice(kind, "kind", tuple(_KINDS))
    if isinstance(x, jax.core.Tracer | jax.Array):
        arr = x
    else:
        try:
            arr = np.asarray(x)
        except (TypeError, ValueError) as e:
            raise TypeError(f"`{name}` must be an array, got {type(x).__name__} ({e}).") from None
    dtype = _dtype(arr)
    if (
        jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
        or not (
            any(np.issubdtype(dtype, k) for k in _KINDS[kind])
            or (kind == "float" and np.issubdtype(dtype, np.integer))
        )
        or (kind != "bool" and np.issubdtype(dtype, np.bool_))
    ):
        want = {"real": "int or float", "float": "float", "int": "int", "bool": "bool"}[kind]
        raise TypeError(f"`{name}` must be an array of {want} values, got dtype {dtype}.")
    if ndim is not None:
        check_rank(arr, name, ndim)
    if shape is not None:
        check_shape(arr, name, shape, dims)
    if finite and kind != "bool":
        check_finite(arr, name)
    if kind == "float" and np.issubdtype(dtype, np.integer):
        arr = arr.astype(jnp.float32)
    return arr if isinstance(arr, jax.core.Tracer | jax.Array) else jnp.asarray(arr)


def check_descending(x: Any, name: str, *, strict: bool = True) -> Any:
    """Raise unless a concrete 1-d ``x`` is (strictly, unless ``strict=False``) decreasing."""
    check_rank(x, name, 1)
    if is_concrete(x):
        a = _host(x)
        d = np.diff(a)
        if not (np.all(d < 0) if strict else np.all(d <= 0)):
            order = "strictly decreasing" if strict else "non-increasing"
            raise ValueError(f"`{name}` must be {order}; got {_describe(a)}: {a[:6]}...")
    return x


def check_callable(fn: Any, name: str) -> Any:
    """``fn`` must be callable (``TypeError`` otherwise)."""
    if not callable(fn):
        raise TypeError(f"`{name}` must be callable, got {type(fn).__name__}: {fn!r:.60}.")
    return fn


def check_instance(value: Any, name: str, cls: type | tuple[type, ...]) -> Any:
    """``value`` must be an instance of ``cls`` (``TypeError`` otherwise)."""
    if not isinstance(value, cls):
        want = cls.__name__ if isinstance(cls, type) else " or ".join(c.__name__ for c in cls)
        raise TypeError(f"`{name}` must be a {want}, got {type(value).__name__}: {value!r:.60}.")
    return value


def check_bool(value: Any, name: str) -> bool:
    """A Python / NumPy bool (not an int, a string or an array); returns a Python bool."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"`{name}` must be a bool, got {type(value).__name__}: {value!r:.60}.")
    return bool(value)


def check_ints(value: Any, name: str, *, minimum: int | None = None, nonempty: bool = True):
    """A tuple / list of ints (each ``>= minimum``; at least one unless ``nonempty=False``), not a
    bare int, a string or an array; returns a tuple of Python ints."""
    if isinstance(value, str) or not isinstance(value, tuple | list):
        raise TypeError(
            f"`{name}` must be a tuple of ints, got {type(value).__name__}: {value!r:.60}."
        )
    if nonempty and len(value) == 0:
        raise ValueError(f"`{name}` must be a non-empty tuple of ints, got {value!r}.")
    return tuple(check_int(v, name, minimum=minimum) for v in value)


def check_float_dtype(dtype: Any, name: str = "dtype", *, allow_none: bool = True) -> Any:
    """A floating dtype (or ``None`` where ``allow_none``); returns it unchanged."""
    if dtype is None and allow_none:
        return None
    try:
        dt = jnp.dtype(dtype)
    except TypeError:
        raise TypeError(f"`{name}` must be a float dtype, got {dtype!r}.") from None
    if not jnp.issubdtype(dt, jnp.floating):
        raise TypeError(f"`{name}` must be a float dtype, got {dt}.")
    return dtype


def check_simplex(x: Any, name: str, *, atol: float = 1e-5) -> Any:
    """Where concrete, every vector along the last axis of ``x`` is a probability vector
    (entries ``>= -atol``, summing to 1 within ``atol``); e.g. policy rows, transition rows."""
    check_real(x, name)
    if is_concrete(x):
        a = np.asarray(jax.device_get(x), np.float64)
        if a.size and (
            not np.all(np.isfinite(a))
            or np.any(a < -atol)
            or not np.allclose(a.sum(-1), 1.0, rtol=0, atol=atol)
        ):
            err = np.abs(a.sum(-1) - 1.0)
            worst = float(np.max(np.where(np.isnan(err), np.inf, err)))
            raise ValueError(
                f"`{name}` must hold probability vectors along its last axis (nonnegative, "
                f"summing to 1, finite); got smallest entry {np.min(a):.4g}, largest row-sum error "
                f"{worst:.3g}."
            )
    return x


def check_same_tree(tree: Any, name: str, reference: Any, reference_name: str) -> Any:
    """``tree`` has the pytree structure and the leaf shapes of ``reference`` (static: works on
    tracers and ``jax.ShapeDtypeStruct`` leaves), e.g. a state built for another size."""
    ref_def = jax.tree_util.tree_structure(reference)
    got_def = jax.tree_util.tree_structure(tree)
    if got_def != ref_def:
        raise ValueError(
            f"`{name}` must have the pytree structure of {reference_name}; got {got_def!s:.200}, "
            f"expected {ref_def!s:.200}."
        )
    leaves = jax.tree_util.tree_leaves_with_path(tree)
    for (path, a), b in zip(leaves, jax.tree_util.tree_leaves(reference), strict=True):
        if np.shape(a) != np.shape(b):
            raise ValueError(
                f"`{name}{jax.tree_util.keystr(path)}` must have shape {np.shape(b)} (as in "
                f"{reference_name}), got {np.shape(a)}: was it built for another size?"
            )
    return tree


def check_number(
    value: Any,
    name: str,
    low: float = -np.inf,
    high: float = np.inf,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> Any:
    """Like :func:`check_scalar`, but an infinite value is allowed where the range allows it
    (``inf`` for "no half-life"); NaN is always rejected; returns ``value`` unchanged."""
    if isinstance(value, bool | np.bool_):
        raise TypeError(f"`{name}` must be a real number, got the bool {value!r}.")
    check_real(value, name)
    if np.ndim(value) != 0:
        raise ValueError(f"`{name}` must be a scalar, got shape {np.shape(value)}.")
    check_in_range(value, name, low, high, low_open=low_open, high_open=high_open)
    return value


def check_tree_finite(tree: Any, name: str) -> Any:
    """Every concrete float leaf of ``tree`` is free of NaN / inf (tracers pass); the message
    names the leaf's path, e.g. ``params['Dense_0']['kernel']``."""
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        if np.issubdtype(getattr(leaf, "dtype", np.dtype(object)), np.inexact):
            check_finite(leaf, f"{name}{jax.tree_util.keystr(path)}")
    return tree


def check_count(value: Any, name: str, minimum: int = 0) -> Any:
    """An int ``>= minimum``: a Python / NumPy int, or an integer scalar array (a traced one
    passes the value check). Returns a Python int for Python input, the array otherwise."""
    if isinstance(value, jax.Array | np.ndarray):
        dtype = value.dtype
        if (
            np.ndim(value) != 0
            or jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
            or not np.issubdtype(dtype, np.integer)
        ):
            raise TypeError(
                f"`{name}` must be an int (or an integer scalar array), got an array of shape "
                f"{np.shape(value)} and dtype {dtype}."
            )
        if is_concrete(value) and int(value) < minimum:
            raise ValueError(f"`{name}` must be >= {minimum}, got {int(value)}.")
        return value
    return check_int(value, name, minimum=minimum)


def check_static_float(
    value: Any,
    name: str,
    low: float = -np.inf,
    high: float = np.inf,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """A concrete finite real scalar in the range, as a Python float (for a value that picks a
    branch or a shape: a traced one is a ``TypeError``)."""
    if isinstance(value, jax.core.Tracer):
        raise TypeError(f"`{name}` must be a concrete number (it is static), got a traced value.")
    return float(check_scalar(value, name, low, high, low_open=low_open, high_open=high_open))


def check_positive_scalar(value: Any, name: str, *, strict: bool = True) -> Any:
    """A finite real scalar ``> 0`` (``>= 0`` unless ``strict``); traced values pass the value
    check. Returns ``value`` unchanged."""
    check_scalar(value, name)
    check_positive(value, name, strict=strict)
    return value


def check_distribution(
    x: Any, name: str, shape: Sequence[int | None], dims: str = "", atol: float = 1e-5
) -> jax.Array:
    """A float array of ``shape`` whose last axis holds probability vectors (nonnegative, summing
    to one within ``atol``) where concrete, e.g. a policy ``[S, A]``; ints become float."""
    x = check_array(x, name, shape=shape, dims=dims, kind="float")
    check_simplex(x, name, atol=atol)
    return x


def check_abstract_call(fn: Any, args: Sequence[Any], what: str) -> Any:
    """``jax.eval_shape(fn, *args)`` (an abstract trace: nothing runs or compiles), with any error
    of ``fn`` re-raised as one ``ValueError`` starting with ``what`` (which names the argument,
    e.g. "`params` do not fit `inner`") and ending with the original error's type and first
    line. Use it where user parameters or inputs meet a network, so a mismatch is named at the
    boundary rather than deep inside flax or an ODE solve. Returns the output's shape pytree."""
    try:
        return jax.eval_shape(fn, *args)
    except Exception as e:  # noqa: BLE001 - re-raised naming the argument
        text = str(e).strip()
        detail = text.splitlines()[0][:300] if text else ""
        raise ValueError(f"{what} ({type(e).__name__}: {detail})") from None

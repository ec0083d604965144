"""Boundary checks shared by the certificates (private; generic candidates for ``core.checks``).

Every helper checks dtype and rank statically (so also under ``jit``/``vmap``) and values only where
concrete (:func:`jaxlab.core.checks.is_concrete`); each returns its argument unchanged, so a valid
call computes exactly what it computed before the check.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from jaxlab.core.checks import check_in_range, check_rank, check_real, is_concrete


def _host(x: Any) -> np.ndarray:
    return np.asarray(jax.device_get(x))


def check_values(
    x: Any,
    name: str,
    low: float = -math.inf,
    high: float = math.inf,
    *,
    ndim: int | Sequence[int] | None = None,
    low_open: bool = False,
    high_open: bool = False,
    finite: bool = True,
    nonempty: bool = False,
) -> Any:
    """Real numbers (not bool / str / None) of rank ``ndim``, finite (``finite``) and in the range
    from ``low`` to ``high`` everywhere, where concrete; ``nonempty``: at least one entry."""
    if isinstance(x, bool | np.bool_):
        raise TypeError(f"`{name}` must be real numbers, got the bool {x!r}.")
    check_real(x, name)
    if ndim is not None:
        check_rank(x, name, ndim)
    if nonempty and np.size(x) == 0:
        raise ValueError(f"`{name}` must not be empty, got shape {np.shape(x)}.")
    if is_concrete(x):
        a = _host(x)
        if finite and np.issubdtype(a.dtype, np.inexact) and not np.all(np.isfinite(a)):
            bad = int(np.sum(~np.isfinite(a)))
            raise ValueError(f"`{name}` must be finite; it has {bad} NaN/inf entries.")
    check_in_range(x, name, low, high, low_open=low_open, high_open=high_open)
    return x


def check_count(value: Any, name: str, minimum: int = 1) -> Any:
    """A count (a sample size, a number of clients): a real scalar, a whole number ``>= minimum``
    where concrete (a float such as ``200.0`` is accepted, ``2.5`` is not). Tracers pass."""
    if isinstance(value, bool | np.bool_):
        raise TypeError(f"`{name}` must be a whole number >= {minimum}, got the bool {value!r}.")
    check_real(value, name)
    if np.ndim(value) != 0:
        raise ValueError(f"`{name}` must be a scalar count, got shape {np.shape(value)}.")
    if is_concrete(value):
        v = float(_host(value))
        if not (math.isfinite(v) and v >= minimum and v == math.floor(v)):
            raise ValueError(f"`{name}` must be a whole number >= {minimum}; got {value!r}.")
    return value


def check_labels(y: Any, name: str, num_classes: int, *, shape: tuple | None = None) -> Any:
    """Integer class labels in ``[0, num_classes)`` (where concrete), of ``shape`` if given."""
    check_real(y, name)
    dtype = getattr(y, "dtype", None)
    dtype = np.asarray(y).dtype if dtype is None else dtype
    if not np.issubdtype(dtype, np.integer):
        raise TypeError(f"`{name}` must hold integer class labels, got dtype {dtype}.")
    if shape is not None and tuple(np.shape(y)) != tuple(shape):
        raise ValueError(f"`{name}` must have shape {tuple(shape)}, got {tuple(np.shape(y))}.")
    if is_concrete(y):
        a = _host(y)
        if a.size and (a.min() < 0 or a.max() >= num_classes):
            raise ValueError(
                f"`{name}` must hold labels in 0..{num_classes - 1}; got values in "
                f"[{a.min()}, {a.max()}]."
            )
    return y


def check_static_float(value: Any, name: str, low: float = 0.0, *, strict: bool = False) -> Any:
    """A finite Python/NumPy number ``>= low`` (``> low`` if ``strict``) for a static (hashed)
    argument of ``jit``; a concrete 0-d array becomes a float, a tracer is refused."""
    if isinstance(value, bool | np.bool_):
        raise TypeError(f"`{name}` must be a number, got the bool {value!r}.")
    if isinstance(value, jax.core.Tracer):
        raise TypeError(f"`{name}` must be a concrete number (it is static), got a traced value.")
    check_real(value, name)
    if np.ndim(value) != 0:
        raise ValueError(f"`{name}` must be a scalar, got shape {np.shape(value)}.")
    v = float(_host(value))
    if not math.isfinite(v) or (v <= low if strict else v < low):
        raise ValueError(f"`{name}` must be {'>' if strict else '>='} {low}; got {value!r}.")
    return v if isinstance(value, jax.Array) else value


def as_array(x: Any) -> Any:
    """A list or tuple as an array; anything else unchanged (Python scalars keep their weak type,
    so valid calls compute exactly as before)."""
    return jax.numpy.asarray(x) if isinstance(x, list | tuple) else x


def check_result(out: Any, what: str) -> Any:
    """Raise if a concrete result is not finite although its (checked) inputs were: the float
    dtype overflowed. ``what`` names the arguments and the formula in the message."""
    leaves = jax.tree_util.tree_leaves(out)
    if leaves and is_concrete(leaves):
        for leaf in leaves:
            a = _host(leaf)
            if np.issubdtype(a.dtype, np.inexact) and not np.all(np.isfinite(a)):
                raise ValueError(
                    f"{what} is not finite in {a.dtype} (an input is too large or too small); "
                    f"got {a.reshape(-1)[:4]}."
                )
    return out


def as_jax(x: Any) -> Any:
    """``x`` unchanged if it is already an array (NumPy or JAX: valid calls compute as before),
    else (a list, a Python number) as a JAX array, for code that reads ``.ndim`` / ``.shape``."""
    return x if hasattr(x, "ndim") else jax.numpy.asarray(x)

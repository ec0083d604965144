"""FedGWC's boundary checks on top of :mod:`jaxlab.core.checks` (private).

Each helper validates and returns its argument *unchanged* when it already is an array (so valid
input computes exactly as before); only array-likes such as lists are converted. Value checks run
where the argument is concrete; dtype / rank / shape checks are static and also run under ``jit``.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jaxlab.core.checks import check_array, check_int, is_concrete
from jaxlab.core.checks import check_callable as callable_  # noqa: F401 (re-exported)
from jaxlab.core.checks import check_instance as instance  # noqa: F401 (re-exported)

_ARRAYS = (np.ndarray, jax.Array, int, float, np.number)


def arr(x: Any, name: str, **kwargs) -> Any:
    """:func:`~jaxlab.core.checks.check_array` that keeps an array (or number) as it is."""
    checked = check_array(x, name, **kwargs)
    return x if isinstance(x, _ARRAYS) and not isinstance(x, bool) else checked


def host(x: Any) -> np.ndarray | None:
    """``x`` on the host, or ``None`` when it is traced."""
    return np.asarray(jax.device_get(x)) if is_concrete(x) else None


def index(x: Any, name: str, low: int = 0, high: int | None = None) -> Any:
    """An integer (Python int or int array) in ``[low, high)`` where concrete; tracers pass the
    value check but must have an int dtype. Returns ``x`` unchanged."""
    if isinstance(x, bool) or isinstance(x, np.bool_):
        raise TypeError(f"`{name}` must be an int, got the bool {x!r}.")
    if isinstance(x, int | np.integer):
        check_int(x, name, minimum=low, maximum=None if high is None else high - 1)
        return x
    check_array(x, name, kind="int")
    a = host(x)
    if a is not None and a.size and (a.min() < low or (high is not None and a.max() >= high)):
        hi = "inf" if high is None else high
        raise ValueError(f"`{name}` must lie in [{low}, {hi}); got values in [{a.min()}, "
                         f"{a.max()}].")  # fmt: skip
    return x


def nonneg(x: Any, name: str) -> Any:
    """Where concrete, every entry ``>= 0`` (and finite)."""
    a = host(x)
    if a is not None and a.size and not (np.all(np.isfinite(a)) and a.min() >= 0):
        bad = a[~np.isfinite(a) | (a < 0)].ravel()[:4]
        raise ValueError(f"`{name}` must be finite and >= 0; got {bad.tolist()}.")
    return x


def leading(tree: Any, name: str, size: int, what: str) -> Any:
    """Every leaf of ``tree`` has a leading axis of ``size`` (``what`` names that axis)."""
    leaves = jax.tree_util.tree_leaves(tree)
    if not leaves:
        raise ValueError(f"`{name}` must be a pytree of arrays, got {tree!r:.60}.")
    for leaf in leaves:
        shape = np.shape(leaf)
        if not shape or shape[0] != size:
            raise ValueError(f"every leaf of `{name}` must have a leading axis of {size} "
                             f"({what}), got a leaf of shape {shape}.")  # fmt: skip
    return tree


def real_tree(tree: Any, name: str) -> Any:
    """A non-empty pytree of real (int / float) arrays, finite where concrete."""
    leaves = jax.tree_util.tree_leaves(tree)
    if not leaves:
        raise ValueError(f"`{name}` must be a non-empty pytree of arrays, got {tree!r:.60}.")
    for leaf in leaves:
        check_array(leaf, name)
    return tree

"""This package's boundary checks: the generic ones come from :mod:`jaxlab.core.checks`
(re-exported here for the call sites), the rest are specific to this package.

Each raises ``TypeError`` / ``ValueError`` naming the argument, what was expected and what was
received; value checks are concrete-only (tracers pass), structure and shape checks are static.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from jaxlab.core import checks

# generic checks live in jaxlab.core.checks; re-exported for this package's call sites
from jaxlab.core.checks import (  # noqa: F401
    check_bool,
    check_callable,
    check_instance,
    check_number,
    check_same_tree,
    check_tree_finite,
)


def check_images(x: Any, name: str = "x", *, finite: bool = True) -> None:
    """A floating ``[B, H, W, C]`` batch with every size >= 1 (static), free of NaN / inf where
    concrete (``finite``)."""
    dtype = getattr(x, "dtype", None)
    if dtype is None:
        raise TypeError(
            f"`{name}` must be a float array [B, H, W, C], got {type(x).__name__}: {x!r:.60}."
        )
    checks.check_shape(x, name, (None, None, None, None), "[B, H, W, C]")
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key) or not np.issubdtype(dtype, np.floating):
        raise TypeError(f"`{name}` must be floating point [B, H, W, C], got dtype {dtype}.")
    if min(x.shape) < 1:
        raise ValueError(f"`{name}` must have every size >= 1 [B, H, W, C], got {x.shape}.")
    if finite:
        checks.check_finite(x, name)


def check_logit_list(logits: Any, name: str) -> list:
    """A non-empty list / tuple of real arrays of rank >= 1 (the discriminator's logit maps)."""
    if not isinstance(logits, list | tuple) or len(logits) == 0:
        raise TypeError(
            f"`{name}` must be a non-empty list of logit arrays (one per head), got "
            f"{type(logits).__name__}: {logits!r:.60}."
        )
    for i, lg in enumerate(logits):
        checks.check_real(lg, f"{name}[{i}]")
        if np.ndim(lg) < 1 or np.shape(lg)[0] < 1:
            raise ValueError(
                f"`{name}[{i}]` must be a [B, ...] logit array with B >= 1, got shape "
                f"{np.shape(lg)}."
            )
    return list(logits)

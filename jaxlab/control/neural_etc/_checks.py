"""This package's boundary checks: the generic ones come from :mod:`jaxlab.core.checks`
(re-exported here for the call sites), the rest are specific to this package.

Each raises ``TypeError`` / ``ValueError`` naming the argument, what was expected and what was
received; value checks are concrete-only (tracers pass), structure and shape checks are static.
"""

from __future__ import annotations

from typing import Any

from jaxlab.core import checks

# generic checks live in jaxlab.core.checks; re-exported for this package's call sites
from jaxlab.core.checks import (  # noqa: F401
    check_bool,
    check_callable,
    check_instance,
    check_number,
    check_same_tree,
)


def check_system(system: Any, name: str = "system") -> Any:
    """A :class:`~jaxlab.control.neural_etc.systems.ControlSystem` with sane fields."""
    from jaxlab.control.neural_etc.systems import ControlSystem

    check_instance(system, name, ControlSystem)
    checks.check_int(system.state_dim, f"{name}.state_dim", minimum=1)
    checks.check_int(system.control_dim, f"{name}.control_dim", minimum=1)
    check_callable(system.drift, f"{name}.drift")
    check_callable(system.actuator, f"{name}.actuator")
    checks.check_scalar(system.domain, f"{name}.domain", 0.0, low_open=True)
    return system


def check_widths(widths: Any, name: str) -> tuple[int, ...]:
    """A non-empty tuple of ints >= 1 (layer widths)."""
    if not isinstance(widths, tuple | list) or len(widths) == 0:
        raise ValueError(f"`{name}` must be a non-empty tuple of positive ints, got {widths!r}.")
    for w in widths:
        checks.check_int(w, name, minimum=1)
    return tuple(widths)

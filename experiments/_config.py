"""Command-line overrides for frozen experiment configs: ``--set field=value``.

Values are parsed as Python literals (``3``, ``1e-3``, ``[2,10,20]``, ``"fp"``), with ``true``/
``false``/``null`` accepted as JSON spellings; anything that is not a literal is a plain string.
The parsed value is then checked against the field's annotation and converted where that is
lossless (an int for a float field, an integral float such as ``1e4`` for an int field, a list for
a tuple field). Anything else is an :class:`OverrideError` naming the field.

Every experiment also declares the *range* of each field in a module-level ``LIMITS`` mapping
(``{field: Range(...) | Choice(...)}``); the runner checks a config against it before a run starts
(:func:`check_config`), so ``--set log_every=0`` is one line and exit code 2, not a
``ZeroDivisionError`` minutes later. Registration refuses an experiment whose ``LIMITS`` misses a
numeric or string field (:func:`missing_limits`) or whose presets break it.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from typing import Any

__all__ = [
    "COUNT",
    "NONNEG",
    "POSITIVE",
    "REAL",
    "UNIT",
    "Choice",
    "ConfigError",
    "OverrideError",
    "Range",
    "apply_overrides",
    "check_config",
    "coerce",
    "config_fields",
    "missing_limits",
    "parse_value",
]

_JSON_WORDS = {"true": True, "false": False, "null": None, "none": None}
_NON_FINITE = ("nan", "inf", "+inf", "-inf", "infinity", "-infinity")


class OverrideError(ValueError):
    """A ``--set`` override that names an unknown field or has a value of the wrong type."""


class ConfigError(ValueError):
    """A config field outside the range its experiment's ``LIMITS`` declares."""


def _items(value: Any) -> list[Any]:
    """The scalar items of a (possibly nested) tuple / list field, or ``[value]``."""
    if isinstance(value, list | tuple):
        return [leaf for v in value for leaf in _items(v)]
    return [value]


@dataclasses.dataclass(frozen=True)
class Range:
    """Every number of a field (each item of a tuple field, nested tuples flattened) is finite
    and lies from ``low`` to ``high`` (ends closed unless ``low_open`` / ``high_open``); a tuple
    field has at least ``min_items`` items; ``None`` passes where the annotation allows it."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    min_items: int = 0

    def describe(self) -> str:
        if self.low == -math.inf and self.high == math.inf:
            return "a finite number"
        lo = "(" if self.low_open else "["
        hi = ")" if self.high_open else "]"
        return f"in {lo}{self.low:g}, {self.high:g}{hi}"

    def violation(self, value: Any) -> str | None:
        items = _items(value)
        if isinstance(value, list | tuple) and len(items) < self.min_items:
            return f"needs at least {self.min_items} item(s), got {value!r}"
        for v in items:
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int | float):
                return f"must be a number {self.describe()}, got {v!r}"
            ok = math.isfinite(v)
            ok = ok and (v > self.low if self.low_open else v >= self.low)
            ok = ok and (v < self.high if self.high_open else v <= self.high)
            if not ok:
                within = f" (in {value!r})" if isinstance(value, list | tuple) else ""
                return f"must be {self.describe()}, got {v!r}{within}"
        return None


@dataclasses.dataclass(frozen=True)
class Choice:
    """The field (each item of a tuple field) is one of ``options``; at least ``min_items`` items
    in a tuple field, and no item twice unless ``repeats``."""

    options: tuple[Any, ...]
    min_items: int = 0
    repeats: bool = False

    def __init__(self, *options: Any, min_items: int = 0, repeats: bool = False):
        object.__setattr__(self, "options", tuple(options))
        object.__setattr__(self, "min_items", min_items)
        object.__setattr__(self, "repeats", repeats)

    def violation(self, value: Any) -> str | None:
        items = _items(value)
        if isinstance(value, list | tuple):
            if len(items) < self.min_items:
                return f"needs at least {self.min_items} item(s), got {value!r}"
            if not self.repeats and len(set(items)) < len(items):
                return f"lists an item twice: {value!r}"
        bad = [v for v in items if v is not None and v not in self.options]
        if bad:
            shown = list(self.options)
            if len(shown) > 12:  # e.g. every valid channel width: the first few and the count
                shown = f"{len(shown)} values ({', '.join(map(repr, shown[:6]))}, ...)"
            return f"must be one of {shown}, got {bad[0]!r}"
        return None


COUNT = Range(1)  # a size, a step count, an interval: >= 1
NONNEG = Range(0)
POSITIVE = Range(0, low_open=True)
UNIT = Range(0, 1)
REAL = Range()  # any finite number

_SEED = Range(0)


def _needs_limit(tp: Any) -> bool:
    """Numeric and string fields (and tuples of them) need a declared range; bools do not."""
    if tp is bool:
        return False
    if tp in (int, float, str):
        return True
    return any(_needs_limit(a) for a in typing.get_args(tp) if a is not Ellipsis)


def missing_limits(config_cls: type, limits: Mapping[str, Any]) -> list[str]:
    """Fields of ``config_cls`` that need a ``LIMITS`` entry and have none (``seed`` has one)."""
    return [
        name
        for name, tp in config_fields(config_cls).items()
        if name != "seed" and name not in limits and _needs_limit(tp)
    ]


def check_config(config: Any, limits: Mapping[str, Any], *, owner: str = "Config") -> Any:
    """Return ``config`` if every field meets its ``limits`` entry, else raise :class:`ConfigError`
    naming the first field that does not (``seed`` must be an int >= 0)."""
    fields = config_fields(type(config))
    unknown = sorted(set(limits) - set(fields))
    if unknown:
        raise TypeError(f"{owner}: LIMITS names fields it does not have: {', '.join(unknown)}")
    for name in fields:
        spec = _SEED if name == "seed" else limits.get(name)
        if spec is None:
            continue
        why = spec.violation(getattr(config, name))
        if why is not None:
            raise ConfigError(f"{owner}.{name} {why}")
    return config


def parse_value(text: str) -> Any:
    """Parse one override value: a Python literal, a JSON word, or else the raw string."""
    stripped = text.strip()
    if stripped.lower() in _JSON_WORDS:
        return _JSON_WORDS[stripped.lower()]
    if stripped.lower() in _NON_FINITE:  # parsed so that the range check can name them
        return float(stripped)
    try:
        return ast.literal_eval(stripped)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        # Lists written with JSON words inside, e.g. [true,false].
        if stripped.startswith(("[", "(")):
            try:
                fixed = stripped
                for word, value in (("true", "True"), ("false", "False"), ("null", "None")):
                    fixed = fixed.replace(word, value)
                return ast.literal_eval(fixed)
            except (ValueError, SyntaxError):
                pass
        return text


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def coerce(value: Any, tp: Any, raw: str | None = None) -> Any:
    """Convert ``value`` to the annotated type ``tp`` or raise ``TypeError``.

    ``raw`` is the original text, used when ``tp`` is ``str`` (so ``--set name=10`` gives "10").
    """
    if tp is Any:
        return value
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for member in args:
            if member is type(None):
                continue
            try:
                return coerce(value, member, raw)
            except TypeError:
                continue
        raise TypeError(f"expected {_type_name(tp)}, got {value!r}")
    if origin is typing.Literal:
        if value in args or (raw is not None and raw in args):
            return value if value in args else raw
        raise TypeError(f"expected one of {list(args)}, got {value!r}")
    if origin in (tuple, list):
        if not isinstance(value, list | tuple):
            raise TypeError(f"expected a list like [1,2,3] for {_type_name(tp)}, got {value!r}")
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if len(args) != len(value):
                raise TypeError(f"expected {len(args)} items for {_type_name(tp)}, got {value!r}")
            items = [coerce(v, a) for v, a in zip(value, args, strict=True)]
        else:
            elem = args[0] if args else Any
            items = [coerce(v, elem) for v in value]
        return tuple(items) if origin is tuple else items
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise TypeError(f"expected a dict, got {value!r}")
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise TypeError(f"expected a bool (true/false), got {value!r}")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise TypeError(f"expected an int, got {value!r}")
    if tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise TypeError(f"expected a float, got {value!r}")
    if tp is str:
        if raw is not None:
            return raw
        if isinstance(value, str):
            return value
        raise TypeError(f"expected a string, got {value!r}")
    if isinstance(tp, type) and isinstance(value, tp):
        return value
    raise TypeError(f"expected {_type_name(tp)}, got {value!r}")


def config_fields(config_cls: type) -> dict[str, Any]:
    """``{field name: resolved annotation}`` of a dataclass config (string annotations resolved)."""
    hints = typing.get_type_hints(config_cls)
    return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(config_cls) if f.init}


def apply_overrides(config: Any, assignments: list[str], *, owner: str = "Config") -> Any:
    """Return ``config`` with each ``"field=value"`` in ``assignments`` applied.

    Raises:
      OverrideError: malformed assignment, unknown field (the message lists the valid ones), or a
        value that does not fit the field's type.
    """
    fields = config_fields(type(config))
    changes: dict[str, Any] = {}
    for assignment in assignments:
        name, sep, text = assignment.partition("=")
        name = name.strip()
        if not sep or not name:
            raise OverrideError(f"--set {assignment!r}: expected field=value")
        if name not in fields:
            raise OverrideError(
                f"--set {name}: unknown field of {owner}; valid fields: {', '.join(fields)}"
            )
        try:
            changes[name] = coerce(parse_value(text), fields[name], raw=text)
        except TypeError as e:
            raise OverrideError(f"--set {name}={text}: {e}") from None
    return dataclasses.replace(config, **changes)

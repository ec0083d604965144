"""Command-line overrides for frozen experiment configs: ``--set field=value``.

Values are parsed as Python literals (``3``, ``1e-3``, ``[2,10,20]``, ``"fp"``), with ``true``/
``false``/``null`` accepted as JSON spellings; anything that is not a literal is a plain string.
The parsed value is then checked against the field's annotation and converted where that is
lossless (an int for a float field, an integral float such as ``1e4`` for an int field, a list for
a tuple field). Anything else is an :class:`OverrideError` naming the field.
"""

from __future__ import annotations

import ast
import dataclasses
import types
import typing
from typing import Any

__all__ = ["OverrideError", "apply_overrides", "coerce", "config_fields", "parse_value"]

_JSON_WORDS = {"true": True, "false": False, "null": None, "none": None}


class OverrideError(ValueError):
    """A ``--set`` override that names an unknown field or has a value of the wrong type."""


def parse_value(text: str) -> Any:
    """Parse one override value: a Python literal, a JSON word, or else the raw string."""
    stripped = text.strip()
    if stripped.lower() in _JSON_WORDS:
        return _JSON_WORDS[stripped.lower()]
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

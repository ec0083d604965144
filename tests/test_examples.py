"""Every method package's docstring ends with a runnable ``Example::`` block, and it runs.

The block is the indented text after the last line ending in ``::`` that contains ``Example``
(``Example::``, ``Example (jitted chunks)::``); it is dedented and executed in a fresh namespace.
Examples are written at tiny sizes so that this whole module stays a few seconds per method.
"""

from __future__ import annotations

import importlib
import re
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
METHODS = sorted(
    ".".join(p.parent.relative_to(ROOT).parts)
    for p in (ROOT / "jaxlab").glob("*/*/__init__.py")
    if p.parent.parent.name != "core"
)
PACKAGES = ["jaxlab.core", *METHODS]


def example_block(doc: str) -> str | None:
    """The dedented code block introduced by the last ``...Example...::`` line of ``doc``."""
    lines = (doc or "").splitlines()
    starts = [i for i, line in enumerate(lines) if re.search(r"Example.*::\s*$", line)]
    if not starts:
        return None
    body = []
    for line in lines[starts[-1] + 1 :]:
        if line.strip() and not line.startswith((" ", "\t")):
            break
        body.append(line)
    return textwrap.dedent("\n".join(body)).strip() or None


def test_every_method_package_is_found():
    assert len(METHODS) >= 8  # the eight landed methods, at least


@pytest.mark.parametrize("package", PACKAGES)
def test_package_example_runs(package):
    module = importlib.import_module(package)
    code = example_block(module.__doc__)
    assert code, f"{package}: the package docstring has no `Example::` block"
    exec(compile(code, f"<{package} example>", "exec"), {"__name__": f"example_{package}"})


def test_example_block_parser():
    doc = "Title.\n\nExample (tiny)::\n\n    x = 1\n    y = x + 1\n\nAfter.\n"
    assert example_block(doc) == "x = 1\ny = x + 1"
    assert example_block("No example here.") is None

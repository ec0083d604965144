"""``python -m benchmarks list | run NAME [--size small|large] [--out FILE] | run --all``."""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

SIZES = ("small", "large")


def discover() -> dict[str, ModuleType]:
    """Every public module of the ``benchmarks`` package, by its ``NAME``."""
    import benchmarks

    found = {}
    for info in sorted(pkgutil.iter_modules(benchmarks.__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            module = importlib.import_module(f"benchmarks.{info.name}")
            found[module.NAME] = module
    return found


def print_table(name: str, rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(
        "impl",
        "size",
        "devices",
        "params",
        "compile s",
        "median s",
        "throughput",
        title=f"benchmark {name}",
    )
    for r in rows:
        params = ", ".join(f"{k}={v}" for k, v in r["params"].items())
        table.add_row(
            r["impl"],
            r["size"],
            str(r["devices"]),
            params,
            f"{r['compile_s']:.3g}",
            f"{r['median_s']:.3g}",
            f"{r['throughput']:.3g} {r['unit']}",
        )
    Console(width=None if sys.stdout.isatty() else 160).print(table)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list benchmarks")
    run = sub.add_parser("run", help="run one benchmark (or --all)")
    run.add_argument("name", nargs="?")
    run.add_argument("--all", action="store_true")
    run.add_argument("--size", choices=SIZES, default="small")
    run.add_argument("--out", default=None, help="JSON file (default: results/bench/NAME.json)")
    args = parser.parse_args(argv)

    import jax

    registry = discover()
    if args.command == "list":
        if not registry:
            print("No benchmarks registered yet.")
        for name, module in registry.items():
            print(f"{name}: {module.DESCRIPTION}")
        return 0
    if args.all == (args.name is not None):
        print("error: run: give either a benchmark NAME or --all", file=sys.stderr)
        return 2
    if args.name is not None and args.name not in registry:
        valid = ", ".join(registry) or "(none registered)"
        print(f"error: unknown benchmark {args.name!r}; registered: {valid}", file=sys.stderr)
        return 2
    if args.all and args.out is not None:
        print(
            "error: --out applies to one benchmark; --all writes results/bench/NAME.json",
            file=sys.stderr,
        )
        return 2
    names = list(registry) if args.all else [args.name]
    if not names:
        print("No benchmarks registered yet: nothing to run.")
    for name in names:
        rows = registry[name].run(args.size)
        out = Path(args.out) if args.out else Path("results") / "bench" / f"{name}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        report = {
            "benchmark": name,
            "size": args.size,
            "jax_version": jax.__version__,
            "backend": jax.default_backend(),
            "device_count": jax.device_count(),
            "rows": rows,
        }
        out.write_text(json.dumps(report, indent=2) + "\n")
        print_table(name, rows)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

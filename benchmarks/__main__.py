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


def _unwritable(out: Path) -> str | None:
    """Why the JSON report cannot be written at ``out`` (``None`` if it can)."""
    if out.is_dir():
        return "is a folder; give a file name such as results/bench/NAME.json"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        probe = out.parent / f".{out.name}.write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        return f"cannot write there ({e.strerror or e})"
    return None


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
    default = Path("results") / "bench"
    outs = {n: Path(args.out) if args.out else default / f"{n}.json" for n in names}
    for out in outs.values():  # output problems are caught before any benchmark runs
        problem = _unwritable(out)
        if problem:
            print(f"error: --out {out}: {problem}", file=sys.stderr)
            return 2
    for name in names:
        out = outs[name]
        try:
            rows = registry[name].run(args.size)
        except KeyboardInterrupt:
            print(f"error: interrupted during benchmark {name}; nothing written", file=sys.stderr)
            return 130
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

"""``python -m experiments list | run NAME [...] | run --all [...] | report``.

Examples::

    python -m experiments list
    python -m experiments run auctions --preset quick --seed 3 --set n_bidders=[2,10,20]
    python -m experiments run --all --preset quick
    python -m experiments run auctions --resume        # continue from the last checkpoint
    python -m experiments report                       # results/*/report.md -> results/README.md
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from experiments._runner import (
    RESULTS_DIR,
    Experiment,
    ExperimentError,
    build_report,
    discover,
    print_error,
    run_experiment,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m experiments", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list registered experiments")
    run = sub.add_parser("run", help="run one experiment (or --all)")
    run.add_argument("name", nargs="?", help="experiment name (see `list`)")
    run.add_argument("--all", action="store_true", help="run every registered experiment")
    run.add_argument("--preset", default="quick", help="preset name (default: quick)")
    run.add_argument("--seed", type=int, default=None, help="override the config's seed")
    run.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a config field (repeatable); lists as [2,10,20]",
    )
    run.add_argument("--out", default=None, help="output folder (default: results/NAME)")
    run.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    report = sub.add_parser("report", help="collect results/*/report.md into results/README.md")
    report.add_argument("--results", default=str(RESULTS_DIR), help="results folder")
    return parser


def _list(registry: Mapping[str, Experiment]) -> int:
    if not registry:
        print("No experiments registered yet.")
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table("name", "paper", "claim", "presets")
    for exp in registry.values():
        table.add_row(exp.name, exp.paper, exp.claim, ", ".join(exp.presets))
    Console().print(table)
    return 0


def _run(args, registry: Mapping[str, Experiment]) -> int:
    if args.all == (args.name is not None):
        raise ExperimentError("run: give either an experiment NAME or --all")
    if args.all:
        if not registry:
            print("No experiments registered yet: nothing to run.")
            return 0
        if args.out is not None:
            raise ExperimentError("run --all writes to results/NAME; --out applies to one run")
        names = list(registry)
    else:
        if args.name not in registry:
            valid = ", ".join(registry) or "(none registered)"
            raise ExperimentError(f"unknown experiment {args.name!r}; registered: {valid}")
        names = [args.name]
    failures = []
    for name in names:
        exp = registry[name]
        if args.all and args.preset not in exp.presets:
            print(f"[{name}] has no preset {args.preset!r}; skipped")
            continue
        try:
            metrics = run_experiment(
                exp,
                preset=args.preset,
                seed=args.seed,
                overrides=args.overrides,
                out_dir=args.out,
                resume=args.resume,
                on_start=lambda n=name: print(f"[{n}] running preset {args.preset!r}", flush=True),
            )
        except ExperimentError:
            raise
        except KeyboardInterrupt:
            out = Path(args.out) if args.out else RESULTS_DIR / name
            print_error(f"interrupted; partial outputs in {out}; resume with --resume")
            return 130
        except Exception as e:  # noqa: BLE001 - reported, and the run is marked failed
            out = Path(args.out) if args.out else RESULTS_DIR / name
            trace = out / "error.txt"
            where = f"traceback in {trace}" if trace.exists() else "no error.txt could be written"
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            print_error(
                f"experiment {name} failed: {type(e).__name__}: {first} "
                f"({where}; partial outputs kept, no metrics.json)"
            )
            failures.append(name)
            continue
        print(f"[{name}] done in {metrics['wall_seconds']:.1f}s", flush=True)
    return 1 if failures else 0


def main(
    argv: Sequence[str] | None = None, registry: Mapping[str, Experiment] | None = None
) -> int:
    """CLI entry point; ``registry`` defaults to every module in ``experiments/``."""
    args = _parser().parse_args(argv)
    registry = discover() if registry is None else registry
    try:
        if args.command == "list":
            return _list(registry)
        if args.command == "run":
            return _run(args, registry)
        path = build_report(args.results, registry)
        print(f"wrote {path}")
        return 0
    except ExperimentError as e:
        print_error(str(e))
        return 2


if __name__ == "__main__":
    sys.exit(main())

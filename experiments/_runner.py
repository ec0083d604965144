"""The experiment registry, runner and report builder behind ``python -m experiments``.

An experiment is a module ``experiments/<name>.py`` (no leading underscore) that defines:

- ``NAME`` (the registry name), ``PAPER`` (title, venue) and ``CLAIM`` (the one-line headline);
- ``Config``: a frozen dataclass with documented defaults and an ``int`` field ``seed``;
- ``LIMITS``: ``{field: Range(...) | Choice(...)}`` for every numeric and string field of
  ``Config`` (see :mod:`experiments._config`); a config outside it is refused before the run;
- ``PRESETS``: ``{"quick": Config(...), "full": Config(...)}`` (quick ~1-3 min, full <= ~20 min
  on 2 CPU cores);
- ``run(config, out_dir) -> dict``: trains/evaluates the method and its baselines, writes
  ``report.md`` and PNG figures into ``out_dir``, and returns the figures the claim rests on.

The runner owns ``metrics.json``: the returned dict plus ``config``, ``seed``, ``jax_version``,
``backend``, ``device_count``, ``wall_seconds`` and ``status: "complete"``, written atomically and
only after ``run`` returns. A run that raises keeps its partial outputs, writes ``error.txt`` with
the traceback, and leaves no ``metrics.json``.

Checkpoints live in ``out_dir/checkpoints``. A fresh run deletes them; ``--resume`` keeps them so
loops built on :func:`jaxlab.core.training.run_chunked` continue from their last checkpoint, and
refuses to resume a run whose ``config.json`` differs from the requested config.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import math
import os
import pkgutil
import re
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from experiments._config import (
    ConfigError,
    OverrideError,
    apply_overrides,
    check_config,
    config_fields,
    missing_limits,
)

RESULTS_DIR = Path("results")
META_KEYS = (
    "experiment",
    "preset",
    "status",
    "config",
    "seed",
    "jax_version",
    "backend",
    "device_count",
    "wall_seconds",
)


class ExperimentError(Exception):
    """A user-facing error of the runner (bad name, preset, override or resume)."""


@dataclasses.dataclass(frozen=True)
class Experiment:
    """One registered experiment (see the module docstring for the contract)."""

    name: str
    paper: str
    claim: str
    config_cls: type
    presets: Mapping[str, Any]
    run: Callable[[Any, Path], dict]
    limits: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        if not dataclasses.is_dataclass(self.config_cls):
            raise TypeError(f"experiment {self.name}: Config must be a dataclass.")
        if not self.config_cls.__dataclass_params__.frozen:
            raise TypeError(f"experiment {self.name}: Config must be frozen.")
        if "seed" not in config_fields(self.config_cls):
            raise TypeError(f"experiment {self.name}: Config needs an int field `seed`.")
        if "quick" not in self.presets:
            raise TypeError(f"experiment {self.name}: PRESETS needs a 'quick' preset.")
        missing = missing_limits(self.config_cls, self.limits)
        if missing:
            raise TypeError(f"experiment {self.name}: LIMITS has no range for {', '.join(missing)}")
        for preset, config in self.presets.items():
            if not isinstance(config, self.config_cls):
                raise TypeError(f"experiment {self.name}: preset {preset!r} is not a Config.")
            try:
                check_config(config, self.limits, owner=f"{self.name}.Config")
            except ConfigError as e:
                raise TypeError(f"experiment {self.name}: preset {preset!r}: {e}") from None

    @classmethod
    def from_module(cls, module: ModuleType) -> Experiment:
        if not hasattr(module, "LIMITS"):
            raise TypeError(f"experiment module {module.__name__} defines no LIMITS (field ranges)")
        return cls(
            name=module.NAME,
            paper=module.PAPER,
            claim=module.CLAIM,
            config_cls=module.Config,
            presets=module.PRESETS,
            run=module.run,
            limits=module.LIMITS,
        )


def discover() -> dict[str, Experiment]:
    """Import every public module of the ``experiments`` package and register it by ``NAME``."""
    import experiments

    registry: dict[str, Experiment] = {}
    for info in sorted(pkgutil.iter_modules(experiments.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"experiments.{info.name}")
        exp = Experiment.from_module(module)
        if exp.name in registry:
            raise TypeError(f"two experiment modules register the name {exp.name!r}.")
        registry[exp.name] = exp
    return registry


def to_jsonable(obj: Any) -> Any:
    """Convert results to strict JSON: arrays to lists, NumPy/JAX scalars to Python numbers,
    dataclasses to dicts, tuples to lists, and non-finite floats (NaN, inf) to ``null``."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return to_jsonable(dataclasses.asdict(obj))
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, str | bool) or obj is None:
        return obj
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "__array__") or isinstance(obj, np.generic):
        arr = np.asarray(obj)
        if arr.dtype == object:
            raise TypeError(f"cannot write an object array to metrics.json: {obj!r}")
        return to_jsonable(arr.tolist()) if arr.ndim else to_jsonable(arr.item())
    raise TypeError(f"cannot write {type(obj).__name__} to metrics.json: {obj!r}")


def _write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n")
    os.replace(tmp, path)


def resolve_config(exp: Experiment, preset: str, seed: int | None, overrides: list[str]):
    """The preset's config with ``--set`` overrides and ``--seed`` applied."""
    if preset not in exp.presets:
        raise ExperimentError(
            f"experiment {exp.name} has no preset {preset!r}; presets: {', '.join(exp.presets)}"
        )
    owner = f"{exp.name}.Config"
    try:
        config = apply_overrides(exp.presets[preset], overrides, owner=owner)
        if seed is not None:
            config = dataclasses.replace(config, seed=seed)
        return check_config(config, exp.limits, owner=owner)
    except (OverrideError, ConfigError) as e:
        raise ExperimentError(str(e)) from None
    except (TypeError, ValueError) as e:  # the Config's own __post_init__ checks
        raise ExperimentError(f"{owner}: {e}") from None


def prepare_out_dir(out: Path) -> Path:
    """Create ``out`` (and its parents) and check it can be written, before any work starts."""
    if out.exists() and not out.is_dir():
        raise ExperimentError(f"--out {out} is a file, not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ExperimentError(f"--out {out}: cannot write there ({e.strerror or e})") from None
    return out


def run_experiment(
    exp: Experiment,
    *,
    preset: str = "quick",
    seed: int | None = None,
    overrides: list[str] | None = None,
    out_dir: str | Path | None = None,
    resume: bool = False,
    on_start: Callable[[], None] | None = None,
) -> dict:
    """Run one experiment and write its ``metrics.json``; return the metrics written.

    ``on_start`` is called once the config and the output folder have passed their checks, just
    before the run (the CLI prints its "running" line there, so a bad setting prints only the
    error).

    Raises:
      ExperimentError: bad preset/override, or ``resume`` with a different config.
      Exception: whatever ``run`` raised (after ``error.txt`` has been written).
    """
    import jax

    config = resolve_config(exp, preset, seed, overrides or [])
    out = prepare_out_dir(Path(out_dir) if out_dir is not None else RESULTS_DIR / exp.name)
    config_json = to_jsonable(config)
    config_path, ckpt_dir = out / "config.json", out / "checkpoints"

    if resume and config_path.exists():
        previous = json.loads(config_path.read_text())
        if previous != config_json:
            changed = sorted(k for k in config_json if previous.get(k) != config_json[k])
            raise ExperimentError(
                f"--resume: {out} holds a run with a different config (fields {', '.join(changed)}"
                "); rerun without --resume or with the same settings"
            )
    elif not resume and ckpt_dir.exists():
        shutil.rmtree(ckpt_dir)
    for stale in ("metrics.json", "error.txt"):
        (out / stale).unlink(missing_ok=True)
    _write_json_atomic(config_path, config_json)

    if on_start is not None:
        on_start()
    start = time.perf_counter()
    try:
        figures = exp.run(config, out)
        if not isinstance(figures, Mapping):
            raise TypeError(f"run() must return a dict of metrics, got {type(figures).__name__}")
        clash = sorted(set(figures) & set(META_KEYS))
        if clash:
            raise TypeError(f"run() returned reserved metric names {clash}")
        metrics = to_jsonable(figures)
    except BaseException as e:
        why = "interrupted (KeyboardInterrupt)\n\n" if isinstance(e, KeyboardInterrupt) else ""
        try:
            (out / "error.txt").write_text(why + traceback.format_exc())
        except OSError:
            pass  # the folder went away or read-only mid-run; the caller reports the error
        raise
    wall = time.perf_counter() - start

    metrics.update(
        experiment=exp.name,
        preset=preset,
        status="complete",
        config=config_json,
        seed=config.seed,
        jax_version=jax.__version__,
        backend=jax.default_backend(),
        device_count=jax.device_count(),
        wall_seconds=round(wall, 3),
    )
    _write_json_atomic(out / "metrics.json", metrics)
    if not (out / "report.md").exists():
        scalars = {k: v for k, v in figures.items() if isinstance(v, int | float | str)}
        lines = [f"# {exp.name}", "", exp.claim, "", "| metric | value |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in scalars.items()]
        (out / "report.md").write_text("\n".join(lines) + "\n")
    return metrics


_LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")


def _relink(markdown: str, prefix: str) -> str:
    """Prefix relative link targets so a report reads correctly from the results root."""

    def fix(m: re.Match) -> str:
        target = m.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:|^/|^#", target, flags=re.I):
            return m.group(0)
        return f"{m.group(1)}{prefix}/{target}{m.group(3)}"

    return _LINK.sub(fix, markdown)


def build_report(results_dir: str | Path = RESULTS_DIR, registry: Mapping | None = None) -> Path:
    """Collect every ``results/*/report.md`` into ``results/README.md`` with figures linked.

    Each report's headings are demoted one level, its relative links re-pointed at its folder, and
    any PNG in its folder that it does not already show is appended. A folder whose run failed
    (``error.txt``, no ``metrics.json``) is listed as failed.
    """
    root = Path(results_dir)
    root.mkdir(parents=True, exist_ok=True)
    lines = ["# jaxlab results", ""]
    folders = sorted(p for p in root.iterdir() if p.is_dir() and (p / "report.md").exists())
    failed = sorted(
        p.name
        for p in root.iterdir()
        if p.is_dir() and (p / "error.txt").exists() and not (p / "metrics.json").exists()
    )
    if not folders and not failed:
        n = len(registry) if registry is not None else None
        why = "no experiments are registered yet" if n == 0 else "no experiment has been run yet"
        lines += [f"No results: {why}. Run `make demo` (or `python -m experiments run NAME`)."]
    if failed:
        lines += ["**Failed runs** (see each folder's `error.txt`): " + ", ".join(failed), ""]
    for folder in folders:
        body = (folder / "report.md").read_text()
        body = re.sub(r"^(#+) ", r"#\1 ", body, flags=re.M)
        body = _relink(body, folder.name)
        status = "" if (folder / "metrics.json").exists() else " (incomplete: no metrics.json)"
        if not body.lstrip().startswith("#"):
            lines.append(f"## {folder.name}{status}")
        elif status:
            lines.append(f"_{folder.name}{status}_")
        lines += ["", body.rstrip(), ""]
        for png in sorted(folder.glob("*.png")):
            if f"{folder.name}/{png.name}" not in body:
                lines += [f"![{folder.name}: {png.stem}]({folder.name}/{png.name})", ""]
    out = root / "README.md"
    out.write_text("\n".join(lines).rstrip() + "\n")
    return out


def print_error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)

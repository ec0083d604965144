"""Helpers every experiment uses: markdown tables, figures, reports and checkpoint folders."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # entry-point code: figures are files, never windows

import matplotlib.pyplot as plt  # noqa: E402

from jaxlab.core.checkpoint import Checkpointer  # noqa: E402


def format_value(value: Any, digits: int = 4) -> str:
    """A table cell: floats to ``digits`` significant figures, ``None`` as an em dash."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.{digits}g}"
    return str(value)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table; every row must have ``len(headers)`` cells."""
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row {row!r} has {len(row)} cells, expected {len(headers)}")
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(format_value(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def write_report(out_dir: Path, title: str, *sections: str) -> Path:
    """Write ``out_dir/report.md``: ``# title``, then the sections, blank-line separated."""
    path = Path(out_dir) / "report.md"
    path.write_text("\n\n".join([f"# {title}", *sections]).rstrip() + "\n")
    return path


def save_figure(fig: plt.Figure, out_dir: Path, name: str) -> Path:
    """Save ``fig`` as ``out_dir/name.png`` and close it."""
    path = Path(out_dir) / f"{name}.png"
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def checkpointer(out_dir: Path, name: str, every_seconds: float = 30.0) -> Checkpointer:
    """A :class:`Checkpointer` for the loop ``name`` in ``out_dir/checkpoints/name``.

    The runner clears ``out_dir/checkpoints`` on a fresh run and keeps it with ``--resume``, so a
    loop run through ``run_chunked(..., checkpointer=...)`` resumes where it stopped.
    """
    return Checkpointer(Path(out_dir) / "checkpoints" / name, every_seconds=every_seconds)

"""The experiment runner, with a tiny experiment defined here (not shipped)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Literal

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
import optax
import pytest

from experiments import _common
from experiments.__main__ import main
from experiments._config import (
    COUNT,
    POSITIVE,
    Choice,
    OverrideError,
    Range,
    apply_overrides,
    parse_value,
)
from experiments._runner import Experiment, build_report, discover, run_experiment
from jaxlab.core.training import run_chunked

# --------------------------------------------------------------------------- the tiny experiment


@dataclasses.dataclass(frozen=True)
class TinyConfig:
    """Fit w to a random target with Adam; the target depends on the seed."""

    seed: int = 0
    n_steps: int = 40
    chunk_size: int = 10
    lr: float = 0.1
    dims: tuple[int, ...] = (2, 3)
    label: str = "tiny"
    verbose: bool = False
    scale: float | None = None
    mode: Literal["adam", "sgd"] = "adam"


PRESETS = {"quick": TinyConfig(), "full": TinyConfig(n_steps=80)}
INTERRUPT_AT: dict = {"done": None}  # set by a test to simulate a crash after some steps
CHUNKS_RUN: list = []


def tiny_run(config: TinyConfig, out_dir: Path) -> dict:
    target = jax.random.normal(jax.random.key(config.seed), (sum(config.dims),))
    opt = optax.adam(config.lr) if config.mode == "adam" else optax.sgd(config.lr)

    def step(state, _):
        params, opt_state = state
        loss, grads = jax.value_and_grad(lambda w: jnp.sum((w - target) ** 2))(params)
        updates, opt_state = opt.update(grads, opt_state)
        return (optax.apply_updates(params, updates), opt_state), {"loss": loss}

    def on_chunk(done, _):
        CHUNKS_RUN.append(done)
        if INTERRUPT_AT["done"] == done:
            raise KeyboardInterrupt("simulated interruption")

    params = jnp.zeros_like(target)
    (final, _), metrics = run_chunked(
        step,
        (params, opt.init(params)),
        config.n_steps,
        chunk_size=config.chunk_size,
        on_chunk=on_chunk,
        checkpointer=_common.checkpointer(out_dir, "train", every_seconds=0),
    )
    fig, ax = plt.subplots()
    ax.semilogy(metrics["loss"])
    _common.save_figure(fig, out_dir, "loss")
    _common.write_report(
        out_dir,
        "Tiny",
        _common.markdown_table(["metric", "value"], [["final loss", float(metrics["loss"][-1])]]),
        "![loss](loss.png)",
    )
    return {
        "final_loss": metrics["loss"][-1],
        "loss_curve": metrics["loss"],
        "final_params": final,
        "not_a_number": float("nan"),
        "steps_to_tol": {"adam": {"2": 5, "10": None}},
    }


def failing_run(config: TinyConfig, out_dir: Path) -> dict:
    (out_dir / "partial.txt").write_text("half done")
    raise RuntimeError("diverged at step 3")


LIMITS = {
    "n_steps": COUNT,
    "chunk_size": COUNT,
    "lr": POSITIVE,
    "dims": Range(1, 8, min_items=1),
    "label": Choice("tiny", "other"),
    "scale": Range(0, 10),
    "mode": Choice("adam", "sgd"),
}
TINY = Experiment(
    "tiny", "Tiny (test only)", "Adam fits a vector.", TinyConfig, PRESETS, tiny_run, LIMITS
)
BROKEN = Experiment("broken", "Broken", "Always fails.", TinyConfig, PRESETS, failing_run, LIMITS)
REGISTRY = {"tiny": TINY, "broken": BROKEN}


@pytest.fixture(autouse=True)
def _reset_hooks():
    INTERRUPT_AT["done"] = None
    CHUNKS_RUN.clear()
    yield
    INTERRUPT_AT["done"] = None


# --------------------------------------------------------------------------- --set parsing


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("3", 3),
        ("-2", -2),
        ("1e-3", 1e-3),
        ("0.5", 0.5),
        ("true", True),
        ("False", False),
        ("[2,10,20]", [2, 10, 20]),
        ("[true,false]", [True, False]),
        ("null", None),
        ("fp", "fp"),
        ("'sp'", "sp"),
        ("a b", "a b"),
    ],
)
def test_parse_value(text, expected):
    assert parse_value(text) == expected
    assert type(parse_value(text)) is type(expected)


def test_apply_overrides_converts_to_field_types():
    cfg = apply_overrides(
        TinyConfig(),
        [
            "n_steps=1e2",
            "lr=1",
            "dims=[4,5,6]",
            "label=10",
            "verbose=true",
            "scale=0.5",
            "mode=sgd",
        ],
    )
    assert cfg == TinyConfig(
        n_steps=100, lr=1.0, dims=(4, 5, 6), label="10", verbose=True, scale=0.5, mode="sgd"
    )
    assert isinstance(cfg.lr, float) and isinstance(cfg.dims, tuple)
    assert apply_overrides(cfg, ["scale=null"]).scale is None


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("n_bidders=3", "--set n_bidders: unknown field of Config; valid fields: seed, n_steps"),
        ("n_steps=2.5", "--set n_steps=2.5: expected an int"),
        ("lr=fast", "--set lr=fast: expected a float"),
        ("verbose=1", "--set verbose=1: expected a bool"),
        ("dims=3", "--set dims=3: expected a list"),
        ("dims=[1,x]", "--set dims=[1,x]: expected a list"),
        ("mode=rmsprop", "--set mode=rmsprop: expected one of ['adam', 'sgd']"),
        ("n_steps", "expected field=value"),
    ],
)
def test_bad_overrides_name_the_field(assignment, message):
    with pytest.raises(OverrideError) as info:
        apply_overrides(TinyConfig(), [assignment])
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_cli_bad_set_is_a_one_line_error(capsys, tmp_path):
    rc = main(["run", "tiny", "--set", "n_bidders=3", "--out", str(tmp_path)], REGISTRY)
    err = capsys.readouterr().err
    assert rc == 2
    assert err.count("\n") == 1 and "n_bidders" in err and "valid fields: seed" in err
    assert not (tmp_path / "metrics.json").exists()


# --------------------------------------------------------------------------- running


def test_run_writes_complete_metrics(tmp_path, capsys):
    rc = main(
        ["run", "tiny", "--seed", "3", "--set", "n_steps=30", "--out", str(tmp_path)], REGISTRY
    )
    assert rc == 0, capsys.readouterr().err
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["status"] == "complete"
    assert metrics["seed"] == 3 and metrics["config"]["seed"] == 3
    assert metrics["config"]["n_steps"] == 30 and metrics["config"]["dims"] == [2, 3]
    assert metrics["jax_version"] == jax.__version__
    assert metrics["backend"] == "cpu" and metrics["device_count"] == 4
    assert metrics["wall_seconds"] > 0
    curve = metrics["loss_curve"]  # Adam on a quadratic: the loss falls and ends where it ends
    assert len(curve) == 30 and metrics["final_loss"] == curve[-1] and curve[-1] < curve[0]
    assert metrics["not_a_number"] is None  # strict JSON: NaN -> null
    assert metrics["steps_to_tol"] == {"adam": {"2": 5, "10": None}}
    assert (tmp_path / "report.md").exists() and (tmp_path / "loss.png").exists()
    # The seed reaches the experiment: a different seed fits a different target.
    other = run_experiment(TINY, seed=4, overrides=["n_steps=30"], out_dir=tmp_path / "s4")
    assert other["final_params"] != metrics["final_params"]


def test_unknown_experiment_and_preset(capsys):
    assert main(["run", "nope"], REGISTRY) == 2
    assert "unknown experiment 'nope'; registered: tiny, broken" in capsys.readouterr().err
    assert main(["run", "tiny", "--preset", "huge"], REGISTRY) == 2
    assert "no preset 'huge'; presets: quick, full" in capsys.readouterr().err


def test_failed_run_keeps_partials_and_writes_no_metrics(tmp_path, capsys):
    (tmp_path / "metrics.json").write_text('{"status": "complete"}')  # stale, from an old run
    rc = main(["run", "broken", "--out", str(tmp_path)], REGISTRY)
    err = capsys.readouterr().err
    assert rc == 1
    assert "experiment broken failed: RuntimeError: diverged at step 3" in err
    assert not (tmp_path / "metrics.json").exists()
    assert (tmp_path / "partial.txt").read_text() == "half done"
    assert "RuntimeError: diverged at step 3" in (tmp_path / "error.txt").read_text()


def test_resume_continues_an_interrupted_run(tmp_path):
    reference = run_experiment(TINY, out_dir=tmp_path / "ref")
    CHUNKS_RUN.clear()

    INTERRUPT_AT["done"] = 20
    with pytest.raises(KeyboardInterrupt):
        run_experiment(TINY, out_dir=tmp_path / "run")
    assert CHUNKS_RUN == [10, 20]
    assert not (tmp_path / "run" / "metrics.json").exists()
    assert (tmp_path / "run" / "error.txt").exists()

    INTERRUPT_AT["done"] = None
    CHUNKS_RUN.clear()
    assert main(["run", "tiny", "--resume", "--out", str(tmp_path / "run")], REGISTRY) == 0
    assert CHUNKS_RUN == [30, 40]  # resumed after step 20, not from scratch
    resumed = json.loads((tmp_path / "run" / "metrics.json").read_text())
    np.testing.assert_allclose(resumed["loss_curve"], reference["loss_curve"], rtol=1e-6)
    assert not (tmp_path / "run" / "error.txt").exists()

    # Without --resume the checkpoints are cleared and the run starts over.
    CHUNKS_RUN.clear()
    run_experiment(TINY, out_dir=tmp_path / "run")
    assert CHUNKS_RUN == [10, 20, 30, 40]


def test_resume_refuses_a_different_config(tmp_path, capsys):
    run_experiment(TINY, out_dir=tmp_path)
    rc = main(["run", "tiny", "--resume", "--set", "lr=0.5", "--out", str(tmp_path)], REGISTRY)
    assert rc == 2
    assert "different config (fields lr)" in capsys.readouterr().err


def test_run_all_runs_every_experiment_and_reports_failure(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "--all"], REGISTRY) == 1
    assert (tmp_path / "results" / "tiny" / "metrics.json").exists()
    assert (tmp_path / "results" / "broken" / "error.txt").exists()
    assert main(["run", "--all"], {}) == 0
    assert "No experiments registered yet" in capsys.readouterr().out


def test_contract_is_checked_at_registration():
    @dataclasses.dataclass(frozen=True)
    class NoSeed:
        n: int = 1

    with pytest.raises(TypeError, match="needs an int field `seed`"):
        Experiment("x", "p", "c", NoSeed, {"quick": NoSeed()}, tiny_run)
    with pytest.raises(TypeError, match="'quick' preset"):
        Experiment("x", "p", "c", TinyConfig, {"full": TinyConfig()}, tiny_run, LIMITS)
    # every numeric / string field needs a declared range, and the presets must meet them
    partial = {k: v for k, v in LIMITS.items() if k not in ("lr", "label")}
    with pytest.raises(TypeError, match="LIMITS has no range for lr, label"):
        Experiment("x", "p", "c", TinyConfig, PRESETS, tiny_run, partial)
    bad = {"quick": TinyConfig(chunk_size=0)}
    with pytest.raises(TypeError, match="preset 'quick': x.Config.chunk_size must be in"):
        Experiment("x", "p", "c", TinyConfig, bad, tiny_run, LIMITS)
    with pytest.raises(TypeError, match="LIMITS names fields it does not have: nope"):
        Experiment("x", "p", "c", TinyConfig, PRESETS, tiny_run, {**LIMITS, "nope": COUNT})


# --------------------------------------------------------------------------- bad input at the CLI


@pytest.mark.parametrize(
    ("assignment", "message"),
    [
        ("n_steps=0", "tiny.Config.n_steps must be in [1, inf], got 0"),
        ("chunk_size=-3", "tiny.Config.chunk_size must be in [1, inf], got -3"),
        ("lr=-0.1", "tiny.Config.lr must be in (0, inf], got -0.1"),
        ("lr=nan", "tiny.Config.lr must be in (0, inf], got nan"),
        ("lr=inf", "tiny.Config.lr must be in (0, inf], got inf"),
        ("dims=[]", "tiny.Config.dims needs at least 1 item(s)"),
        ("dims=[2,0]", "tiny.Config.dims must be in [1, 8], got 0 (in (2, 0))"),
        ("label=big", "tiny.Config.label must be one of ['tiny', 'other'], got 'big'"),
        ("scale=11", "tiny.Config.scale must be in [0, 10], got 11"),
    ],
)
def test_cli_out_of_range_field_is_a_one_line_error(assignment, message, capsys, tmp_path):
    rc = main(["run", "tiny", "--set", assignment, "--out", str(tmp_path / "o")], REGISTRY)
    out, err = capsys.readouterr()
    assert rc == 2 and err.count("\n") == 1 and message in err and out == "", (out, err)
    assert not (tmp_path / "o").exists()  # refused before the run: nothing written
    assert main(["run", "tiny", "--seed", "-1", "--out", str(tmp_path / "o")], REGISTRY) == 2
    assert "tiny.Config.seed must be in [0, inf], got -1" in capsys.readouterr().err


def test_cli_out_folder_problems_are_one_line_errors(capsys, tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    assert main(["run", "tiny", "--out", str(afile)], REGISTRY) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and f"--out {afile} is a file, not a folder" in err
    assert main(["run", "tiny", "--out", str(afile / "below")], REGISTRY) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write there" in err


def test_cli_unwritable_out_folder(capsys, tmp_path, monkeypatch):
    # a read-only folder (root ignores chmod, so the write itself is made to fail)
    real_write = Path.write_text

    def refuse(self, *args, **kwargs):
        if self.name == ".write-test":
            raise PermissionError(13, "Permission denied")
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", refuse)
    assert main(["run", "tiny", "--out", str(tmp_path)], REGISTRY) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write there (Permission denied)" in err


def test_cli_failure_does_not_claim_an_error_txt_it_could_not_write(capsys, tmp_path, monkeypatch):
    real_write = Path.write_text

    def no_error_txt(self, *args, **kwargs):
        if self.name == "error.txt":
            raise OSError(30, "Read-only file system")
        return real_write(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", no_error_txt)
    assert main(["run", "broken", "--out", str(tmp_path)], REGISTRY) == 1
    err = capsys.readouterr().err
    assert "no error.txt could be written" in err and "traceback in" not in err


def test_cli_ctrl_c_is_one_line_and_resume_matches_an_uninterrupted_run(capsys, tmp_path):
    reference = run_experiment(TINY, out_dir=tmp_path / "ref")
    INTERRUPT_AT["done"] = 30
    out = tmp_path / "run"
    assert main(["run", "tiny", "--out", str(out)], REGISTRY) == 130
    err = capsys.readouterr().err
    assert err == f"error: interrupted; partial outputs in {out}; resume with --resume\n"
    assert not (out / "metrics.json").exists()
    assert "interrupted" in (out / "error.txt").read_text()
    INTERRUPT_AT["done"] = None
    CHUNKS_RUN.clear()
    assert main(["run", "tiny", "--resume", "--out", str(out)], REGISTRY) == 0
    assert CHUNKS_RUN == [40]  # the checkpoint of step 30 was intact
    resumed = json.loads((out / "metrics.json").read_text())
    for key in ("final_loss", "loss_curve", "final_params"):
        np.testing.assert_array_equal(resumed[key], reference[key], err_msg=key)
    assert resumed["steps_to_tol"] == reference["steps_to_tol"]


def _below(spec, tp):
    """A value just outside ``spec``'s lower end, as ``--set`` text, or None if unbounded."""
    if not isinstance(spec, Range) or spec.low == -float("inf"):
        return None
    if tp is int:
        return str(int(spec.low) if spec.low_open else int(spec.low) - 1)
    return repr(spec.low if spec.low_open else spec.low - 1.0)


def test_every_experiment_declares_and_enforces_its_limits():
    import typing

    from experiments._runner import ExperimentError, resolve_config

    registry = discover()  # registration checks LIMITS covers every field and every preset
    assert len(registry) >= 8
    checked = 0
    for exp in registry.values():
        hints = typing.get_type_hints(exp.config_cls)
        for name, spec in exp.limits.items():
            tp = hints[name]
            value = _below(spec, tp) if tp in (int, float) else None
            if isinstance(spec, Choice) and hints[name] is str:
                value = "'no-such-option'"
            if value is None:
                continue
            # named by the range check, or by the Config's own __post_init__ check
            with pytest.raises(ExperimentError, match=rf"{exp.name}.Config(\.{name} |: .*{name})"):
                resolve_config(exp, "quick", None, [f"{name}={value}"])
            checked += 1
    assert checked > 100


# --------------------------------------------------------------------------- report and list


def test_report_collects_reports_and_links_figures(tmp_path):
    run_experiment(TINY, out_dir=tmp_path / "tiny")
    (tmp_path / "tiny" / "extra.png").write_bytes(b"png")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "error.txt").write_text("Traceback")
    readme = build_report(tmp_path, REGISTRY).read_text()
    assert readme.startswith("# jaxlab results")
    assert "## Tiny" in readme  # headings demoted one level
    assert "![loss](tiny/loss.png)" in readme  # relative links re-pointed at the folder
    assert "(tiny/extra.png)" in readme  # figures the report does not show are appended
    assert "Failed runs" in readme and "broken" in readme


def test_report_with_no_experiments(tmp_path):
    text = build_report(tmp_path / "results", {}).read_text()
    assert "no experiments are registered yet" in text


def test_list_shows_name_claim_and_presets(capsys):
    assert main(["list"], REGISTRY) == 0
    out = capsys.readouterr().out
    assert "tiny" in out and "Adam fits a vector." in out and "quick, full" in out


def test_cli_list_runs_as_a_module():
    # `python -m experiments list` and `python -m benchmarks list`, in one interpreter (runpy is
    # what -m does) so that the imports are paid once; each lists every module of its package
    root = Path(__file__).resolve().parents[2]
    code = (
        "import runpy, sys\n"
        "for pkg in ('experiments', 'benchmarks'):\n"
        "    sys.argv = [pkg, 'list']\n"
        "    print('@@', pkg, flush=True)\n"
        "    try:\n"
        "        runpy.run_module(pkg, run_name='__main__', alter_sys=True)\n"
        "    except SystemExit as e:\n"
        "        assert not e.code, (pkg, e.code)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stderr
    _, exp_out, bench_out = proc.stdout.split("@@ ")
    for pkg, out in (("experiments", exp_out), ("benchmarks", bench_out)):
        names = [p.stem for p in (root / pkg).glob("[!_]*.py")]
        assert len(names) >= 8 and all(name in out for name in names), (pkg, out)

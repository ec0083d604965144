"""Run one JAX program as several cooperating processes (``jax.distributed``), here or on hosts.

A jaxlab entry point becomes multi-process by calling :func:`initialize` before it touches JAX;
:func:`jaxlab.core.sharding.data_mesh` then spans every process's devices and each hot core runs
unchanged on the global mesh (``shard_batch`` takes this process's slice of a batch).

**On one machine** (the multi-process test, or trying a run before taking it to hosts),
:func:`launch` starts ``num_processes`` copies of a command on ``127.0.0.1`` with a free
coordinator port, gives each ``local_devices`` forced CPU devices, waits for all of them within a
time limit, and always reaps them (a failed process takes its peers down instead of leaving them
blocked in a collective)::

    python -m jaxlab.launch -n 2 --local-devices 2 -- python my_script.py --flag

**On real hosts** run the same command on every host with the three variables set by hand
(``JAXLAB_COORDINATOR=host0:port``, ``JAXLAB_NUM_PROCESSES``, ``JAXLAB_PROCESS_ID``), or leave
them unset where ``jax.distributed.initialize()`` detects the cluster itself (SLURM, Open MPI, TPU
pods) and call :func:`initialize` with ``auto=True``.

CPU collectives across processes use gloo (``jax_cpu_collectives_implementation``), which
:func:`initialize` selects; accelerators use their own. This module configures JAX only when its
:func:`initialize` is called, by an entry point; importing it configures nothing.

Example::

    # my_script.py; start it with
    #   python -m jaxlab.launch -n 2 --local-devices 2 -- python my_script.py
    from jaxlab import launch
    launch.initialize()                 # no-op when the JAXLAB_* variables are unset
    import jax
    from jaxlab.core.sharding import data_mesh
    mesh = data_mesh()                  # 4 devices over 2 processes
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from typing import NamedTuple

ENV_COORDINATOR = "JAXLAB_COORDINATOR"
ENV_NUM_PROCESSES = "JAXLAB_NUM_PROCESSES"
ENV_PROCESS_ID = "JAXLAB_PROCESS_ID"
_DEVICE_FLAG = "--xla_force_host_platform_device_count"

__all__ = ["LaunchError", "ProcessResult", "free_port", "initialize", "launch", "main"]


class ProcessResult(NamedTuple):
    """One launched process: its id, exit status (negative: killed by that signal) and output."""

    process_id: int
    returncode: int
    stdout: str
    stderr: str


class LaunchError(RuntimeError):
    """A launched process failed or the run passed its time limit; ``results`` has every output."""

    def __init__(self, message: str, results: list[ProcessResult]):
        super().__init__(message)
        self.results = results


def initialize(
    coordinator_address: str | None = None,
    num_processes: int | None = None,
    process_id: int | None = None,
    *,
    auto: bool = False,
    cpu_collectives: str = "gloo",
    timeout_s: int = 120,
) -> bool:
    """Join a multi-process JAX run; call it first, before any other JAX call.

    Arguments default to the ``JAXLAB_COORDINATOR`` / ``JAXLAB_NUM_PROCESSES`` /
    ``JAXLAB_PROCESS_ID`` variables that :func:`launch` sets. With none given or set, it does
    nothing (single-process run) unless ``auto`` asks ``jax.distributed.initialize()`` to detect a
    cluster.

    Args:
      coordinator_address: ``"host:port"`` of process 0's coordinator service.
      num_processes: how many processes take part.
      process_id: this process's index in ``[0, num_processes)``.
      auto: with no address given or set, let JAX detect the cluster (SLURM, Open MPI, TPU).
      cpu_collectives: the CPU cross-process collectives (``"gloo"`` or ``"mpi"``).
      timeout_s: how long to wait for every process to join.

    Returns:
      ``True`` when this process joined a multi-process run, ``False`` for a single process.

    Raises:
      ValueError: a missing or inconsistent address / count / id, naming it.
    """
    import jax

    address = coordinator_address or os.environ.get(ENV_COORDINATOR)
    n = num_processes if num_processes is not None else _env_int(ENV_NUM_PROCESSES)
    pid = process_id if process_id is not None else _env_int(ENV_PROCESS_ID)
    if address is None and n is None and pid is None:
        if not auto:
            return False
        jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
        jax.distributed.initialize(initialization_timeout=timeout_s)
        return jax.process_count() > 1
    if address is None or n is None or pid is None:
        raise ValueError(
            "initialize: `coordinator_address`, `num_processes` and `process_id` go together "
            f"(or {ENV_COORDINATOR}, {ENV_NUM_PROCESSES}, {ENV_PROCESS_ID}); got "
            f"{address!r}, {n!r}, {pid!r}."
        )
    if ":" not in address:
        raise ValueError(f"initialize: `coordinator_address` must be 'host:port', got {address!r}.")
    if n < 1 or not 0 <= pid < n:
        raise ValueError(
            f"initialize: need num_processes >= 1 and 0 <= process_id < num_processes, "
            f"got num_processes={n}, process_id={pid}."
        )
    jax.config.update("jax_cpu_collectives_implementation", cpu_collectives)
    jax.distributed.initialize(
        coordinator_address=address,
        num_processes=n,
        process_id=pid,
        initialization_timeout=timeout_s,
    )
    return n > 1


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"initialize: {name} must be an integer, got {value!r}.") from None


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _child_env(base: Mapping[str, str], address: str, n: int, pid: int, local_devices: int | None):
    env = dict(base)
    env[ENV_COORDINATOR], env[ENV_NUM_PROCESSES], env[ENV_PROCESS_ID] = address, str(n), str(pid)
    if local_devices is not None:
        flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(_DEVICE_FLAG)]
        env["XLA_FLAGS"] = " ".join([*flags, f"{_DEVICE_FLAG}={local_devices}"])
        env["JAX_PLATFORMS"] = "cpu"
    return env


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the whole session: the child and its children
        except (ProcessLookupError, PermissionError):
            proc.kill()
    proc.wait()


def launch(
    argv: Sequence[str],
    num_processes: int = 2,
    local_devices: int | None = None,
    *,
    timeout_s: float = 600.0,
    host: str = "127.0.0.1",
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    capture: bool = True,
    check: bool = True,
) -> list[ProcessResult]:
    """Run ``argv`` as ``num_processes`` processes of one ``jax.distributed`` job on ``host``.

    Each process gets ``JAXLAB_COORDINATOR`` (``host`` and a free port),
    ``JAXLAB_NUM_PROCESSES`` and its ``JAXLAB_PROCESS_ID``; the program calls :func:`initialize`.
    With ``local_devices`` each process also gets that many forced CPU devices
    (``XLA_FLAGS=--xla_force_host_platform_device_count``, ``JAX_PLATFORMS=cpu``).

    The first process to fail, or the time limit, kills every process still running (its whole
    process group); all are reaped before this returns or raises.

    Args:
      argv: the command, e.g. ``[sys.executable, "-m", "my.module"]``.
      num_processes: how many processes (>= 1).
      local_devices: forced CPU devices per process (``None``: leave the platform alone).
      timeout_s: wall-clock limit for the whole run.
      env: base environment (default ``os.environ``); cwd: working directory.
      capture: collect each process's stdout / stderr (else they inherit this process's).
      check: raise :class:`LaunchError` when a process fails or the limit passes.

    Returns:
      One :class:`ProcessResult` per process, in process order.
    """
    if not argv:
        raise ValueError("launch: `argv` is empty; expected a command to run.")
    if num_processes < 1:
        raise ValueError(f"launch: `num_processes` must be >= 1, got {num_processes}.")
    if local_devices is not None and local_devices < 1:
        raise ValueError(f"launch: `local_devices` must be >= 1 or None, got {local_devices}.")
    if timeout_s <= 0:
        raise ValueError(f"launch: `timeout_s` must be > 0, got {timeout_s}.")
    address = f"{host}:{free_port(host)}"
    base = os.environ if env is None else env
    procs, files = [], []
    timed_out = False
    try:
        for pid in range(num_processes):
            out = tempfile.TemporaryFile("w+") if capture else None
            err = tempfile.TemporaryFile("w+") if capture else None
            files.append((out, err))
            procs.append(
                subprocess.Popen(
                    list(argv),
                    env=_child_env(base, address, num_processes, pid, local_devices),
                    cwd=cwd,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
            )
        deadline = time.monotonic() + timeout_s
        while True:
            codes = [p.poll() for p in procs]  # poll every process (no short circuit)
            if all(c is not None for c in codes):
                break
            if any(c not in (None, 0) for c in codes):
                break  # one failed: its peers would wait on it in a collective until the limit
            if time.monotonic() > deadline:
                timed_out = True
                break
            time.sleep(0.05)
    finally:
        for p in procs:
            _kill(p)
    results = []
    for pid, (p, (out, err)) in enumerate(zip(procs, files, strict=True)):
        texts = []
        for f in (out, err):
            if f is None:
                texts.append("")
                continue
            f.seek(0)
            texts.append(f.read())
            f.close()
        results.append(ProcessResult(pid, p.returncode, *texts))
    if check and (timed_out or any(r.returncode for r in results)):
        why = f"passed its {timeout_s:g} s limit" if timed_out else "failed"
        detail = "\n".join(
            f"--- process {r.process_id} (exit {r.returncode}) ---\n{r.stderr[-3000:]}"
            for r in results
        )
        raise LaunchError(f"launch: the {num_processes}-process run {why}.\n{detail}", results)
    return results


def main(args: Sequence[str] | None = None) -> int:
    """``python -m jaxlab.launch -n N [--local-devices K] [--timeout S] -- command ...``."""
    parser = argparse.ArgumentParser(
        prog="python -m jaxlab.launch",
        description="Run a command as N jax.distributed processes on this machine.",
    )
    parser.add_argument("-n", "--num-processes", type=int, default=2)
    parser.add_argument(
        "--local-devices",
        type=int,
        default=None,
        help="forced CPU devices per process (default: leave the platform alone)",
    )
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds for the whole run")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command, after --")
    ns = parser.parse_args(args)  # fmt: skip
    command = ns.command[1:] if ns.command[:1] == ["--"] else ns.command
    if not command:
        parser.error("give the command to run after --")
    results = launch(command, ns.num_processes, ns.local_devices, timeout_s=ns.timeout,
                     capture=False, check=False)  # fmt: skip
    return max((abs(r.returncode) for r in results), default=0)


if __name__ == "__main__":
    sys.exit(main())

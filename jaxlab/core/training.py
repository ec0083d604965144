"""Scan-based training loops: the whole loop inside ``jit``, seen by the host in chunks.

A jaxlab method is a pure step ``step(state, x) -> (state, metrics)`` over a pytree state. This
module runs it:

- :func:`scan_steps`: ``n_steps`` steps as one ``lax.scan`` (pure; jit it, vmap it over seeds);
- :func:`run_chunked`: the same loop as jitted chunks of ``chunk_size`` steps, with a host callback
  once per chunk (progress bars), optional periodic checkpoints and resume, and optional ``vmap``
  over a leading seed axis of the state. Chunked and unchunked runs give identical results.

``x`` is the per-step input: the matching slice of ``xs`` (leading axis ``n_steps``) or ``None``
when the step needs only its state (derive per-step keys with ``jax.random.fold_in(key, step)``).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import jax
import numpy as np
from tqdm.auto import tqdm

from jaxlab.core.checkpoint import Checkpointer

PyTree = Any
Step = Callable[[PyTree, Any], tuple[PyTree, PyTree]]
ChunkCallback = Callable[[int, PyTree], None]

__all__ = ["progress_bar", "run_chunked", "scan_steps"]


def scan_steps(step: Step, state: PyTree, n_steps: int, xs: PyTree = None) -> tuple[PyTree, PyTree]:
    """Run ``n_steps`` of ``step`` as one ``lax.scan``.

    Args:
      step: ``step(state, x) -> (state, metrics)``, pure.
      state: the initial state pytree.
      n_steps: number of steps (static).
      xs: per-step inputs with leading axis ``n_steps``, or ``None``.

    Returns:
      ``(final_state, metrics)`` with every metrics leaf stacked: ``[n_steps, ...]``.
    """
    return jax.lax.scan(step, state, xs, length=n_steps)


def _slice(xs: PyTree, start: int, stop: int) -> PyTree:
    return jax.tree_util.tree_map(lambda x: x[start:stop], xs)


def run_chunked(
    step: Step,
    state: PyTree,
    n_steps: int,
    *,
    chunk_size: int,
    xs: PyTree = None,
    vmap: bool = False,
    on_chunk: ChunkCallback | None = None,
    checkpointer: Checkpointer | None = None,
) -> tuple[PyTree, PyTree]:
    """Run ``n_steps`` of ``step`` in jitted chunks of ``chunk_size`` steps.

    Each chunk is one ``lax.scan`` under ``jit``; the host syncs once per chunk to copy that chunk's
    metrics into a preallocated buffer, call ``on_chunk`` and (maybe) checkpoint. ``step`` is
    traced once; the chunk is compiled once per distinct chunk length (once if ``chunk_size``
    divides ``n_steps``, otherwise twice: the last chunk is shorter).

    With ``checkpointer``, the state and the metrics so far are saved after a chunk whenever the
    checkpointer's interval has passed, and always after the last chunk; if the checkpointer's
    directory already holds a checkpoint, the run continues from it (resume) instead of ``state``,
    which then serves only as the template for restoring.

    Args:
      step: ``step(state, x) -> (state, metrics)``, pure.
      state: initial state. With ``vmap=True`` every leaf has a leading seed axis ``[S, ...]``.
      n_steps: total number of steps.
      chunk_size: steps per jitted chunk (host sync and callback granularity).
      xs: per-step inputs with leading axis ``n_steps`` (shared by all seeds), or ``None``.
      vmap: run ``jax.vmap(step)`` over the leading seed axis of ``state``.
      on_chunk: ``on_chunk(steps_done, chunk_metrics)`` called on the host after each chunk
        (``chunk_metrics`` leaves are NumPy arrays ``[k, ...]``, ``[k, S, ...]`` with vmap).
      checkpointer: periodic checkpoints and resume (see ``Checkpointer``).

    Returns:
      ``(final_state, metrics)``; metrics leaves are NumPy arrays ``[n_steps, ...]``, or
      ``[S, n_steps, ...]`` with ``vmap=True`` (the layout of ``jax.vmap`` over a whole run).
    """
    if n_steps < 1:
        raise ValueError(f"run_chunked: `n_steps` must be >= 1, got {n_steps}.")
    if chunk_size < 1:
        raise ValueError(f"run_chunked: `chunk_size` must be >= 1, got {chunk_size}.")
    if xs is not None:
        lengths = {np.shape(x)[0] for x in jax.tree_util.tree_leaves(xs)}
        if lengths != {n_steps}:
            raise ValueError(
                f"run_chunked: `xs` leading axes {sorted(lengths)} != n_steps={n_steps}."
            )

    step_fn = jax.vmap(step, in_axes=(0, None)) if vmap else step
    chunk = jax.jit(functools.partial(scan_steps, step_fn), static_argnums=(1,))

    # Preallocate host buffers for every step's metrics (fixed shapes, checkpointable).
    first_xs = None if xs is None else _slice(xs, 0, min(chunk_size, n_steps))
    _, metrics_shape = jax.eval_shape(chunk, state, min(chunk_size, n_steps), first_xs)
    buffers = jax.tree_util.tree_map(
        lambda s: np.zeros((n_steps,) + s.shape[1:], s.dtype), metrics_shape
    )

    done = 0
    if checkpointer is not None and checkpointer.latest_step() is not None:
        done, restored = checkpointer.restore({"state": state, "metrics": buffers})
        if done > n_steps:
            raise ValueError(
                f"run_chunked: checkpoint in {checkpointer.directory} is at step {done}, past "
                f"n_steps={n_steps}; it belongs to a different run."
            )
        state = restored["state"]
        buffers = jax.tree_util.tree_map(np.array, restored["metrics"])  # writable host copies

    while done < n_steps:
        k = min(chunk_size, n_steps - done)
        xs_chunk = None if xs is None else _slice(xs, done, done + k)
        state, metrics = chunk(state, k, xs_chunk)
        metrics = jax.device_get(metrics)
        for buf, m in zip(
            jax.tree_util.tree_leaves(buffers), jax.tree_util.tree_leaves(metrics), strict=True
        ):
            buf[done : done + k] = m
        done += k
        if checkpointer is not None:
            checkpointer.maybe_save(
                done, {"state": state, "metrics": buffers}, force=done == n_steps
            )
        if on_chunk is not None:
            on_chunk(done, metrics)

    if vmap:
        buffers = jax.tree_util.tree_map(lambda b: np.moveaxis(b, 0, 1), buffers)
    return state, buffers


@contextlib.contextmanager
def progress_bar(
    total: int, desc: str = "", metric: str | None = None, **tqdm_kwargs: Any
) -> Iterator[ChunkCallback]:
    """A tqdm progress bar usable as ``run_chunked``'s ``on_chunk`` callback.

    Shows steps done out of ``total`` and, if ``metric`` names a top-level key of the metrics
    dict, its mean over the last step of the chunk. Disabled automatically when stderr is not a
    terminal (logs stay clean); ``tqdm_kwargs`` go to ``tqdm`` (e.g. ``file=``, ``disable=``).

    Example::

        with progress_bar(n_steps, "train", metric="loss") as cb:
            state, metrics = run_chunked(step, state, n_steps, chunk_size=100, on_chunk=cb)
    """
    options = {"unit": "step", "disable": None, "dynamic_ncols": True, **tqdm_kwargs}
    with tqdm(total=total, desc=desc, **options) as bar:

        def update(done: int, metrics: PyTree) -> None:
            bar.update(done - bar.n)
            if metric is not None and isinstance(metrics, dict) and metric in metrics:
                bar.set_postfix({metric: f"{float(np.mean(metrics[metric][-1])):.4g}"})

        yield update

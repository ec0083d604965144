"""Scan-based training loops: the whole loop inside ``jit``, seen by the host in chunks.

A jaxlab method is a pure step ``step(state, x) -> (state, metrics)`` over a pytree state. This
module runs it:

- :func:`scan_steps`: ``n_steps`` steps as one ``lax.scan`` (pure; jit it, vmap it over seeds);
- :func:`run_chunked`: the same loop as jitted chunks of ``chunk_size`` steps, with a host callback
  once per chunk (progress bars), optional periodic checkpoints and resume, and optional ``vmap``
  over a leading seed axis of the state. Chunked and unchunked runs give identical results.

``x`` is the per-step input: the matching slice of ``xs`` (leading axis ``n_steps``) or ``None``
when the step needs only its state (derive per-step keys with ``jax.random.fold_in(key, step)``).

Optimisation helpers (every optax loop of the library goes through these, none is hand-written):

- :class:`TrainState`: ``params``, ``opt_state``, ``step`` and ``key`` of one optimiser, with
  :meth:`TrainState.apply_gradients` and per-step keys :meth:`TrainState.step_key`;
- :func:`fit`: ``num_steps`` full-batch optimiser steps as one ``lax.scan`` (pure; jit it);
- :func:`minibatch_epochs`: epochs of shuffled minibatches as nested scans (pure; jit it);
- :func:`map_in_chunks`: a jitted batched function applied to a long leading axis in fixed-size,
  padded chunks from the host (one compiled shape).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from tqdm.auto import tqdm

from jaxlab.core.checkpoint import Checkpointer
from jaxlab.core.checks import check_callable, check_int, check_key, check_tree_finite

PyTree = Any
Step = Callable[[PyTree, Any], tuple[PyTree, PyTree]]
ChunkCallback = Callable[[int, PyTree], None]

__all__ = [
    "TrainState",
    "all_finite",
    "chunked_runner",
    "fit",
    "map_in_chunks",
    "minibatch_epochs",
    "precompile_chunked",
    "next_token_loss",
    "progress_bar",
    "run_chunked",
    "scan_steps",
]


def all_finite(*trees: PyTree) -> jax.Array:
    """``[]`` bool: every float leaf of ``trees`` is free of NaN / inf (traceable; put it in a
    step's metrics as ``finite`` so that a run that went non-finite is flagged, not reported)."""
    flags = [
        jnp.all(jnp.isfinite(leaf))
        for leaf in jax.tree_util.tree_leaves(trees)
        if jnp.issubdtype(jnp.asarray(leaf).dtype, jnp.inexact)
    ]
    return jnp.all(jnp.stack(flags)) if flags else jnp.ones((), bool)


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
    check_callable(step, "step")
    check_int(n_steps, "n_steps", minimum=0)
    _check_xs(xs, n_steps)
    return jax.lax.scan(step, state, xs, length=n_steps)


def _check_xs(xs: PyTree, n_steps: int) -> None:
    lengths = {np.shape(x)[0] if np.ndim(x) else None for x in jax.tree_util.tree_leaves(xs)}
    if lengths and lengths != {n_steps}:
        raise ValueError(f"`xs` leading axes {sorted(lengths, key=str)} != n_steps={n_steps}.")


def _check_optimizer(tx: Any, name: str) -> None:
    if not (callable(getattr(tx, "init", None)) and callable(getattr(tx, "update", None))):
        raise TypeError(
            f"`{name}` must be an optax GradientTransformation (init / update), got "
            f"{type(tx).__name__}."
        )


def _slice(xs: PyTree, start: int, stop: int) -> PyTree:
    return jax.tree_util.tree_map(lambda x: x[start:stop], xs)


def _check_run(n_steps, chunk_size, xs, caller: str) -> None:
    """The arguments ``run_chunked`` and ``precompile_chunked`` share."""
    check_int(n_steps, "n_steps", minimum=1)
    check_int(chunk_size, "chunk_size", minimum=1)
    if xs is not None:
        lengths = {np.shape(x)[0] for x in jax.tree_util.tree_leaves(xs)}
        if lengths != {n_steps}:
            raise ValueError(f"{caller}: `xs` leading axes {sorted(lengths)} != n_steps={n_steps}.")


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
    donate: bool = True,
) -> tuple[PyTree, PyTree]:
    """Run ``n_steps`` of ``step`` in jitted chunks of ``chunk_size`` steps.

    Each chunk is one ``lax.scan`` under ``jit``; the host syncs once per chunk to copy that chunk's
    metrics into a preallocated buffer, call ``on_chunk`` and (maybe) checkpoint. ``step`` is
    traced once; the chunk is compiled once per distinct chunk length (once if ``chunk_size``
    divides ``n_steps``, otherwise twice: the last chunk is shorter). The compiled chunk is cached
    per ``(step, vmap, donate)`` across calls, so calling ``run_chunked`` again with the same
    ``step`` object (a module-level function, or the same bound method / closure) and the same
    shapes compiles nothing; a fresh lambda per call is a fresh ``step`` and compiles again.
    With ``donate`` (the default) each chunk donates its input state's buffers to the output, so
    a large state is not held twice; the caller's ``state`` is copied once first and stays valid.

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
      donate: donate the state between chunks (see above).

    Returns:
      ``(final_state, metrics)``; metrics leaves are NumPy arrays ``[n_steps, ...]``, or
      ``[S, n_steps, ...]`` with ``vmap=True`` (the layout of ``jax.vmap`` over a whole run).
    """
    _check_run(n_steps, chunk_size, xs, "run_chunked")
    chunk = _compiled_chunk(step, vmap, donate)
    if donate:  # the chunk donates its state: never the caller's arrays, a private copy of them
        state = jax.tree_util.tree_map(lambda a: a.copy() if isinstance(a, jax.Array) else a, state)

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


def precompile_chunked(
    step: Step,
    state: PyTree,
    n_steps: int,
    *,
    chunk_size: int,
    xs: PyTree = None,
    vmap: bool = False,
    donate: bool = True,
) -> None:
    """Compile ahead of time the chunks that ``run_chunked`` with the same arguments will call.

    Only shapes and dtypes of ``state`` (and ``xs``) matter: pass a template state (e.g. a fresh
    initialisation) to compile a run while its real initial state is still being computed, say
    in another thread. The later ``run_chunked`` then only traces (the compiled executables are
    cached by jax). Runs nothing.
    """
    _check_run(n_steps, chunk_size, xs, "precompile_chunked")
    chunk = _compiled_chunk(step, vmap, donate)
    for k in sorted({min(chunk_size, n_steps), n_steps % chunk_size or chunk_size}):
        chunk.lower(state, k, None if xs is None else _slice(xs, 0, k)).compile()


@functools.lru_cache(maxsize=128)
def _compiled_chunk(step: Step, vmap: bool, donate: bool) -> Callable:
    step_fn = jax.vmap(step, in_axes=(0, None)) if vmap else step
    return jax.jit(
        functools.partial(scan_steps, step_fn),
        static_argnums=(1,),
        donate_argnums=(0,) if donate else (),
    )


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


def chunked_runner(
    step: Step, default_steps: int, chunk_size: int, metric: str | None = "loss"
) -> tuple[Callable, Callable]:
    """``(run, precompile)`` of a trainer whose ``step(state, x=None)`` draws its own batches:

    - ``run(state, n_steps=None, desc="", vmap=False) -> (state, metrics [n_steps])``:
      :func:`run_chunked` in chunks of ``min(chunk_size, n_steps)`` with a :func:`progress_bar`
      showing ``metric`` (``n_steps=None``: ``default_steps``; ``vmap``: a leading seed axis);
    - ``precompile(state, n_steps=None, vmap=False)``: compile what that ``run`` runs
      (:func:`precompile_chunked`), from a template state, without running it.
    """
    check_int(default_steps, "default_steps", minimum=1)
    check_int(chunk_size, "chunk_size", minimum=1)

    def steps_and_chunk(n_steps):
        n = default_steps if n_steps is None else check_int(n_steps, "n_steps", minimum=1)
        return n, min(chunk_size, n)

    def run(state, n_steps: int | None = None, desc: str = "", vmap: bool = False):
        n, chunk = steps_and_chunk(n_steps)
        with progress_bar(n, desc, metric=metric) as bar:
            return run_chunked(step, state, n, chunk_size=chunk, vmap=vmap, on_chunk=bar)

    def precompile(state, n_steps: int | None = None, vmap: bool = False) -> None:
        n, chunk = steps_and_chunk(n_steps)
        precompile_chunked(step, state, n, chunk_size=chunk, vmap=vmap)

    return run, precompile


def next_token_loss(logits: jax.Array, tokens: jax.Array, weights: jax.Array, scored=None):
    """Weighted next-token cross-entropy of a language model and its exact-match accuracy.

    ``logits [B, T, V]`` of ``tokens [B, T]``; ``weights [B, T]`` weigh the *targets*
    (``tokens[:, 1:]``, so ``weights[:, 0]`` is unused). Returns ``(sum(ce * w) / max(sum(w), 1),
    accuracy)``, the accuracy the fraction of sequences whose every ``scored`` target (default:
    ``weights > 0``) is the argmax (teacher-forced)."""
    targets = tokens[:, 1:]
    w = weights[:, 1:]
    ce = optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], targets)
    loss = jnp.sum(ce * w) / jnp.maximum(jnp.sum(w), 1.0)
    scored = w > 0 if scored is None else scored[:, 1:]
    right = (jnp.argmax(logits[:, :-1], -1) == targets) | ~scored
    return loss, jnp.mean(jnp.all(right, axis=1).astype(jnp.float32))


# ---- optimisation ------------------------------------------------------------------------------


@struct.dataclass
class TrainState:
    """One optimiser's training state (a pytree; ``tx`` is static metadata).

    Attributes:
      step: ``[]`` int32, optimiser steps taken so far.
      params: the parameter pytree being optimised.
      opt_state: ``tx``'s state for ``params``.
      key: ``[]`` typed PRNG key of the run (or ``None``); per-step keys come from
        :meth:`step_key`, so a run resumed from a checkpoint draws the same numbers.
      tx: the optax ``GradientTransformation`` (static, not a leaf).
    """

    step: jax.Array
    params: PyTree
    opt_state: PyTree
    key: jax.Array | None
    tx: optax.GradientTransformation = struct.field(pytree_node=False)

    @classmethod
    def create(
        cls, params: PyTree, tx: optax.GradientTransformation, key: jax.Array | None = None
    ) -> TrainState:
        """A state at step 0 with ``tx.init(params)``."""
        _check_optimizer(tx, "tx")
        key = None if key is None else check_key(key, "key")
        return cls(jnp.zeros((), jnp.int32), params, tx.init(params), key, tx)

    def apply_gradients(self, grads: PyTree) -> TrainState:
        """One optimiser step: ``tx.update(grads, opt_state, params)``, then ``step + 1``.

        ``grads`` must have the structure and leaf shapes of ``params`` (checked when traced, at
        no run-time cost, with ``chex``: a gradient of the wrong pytree is an error here, not a
        silent broadcast inside the optimiser).
        """
        chex.assert_trees_all_equal_shapes(grads, self.params)
        updates, opt_state = self.tx.update(grads, self.opt_state, self.params)
        return self.replace(
            step=self.step + 1,
            params=optax.apply_updates(self.params, updates),
            opt_state=opt_state,
        )

    def step_key(self, salt: int | None = None) -> jax.Array:
        """``fold_in(key, step)`` (then ``fold_in(., salt)``): this step's key, never reused."""
        if self.key is None:
            raise ValueError("TrainState.step_key: this state was created without a `key`.")
        k = jax.random.fold_in(self.key, self.step)
        return k if salt is None else jax.random.fold_in(k, salt)


def fit(
    loss_fn: Callable[..., jax.Array],
    params: PyTree,
    optimizer: optax.GradientTransformation,
    num_steps: int,
    *,
    key: jax.Array | None = None,
    xs: PyTree = None,
    opt_state: PyTree = None,
) -> tuple[PyTree, jax.Array]:
    """``num_steps`` optimiser steps on ``loss_fn`` as one ``lax.scan`` (pure: jit or vmap it).

    The step is ``loss, g = value_and_grad(loss_fn)(params, *extra)``, then
    ``optimizer.update(g, opt_state, params)`` and ``optax.apply_updates``.

    Args:
      loss_fn: ``loss_fn(params, *extra) -> scalar``; ``extra`` is ``(key_t,)`` when ``key`` is
        given, then ``(x_t,)`` when ``xs`` is given (so ``loss_fn(params, key_t, x_t)`` with both).
      params: initial parameters.
      optimizer: any optax transformation.
      num_steps: number of steps (static).
      key: if given, step ``t`` gets ``key_t = jax.random.split(key, num_steps)[t]``.
      xs: per-step inputs with leading axis ``num_steps``.
      opt_state: initial optimiser state (default ``optimizer.init(params)``).

    Returns:
      ``(params, losses [num_steps])``, the loss at each step before its update.
    """
    check_callable(loss_fn, "loss_fn")
    _check_optimizer(optimizer, "optimizer")
    check_int(num_steps, "num_steps", minimum=0)
    check_tree_finite(params, "params")
    _check_xs(xs, num_steps)
    keys = None if key is None else jax.random.split(check_key(key, "key"), num_steps)
    value_and_grad = jax.value_and_grad(loss_fn)

    def body(carry, inputs):
        p, s = carry
        k, x = inputs
        extra = (() if key is None else (k,)) + (() if xs is None else (x,))
        loss, g = value_and_grad(p, *extra)
        updates, s = optimizer.update(g, s, p)
        return (optax.apply_updates(p, updates), s), loss

    s0 = optimizer.init(params) if opt_state is None else opt_state
    (params, _), losses = jax.lax.scan(body, (params, s0), (keys, xs), length=num_steps)
    return params, losses


def minibatch_epochs(
    loss_fn: Callable[[PyTree, tuple, jax.Array], jax.Array],
    params: PyTree,
    optimizer: optax.GradientTransformation,
    data: tuple[jax.Array, ...],
    key: jax.Array,
    *,
    epochs: int,
    batch_size: int,
    opt_state: PyTree = None,
) -> tuple[PyTree, jax.Array]:
    """Epochs of shuffled minibatches, as a ``lax.scan`` over epochs of a scan over batches.

    Epoch ``e`` uses ``k_e = jax.random.split(key, epochs)[e]``: its order is
    ``permutation(k_e, N)`` cut to ``B = max(1, N // batch_size)`` batches of
    ``min(batch_size, N)`` rows (the remainder of each epoch is dropped, a different one each
    epoch), and batch ``i`` calls ``loss_fn(params, batch, fold_in(k_e, i))`` with ``batch`` the
    tuple of ``data`` rows. Pure: jit it (``loss_fn`` and the sizes are static).

    Args:
      loss_fn: ``loss_fn(params, batch: tuple, key) -> scalar`` (ignore ``key`` if not needed).
      params: initial parameters.
      optimizer: any optax transformation.
      data: a tuple of arrays with one leading axis ``N``.
      key: the run's key.
      epochs: number of epochs (static).
      batch_size: rows per batch (static).
      opt_state: initial optimiser state (default ``optimizer.init(params)``).

    Returns:
      ``(params, epoch_losses [epochs])``: the mean batch loss of each epoch.
    """
    sizes = {int(np.shape(d)[0]) for d in data}
    if len(sizes) != 1:
        raise ValueError(f"minibatch_epochs: `data` arrays have different lengths {sorted(sizes)}.")
    check_callable(loss_fn, "loss_fn")
    _check_optimizer(optimizer, "optimizer")
    check_int(batch_size, "batch_size", minimum=1)
    check_int(epochs, "epochs", minimum=0)
    key = check_key(key, "key")
    check_tree_finite(params, "params")
    (n,) = sizes
    n_batches, size = max(1, n // batch_size), min(batch_size, n)
    value_and_grad = jax.value_and_grad(loss_fn)

    def epoch(carry, k):
        order = jax.random.permutation(k, n)[: n_batches * size].reshape(n_batches, size)

        def batch_step(carry, idx):
            p, s, i = carry
            loss, g = value_and_grad(p, tuple(d[idx] for d in data), jax.random.fold_in(k, i))
            updates, s = optimizer.update(g, s, p)
            return (optax.apply_updates(p, updates), s, i + 1), loss

        (p, s, _), losses = jax.lax.scan(batch_step, (*carry, 0), order)
        return (p, s), jnp.mean(losses)

    s0 = optimizer.init(params) if opt_state is None else opt_state
    (params, _), losses = jax.lax.scan(epoch, (params, s0), jax.random.split(key, epochs))
    return params, losses


def map_in_chunks(fn: Callable[..., PyTree], args: tuple, chunk: int | None) -> PyTree:
    """``fn(*args)`` over the leading axis of ``args``, ``chunk`` rows per call from the host.

    ``fn`` maps a batch to a batch (e.g. a jitted ``vmap``); the last chunk is padded by repeating
    the final row, so every call has one shape and ``fn`` compiles once, and the padding is dropped
    from the concatenated outputs. ``chunk=None`` (or ``>= N``) is one call. Host-dispatched on
    purpose: it bounds memory, shows progress between calls, and avoids nesting a long-running
    program in ``lax.map`` (which deadlocked on XLA:CPU with LAPACK solves inside, jaxlib 0.10).
    """
    check_callable(fn, "fn")
    if chunk is not None:
        check_int(chunk, "chunk", minimum=1)
    sizes = {int(np.shape(a)[0]) if np.ndim(a) else None for a in jax.tree_util.tree_leaves(args)}
    if len(sizes) != 1 or None in sizes:
        raise ValueError(
            f"map_in_chunks: every leaf of `args` needs one leading size, got {sizes}."
        )
    total = sizes.pop()
    if chunk is None or chunk >= total:
        return fn(*args)
    outs = []
    for start in range(0, total, chunk):
        idx = np.minimum(np.arange(start, start + chunk), total - 1)
        outs.append(fn(*jax.tree_util.tree_map(lambda a, idx=idx: a[idx], args)))
    out = jax.tree_util.tree_map(lambda *leaves: jnp.concatenate(leaves), *outs)
    return jax.tree_util.tree_map(lambda a: a[:total], out)

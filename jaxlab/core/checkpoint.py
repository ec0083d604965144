"""Saving and restoring training-state pytrees with orbax-checkpoint.

Entry points:

- :func:`save_pytree` / :func:`restore_pytree`: one pytree to one directory (a trained model);
- :func:`cache_path` / :func:`load_or_build`: a trained pytree cached on disk under a hash of
  whatever determines it (configs, seed), built once and restored after (pretrained bases);
- :class:`Checkpointer`: numbered, periodic checkpoints of a running loop in one directory, used by
  :func:`jaxlab.core.training.run_chunked` to resume an interrupted run from its last checkpoint.

Restoring needs a template (``like``): a pytree with the same structure whose leaves give shape,
dtype and sharding (concrete arrays or ``jax.ShapeDtypeStruct``). Typed PRNG keys
(``jax.random.key``) are stored as their raw key data and re-wrapped with the template's key
implementation, so states holding either kind of key round-trip exactly.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from jaxlab.core.checks import check_int, check_scalar

PyTree = Any

__all__ = [
    "Checkpointer",
    "cache_path",
    "default_cache_dir",
    "load_or_build",
    "restore_pytree",
    "save_pytree",
]


def _is_typed_key(x) -> bool:
    return isinstance(x, jax.Array | jax.ShapeDtypeStruct) and jax.dtypes.issubdtype(
        x.dtype, jax.dtypes.prng_key
    )


def _unwrap_keys(tree: PyTree) -> PyTree:
    return jax.tree_util.tree_map(lambda x: jax.random.key_data(x) if _is_typed_key(x) else x, tree)


def _abstract(tree: PyTree) -> PyTree:
    """Shape/dtype(/sharding) template for orbax, with typed keys replaced by their raw data."""

    def leaf(x):
        if _is_typed_key(x):
            x = jax.eval_shape(jax.random.key_data, x)
            return jax.ShapeDtypeStruct(x.shape, x.dtype)
        if isinstance(x, jax.Array):
            return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
        if isinstance(x, jax.ShapeDtypeStruct):
            return x
        return np.asarray(x)  # NumPy arrays and Python scalars restore as NumPy arrays

    return jax.tree_util.tree_map(leaf, tree)


def _rewrap_keys(restored: PyTree, like: PyTree) -> PyTree:
    def leaf(r, t):
        if not _is_typed_key(t):
            return r
        # key_impl needs a concrete key; an abstract template only carries the key dtype.
        impl = jax.random.key_impl(t) if isinstance(t, jax.Array) else t.dtype._impl
        return jax.random.wrap_key_data(r, impl=impl)

    return jax.tree_util.tree_map(leaf, restored, like)


def save_pytree(path: str | Path, tree: PyTree, *, overwrite: bool = True) -> None:
    """Save ``tree`` (arrays, NumPy arrays, scalars, typed keys) to the directory ``path``.

    Blocks until the checkpoint is complete on disk. With ``overwrite`` an existing checkpoint at
    ``path`` is replaced; anything else at ``path`` (a file, a folder that is not an orbax
    checkpoint and not empty) is refused, never deleted.
    """
    path = Path(path).resolve()
    if path.exists():
        if not path.is_dir():
            raise ValueError(
                f"save_pytree: `path` {path} is a file, not a checkpoint; not replaced."
            )
        if any(path.iterdir()) and not (path / "_CHECKPOINT_METADATA").exists():
            raise ValueError(
                f"save_pytree: `path` {path} is a non-empty folder that holds no checkpoint; "
                "not replaced."
            )
    bad = [
        jax.tree_util.keystr(p)
        for p, leaf in jax.tree_util.tree_leaves_with_path(tree)
        if not isinstance(leaf, jax.Array | np.ndarray | np.generic | int | float)
    ]
    if bad:
        raise TypeError(
            f"save_pytree: every leaf of `tree` must be an array or number; `tree{bad[0]}` is not."
        )
    with ocp.StandardCheckpointer() as ckptr:
        ckptr.save(path, _unwrap_keys(tree), force=overwrite)
        ckptr.wait_until_finished()


def restore_pytree(path: str | Path, like: PyTree) -> PyTree:
    """Restore the pytree saved at ``path``, shaped, typed and sharded like ``like``.

    Raises:
      FileNotFoundError: if ``path`` holds no checkpoint.
    """
    path = Path(path).resolve()
    if not path.exists():
        raise FileNotFoundError(f"restore_pytree: no checkpoint at `path`={path}.")
    with ocp.StandardCheckpointer() as ckptr:
        try:
            restored = ckptr.restore(path, _abstract(like))
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(
                f"restore_pytree: `like` does not match the checkpoint at {path}: {e}"
            ) from None
    return _rewrap_keys(restored, like)


def default_cache_dir(namespace: str) -> Path:
    """``$JAXLAB_CACHE_DIR/<namespace>``, else ``~/.cache/jaxlab/<namespace>``."""
    root = os.environ.get("JAXLAB_CACHE_DIR") or Path.home() / ".cache" / "jaxlab"
    return Path(root) / namespace


def cache_path(root: str | Path, prefix: str, key: Any) -> Path:
    """``root / f"{prefix}-{digest}"``: the digest is 16 hex digits of the sha256 of
    ``repr(key)``, so ``key`` should be a tuple of frozen dataclasses, strings and numbers whose
    ``repr`` names every field that changes the result (put a version string in it)."""
    digest = hashlib.sha256(repr(key).encode()).hexdigest()[:16]
    return Path(root) / f"{prefix}-{digest}"


def load_or_build(
    path: str | Path | None, like: PyTree, build: Callable[[], tuple[PyTree, Any]]
) -> tuple[PyTree, Any, bool]:
    """Restore the pytree cached at ``path`` (shaped like ``like``), or ``build()`` it and save it
    there. ``build() -> (tree, info)``; ``path=None`` builds without a cache. Returns ``(tree,
    info, cached)`` with ``info`` ``None`` when restored."""
    if path is not None and (Path(path) / "_CHECKPOINT_METADATA").exists():
        return restore_pytree(path, like), None, True
    tree, info = build()
    if path is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        save_pytree(path, tree)
    return tree, info, False


class Checkpointer:
    """Numbered checkpoints of a running loop, saved at most every ``every_seconds``.

    Host-side I/O helper (not traced). ``step`` is whatever progress counter the loop uses
    (``run_chunked`` uses the number of completed steps).

    Args:
      directory: where numbered checkpoints live (created if missing).
      every_seconds: :meth:`maybe_save` writes only if this much wall time has passed since the
        last write (``0`` saves every time); ``force=True`` always writes.
      max_to_keep: how many recent checkpoints to keep.
    """

    def __init__(self, directory: str | Path, *, every_seconds: float = 30.0, max_to_keep: int = 2):
        check_scalar(every_seconds, "every_seconds", 0.0)
        check_int(max_to_keep, "max_to_keep", minimum=1)
        self.directory = Path(directory).resolve()
        if self.directory.exists() and not self.directory.is_dir():
            raise ValueError(f"Checkpointer: `directory` {self.directory} is a file, not a folder.")
        self.every_seconds = every_seconds
        self._manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(
                max_to_keep=max_to_keep, create=True, enable_async_checkpointing=False
            ),
        )
        self._last_save = time.monotonic()

    def latest_step(self) -> int | None:
        """The step of the newest complete checkpoint, or ``None`` if there is none."""
        return self._manager.latest_step()

    def restore(self, like: PyTree, step: int | None = None) -> tuple[int, PyTree]:
        """Restore checkpoint ``step`` (default: the latest) shaped like ``like``.

        Returns:
          ``(step, tree)``.

        Raises:
          FileNotFoundError: if there is no checkpoint to restore.
        """
        step = self.latest_step() if step is None else step
        if step is None:
            raise FileNotFoundError(f"Checkpointer: no checkpoint in {self.directory}.")
        try:
            restored = self._manager.restore(step, args=ocp.args.StandardRestore(_abstract(like)))
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(
                f"Checkpointer.restore: `like` does not match checkpoint {step} in "
                f"{self.directory}: {e}"
            ) from None
        return step, _rewrap_keys(restored, like)

    def maybe_save(self, step: int, tree: PyTree, *, force: bool = False) -> bool:
        """Save ``tree`` as checkpoint ``step`` if ``every_seconds`` have passed (or ``force``).

        Returns:
          Whether a checkpoint was written.
        """
        if not force and time.monotonic() - self._last_save < self.every_seconds:
            return False
        if self.latest_step() == step:
            return False
        self._manager.save(step, args=ocp.args.StandardSave(_unwrap_keys(tree)), force=True)
        self._manager.wait_until_finished()
        self._last_save = time.monotonic()
        return True

    def close(self) -> None:
        self._manager.close()

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

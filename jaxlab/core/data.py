"""Shared data: sklearn's bundled 8x8 digits (offline) in the scalings jaxlab methods use.

- :func:`load_digits`: all 1,797 images and labels, as flat pixels ``[N, 64]`` or images
  ``[N, 8, 8]`` / ``[N, 8, 8, 1]``, scaled to ``[0, 1]`` (``"unit"``), ``[-1, 1]`` (``"signed"``)
  or left as the raw counts ``0..16`` (``"raw"``);
- :func:`digits_split`: a seeded, class-stratified train/test split of the same arrays (seed 0,
  360 test images is the split every experiment shares).

Example::

    x_train, x_test, y_train, y_test = digits_split(test_size=360, seed=0)   # [1437, 64] in [0, 1]
    images, labels = load_digits(scale="signed", layout="nhwc")               # [1797, 8, 8, 1]
"""

from __future__ import annotations

import functools

import numpy as np

from jaxlab.core.checks import check_float_dtype, check_int

SCALES = ("unit", "signed", "raw")
LAYOUTS = ("flat", "image", "nhwc")
NUM_DIGITS = 1797

__all__ = ["LAYOUTS", "NUM_DIGITS", "SCALES", "digits_split", "load_digits"]


@functools.cache
def _raw_digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits as _sk_load  # here: importing sklearn is slow

    data = _sk_load()
    pixels = data.images.astype(np.float64)  # [N, 8, 8], integers 0..16
    pixels.setflags(write=False)
    target = data.target.astype(np.int64)
    target.setflags(write=False)
    return pixels, target


def load_digits(
    scale: str = "unit", layout: str = "flat", dtype=np.float32
) -> tuple[np.ndarray, np.ndarray]:
    """All digits as ``(x, y)``: pixels in ``dtype`` and int64 labels ``[N]`` (``N = 1797``).

    Args:
      scale: ``"unit"`` (``counts / 16``, in ``[0, 1]``), ``"signed"`` (``counts / 8 - 1``, in
        ``[-1, 1]``) or ``"raw"`` (the counts ``0..16``). Every scaling is exact in float32.
      layout: ``"flat"`` ``[N, 64]`` (row-major 8 x 8), ``"image"`` ``[N, 8, 8]`` or ``"nhwc"``
        ``[N, 8, 8, 1]``.
      dtype: the pixel dtype (float32 or float64).

    Returns:
      Fresh (writable) NumPy arrays; the sklearn load is cached per process.
    """
    if scale not in SCALES:
        raise ValueError(f"load_digits: `scale` must be one of {SCALES}, got {scale!r}.")
    if layout not in LAYOUTS:
        raise ValueError(f"load_digits: `layout` must be one of {LAYOUTS}, got {layout!r}.")
    check_float_dtype(dtype, "dtype", allow_none=False)
    pixels, target = _raw_digits()
    if scale == "unit":
        pixels = pixels / 16.0
    elif scale == "signed":
        pixels = pixels / 8.0 - 1.0
    x = pixels.astype(dtype)
    if layout == "flat":
        x = x.reshape(len(x), 64)
    elif layout == "nhwc":
        x = x[..., None]
    return x, target.copy()


def digits_split(
    test_size: int = 360,
    seed: int = 0,
    scale: str = "unit",
    layout: str = "flat",
    dtype=np.float32,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x_train, x_test, y_train, y_test)``: a class-stratified split with a fixed ``seed``.

    The split is sklearn's ``train_test_split(..., stratify=y, random_state=seed)`` on the arrays of
    :func:`load_digits` (same ``scale``, ``layout``, ``dtype``), so it is the same on every machine
    for a given seed; ``test_size`` images go to the test set (``10 <= test_size <= 1787``: at
    least one image per class on each side).
    """
    check_int(test_size, "test_size")
    check_int(seed, "seed", minimum=0, maximum=2**32 - 1)
    if not 10 <= int(test_size) <= NUM_DIGITS - 10:
        raise ValueError(
            f"digits_split: `test_size` must be in [10, {NUM_DIGITS - 10}] (one image per class on "
            f"each side), got {test_size}."
        )
    from sklearn.model_selection import train_test_split

    x, y = load_digits(scale, layout, dtype)
    return tuple(
        train_test_split(x, y, test_size=int(test_size), random_state=int(seed), stratify=y)
    )

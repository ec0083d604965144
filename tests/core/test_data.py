"""jaxlab.core.data: the digits loader's scalings and layouts, and the seeded stratified split."""

import numpy as np
import pytest
from sklearn.datasets import load_digits as sk_load_digits

from jaxlab.core.data import digits_split, load_digits


def test_scalings_equal_sklearn_arrays():
    ref = sk_load_digits()
    x, y = load_digits()
    assert x.shape == (1797, 64) and x.dtype == np.float32
    np.testing.assert_array_equal(x, ref.data.astype(np.float32) / 16.0)
    np.testing.assert_array_equal(y, ref.target)
    signed, _ = load_digits(scale="signed", layout="nhwc")
    assert signed.shape == (1797, 8, 8, 1)
    np.testing.assert_array_equal(signed[..., 0], ref.images.astype(np.float32) / 8.0 - 1.0)
    assert signed.min() == -1.0 and signed.max() == 1.0
    img64, _ = load_digits(layout="image", dtype=np.float64)
    np.testing.assert_array_equal(img64, ref.images / 16.0)
    raw, _ = load_digits(scale="raw")
    assert raw.max() == 16.0


def test_loader_returns_fresh_arrays():
    x, y = load_digits()
    x[:] = -5.0
    y[:] = 0
    x2, y2 = load_digits()
    assert x2.min() == 0.0 and len(set(y2.tolist())) == 10


def test_split_is_stratified_seeded_and_disjoint():
    x_tr, x_te, y_tr, y_te = digits_split(test_size=360, seed=0)
    assert x_tr.shape == (1437, 64) and x_te.shape == (360, 64)
    counts_all = np.bincount(np.concatenate([y_tr, y_te]))
    counts_te = np.bincount(y_te, minlength=10)
    np.testing.assert_allclose(counts_te / 360, counts_all / 1797, atol=0.01)  # stratified
    again = digits_split(test_size=360, seed=0)
    np.testing.assert_array_equal(again[1], x_te)
    other = digits_split(test_size=360, seed=1)
    assert not np.array_equal(other[1], x_te)
    # disjoint: every image appears once in train + test (rows are unique up to a few duplicates)
    rows = {r.tobytes() for r in np.concatenate([x_tr, x_te])}
    full = {r.tobytes() for r in load_digits()[0]}
    assert rows == full


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="scale"):
        load_digits(scale="percent")
    with pytest.raises(ValueError, match="layout"):
        load_digits(layout="nchw")
    with pytest.raises(ValueError, match="test_size"):
        digits_split(test_size=5)

"""The cmi_bootstrap benchmark's NumPy reference computes the library's statistic and bootstrap."""

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import cmi_bootstrap as bench
from jaxlab.stats import cmi_test as C


def test_numpy_reference_matches_the_library():
    ks = jax.random.split(jax.random.key(0), 5)
    n, m, d = 14, 3, 2
    fold = (
        jax.random.normal(ks[0], (n, d)),
        jax.random.normal(ks[1], (n, m, d)),
        jax.random.normal(ks[2], (n, 1)),
        jax.random.normal(ks[3], (n, 1)),
        jax.random.normal(ks[4], (n, d)),
    )
    f = C.fold_matrix(*fold, jnp.ones((n,), bool))
    f_np = bench.numpy_fold_matrix(*(np.asarray(a, np.float64) for a in fold))
    np.testing.assert_allclose(f_np, np.asarray(f), rtol=1e-4, atol=1e-6)
    t, boot = bench.numpy_bootstrap([f_np, f_np], np.random.default_rng(0))
    assert t == np.float64(f_np.sum() / (n - 1))
    assert boot.shape == (bench.B,)
    # Rademacher quadratic forms: mean 0, variance 2 sum F^2 / (n-1)^2 / 2 for two equal folds
    var = 2 * (f_np**2).sum() / (n - 1) ** 2 / 2
    assert abs(boot.mean()) < 4 * np.sqrt(var / bench.B)

"""The cmi_bootstrap benchmark's NumPy reference computes the library's statistic and bootstrap."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks import cmi_bootstrap as bench
from jaxlab.stats import cmi_test as C


def test_numpy_reference_matches_the_library():
    n, m, d = 14, 3, 2

    @jax.jit  # one program: the fold, its matrix and the library's T for two equal folds
    def library(key):
        ks = jax.random.split(key, 5)
        fold = (
            jax.random.normal(ks[0], (n, d)),
            jax.random.normal(ks[1], (n, m, d)),
            jax.random.normal(ks[2], (n, 1)),
            jax.random.normal(ks[3], (n, 1)),
            jax.random.normal(ks[4], (n, d)),
        )
        mask = jnp.ones((n,), bool)
        f = C.fold_matrix(*fold, mask)
        t, _ = C.bootstrap_draws(
            jnp.stack([f, f]), jnp.stack([mask, mask]), key, C.CMIConfig(num_boot=4)
        )
        return fold, f, t

    fold, f, t_lib = library(jax.random.key(0))
    f_np = bench.numpy_fold_matrix(*(np.asarray(a, np.float64) for a in fold))
    np.testing.assert_allclose(f_np, np.asarray(f), rtol=1e-4, atol=1e-6)
    t, boot = bench.numpy_bootstrap([f_np, f_np], np.random.default_rng(0))
    assert t == np.float64(f_np.sum() / (n - 1))
    assert t == pytest.approx(float(t_lib), rel=1e-5)  # the library's fold-combined statistic
    # Rademacher quadratic forms: mean 0, variance 2 sum F^2 / (n-1)^2 / 2 for two equal folds
    # (fixed seed; 4 SE)
    var = 2 * (f_np**2).sum() / (n - 1) ** 2 / 2
    assert abs(boot.mean()) < 4 * np.sqrt(var / bench.B)
    se_var = np.sqrt((np.mean((boot - boot.mean()) ** 4) - boot.var() ** 2) / bench.B)
    assert abs(boot.var() - var) < 4 * se_var

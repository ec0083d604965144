"""jaxlab.core.checks: concrete values checked with messages naming the argument; tracers pass."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core import checks as C


def test_finite_positive_range_probability():
    C.check_finite(jnp.ones(3), "x")
    with pytest.raises(ValueError, match=r"`x` must be finite; it has 1 NaN"):
        C.check_finite(jnp.array([1.0, jnp.nan]), "x")
    with pytest.raises(ValueError, match="`sigma` must be > 0"):
        C.check_positive(jnp.array([1.0, 0.0]), "sigma")
    C.check_positive(0.0, "jitter", strict=False)
    with pytest.raises(ValueError, match="`jitter` must be >= 0"):
        C.check_positive(-1e-3, "jitter", strict=False)
    with pytest.raises(ValueError, match=r"`r` must lie in \[0.0, 1.0\]"):
        C.check_in_range(np.array([0.2, 1.5]), "r", 0.0, 1.0)
    with pytest.raises(ValueError, match="`r`"):
        C.check_in_range(np.array([np.nan]), "r", 0.0, 1.0)  # NaN is out of every range
    with pytest.raises(ValueError, match=r"`delta` must lie in \(0.0, 1.0\)"):
        C.check_probability(1.0, "delta")
    C.check_probability(1.0, "p", open_interval=False)


def test_tracers_pass_through_value_checks_but_not_shape_checks():
    @jax.jit
    def f(x):
        C.check_finite(x, "x")
        C.check_positive(x, "x")
        C.check_rank(x, "x", 1)
        return x * 2

    np.testing.assert_array_equal(f(jnp.array([-1.0, jnp.nan]))[:1], [-2.0])  # value: not checked
    with pytest.raises(ValueError, match="`x` must have rank 1"):
        f(jnp.ones((2, 2)))  # shapes are static: checked under jit too
    assert not jax.jit(lambda x: C.is_concrete(x) * x)(1.0)
    assert C.is_concrete(jnp.ones(2))


def test_int_choice_shape_key():
    assert C.check_int(np.int64(3), "n", minimum=1) == 3
    for bad in (2.0, True, "3"):
        with pytest.raises(ValueError, match="`n` must be an int"):
            C.check_int(bad, "n")
    with pytest.raises(ValueError, match="`n` must be >= 1"):
        C.check_int(0, "n", minimum=1)
    with pytest.raises(ValueError, match="`method` must be one of"):
        C.check_choice("sgd", "method", ("ug", "abr"))
    C.check_shape(jnp.ones((2, 3)), "x", (None, 3))
    with pytest.raises(ValueError, match=r"`x` must have shape \(\*, 4\) \[B, D\], got \(2, 3\)"):
        C.check_shape(jnp.ones((2, 3)), "x", (None, 4), "[B, D]")
    k = C.check_key(jax.random.PRNGKey(0), "key")  # legacy uint32[2] -> typed
    assert jax.dtypes.issubdtype(k.dtype, jax.dtypes.prng_key)
    C.check_key(jax.random.split(jax.random.key(0), 3), "keys", batched=True)
    with pytest.raises(ValueError, match="`key` must be a PRNG key"):
        C.check_key(0, "key")
    with pytest.raises(ValueError, match="`key` must be a single PRNG key"):
        C.check_key(jax.random.split(jax.random.key(0), 2), "key")

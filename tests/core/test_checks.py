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


KEY = jax.random.key(0)


@pytest.mark.parametrize(
    "call, exc, fragment",
    [
        (lambda: C.check_real("abc", "x"), TypeError, "`x` must be real numbers"),
        (lambda: C.check_real(np.array([True]), "mask"), TypeError, "`mask` must be real"),
        (lambda: C.check_positive("1.5", "lr"), TypeError, "`lr` must be real"),
        (lambda: C.check_scalar(True, "lr"), TypeError, "`lr` must be a real number"),
        (lambda: C.check_scalar(np.ones(2), "lr"), ValueError, "`lr` must be a scalar"),
        (lambda: C.check_scalar(float("nan"), "lr"), ValueError, "`lr` must be finite"),
        (lambda: C.check_scalar(-1.0, "lr", 0.0, low_open=True), ValueError, r"`lr` must lie"),
        (lambda: C.check_array([[1.0, 2.0]], "x", ndim=1), ValueError, "`x` must have rank 1"),
        (lambda: C.check_array(np.ones((2, 3)), "x", shape=(None, 4)), ValueError, r"\(\*, 4\)"),
        (lambda: C.check_array([1.0, np.inf], "x"), ValueError, "`x` must be finite"),
        (lambda: C.check_array(["a"], "x"), TypeError, "`x` must be an array of int or float"),
        (lambda: C.check_array(np.array([1.5]), "y", kind="int"), TypeError, "`y` must be an arr"),
        (lambda: C.check_array(jax.random.split(KEY), "x"), TypeError, "`x` must be an array"),
        (lambda: C.check_descending(np.array([1.0, 2.0]), "s"), ValueError, "strictly decreasing"),
        (lambda: C.check_key(np.zeros(2, np.float32), "key"), ValueError, "`key` must be a PRNG"),
        (lambda: C.check_key(np.zeros(3, np.uint32), "key"), ValueError, "`key` must be a PRNG"),
    ],
)  # fmt: skip
def test_bad_values_raise_naming_the_argument(call, exc, fragment):
    with pytest.raises(exc, match=fragment):
        call()


def test_check_array_converts_and_passes_good_values():
    a = C.check_array([1, 2], "x", kind="float", ndim=1)
    assert a.dtype == jnp.float32 and isinstance(a, jax.Array)
    assert C.check_scalar(np.float32(0.5), "p", 0.0, 1.0) == 0.5
    assert isinstance(C.check_scalar(3, "n"), float)
    C.check_descending(np.array([3.0, 2.0, 2.0]), "s", strict=False)
    np.testing.assert_array_equal(C.check_array(np.array([True]), "m", kind="bool"), [True])
    # under jit the value checks pass a tracer through; the dtype / rank checks still apply
    f = jax.jit(lambda x: C.check_array(x, "x", ndim=1) * 2)
    np.testing.assert_array_equal(f(jnp.array([jnp.nan, 1.0]))[1:], [2.0])
    with pytest.raises(TypeError, match="`x` must be an array of int or float"):
        jax.jit(lambda x: C.check_array(x, "x"))(jnp.array([True]))


@pytest.mark.parametrize(
    "call, exc, fragment",
    [
        (lambda: C.check_callable(3, "loss_fn"), TypeError, "`loss_fn` must be callable"),
        (lambda: C.check_instance("g", "game", dict), TypeError, "`game` must be a dict, got str"),
        (lambda: C.check_bool(1, "causal"), TypeError, "`causal` must be a bool, got int"),
        (lambda: C.check_ints(3, "widths"), TypeError, "`widths` must be a tuple of ints"),
        (lambda: C.check_ints((), "widths"), ValueError, "non-empty"),
        (lambda: C.check_ints((2, 0), "w", minimum=1), ValueError, "`w` must be >= 1"),
        (lambda: C.check_ints((2.5,), "w"), ValueError, "`w` must be an int"),
        (lambda: C.check_float_dtype(np.int32), TypeError, "`dtype` must be a float dtype"),
        (lambda: C.check_float_dtype("pixels"), TypeError, "`dtype` must be a float dtype"),
        (lambda: C.check_simplex(np.array([[0.5, 0.6]]), "P"), ValueError, "`P` must hold"),
        (lambda: C.check_simplex(np.array([[-0.5, 1.5]]), "P"), ValueError, "smallest entry -0.5"),
        (lambda: C.check_simplex(np.array([[np.nan, 1.0]]), "P"), ValueError, "`P` must hold"),
        (
            lambda: C.check_same_tree({"w": jnp.ones(3)}, "state", {"w": jnp.ones(4)}, "init"),
            ValueError,
            "`state['w']` must have shape (4,)",
        ),
        (
            lambda: C.check_same_tree({"v": 1.0}, "state", {"w": 1.0}, "init"),
            ValueError,
            "`state` must have the pytree structure of init",
        ),
    ],
)
def test_structural_checks(call, exc, fragment):
    with pytest.raises(exc) as info:
        call()
    assert fragment in str(info.value), str(info.value)


def test_structural_checks_pass_good_values():
    assert C.check_ints([1, np.int64(2)], "w") == (1, 2)
    assert C.check_bool(np.bool_(True), "b") is True
    assert C.check_float_dtype(None) is None and C.check_float_dtype(jnp.float32) == jnp.float32
    C.check_simplex(np.full((2, 3), 1 / 3), "P")
    C.check_same_tree({"w": jax.ShapeDtypeStruct((3,), jnp.float32)}, "s", {"w": jnp.ones(3)}, "r")


def test_check_abstract_call_names_the_argument_and_keeps_the_cause():
    out = C.check_abstract_call(lambda w, x: x @ w, (jnp.ones((3, 2)), jnp.ones((4, 3))), "`w`")
    assert out.shape == (4, 2)  # abstract: a ShapeDtypeStruct, nothing ran
    with pytest.raises(ValueError, match=r"^`w` do not fit \(TypeError: dot_general"):
        C.check_abstract_call(lambda w, x: x @ w, (jnp.ones((5, 2)), jnp.ones((4, 3))),
                              "`w` do not fit")  # fmt: skip

"""jaxlab.core.nn MLP / ConvNet: parameter trees, init schemes, dropout, closed forms, errors."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.nn import MLP, ConvNet, activation_fn, dense_init, torch_uniform


class HandWritten(nn.Module):
    """The Dense loop the six landed copies wrote by hand: ReLU hidden layers, linear output."""

    hidden: tuple
    out: int

    @nn.compact
    def __call__(self, x):
        for h in self.hidden:
            x = nn.relu(nn.Dense(h)(x))
        return nn.Dense(self.out)(x)


class Wrapper(nn.Module):
    """A wrapper keeping the MLP's layers at its own level via share_scope."""

    def setup(self):
        self.mlp = MLP((5, 1), init_scheme="torch")
        nn.share_scope(self, self.mlp)

    def __call__(self, v):
        return jnp.abs(self.mlp(v[..., None])[..., 0])


def test_mlp_matches_hand_written_loop_params_and_outputs(key):
    x = jax.random.normal(key, (4, 3))
    ref, mlp = HandWritten((8, 6), 2), MLP((8, 6, 2))
    p_ref, p = ref.init(key, x), mlp.init(key, x)
    assert jax.tree_util.tree_structure(p) == jax.tree_util.tree_structure(p_ref)
    jax.tree_util.tree_map(np.testing.assert_array_equal, p, p_ref)
    np.testing.assert_array_equal(mlp.apply(p, x), ref.apply(p_ref, x))


def test_mlp_closed_form_forward(key):
    x = jax.random.normal(key, (5, 3))
    mlp = MLP((4, 2), activation="tanh", output_activation="sigmoid")
    p = mlp.init(key, x)["params"]
    q = jax.tree_util.tree_map(np.asarray, p)
    h = np.tanh(np.asarray(x) @ q["Dense_0"]["kernel"] + q["Dense_0"]["bias"])
    want = 1 / (1 + np.exp(-(h @ q["Dense_1"]["kernel"] + q["Dense_1"]["bias"])))
    np.testing.assert_allclose(mlp.apply({"params": p}, x), want, rtol=1e-5, atol=1e-6)


def test_torch_init_bounds_and_share_scope(key):
    mlp = MLP((64, 3), init_scheme="torch")
    p = mlp.init(key, jnp.zeros((1, 16)))["params"]
    for name, fan_in in (("Dense_0", 16), ("Dense_1", 64)):
        bound = 1 / np.sqrt(fan_in)
        for leaf in (p[name]["kernel"], p[name]["bias"]):
            assert np.abs(leaf).max() <= bound
            assert np.abs(leaf).max() > 0.8 * bound  # uniform, not shrunk
        assert np.any(np.asarray(p[name]["bias"]) != 0)  # torch init: biases are not zero
    wp = Wrapper().init(key, jnp.zeros((2,)))["params"]
    assert set(wp) == {"Dense_0", "Dense_1"}  # no "mlp" level in the path


@pytest.mark.parametrize("scheme", ["lecun", "xavier_uniform", "orthogonal"])
def test_other_init_schemes_zero_bias(scheme, key):
    p = MLP((32, 32), init_scheme=scheme).init(key, jnp.zeros((1, 32)))["params"]
    assert np.all(np.asarray(p["Dense_0"]["bias"]) == 0)
    if scheme == "orthogonal":
        w = np.asarray(p["Dense_0"]["kernel"])
        np.testing.assert_allclose(w.T @ w, np.eye(32), atol=1e-5)


def test_dropout_active_only_when_not_deterministic(key):
    mlp = MLP((256, 256, 1), dropout=0.5)
    x = jnp.ones((3, 4))
    p = mlp.init(key, x)
    np.testing.assert_array_equal(mlp.apply(p, x), mlp.apply(p, x))
    a = mlp.apply(p, x, deterministic=False, rngs={"dropout": jax.random.key(1)})
    b = mlp.apply(p, x, deterministic=False, rngs={"dropout": jax.random.key(2)})
    assert not np.allclose(a, b)
    assert "Dropout_0" not in jax.tree_util.keystr(p)  # dropout has no parameters


def test_leaky_relu_slope():
    f = activation_fn("leaky_relu", negative_slope=0.8)
    np.testing.assert_allclose(f(jnp.array([-1.0, 2.0])), [-0.8, 2.0])


def test_convnet_shapes_and_pooling(key):
    x = jnp.ones((2, 8, 8, 1))
    net = ConvNet(channels=(4, 8), head=(16, 10))
    p = net.init(key, x)
    assert net.apply(p, x).shape == (2, 10)
    feats = ConvNet(channels=(4, 8), global_pool=False).apply(
        ConvNet(channels=(4, 8), global_pool=False).init(key, x), x
    )
    assert feats.shape == (2, 4 * 4 * 8)  # one 2x2 pool after block 1


def test_convnet_constant_image_closed_form(key):
    # A constant image c through one 3x3 SAME conv + ReLU + global mean: pixel (i, j) sees the
    # kernel taps that fall inside the image, so the output is a closed form in the kernel.
    net = ConvNet(channels=(3,), pool=())
    c, size = 0.5, 5
    x = jnp.full((1, size, size, 2), c)
    p = net.init(key, x)
    k = np.asarray(p["params"]["Conv_0"]["kernel"])  # [3, 3, 2, 3]
    b = np.asarray(p["params"]["Conv_0"]["bias"])
    out = np.zeros(3)
    for i in range(size):
        for j in range(size):
            taps = np.zeros(3)
            for di in (-1, 0, 1):
                for dj in (-1, 0, 1):
                    if 0 <= i + di < size and 0 <= j + dj < size:
                        taps += c * k[di + 1, dj + 1].sum(0)
            out += np.maximum(taps + b, 0)
    np.testing.assert_allclose(net.apply(p, x)[0], out / size**2, rtol=1e-5, atol=1e-6)


def test_bad_arguments_name_the_field(key):
    with pytest.raises(ValueError, match="features"):
        MLP(()).init(key, jnp.zeros((1, 2)))
    with pytest.raises(ValueError, match="init_scheme"):
        MLP((2,), init_scheme="kaiming").init(key, jnp.zeros((1, 2)))
    with pytest.raises(ValueError, match="activation"):
        MLP((2, 2), activation="swishy").init(key, jnp.zeros((1, 2)))
    with pytest.raises(ValueError, match="dropout"):
        MLP((2, 2), dropout=1.0).init(key, jnp.zeros((1, 2)))
    with pytest.raises(ValueError, match="x"):
        ConvNet().init(key, jnp.zeros((8, 8, 1)))
    with pytest.raises(ValueError, match="init_scheme"):
        dense_init("bad", 3)


def test_torch_uniform_range(key):
    w = torch_uniform(4)(key, (1000,))
    assert float(jnp.min(w)) >= -0.5 and float(jnp.max(w)) <= 0.5
    assert abs(float(jnp.mean(w))) < 0.05


def test_torch_uniform_default_dtype_follows_x64(key):
    # a module's own self.param(name, init, shape) passes no dtype: the values must then have the
    # default float type, so a float64 model stays float64 (was float32 always)
    assert torch_uniform(4)(key, (3,)).dtype == jnp.float32
    assert torch_uniform(4)(key, (3,), jnp.float16).dtype == jnp.float16
    with jax.enable_x64(True):
        assert torch_uniform(4)(key, (3,)).dtype == jnp.float64


def test_mlp_layer_norm_normalises_each_hidden_layer_before_the_activation():
    x = jax.random.normal(jax.random.key(0), (5, 3)) * 10 + 4
    mlp = MLP((6, 2), activation=None, layer_norm=True)
    p = mlp.init(jax.random.key(1), x)
    assert set(p["params"]) == {"Dense_0", "LayerNorm_0", "Dense_1"}
    h = nn.Dense(6).apply({"params": p["params"]["Dense_0"]}, x)
    h = (h - h.mean(-1, keepdims=True)) / jnp.sqrt(h.var(-1, keepdims=True) + 1e-6)
    want = nn.Dense(2).apply({"params": p["params"]["Dense_1"]}, h)
    np.testing.assert_allclose(mlp.apply(p, x), want, rtol=1e-4, atol=1e-5)

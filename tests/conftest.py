"""Test-session setup: 4 forced host devices (before JAX starts), fast compiles, strict numerics.

Four fake CPU devices check sharded == unsharded and output shardings; they say nothing about
speed. Rank promotion raises (``[B] + [B, 1]`` is a bug, not a broadcast); a test that needs a
library's implicit rank promotion can wrap the call in ``jax.numpy_rank_promotion("allow")``.
Dtype promotion stays "standard": optax's own updates mix Python floats with int32 step counts,
which "strict" rejects. x64 stays off, so float64 cannot creep in.
"""

import os

_FLAG = "--xla_force_host_platform_device_count"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FLAG}=4".strip()
# The suite is compile-bound (hundreds of small jitted programs, each run a few times): LLVM at
# -O0 compiles them about 40% faster on XLA:CPU, and the tests check values, not speed.
_OPT = "--xla_backend_optimization_level"
if _OPT not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += f" {_OPT}=0"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")

N_DEVICES = 4


@pytest.fixture(scope="session")
def mesh():
    from jaxlab.core.sharding import data_mesh

    assert jax.device_count() == N_DEVICES, "XLA_FLAGS was set too late: JAX started first"
    return data_mesh()


@pytest.fixture
def key(request):
    """A PRNG key that differs per test (derived from the test's name), fixed across runs."""
    import zlib

    return jax.random.key(zlib.crc32(request.node.nodeid.encode()))

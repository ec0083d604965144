"""Shared by FedGWC's test modules: one network, one federation and one compiled setup.

Every FedGWC state test of ``test_fedgwc.py`` and ``test_fedgwc_baselines.py`` runs on
:func:`gwc` (the same ``apply_fn``, shapes and config), so the factory's jitted round and chunk
of rounds compile once for all of them.

:func:`tests.helpers.assert_compiles_once` needs the ``jax.jit`` object itself; the factories of
:mod:`jaxlab.federated.fedgwc` call module-level jits that they keep private, so their trace-once
checks count trace events by function name instead (:func:`tests.helpers.count_compilations`).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxlab.core.nn import MLP
from jaxlab.federated import fedgwc as F

NET = MLP((7, 3))  # d = 5 -> 7 -> 3, ReLU; one instance: its bound `apply` is a static argument
CFG = F.LocalConfig(steps=3, batch_size=4, lr=0.1)
K = 20  # clients in every problem: one shape, one compile per program
GWC = F.FedGWCConfig(participation=0.2, local=CFG, eps=1.0, max_clusters=4)  # m = 4


def problem(key, n=8, d=5):
    """``(params, data)``: ``K`` clients with 4..``n`` samples of ``d`` features, 3 classes and
    input noise SDs ``0 .. 1``."""
    kx, ky, kc, kp = jax.random.split(key, 4)
    data = F.ClientData(
        x=jax.random.normal(kx, (K, n, d)),
        y=jax.random.randint(ky, (K, n), 0, 3),
        count=jax.random.randint(kc, (K,), 4, n + 1),
        noise=jnp.linspace(0.0, 1.0, K),
    )
    return NET.init(kp, jnp.zeros((1, d))), data.check(CFG.batch_size)


@functools.cache
def gwc():
    """``(params, data, fed)``: the FedGWC problem the state tests share (fixed data, ``GWC``)."""
    params, data = problem(jax.random.key(20))
    return params, data, F.make_fedgwc(GWC, NET.apply, data)

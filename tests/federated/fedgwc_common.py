"""Shared by FedGWC's test modules: one network, one federation and one compiled setup, and a
trace counter.

Every FedGWC state test of ``test_fedgwc.py`` and ``test_fedgwc_baselines.py`` runs on
:func:`gwc` (the same ``apply_fn``, shapes and config), so the factory's jitted round and chunk
of rounds compile once for all of them.

:func:`tests.helpers.assert_compiles_once` needs the ``jax.jit`` object itself; the factories of
:mod:`jaxlab.federated.fedgwc` call module-level jits that they keep private, so their trace-once
checks count trace events by function name instead (:func:`count_traces`, ``jax.monitoring``).
"""

from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp

from jaxlab.core.nn import MLP
from jaxlab.federated import fedgwc as F

NET = MLP((7, 3))  # d = 5 -> 7 -> 3, ReLU; one instance: its bound `apply` is a static argument
CFG = F.LocalConfig(steps=3, batch_size=4, lr=0.1)
K = 20  # clients in every problem: one shape, one compile per program
GWC = F.FedGWCConfig(participation=0.2, local=CFG, eps=1.0, max_clusters=4)  # m = 4

_TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"


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


@contextlib.contextmanager
def count_traces(fun_name: str):
    """Yield a list that collects one entry per trace of a jitted function named ``fun_name``
    inside the block (e.g. ``"run_rounds"`` for ``jax.jit(run_rounds)``).

    On entry a fresh probe function is jitted and its trace must be seen, so an empty list means
    "no trace", not "the counter saw nothing" (e.g. after a renamed ``jax.monitoring`` event).
    """
    seen: list[str] = []
    probes: list[str] = []

    def _count_traces_probe(x):
        return x + 1

    def listen(event, duration, **kwargs):
        if event == _TRACE_EVENT:
            name = kwargs.get("fun_name")
            if name == fun_name:
                seen.append(name)
            elif name == _count_traces_probe.__name__:
                probes.append(name)

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        jax.jit(_count_traces_probe)(0)  # a new function: always traced
        assert probes, "count_traces: jax.monitoring reported no trace; the counter is broken"
        yield seen
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)

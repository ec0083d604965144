"""FedGWC and its baselines as factories of pure functions over one network and one federation.

:func:`make_fedgwc` and :func:`make_ifca` close over the configuration, the model's ``apply_fn``
and the clients' :class:`~.rounds.ClientData`, so a caller never passes those (or their
``static_argnums``) again. The returned functions are already jitted where that pays (the round
loops, the client updates, Local training); each calls one module-level ``jax.jit`` of the
underlying module function with the client data as a traced argument (not a constant baked into
the program), so every factory built on equal configs and the same ``apply_fn`` shares one
compilation cache.

Use one Flax module instance per architecture (``apply_fn = net.apply``): bound methods of two
distinct instances, even equal ones, hash unequal, which would compile every chunk again.

The PRNG key lives in the state: round ``t`` uses ``fold_in(state.key, t)`` in ``step`` and in
``run_rounds``, so a run split into chunks draws the same numbers as one long run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from jaxlab.core import sharding
from jaxlab.core.checks import check_int, check_key
from jaxlab.federated.fedgwc._checks import callable_, index, instance, leading, real_tree
from jaxlab.federated.fedgwc.baselines import (
    IFCAState,
    cfl_split,
    client_deltas,
    fixed_clusters,
    ifca_assign,
    ifca_round,
    ifca_run,
    local_only,
)
from jaxlab.federated.fedgwc.fedgwc import (
    FedGWCConfig,
    FedGWCState,
    _check_state,
    init,
    round_step,
    run_rounds,
    triggered,
    try_split,
)
from jaxlab.federated.fedgwc.rounds import ClientData, _check_model_fit

__all__ = ["IFCA", "FedGWC", "make_fedgwc", "make_ifca"]

# One jit per module function (shared by every factory): statics by name, data traced.
_RUN_ROUNDS = jax.jit(
    run_rounds, static_argnames=("max_rounds", "apply_fn", "config", "mesh", "slots")
)
_ROUND_STEP = jax.jit(round_step, static_argnames=("apply_fn", "config", "mesh", "slots"))
_CLIENT_DELTAS = jax.jit(client_deltas, static_argnames=("apply_fn", "local", "mesh"))
_LOCAL_ONLY = jax.jit(local_only, static_argnames=("apply_fn", "steps", "local", "mesh"))
_IFCA_RUN = jax.jit(ifca_run, static_argnames=("rounds", "apply_fn", "m", "local", "mesh"))
_IFCA_ROUND = jax.jit(ifca_round, static_argnames=("apply_fn", "m", "local", "mesh"))
_IFCA_ASSIGN = jax.jit(ifca_assign, static_argnames=("apply_fn",))


def _key_of(state) -> jax.Array:
    if state.key is None:
        raise ValueError(
            "`state` has no key: build it with the factory's `init` (or `fixed_clusters`), or "
            "use the module-level functions, which take the key as an argument."
        )
    return state.key


def _check_inputs(config, apply_fn, data, mesh: Mesh | None) -> tuple[int, int]:
    """Boundary checks of a factory's arguments; returns ``(K, m)``."""
    if not isinstance(config, FedGWCConfig):
        raise ValueError(f"`config` must be a FedGWCConfig, got {type(config).__name__}.")
    if not isinstance(data, ClientData):
        raise ValueError(f"`data` must be a ClientData, got {type(data).__name__}.")
    callable_(apply_fn, "apply_fn")
    if mesh is not None:
        instance(mesh, "mesh", Mesh)
    data.check(config.local.batch_size)
    k = int(data.count.shape[0])
    m = config.clients_per_round(k)
    if mesh is not None:
        sharding.check_divisible(m, mesh, "clients_per_round")
    return k, m


class _ParamsFit:
    """:func:`~.rounds._check_model_fit` on one model of stacked ``[C, ...]`` parameters, once
    per distinct structure and leaf shapes (a factory's ``step`` pays for it on its first call)."""

    def __init__(self, apply_fn, data: ClientData):
        self.apply_fn, self.data, self.seen = apply_fn, data, set()

    def __call__(self, stacked, name: str) -> None:
        leaves, treedef = jax.tree_util.tree_flatten(stacked)
        signature = (treedef, tuple((np.shape(a), str(getattr(a, "dtype", ""))) for a in leaves))
        if signature in self.seen:
            return
        head = jax.tree_util.tree_map(
            lambda a: jax.ShapeDtypeStruct(np.shape(a)[1:], a.dtype), stacked
        )
        _check_model_fit(self.apply_fn, head, self.data, f"{name} (each model)", finite=False)
        self.seen.add(signature)


class FedGWC(NamedTuple):
    """FedGWC's pure functions over one network and one federation (see :func:`make_fedgwc`).

    FedAvg, Oracle and CFL run on the same state and round (``fixed_clusters``), Local on the
    same local training (``local_only``).

    Attributes:
      init: ``init(key, params) -> FedGWCState``: one cluster of all ``K`` clients with model
        ``params``; ``key`` drives the rounds.
      fixed_clusters: ``fixed_clusters(key, params, labels [K]) -> FedGWCState``: clusters that
        never split (FedAvg: all zeros; Oracle: the true groups; the start of CFL).
      step: ``step(state, x=None) -> (state, {"loss": [], "finite": []})``: one round over
        every cluster slot (:func:`~.fedgwc.round_step`); ``loss`` is the mean local loss,
        ``finite`` False when the round diverged (NaN / inf loss or interaction matrix: do not
        read ``loss`` as a result).
      run_rounds: ``run_rounds(state, max_rounds, *, slots=None, until=None) -> (state,
        losses [max_rounds])``: up to ``max_rounds`` rounds in one jitted ``lax.scan`` that
        stops at a clustering trigger (:func:`~.fedgwc.run_rounds`; ``slots`` and
        ``max_rounds`` static, ``until`` traced: one compiled chunk serves any budget).
      triggered: ``triggered(state) -> [C_max]`` bool: clusters due for a clustering attempt.
      try_split: ``try_split(state) -> (state, records)``: the host's clustering step.
      client_deltas: ``client_deltas(state, key) -> [K, P]``: every client's local update from
        its own cluster's model (CFL's criterion).
      cfl_split: ``cfl_split(state, splits) -> (state, sizes)``: apply CFL's bipartitions.
      local_only: ``local_only(params, key, steps) -> [K, ...]``: every client alone for
        ``steps`` SGD steps (Local; ``steps`` static).
      config: the :class:`~.fedgwc.FedGWCConfig`.
      num_clients: ``K``.
      clients_per_round: ``m`` (per cluster per round).
    """

    init: Callable[[jax.Array, Any], FedGWCState]
    fixed_clusters: Callable[[jax.Array, Any, Any], FedGWCState]
    step: Callable[[FedGWCState, Any], tuple[FedGWCState, dict]]
    run_rounds: Callable[..., tuple[FedGWCState, jax.Array]]
    triggered: Callable[[FedGWCState], jax.Array]
    try_split: Callable[[FedGWCState], tuple[FedGWCState, list[dict]]]
    client_deltas: Callable[[FedGWCState, jax.Array], jax.Array]
    cfl_split: Callable[[FedGWCState, list], tuple[FedGWCState, list[list[int]]]]
    local_only: Callable[[Any, jax.Array, int], Any]
    config: FedGWCConfig
    num_clients: int
    clients_per_round: int


def make_fedgwc(
    config: FedGWCConfig, apply_fn: Callable, data: ClientData, mesh: Mesh | None = None
) -> FedGWC:
    """FedGWC (and FedAvg / Oracle / CFL / Local) on ``data`` with the model ``apply_fn``.

    Args:
      config: FedGWC's settings (``participation`` gives ``m``, ``local`` the local training).
      apply_fn: ``apply_fn(params, x [B, d]) -> logits [B, classes]``, e.g. ``net.apply`` of one
        :class:`jaxlab.core.nn.MLP` instance (hashable: it is a static argument).
      data: every client's training data (checked: ``batch_size <= count <= n_max``).
      mesh: optional 1-D ``"data"`` mesh: the ``m`` client slots of a round (and the ``K``
        clients of ``client_deltas`` / ``local_only``) are sharded across it; ``m`` must be a
        multiple of the device count. ``None`` runs on one device with the same code.

    Returns:
      A :class:`FedGWC` of pure functions.
    """
    k, m = _check_inputs(config, apply_fn, data, mesh)
    statics = dict(apply_fn=apply_fn, config=config, mesh=mesh)

    fits = _ParamsFit(apply_fn, data)

    def check(state: FedGWCState, with_key: bool = True) -> jax.Array | None:
        """The state's shapes (built for these ``K`` clients and slots), that its models fit the
        network and the data, and its key."""
        _check_state(state, k, config)
        fits(state.params, "state.params")
        return check_key(_key_of(state), "state.key") if with_key else None

    def init_(key: jax.Array, params) -> FedGWCState:
        key = check_key(key)
        _check_model_fit(apply_fn, params, data)
        return init(params, k, config, key=key)

    def fixed_clusters_(key: jax.Array, params, labels) -> FedGWCState:
        key = check_key(key)
        _check_model_fit(apply_fn, params, data)
        if np.shape(labels) != (k,):
            raise ValueError(f"`labels` must have shape ({k},) (one per client), got "
                             f"{np.shape(labels)}.")  # fmt: skip
        return fixed_clusters(params, labels, config).replace(key=key)

    def step(state: FedGWCState, x=None) -> tuple[FedGWCState, dict]:
        key = check(state)
        if x is not None:
            raise ValueError("`x` must be None: the client data live in the factory.")
        round_key = jax.random.fold_in(key, state.rounds)
        new, loss = _ROUND_STEP(state.replace(key=None), round_key, data=data, **statics)
        # a diverged round (NaN / inf loss or interaction matrix) is flagged, never silent
        finite = jnp.isfinite(loss) & jnp.all(jnp.isfinite(new.r))
        return new.replace(key=key), {"loss": loss, "finite": finite}

    def run_rounds_(state: FedGWCState, max_rounds: int, *, slots: int | None = None,
                    until: jax.Array | int | None = None):  # fmt: skip
        key = check(state)
        check_int(max_rounds, "max_rounds", minimum=1)
        if slots is not None:
            check_int(slots, "slots", minimum=1, maximum=config.max_clusters)
        if until is not None:
            if isinstance(until, bool):
                raise TypeError(f"`until` must be an int round count, got the bool {until!r}.")
            index(until, "until", 0)
            until = jnp.asarray(until, jnp.int32)  # traced: one compile for every budget
        # the module-level function takes the key as an argument; the state travels without it
        new, losses = _RUN_ROUNDS(state.replace(key=None), key, max_rounds=max_rounds,
                                  data=data, slots=slots, until=until, **statics)  # fmt: skip
        return new.replace(key=key), losses

    def try_split_(state: FedGWCState):
        _check_state(state, k, config)
        return try_split(state, config)

    def client_deltas_(state: FedGWCState, key: jax.Array) -> jax.Array:
        check(state, with_key=False)
        key = check_key(key)
        return _CLIENT_DELTAS(apply_fn=apply_fn, state=state.replace(key=None), data=data,
                              key=key, local=config.local, mesh=mesh)  # fmt: skip

    def cfl_split_(state: FedGWCState, splits):
        _check_state(state, k, config)
        return cfl_split(state, splits, config)

    def local_only_(params, key: jax.Array, steps: int):
        key = check_key(key)
        _check_model_fit(apply_fn, params, data)
        check_int(steps, "steps", minimum=1)
        return _LOCAL_ONLY(apply_fn=apply_fn, params=params, data=data, key=key, steps=steps,
                           local=config.local, mesh=mesh)  # fmt: skip

    return FedGWC(init_, fixed_clusters_, step, run_rounds_, triggered, try_split_,
                  client_deltas_, cfl_split_, local_only_, config, k, m)  # fmt: skip


class IFCA(NamedTuple):
    """IFCA's pure functions over one network and one federation (see :func:`make_ifca`).

    Attributes:
      init: ``init(key, params) -> IFCAState``: ``params`` the ``k`` models stacked on a leading
        axis (:func:`~.baselines.random_inits`); ``key`` drives the rounds.
      step: ``step(state, x=None) -> (state, {"choice": [m], "finite": []})``: one round (each
        sampled client's chosen model; ``finite`` False when some model became NaN / inf).
      run_rounds: ``run_rounds(state, rounds) -> state``: ``rounds`` rounds in one jitted
        ``lax.scan`` (``rounds`` static).
      assign: ``assign(state, key) -> [K]``: each client's model, the argmin of its training
        loss.
      config: the :class:`~.fedgwc.FedGWCConfig` (IFCA reads ``participation`` and ``local``).
      num_clients: ``K``.
      clients_per_round: ``m``.
    """

    init: Callable[[jax.Array, Any], IFCAState]
    step: Callable[[IFCAState, Any], tuple[IFCAState, dict]]
    run_rounds: Callable[[IFCAState, int], IFCAState]
    assign: Callable[[IFCAState, jax.Array], jax.Array]
    config: FedGWCConfig
    num_clients: int
    clients_per_round: int


def make_ifca(
    config: FedGWCConfig, apply_fn: Callable, data: ClientData, mesh: Mesh | None = None
) -> IFCA:
    """IFCA (Ghosh et al. 2020) on ``data`` with the model ``apply_fn``: ``m =
    config.clients_per_round(K)`` clients per round, ``config.local`` local training.

    Arguments as in :func:`make_fedgwc` (``mesh`` shards the ``m`` client slots of a round).
    """
    k, m = _check_inputs(config, apply_fn, data, mesh)
    statics = dict(apply_fn=apply_fn, m=m, local=config.local, mesh=mesh)

    fits = _ParamsFit(apply_fn, data)

    def check(state: IFCAState, with_key: bool = True):
        instance(state, "state", IFCAState)
        leaves = jax.tree_util.tree_leaves(state.params)
        n_models = np.shape(leaves[0])[0] if leaves and np.ndim(leaves[0]) else -1
        leading(state.params, "state.params", n_models, "model")
        fits(state.params, "state.params")
        return check_key(_key_of(state), "state.key") if with_key else None

    def init_(key: jax.Array, params) -> IFCAState:
        key = check_key(key)
        real_tree(params, "params")
        leaves = jax.tree_util.tree_leaves(params)
        n_models = np.shape(leaves[0])[0] if np.ndim(leaves[0]) else -1
        leading(params, "params", n_models, "model: the k models stacked, see `random_inits`")
        one = jax.tree_util.tree_map(lambda a: a[0], params)
        _check_model_fit(apply_fn, one, data, "params (one of the stacked models)")
        zero = jnp.zeros((), jnp.int32)
        return IFCAState(params, zero, zero, key)

    def step(state: IFCAState, x=None) -> tuple[IFCAState, dict]:
        key = check(state)
        if x is not None:
            raise ValueError("`x` must be None: the client data live in the factory.")
        round_key = jax.random.fold_in(key, state.rounds)
        new, choice = _IFCA_ROUND(state.replace(key=None), round_key, data=data, **statics)
        finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(a))
                                    for a in jax.tree_util.tree_leaves(new.params)]))  # fmt: skip
        return new.replace(key=key), {"choice": choice, "finite": finite}

    def run_rounds_(state: IFCAState, rounds: int) -> IFCAState:
        key = check(state)
        check_int(rounds, "rounds", minimum=1)
        new = _IFCA_RUN(state.replace(key=None), key, rounds=rounds, data=data, **statics)
        return new.replace(key=key)

    def assign(state: IFCAState, key: jax.Array) -> jax.Array:
        check(state, with_key=False)
        key = check_key(key)
        return _IFCA_ASSIGN(apply_fn=apply_fn, params=state.params, data=data, key=key)

    return IFCA(init_, step, run_rounds_, assign, config, k, m)

"""FedGWC with static shapes: every cluster trains in the same jitted round, and the rare split
runs on the host (spec sections 2.1-2.5 and 7).

State (:class:`FedGWCState`): a cluster-slot label per client (``[K]``), parameters stacked over
``C_max`` cluster slots, an ``active`` mask, per-slot convergence statistics, patience targets and
splittability, and one global ``K x K`` interaction matrix. A child cluster inherits its parent's
sub-block unchanged, so one global matrix serves every cluster: a round only writes the sampled
``S x S`` block of each cluster, and cross-cluster entries go stale and are never read.

One round (:func:`round_step`, ``vmap`` over the ``C_max`` slots, inactive ones masked): each
active cluster samples ``min(m, K_c)`` of its members, runs :func:`~.rounds.federated_round`, and
if splittable (``K_c > m``) computes the Gaussian rewards, updates its block of ``R`` with ``alpha =
m / K_c`` and its convergence statistics. :func:`run_rounds` runs up to ``max_rounds`` rounds in a
``lax.scan`` that skips the remaining rounds after the first round where some splittable
cluster's patience reaches its target, so the host's clustering happens at exactly the official
round.
:func:`try_split` is that host step: affinity of the cluster's block, the official model selection,
and on a split the children take the parent's slot and free slots, copying its parameters
(warm start), with ``mse = 1``, patience 0 and target ``round(K_child / m)``; without a split (or
without free slots) the wait restarts (``mse = 1``).

These module functions take the model, the data, the config and the key as arguments;
:func:`~.factory.make_fedgwc` closes over the first three and keeps the key in the state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import Mesh

from jaxlab.core.checks import check_array, check_int, check_key, check_scalar, is_concrete
from jaxlab.federated.fedgwc._checks import index, instance, leading, real_tree
from jaxlab.federated.fedgwc.clustering import affinity, select_split
from jaxlab.federated.fedgwc.interaction import (
    ConvergenceState,
    convergence_step,
    gaussian_rewards,
    update_interaction,
)
from jaxlab.federated.fedgwc.rounds import (
    ClientData,
    LocalConfig,
    _check_model_fit,
    federated_round,
    sample_clients,
)

__all__ = [
    "FedGWCConfig",
    "FedGWCState",
    "active_slots",
    "init",
    "round_step",
    "run_rounds",
    "split_cluster",
    "triggered",
    "try_split",
]


@dataclasses.dataclass(frozen=True)
class FedGWCConfig:
    """FedGWC's settings (official defaults; ``max_clusters`` is the static slot count ``C_max``).

    The baselines read what they share with FedGWC: IFCA ``participation`` and ``local``; FedAvg,
    Oracle and CFL run on the FedGWC state (``max_clusters`` slots); Local reads ``local``.

    Attributes:
      participation: fraction of all clients sampled per cluster per round, in ``(0, 1]``;
        ``m = max(1, round(participation K))`` (:meth:`clients_per_round`).
      local: local training (:class:`~.rounds.LocalConfig`).
      gamma: affinity bandwidth (> 0).
      eps: convergence threshold on the running mse (> 0).
      max_clusters: cluster slots ``C_max`` (>= 1).
      max_candidates: cap on ``n_max`` in model selection (>= 3: candidate splits are
        ``2 .. n_max - 1`` clusters).
      seed: seed of the spectral embedding / clustering (>= 0).
    """

    participation: float = 0.1
    local: LocalConfig = LocalConfig()
    gamma: float = 0.1
    eps: float = 1e-5
    max_clusters: int = 8
    max_candidates: int = 5
    seed: int = 0

    def __post_init__(self):
        check_scalar(self.participation, "participation", 0.0, 1.0, low_open=True)
        if not isinstance(self.local, LocalConfig):
            raise ValueError(f"`local` must be a LocalConfig, got {type(self.local).__name__}.")
        check_scalar(self.gamma, "gamma", 0.0, low_open=True)
        check_scalar(self.eps, "eps", 0.0, low_open=True)
        check_int(self.max_clusters, "max_clusters", minimum=1)
        check_int(self.max_candidates, "max_candidates", minimum=3)
        check_int(self.seed, "seed", minimum=0)

    def clients_per_round(self, num_clients: int) -> int:
        """``m = max(1, round(participation * num_clients))``."""
        num_clients = check_int(num_clients, "num_clients", minimum=1)
        return max(1, round(self.participation * num_clients))


@struct.dataclass
class FedGWCState:
    """The multi-cluster state (``K`` clients, ``C_max = max_clusters`` slots; a pytree).

    Attributes:
      params: model parameters, every leaf ``[C_max, ...]`` (one model per cluster slot;
        inactive slots hold stale copies).
      labels: ``[K]`` int32, each client's cluster slot.
      active: ``[C_max]`` bool, slots in use (always a prefix, see :func:`active_slots`).
      splittable: ``[C_max]`` bool, clusters that compute the interaction signal (``K_c > m``).
      target: ``[C_max]`` int32, the patience at which clustering is tried (``round(K_c / m)``).
      conv: :class:`~.interaction.ConvergenceState` with ``mse [C_max]`` float32 and
        ``patience [C_max]`` int32.
      r: ``[K, K]`` float32, the interaction matrix (cross-cluster entries are never read).
      rounds: ``[]`` int32, rounds run.
      client_updates: ``[]`` int32, local trainings run (over all clusters).
      key: ``[]`` typed PRNG key of the rounds (round ``t`` uses ``fold_in(key, t)``), set by
        :func:`~.factory.make_fedgwc`'s ``init``; ``None`` from the module-level :func:`init`,
        whose :func:`run_rounds` takes the key as an argument.
    """

    params: object
    labels: jax.Array
    active: jax.Array
    splittable: jax.Array
    target: jax.Array
    conv: ConvergenceState
    r: jax.Array
    rounds: jax.Array
    client_updates: jax.Array
    key: jax.Array | None = None


def _check_config(config) -> FedGWCConfig:
    if not isinstance(config, FedGWCConfig):
        raise TypeError(f"`config` must be a FedGWCConfig, got {type(config).__name__}.")
    return config


def _check_state(state, num_clients: int | None = None, config: FedGWCConfig | None = None,
                name: str = "state") -> tuple[int, int]:  # fmt: skip
    """Raise unless ``state`` is a :class:`FedGWCState` of consistent shapes (for ``num_clients``
    clients and ``config.max_clusters`` slots when given); returns ``(K, C_max)``. Shapes and
    dtypes are static; the labels' range is checked where concrete."""
    instance(state, name, FedGWCState)
    check_array(state.labels, f"{name}.labels", ndim=1, kind="int", finite=False)
    check_array(state.active, f"{name}.active", ndim=1, kind="bool")
    k, c = int(np.shape(state.labels)[0]), int(np.shape(state.active)[0])
    if num_clients is not None and k != num_clients:
        raise ValueError(f"`{name}` was built for {k} clients, but the data have {num_clients} "
                         f"(`{name}.labels` has shape {np.shape(state.labels)}).")  # fmt: skip
    if config is not None and c != config.max_clusters:
        raise ValueError(f"`{name}` has {c} cluster slots, but `config.max_clusters` is "
                         f"{config.max_clusters}.")  # fmt: skip
    for field, kind in (("splittable", "bool"), ("target", "int")):
        check_array(getattr(state, field), f"{name}.{field}", shape=(c,), kind=kind, finite=False)
    instance(state.conv, f"{name}.conv", ConvergenceState)
    check_array(state.conv.mse, f"{name}.conv.mse", shape=(c,), finite=False)
    check_array(state.conv.patience, f"{name}.conv.patience", shape=(c,), kind="int")
    check_array(state.r, f"{name}.r", shape=(k, k), dims="[K, K]", finite=False)
    check_array(state.rounds, f"{name}.rounds", shape=(), kind="int")
    check_array(state.client_updates, f"{name}.client_updates", shape=(), kind="int")
    leading(state.params, f"{name}.params", c, "cluster slots")
    index(state.labels, f"{name}.labels", 0, c)
    return k, c


def init(
    params, num_clients: int, config: FedGWCConfig, key: jax.Array | None = None
) -> FedGWCState:
    """One active cluster of all ``num_clients`` clients with model ``params``; ``R = 1 / K^2``.

    ``key`` is stored in the state (``None``: none; the module-level :func:`run_rounds` takes it
    as an argument instead)."""
    config = _check_config(config)
    real_tree(params, "params")
    if key is not None:
        key = check_key(key)
    c, k = config.max_clusters, check_int(num_clients, "num_clients", minimum=1)
    m = config.clients_per_round(k)
    stacked = jax.tree_util.tree_map(lambda a: jnp.broadcast_to(a, (c,) + a.shape), params)
    active = jnp.arange(c) == 0
    return FedGWCState(
        params=stacked,
        labels=jnp.zeros((k,), jnp.int32),
        active=active,
        splittable=active & (k > m),
        target=jnp.where(active, round(k / m), 0).astype(jnp.int32),
        conv=ConvergenceState.init((c,)),
        r=jnp.full((k, k), 1.0 / k**2, jnp.result_type(float)),  # not weak: one compile
        rounds=jnp.zeros((), jnp.int32),
        client_updates=jnp.zeros((), jnp.int32),
        key=key,
    )


def active_slots(state: FedGWCState) -> int:
    """The number of active clusters (host). Splits fill the lowest free slots, so the active
    slots are a prefix and this is the ``slots`` argument of :func:`round_step` that computes
    exactly the clusters that exist."""
    _check_state(state)
    active = jax.device_get(state.active)
    n = int(active.sum())
    if not active[:n].all():
        raise ValueError(f"`state.active`: active cluster slots must be a prefix, got "
                         f"{active.tolist()}.")  # fmt: skip
    return n


def round_step(
    state: FedGWCState,
    key: jax.Array,
    apply_fn: Callable,
    data: ClientData,
    config: FedGWCConfig,
    mesh: Mesh | None = None,
    slots: int | None = None,
) -> tuple[FedGWCState, jax.Array]:
    """One FedGWC round over every active cluster (module docstring); returns ``(state, mean
    local loss over the real slots)``.

    ``slots`` (static, default ``C_max``) computes only the leading ``slots`` cluster slots. Splits
    fill the lowest free slots, so the active slots are always a prefix and ``slots = number of
    active clusters`` gives the same result at a cost proportional to the clusters that exist.
    Round-level keys: ``split(key, C_max)[c]`` for slot ``c`` whatever ``slots`` is.
    """
    key = _check_round_args(state, key, apply_fn, data, config)
    k = state.labels.shape[0]
    c_max = config.max_clusters
    n = c_max if slots is None else check_int(slots, "slots", minimum=1, maximum=c_max)
    m = config.clients_per_round(k)

    def cluster(c, params, kc):
        members = (state.labels == c) & state.active[c]
        k_sample, k_train = jax.random.split(kc)
        idx, mask = sample_clients(k_sample, members, m)
        new, _, losses = federated_round(apply_fn, params, data, idx, mask, k_train, config.local,
                                         mesh)  # fmt: skip
        size = jnp.sum(members)
        alpha = m / jnp.maximum(size, 1)
        rewards = gaussian_rewards(losses, data.count[idx].astype(losses.dtype), mask)
        r_new, sse = update_interaction(state.r, idx, mask, rewards, alpha)
        loss_sum = jnp.sum(jnp.where(mask[:, None], losses, 0.0))
        return new, r_new - state.r, sse, alpha, loss_sum, jnp.sum(mask)

    keys = jax.random.split(key, c_max)[:n]
    head = jax.tree_util.tree_map(lambda a: a[:n], state.params)
    new, dr, sse, alpha, loss_sum, used = jax.vmap(cluster)(jnp.arange(n), head, keys)
    act = state.active[:n]
    grow = act & state.splittable[:n]
    params = jax.tree_util.tree_map(
        lambda full, nw: full.at[:n].set(
            jnp.where(act.reshape((-1,) + (1,) * (nw.ndim - 1)), nw, full[:n])
        ),
        state.params,
        new,
    )
    r = state.r + jnp.sum(jnp.where(grow[:, None, None], dr, 0.0), axis=0)
    old = jax.tree_util.tree_map(lambda a: a[:n], state.conv)
    conv = convergence_step(old, sse, alpha, m, config.eps)
    conv = ConvergenceState(
        state.conv.mse.at[:n].set(jnp.where(grow, conv.mse, old.mse)),
        state.conv.patience.at[:n].set(jnp.where(grow, conv.patience, 0)),
    )
    n_used = jnp.sum(jnp.where(act, used, 0))
    new_state = state.replace(
        params=params,
        r=r,
        conv=conv,
        rounds=state.rounds + 1,
        client_updates=state.client_updates + n_used,
    )
    mean_loss = jnp.sum(jnp.where(act, loss_sum, 0.0)) / (n_used * config.local.steps)
    return new_state, mean_loss


def _check_round_args(state, key, apply_fn, data, config) -> jax.Array:
    """The checks of :func:`round_step` / :func:`run_rounds`; returns the typed key."""
    config = _check_config(config)
    if not callable(apply_fn):
        raise TypeError(f"`apply_fn` must be a callable, got {type(apply_fn).__name__}.")
    if not isinstance(data, ClientData):
        raise TypeError(f"`data` must be a ClientData, got {type(data).__name__}.")
    data.check(config.local.batch_size)
    _check_state(state, int(np.shape(data.count)[0]), config)
    if is_concrete(state.params):  # an eager call: the models must fit the network and data
        head = jax.tree_util.tree_map(
            lambda a: jax.ShapeDtypeStruct(np.shape(a)[1:], a.dtype), state.params
        )
        _check_model_fit(apply_fn, head, data, "state.params (each model)", finite=False)
    return check_key(key)


def triggered(state: FedGWCState) -> jax.Array:
    """``[C_max]``: splittable active clusters whose patience has reached its target."""
    _check_state(state)
    return state.active & state.splittable & (state.conv.patience >= state.target)


def run_rounds(
    state: FedGWCState,
    key: jax.Array,
    max_rounds: int,
    apply_fn: Callable,
    data: ClientData,
    config: FedGWCConfig,
    mesh: Mesh | None = None,
    slots: int | None = None,
    until: jax.Array | int | None = None,
) -> tuple[FedGWCState, jax.Array]:
    """Up to ``max_rounds`` rounds in one ``lax.scan``; once :func:`triggered` is true for some
    cluster the remaining iterations are skipped (``lax.cond``), so the host can cluster at exactly
    the official round. Round ``i`` uses ``fold_in(key, rounds)``; ``slots`` as in
    :func:`round_step`. ``until`` (traced, optional) also skips every round once ``state.rounds``
    reaches it, so one compiled chunk length serves any round budget.

    Returns ``(state, losses [max_rounds])`` (mean local loss per round run; NaN after a stop).
    A NaN / inf loss among the rounds run (the first ``state.rounds`` increase) means local
    training diverged: the interaction matrix is then not finite and :func:`try_split` refuses
    it with an error rather than deciding a clustering.
    (A scan with a skip branch, not a ``while_loop``: on XLA:CPU the while loop ran the same
    rounds about 4x slower when the client data is a jit argument.)
    """
    key = _check_round_args(state, key, apply_fn, data, config)
    max_rounds = check_int(max_rounds, "max_rounds", minimum=1)
    if slots is not None:
        check_int(slots, "slots", minimum=1, maximum=config.max_clusters)
    if until is not None:
        if isinstance(until, bool):
            raise TypeError(f"`until` must be an int round count, got the bool {until!r}.")
        check_array(until, "until", ndim=0, kind="int")
        index(until, "until", 0)

    def body(s, _):
        def go(s):
            return round_step(s, jax.random.fold_in(key, s.rounds), apply_fn, data, config, mesh,
                              slots)  # fmt: skip

        def stop(s):
            return s, jnp.full((), jnp.nan, jnp.float32)

        done = jnp.any(triggered(s))
        if until is not None:
            done = done | (s.rounds >= until)
        return jax.lax.cond(done, stop, go, s)

    return jax.lax.scan(body, state, None, length=max_rounds)


def split_cluster(
    state: FedGWCState, cluster: int, children: np.ndarray, config: FedGWCConfig
) -> tuple[FedGWCState, list[int]]:
    """Replace cluster slot ``cluster`` by its children (host step shared with CFL).

    ``children [K_c]`` labels ``0..n-1`` the members of ``cluster`` in client order. Child 0 keeps
    the slot, the others take the lowest free slots (so active slots stay a prefix); every child
    copies the parent's parameters (warm start) and starts with ``mse = 1``, patience 0, target
    ``round(K_child / m)`` and is splittable iff ``K_child > m``. Returns ``(state, child sizes)``;
    with too few free slots the state is returned unchanged and the sizes list is empty.
    """
    config = _check_config(config)
    _, c_max = _check_state(state, config=config)
    cluster = check_int(cluster, "cluster", minimum=0, maximum=c_max - 1)
    check_array(children, "children", ndim=1, kind="int")
    if np.size(children) and np.min(children) < 0:
        raise ValueError(f"`children` must be child labels 0..n-1, got {np.unique(children)}.")
    host = jax.device_get((state.labels, state.active, state.splittable, state.target, state.conv))
    labels, active, splittable, target = (np.array(a) for a in host[:4])
    mse, patience = np.array(host[4].mse), np.array(host[4].patience)
    members = np.flatnonzero(labels == cluster)
    children = np.asarray(children)
    if children.shape != members.shape:
        raise ValueError(f"`children` has shape {children.shape}; cluster {cluster} has "
                         f"{members.size} members.")  # fmt: skip
    free = np.flatnonzero(~active)
    n_new = int(children.max())
    if len(free) < n_new:
        return state, []
    m = config.clients_per_round(labels.shape[0])
    slots = [int(cluster)] + [int(f) for f in free[:n_new]]
    params, sizes = state.params, []
    for child, slot in enumerate(slots):
        mine = members[children == child]
        labels[mine] = slot
        active[slot] = True
        splittable[slot] = len(mine) > m
        target[slot] = round(len(mine) / m)
        mse[slot], patience[slot] = 1.0, 0
        params = jax.tree_util.tree_map(lambda a, s=slot: a.at[s].set(a[cluster]), params)
        sizes.append(len(mine))
    new = state.replace(
        params=params,
        labels=jnp.asarray(labels),
        active=jnp.asarray(active),
        splittable=jnp.asarray(splittable),
        target=jnp.asarray(target),
        conv=ConvergenceState(jnp.asarray(mse), jnp.asarray(patience)),
    )
    return new, sizes


def try_split(state: FedGWCState, config: FedGWCConfig) -> tuple[FedGWCState, list[dict]]:
    """The host's clustering step for every triggered cluster (module docstring).

    Returns the new state and one record per attempt: ``{"round", "cluster", "size", "scores",
    "split_sizes"}`` (``split_sizes`` empty when the cluster was not split).
    """
    config = _check_config(config)
    _check_state(state, config=config)
    labels, r, rounds = (np.asarray(a) for a in jax.device_get((state.labels, state.r,
                                                                state.rounds)))  # fmt: skip
    m = config.clients_per_round(labels.shape[0])
    records = []
    for c in np.flatnonzero(np.asarray(jax.device_get(triggered(state)))):
        members = np.flatnonzero(labels == c)
        block = r[np.ix_(members, members)]
        if not np.isfinite(block).all():
            raise ValueError(f"`state.r` of cluster {int(c)} is not finite (NaN/inf): its local "
                             "training diverged; no clustering decision can be made.")  # fmt: skip
        children, scores = select_split(np.asarray(affinity(jnp.asarray(block), config.gamma)), m,
                                        config.seed, config.max_candidates)  # fmt: skip
        sizes = []
        if children is not None:
            state, sizes = split_cluster(state, int(c), children, config)
        if not sizes:  # no split (or no free slot): restart the wait
            conv = state.conv
            state = state.replace(conv=ConvergenceState(conv.mse.at[c].set(1.0),
                                                        conv.patience.at[c].set(0)))  # fmt: skip
        records.append({"round": int(rounds), "cluster": int(c), "size": len(members),
                        "scores": scores, "split_sizes": sizes})  # fmt: skip
    return state, records

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
``lax.while_loop`` that stops early at the first round where some splittable cluster's patience
reaches its target, so the host's clustering happens at exactly the official round.
:func:`try_split` is that host step: affinity of the cluster's block, the official model selection,
and on a split the children take the parent's slot and free slots, copying its parameters
(warm start), with ``mse = 1``, patience 0 and target ``round(K_child / m)``; without a split (or
without free slots) the wait restarts (``mse = 1``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import Mesh

from jaxlab.federated.fedgwc.clustering import affinity, select_split
from jaxlab.federated.fedgwc.interaction import (
    ConvergenceState,
    convergence_step,
    gaussian_rewards,
    update_interaction,
)
from jaxlab.federated.fedgwc.rounds import ClientData, LocalConfig, federated_round, sample_clients

__all__ = [
    "FedGWCConfig",
    "FedGWCState",
    "init",
    "round_step",
    "run_rounds",
    "triggered",
    "try_split",
]


@dataclasses.dataclass(frozen=True)
class FedGWCConfig:
    """FedGWC's settings (official defaults; ``max_clusters`` is the static slot count ``C_max``).

    Attributes:
      participation: fraction of all clients sampled per cluster per round, ``m = round(p K)``.
      local: local training.
      gamma: affinity bandwidth; eps: convergence threshold on the running mse.
      max_clusters: cluster slots ``C_max``; max_candidates: cap on ``n_max`` in model selection.
      seed: seed of the spectral embedding / clustering.
    """

    participation: float = 0.1
    local: LocalConfig = LocalConfig()
    gamma: float = 0.1
    eps: float = 1e-5
    max_clusters: int = 8
    max_candidates: int = 5
    seed: int = 0

    def __post_init__(self):
        if not 0.0 < self.participation <= 1.0:
            raise ValueError(
                f"FedGWCConfig.participation must be in (0, 1], got {self.participation}."
            )
        if self.max_clusters < 1 or self.gamma <= 0 or self.eps <= 0:
            raise ValueError(f"FedGWCConfig needs max_clusters >= 1, gamma > 0, eps > 0: {self}.")

    def clients_per_round(self, num_clients: int) -> int:
        return max(1, round(self.participation * num_clients))


@struct.dataclass
class FedGWCState:
    params: object  # pytree with leaves [C_max, ...]
    labels: jax.Array  # [K] cluster slot of each client
    active: jax.Array  # [C_max] bool
    splittable: jax.Array  # [C_max] bool: K_c > m
    target: jax.Array  # [C_max] int: round(K_c / m)
    conv: ConvergenceState  # [C_max]
    r: jax.Array  # [K, K] interaction matrix
    rounds: jax.Array  # int: rounds run
    client_updates: jax.Array  # int: local trainings run


def init(params, num_clients: int, config: FedGWCConfig) -> FedGWCState:
    """One active cluster of all ``num_clients`` clients with model ``params``; ``R = 1 / K^2``."""
    c, k = config.max_clusters, num_clients
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
        r=jnp.full((k, k), 1.0 / k**2),
        rounds=jnp.zeros((), jnp.int32),
        client_updates=jnp.zeros((), jnp.int32),
    )


def round_step(
    state: FedGWCState,
    key: jax.Array,
    apply_fn: Callable,
    data: ClientData,
    config: FedGWCConfig,
    mesh: Mesh | None = None,
) -> tuple[FedGWCState, jax.Array]:
    """One FedGWC round over every active cluster (module docstring); returns ``(state, mean
    local loss over the real slots)``."""
    k = state.labels.shape[0]
    m = config.clients_per_round(k)
    slots = jnp.arange(config.max_clusters)

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

    keys = jax.random.split(key, config.max_clusters)
    new, dr, sse, alpha, loss_sum, used = jax.vmap(cluster)(slots, state.params, keys)
    act = state.active
    grow = act & state.splittable
    params = jax.tree_util.tree_map(
        lambda n, o: jnp.where(act.reshape((-1,) + (1,) * (n.ndim - 1)), n, o), new, state.params
    )
    r = state.r + jnp.sum(jnp.where(grow[:, None, None], dr, 0.0), axis=0)
    conv = convergence_step(state.conv, sse, alpha, m, config.eps)
    conv = ConvergenceState(
        jnp.where(grow, conv.mse, state.conv.mse), jnp.where(grow, conv.patience, 0)
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


def triggered(state: FedGWCState) -> jax.Array:
    """``[C_max]``: splittable active clusters whose patience has reached its target."""
    return state.active & state.splittable & (state.conv.patience >= state.target)


def run_rounds(
    state: FedGWCState,
    key: jax.Array,
    max_rounds: int,
    apply_fn: Callable,
    data: ClientData,
    config: FedGWCConfig,
    mesh: Mesh | None = None,
) -> tuple[FedGWCState, jax.Array]:
    """Up to ``max_rounds`` rounds in one ``lax.while_loop``, stopping after the first round at
    which :func:`triggered` is true for some cluster. Round ``i`` uses ``fold_in(key, rounds)``.

    Returns ``(state, losses [max_rounds])`` (mean local loss per round run; NaN after a stop).
    """

    def cond(carry):
        s, i, _ = carry
        return (i < max_rounds) & ~jnp.any(triggered(s))

    def body(carry):
        s, i, losses = carry
        s, loss = round_step(s, jax.random.fold_in(key, s.rounds), apply_fn, data, config, mesh)
        return s, i + 1, losses.at[i].set(loss)

    init_losses = jnp.full((max_rounds,), jnp.nan)
    state, _, losses = jax.lax.while_loop(
        cond, body, (state, jnp.zeros((), jnp.int32), init_losses)
    )
    return state, losses


def try_split(state: FedGWCState, config: FedGWCConfig) -> tuple[FedGWCState, list[dict]]:
    """The host's clustering step for every triggered cluster (module docstring).

    Returns the new state and one record per attempt: ``{"round", "cluster", "size", "scores",
    "split_sizes"}`` (``split_sizes`` empty when the cluster was not split).
    """
    host = jax.device_get(state)
    labels = np.array(host.labels)
    active = np.array(host.active)
    splittable = np.array(host.splittable)
    target = np.array(host.target)
    mse = np.array(host.conv.mse)
    patience = np.array(host.conv.patience)
    params = state.params
    k = labels.shape[0]
    m = config.clients_per_round(k)
    records = []
    for c in np.flatnonzero(np.asarray(jax.device_get(triggered(state)))):
        members = np.flatnonzero(labels == c)
        block = host.r[np.ix_(members, members)]
        children, scores = select_split(np.asarray(affinity(jnp.asarray(block), config.gamma)), m,
                                        config.seed, config.max_candidates)  # fmt: skip
        free = list(np.flatnonzero(~active))
        record = {"round": int(host.rounds), "cluster": int(c), "size": len(members),
                  "scores": scores, "split_sizes": []}  # fmt: skip
        if children is None or len(free) < children.max():
            mse[c], patience[c] = 1.0, 0
            records.append(record)
            continue
        slots = [int(c)] + [int(s) for s in free[: children.max()]]
        for child, slot in enumerate(slots):
            mine = members[children == child]
            labels[mine] = slot
            active[slot] = True
            splittable[slot] = len(mine) > m
            target[slot] = round(len(mine) / m)
            mse[slot], patience[slot] = 1.0, 0
            params = jax.tree_util.tree_map(lambda a, s=slot, p=c: a.at[s].set(a[p]), params)
            record["split_sizes"].append(len(mine))
        records.append(record)
    new = state.replace(
        params=params,
        labels=jnp.asarray(labels),
        active=jnp.asarray(active),
        splittable=jnp.asarray(splittable),
        target=jnp.asarray(target),
        conv=ConvergenceState(jnp.asarray(mse), jnp.asarray(patience)),
    )
    return new, records

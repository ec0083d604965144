"""FedGWC's baselines on the same round machinery (spec section 2.10): FedAvg and Oracle as fixed
clusterings of the FedGWC state, IFCA, CFL and Local.

- **FedAvg** / **Oracle**: :func:`fixed_clusters` builds a :class:`~.fedgwc.FedGWCState` whose
  clusters are given (one cluster: FedAvg; the true groups: Oracle) and never split; the FedGWC
  round then samples ``m`` clients per cluster and averages inside each (no interaction signal is
  computed for unsplittable clusters).
- **IFCA** (Ghosh et al. 2020): ``k`` models from different random initialisations. Each sampled
  client evaluates every model on its whole training set, trains the one with the smallest loss for
  ``T`` steps, and the server averages, per model, the clients that chose it (a model nobody chose
  is unchanged). Clients are assigned by the same argmin at evaluation time.
- **CFL** (Sattler et al. 2021): clusters train like FedAvg (``m`` sampled members per cluster
  per round); every ``check_every`` rounds every member of every cluster computes its update
  ``dtheta_i`` from the cluster model (full participation for the test). A cluster of more than
  ``min_size`` clients is bipartitioned when ``||mean_i dtheta_i|| < eps1`` (near a stationary
  point of the cluster's objective) while ``max_i ||dtheta_i|| > eps2`` (some client is not), by
  complete-linkage clustering on the cosine similarities of the updates; children warm-start from
  the parent (:func:`~.fedgwc.split_cluster`) and may split again.
- **Local**: every client trains its own model alone for as many SGD steps as it takes part in on
  average under FedAvg (``rounds * m / K * T``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from jax.sharding import Mesh
from sklearn.cluster import AgglomerativeClustering

from jaxlab.core import sharding
from jaxlab.core.checks import check_array, check_int, check_key, check_scalar
from jaxlab.federated.fedgwc._checks import callable_, index, instance, leading, real_tree
from jaxlab.federated.fedgwc.fedgwc import (
    FedGWCConfig,
    FedGWCState,
    _check_config,
    _check_state,
    init,
    split_cluster,
)
from jaxlab.federated.fedgwc.rounds import (
    ClientData,
    LocalConfig,
    _check_local,
    _fit_eager,
    _one_client,
    fedavg,
    train_clients,
)
from jaxlab.federated.fedgwc.rounds import sample_clients as _sample

__all__ = [
    "CFLConfig",
    "IFCAState",
    "cfl_check",
    "cfl_split",
    "client_deltas",
    "fixed_clusters",
    "ifca_assign",
    "ifca_init",
    "ifca_losses",
    "ifca_round",
    "ifca_run",
    "local_only",
    "random_inits",
]


def fixed_clusters(params, labels, config: FedGWCConfig) -> FedGWCState:
    """A FedGWC state with the given clusters that never split (FedAvg: all zeros; Oracle: the
    true groups). ``labels [K]`` must use the slots ``0..n-1`` with ``n <= config.max_clusters``;
    every cluster starts from ``params``."""
    config = _check_config(config)
    check_array(labels, "labels", ndim=1, kind="int")
    labels = np.asarray(labels)
    if labels.size < 1:
        raise ValueError("`labels` must hold one cluster slot per client, got an empty array.")
    n = int(labels.max()) + 1
    if labels.min() < 0 or n > config.max_clusters or len(np.unique(labels)) != n:
        raise ValueError(f"`labels` must use every slot 0..n-1 with n <= max_clusters="
                         f"{config.max_clusters}; got values {np.unique(labels)}.")  # fmt: skip
    state = init(params, labels.shape[0], config)
    slots = np.arange(config.max_clusters)
    return state.replace(
        labels=jnp.asarray(labels, jnp.int32),
        active=jnp.asarray(slots < n),
        splittable=jnp.zeros((config.max_clusters,), bool),
    )


# ---- IFCA ----------------------------------------------------------------------------------------


@struct.dataclass
class IFCAState:
    """IFCA's state (a pytree; ``k`` models).

    Attributes:
      params: the models, every leaf ``[k, ...]``.
      rounds: ``[]`` int32, rounds run.
      client_updates: ``[]`` int32, local trainings run.
      key: ``[]`` typed PRNG key of the rounds (round ``t`` uses ``fold_in(key, t)``), set by
        :func:`~.factory.make_ifca`'s ``init``; ``None`` from :func:`ifca_init`, whose
        :func:`ifca_run` takes the key as an argument.
    """

    params: object
    rounds: jax.Array
    client_updates: jax.Array
    key: jax.Array | None = None


def random_inits(apply_init: Callable, key: jax.Array, k: int):
    """``k`` models stacked on a leading axis, ``apply_init(split(key, k)[j])`` for model ``j``
    (IFCA's independent random initialisations); every leaf ``[k, ...]``."""
    callable_(apply_init, "apply_init")
    key = check_key(key)
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(f"`k`: IFCA needs k >= 1 models, got k={k!r}.")
    return jax.vmap(apply_init)(jax.random.split(key, k))


def ifca_init(apply_init: Callable, key: jax.Array, k: int) -> IFCAState:
    """``k`` models from ``apply_init(key_j)`` with independent keys (:func:`random_inits`)."""
    params = random_inits(apply_init, key, k)
    return IFCAState(params, jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))


def ifca_losses(apply_fn: Callable, params, x, y, count, noise, key) -> jax.Array:
    """Mean training loss of one client under each of the ``k`` models: ``[k]``.

    ``x [n_max, d]``, ``y [n_max]``; only the first ``count`` rows count; noisy clients see fresh
    input noise (one draw shared by the models, so the comparison is paired).
    """
    key = check_key(key)
    real_tree(params, "params")
    x, y, count, noise = _one_client(x, y, count, noise, LocalConfig(batch_size=1))
    _fit_eager(apply_fn, params, x, y, count, stacked=True)
    xn = x + noise * jax.random.normal(key, x.shape)
    valid = jnp.arange(y.shape[0]) < count

    def one(p):
        ce = optax.softmax_cross_entropy_with_integer_labels(apply_fn(p, xn), y)
        return jnp.sum(jnp.where(valid, ce, 0.0)) / count

    return jax.vmap(one)(params)


def _losses_by_client(apply_fn: Callable, params, data: ClientData, keys) -> jax.Array:
    """:func:`ifca_losses` of every client in ``data`` (one key each): ``[clients, k]``."""
    return jax.vmap(ifca_losses, in_axes=(None, None, 0, 0, 0, 0, 0))(
        apply_fn, params, data.x, data.y, data.count, data.noise, keys
    )


def _check_data(data, batch_size: int) -> ClientData:
    if not isinstance(data, ClientData):
        raise TypeError(f"`data` must be a ClientData, got {type(data).__name__}.")
    return data.check(batch_size)


def _check_ifca(state, key, apply_fn, data, local) -> jax.Array:
    """The checks of :func:`ifca_round` / :func:`ifca_run`; returns the typed key."""
    instance(state, "state", IFCAState)
    callable_(apply_fn, "apply_fn")
    _check_local(local, "local")
    _check_data(data, local.batch_size)
    real_tree(state.params, "state.params")
    n_models = np.shape(jax.tree_util.tree_leaves(state.params)[0])[:1]
    leading(state.params, "state.params", n_models[0] if n_models else -1, "model")
    _check_stacked_fit(apply_fn, state.params, data)
    return check_key(key)


def _check_stacked_fit(apply_fn, params, data: ClientData) -> None:
    """The stacked models ``params [M, ...]`` fit the network and every client's data."""
    _fit_eager(apply_fn, params, data.x, data.y, data.count, stacked=True, batched=True,
               y_name="data.y")  # fmt: skip


def ifca_round(
    state: IFCAState,
    key: jax.Array,
    apply_fn: Callable,
    data: ClientData,
    m: int,
    local: LocalConfig,
    mesh: Mesh | None = None,
) -> tuple[IFCAState, jax.Array]:
    """One IFCA round (module docstring); returns ``(state, choices [m])``. The client-slot axis is
    sharded over ``mesh``'s ``"data"`` axis when given."""
    key = _check_ifca(state, key, apply_fn, data, local)
    k = data.count.shape[0]
    if isinstance(m, bool) or not isinstance(m, int | np.integer) or not 1 <= m <= k:
        raise ValueError(f"`m`: IFCA needs 1 <= m <= K = {k} clients, got m={m!r}.")
    k_sample, k_eval, k_train = jax.random.split(key, 3)
    idx, _ = _sample(k_sample, jnp.ones(data.count.shape, bool), m)
    sub = sharding.constrain_batch(data.take(idx), mesh)
    losses = _losses_by_client(apply_fn, state.params, sub, jax.random.split(k_eval, m))
    choice = jnp.argmin(losses, axis=1)  # [m]
    start = jax.tree_util.tree_map(lambda a: a[choice], state.params)
    trained, _ = train_clients(apply_fn, start, sub.x, sub.y, sub.count, sub.noise,
                               jax.random.split(k_train, m), local, shared=False)  # fmt: skip
    n_models = jax.tree_util.tree_leaves(state.params)[0].shape[0]

    def per_model(j, old):
        w = jnp.where(choice == j, sub.count, 0).astype(losses.dtype)
        chosen = jnp.sum(w) > 0
        new = fedavg(trained, jnp.where(chosen, w, 1.0))
        return jax.tree_util.tree_map(lambda a, b: jnp.where(chosen, a, b), new, old)

    params = jax.vmap(per_model)(jnp.arange(n_models), state.params)
    new_state = state.replace(
        params=params, rounds=state.rounds + 1, client_updates=state.client_updates + m
    )
    return new_state, choice


def ifca_run(
    state: IFCAState,
    key: jax.Array,
    rounds: int,
    apply_fn: Callable,
    data: ClientData,
    m: int,
    local: LocalConfig,
    mesh: Mesh | None = None,
) -> IFCAState:
    """``rounds`` IFCA rounds in one ``lax.scan``; round ``i`` uses ``fold_in(key, rounds)``."""
    key = _check_ifca(state, key, apply_fn, data, local)
    rounds = check_int(rounds, "rounds", minimum=1)

    def body(s, _):
        s, _ = ifca_round(s, jax.random.fold_in(key, s.rounds), apply_fn, data, m, local, mesh)
        return s, None

    return jax.lax.scan(body, state, None, length=rounds)[0]


def ifca_assign(apply_fn: Callable, params, data: ClientData, key: jax.Array) -> jax.Array:
    """Each client's model under IFCA: ``argmin_j`` of its training loss, ``[K]``."""
    callable_(apply_fn, "apply_fn")
    real_tree(params, "params")
    _check_data(data, 1)
    _fit_eager(
        apply_fn, params, data.x, data.y, data.count, stacked=True, batched=True, y_name="data.y"
    )
    key = check_key(key)
    keys = jax.random.split(key, data.count.shape[0])
    return jnp.argmin(_losses_by_client(apply_fn, params, data, keys), axis=1)


# ---- CFL -----------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CFLConfig:
    """CFL's split criterion: ``||mean update|| < eps1`` and ``max ||update|| > eps2``, tested
    every ``check_every`` rounds after ``warmup`` rounds, on clusters of more than ``min_size``
    clients.

    Attributes:
      eps1: threshold on the norm of the cluster's mean update (> 0; no default: tune it).
      eps2: threshold on the largest client update norm (> 0; no default: tune it).
      check_every: rounds between two checks (>= 1).
      warmup: rounds before the first check (>= 0).
      min_size: only clusters of more than ``min_size`` clients split (>= 2).
    """

    eps1: float
    eps2: float
    check_every: int = 100
    warmup: int = 500
    min_size: int = 2

    def __post_init__(self):
        check_scalar(self.eps1, "eps1", 0.0, low_open=True)
        check_scalar(self.eps2, "eps2", 0.0, low_open=True)
        check_int(self.check_every, "check_every", minimum=1)
        check_int(self.warmup, "warmup", minimum=0)
        check_int(self.min_size, "min_size", minimum=2)


def client_deltas(
    apply_fn: Callable,
    state: FedGWCState,
    data: ClientData,
    key: jax.Array,
    local: LocalConfig,
    mesh: Mesh | None = None,
) -> jax.Array:
    """Every client's flattened local update from its own cluster's model: ``[K, P]``
    (``theta_k^{after T steps} - theta_{c(k)}``; the client axis sharded over ``mesh``)."""
    callable_(apply_fn, "apply_fn")
    _check_local(local, "local")
    _check_data(data, local.batch_size)
    _check_state(state, int(np.shape(data.count)[0]))
    _check_stacked_fit(apply_fn, state.params, data)
    key = check_key(key)
    start = jax.tree_util.tree_map(lambda a: a[state.labels], state.params)
    x, y, count, noise = sharding.constrain_batch((data.x, data.y, data.count, data.noise), mesh)
    keys = jax.random.split(key, data.count.shape[0])
    trained, _ = train_clients(apply_fn, start, x, y, count, noise, keys, local, shared=False)
    delta = jax.tree_util.tree_map(lambda a, b: (a - b).reshape(a.shape[0], -1), trained, start)
    return jnp.concatenate(jax.tree_util.tree_leaves(delta), axis=1)


def cfl_check(
    updates: np.ndarray, labels: np.ndarray, active: np.ndarray, config: CFLConfig
) -> tuple[list[tuple[int, np.ndarray]], dict]:
    """CFL's criterion on every active cluster (host).

    Args:
      updates: ``[K, P]`` client updates (:func:`client_deltas`); labels: ``[K]`` cluster slots;
      active: ``[C_max]`` bool.

    Returns:
      ``(splits, norms)``: ``splits`` lists ``(cluster, children [K_c] in {0, 1})`` for the clusters
      that meet the criterion (bipartition by complete linkage on ``1 - cosine similarity``);
      ``norms[c] = (||mean update||, max ||update||)`` for every active cluster.
    """
    instance(config, "config", CFLConfig)
    check_array(updates, "updates", ndim=2, dims="[K, P]")
    k = np.shape(updates)[0]
    check_array(labels, "labels", shape=(k,), dims="[K] like `updates`", kind="int")
    check_array(active, "active", ndim=1, kind="bool")
    index(labels, "labels", 0, np.shape(active)[0])
    updates, labels, active = (
        np.asarray(updates, np.float64),
        np.asarray(labels),
        np.asarray(active),
    )
    splits, norms = [], {}
    for c in np.flatnonzero(active):
        u = updates[labels == c]
        mean_norm = float(np.linalg.norm(u.mean(0)))
        max_norm = float(np.linalg.norm(u, axis=1).max())
        norms[int(c)] = (mean_norm, max_norm)
        if len(u) <= config.min_size or mean_norm >= config.eps1 or max_norm <= config.eps2:
            continue
        unit = u / np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-12)
        dist = np.clip(1.0 - unit @ unit.T, 0.0, 2.0)
        children = AgglomerativeClustering(n_clusters=2, metric="precomputed",
                                           linkage="complete").fit_predict(dist)  # fmt: skip
        splits.append((int(c), children))
    return splits, norms


# ---- Local ---------------------------------------------------------------------------------------


def local_only(
    apply_fn: Callable,
    params,
    data: ClientData,
    key: jax.Array,
    steps: int,
    local: LocalConfig,
    mesh: Mesh | None = None,
):
    """Every client trains its own copy of ``params`` alone for ``steps`` SGD steps (``local``'s
    batch size, lr and weight decay). Returns the stacked client models ``[K, ...]``."""
    callable_(apply_fn, "apply_fn")
    real_tree(params, "params")
    _check_local(local, "local")
    _check_data(data, local.batch_size)
    _fit_eager(apply_fn, params, data.x, data.y, data.count, batched=True, y_name="data.y")
    key = check_key(key)
    steps = check_int(steps, "steps", minimum=1)
    cfg = dataclasses.replace(local, steps=steps)
    x, y, count, noise = sharding.constrain_batch((data.x, data.y, data.count, data.noise), mesh)
    keys = jax.random.split(key, data.count.shape[0])
    return train_clients(apply_fn, params, x, y, count, noise, keys, cfg)[0]


def cfl_split(
    state: FedGWCState, splits: list[tuple[int, np.ndarray]], config: FedGWCConfig
) -> tuple[FedGWCState, list[list[int]]]:
    """Apply :func:`cfl_check`'s bipartitions with :func:`~.fedgwc.split_cluster` (warm start);
    returns the state and the child sizes per split (empty when no slot was free). CFL computes no
    interaction signal, so every cluster stays unsplittable in FedGWC's sense."""
    config = _check_config(config)
    _check_state(state, config=config)
    if not isinstance(splits, list | tuple) or not all(
        isinstance(sp, list | tuple) and len(sp) == 2 for sp in splits
    ):
        raise TypeError(f"`splits` must be a list of (cluster, children) pairs (`cfl_check`'s), "
                        f"got {splits!r:.80}.")  # fmt: skip
    sizes = []
    for c, children in splits:
        state, s = split_cluster(state, c, children, config)
        sizes.append(s)
    return state.replace(splittable=jnp.zeros_like(state.splittable)), sizes

"""FedGWC: interaction-aware Gaussian weighting for clustered federated learning (ICML 2025).

Licciardi, Leo, Fani, Caputo, Ciccone, "Interaction-Aware Gaussian Weighting for Clustered
Federated Learning" (spec ``papers/fedgwc.md``): the federated round, the server-side signal, the
clustering step, the multi-cluster FedGWC state with its early-stopping round loop, and the
baselines on the same machinery.

- :mod:`.rounds`: client sampling (Gumbel-top-k among members), local SGD (``vmap`` over client
  slots of a ``lax.scan`` over steps, per-step losses recorded), FedAvg, one round;
- :mod:`.interaction`: Gaussian rewards from loss trajectories, the interaction-matrix EMA and the
  convergence statistic;
- :mod:`.fedgwc`: the static-shape state (cluster slots, stacked models, one interaction matrix),
  one round over all clusters, ``run_rounds`` (a ``lax.scan`` that stops at a clustering
  trigger) and the host's ``try_split``;
- :mod:`.clustering`: the affinity (vectorised exclusion formula) and the official model selection
  (spectral embedding + ``cluster_qr`` spectral clustering, Davies-Bouldin < 1 gate);
- :mod:`.baselines`: FedAvg and Oracle (fixed clusterings), IFCA, CFL and Local;
- :mod:`.cohesion`: ``class_cohesion_scores``, a labelled stand-in for the paper's Wasserstein
  Adjusted Score (not in the official code);
- :mod:`.factory`: :func:`make_fedgwc` / :func:`make_ifca`, the entry points: pure functions that
  close over the config, the model's ``apply_fn`` and the client data (``init(key, params)``,
  ``step(state)``, ``run_rounds(state, max_rounds, until=...)``, ``try_split(state)``, ...).

The model is any Flax ``apply_fn``; the spec's digits classifier is
``jaxlab.core.nn.MLP((64, 10))``. Use one module instance per architecture (its bound ``apply``
is a static argument of the jitted rounds).

Example (12 random clients, a noisy third; jitted chunks of rounds, clustering on the host)::

    import jax
    import jax.numpy as jnp
    from jaxlab.core.nn import MLP
    from jaxlab.federated.fedgwc import ClientData, FedGWCConfig, LocalConfig, make_fedgwc

    k, n, d = 12, 16, 8                                   # clients, samples each, features
    kx, ky, kp, kr = jax.random.split(jax.random.key(0), 4)
    data = ClientData(x=jax.random.normal(kx, (k, n, d)), y=jax.random.randint(ky, (k, n), 0, 3),
                      count=jnp.full((k,), n), noise=jnp.where(jnp.arange(k) < 8, 0.0, 2.0))
    net = MLP((16, 3))                                    # d -> 16 -> 3 classes, ReLU
    local = LocalConfig(steps=2, batch_size=8, lr=0.1)
    fed = make_fedgwc(FedGWCConfig(participation=0.25, local=local, max_clusters=2), net.apply,
                      data)
    state = fed.init(kr, net.init(kp, jnp.zeros((1, d))))   # one cluster of all 12 clients
    while int(state.rounds) < 30:
        state, losses = fed.run_rounds(state, 10, until=30)  # stops early at a trigger
        if bool(fed.triggered(state).any()):
            state, records = fed.try_split(state)       # spectral clustering, DB < 1 gate
    state, metrics = fed.step(state)                      # one more round: {"loss", "finite"}
    print(state.labels, metrics["loss"])                  # [12] cluster slot of each client
"""

from jaxlab.federated.fedgwc.baselines import (
    CFLConfig,
    IFCAState,
    cfl_check,
    cfl_split,
    client_deltas,
    fixed_clusters,
    ifca_assign,
    ifca_init,
    ifca_losses,
    ifca_round,
    ifca_run,
    local_only,
    random_inits,
)
from jaxlab.federated.fedgwc.clustering import affinity, select_split
from jaxlab.federated.fedgwc.cohesion import class_cohesion_scores, tv_distances
from jaxlab.federated.fedgwc.factory import IFCA, FedGWC, make_fedgwc, make_ifca
from jaxlab.federated.fedgwc.fedgwc import (
    FedGWCConfig,
    FedGWCState,
    active_slots,
    init,
    round_step,
    run_rounds,
    split_cluster,
    triggered,
    try_split,
)
from jaxlab.federated.fedgwc.interaction import (
    ConvergenceState,
    convergence_step,
    gaussian_rewards,
    update_interaction,
)
from jaxlab.federated.fedgwc.rounds import (
    ClientData,
    LocalConfig,
    epoch_batch,
    fedavg,
    federated_round,
    local_batches,
    local_step,
    local_train,
    sample_clients,
    train_clients,
)

__all__ = [
    "IFCA",
    "CFLConfig",
    "ClientData",
    "ConvergenceState",
    "FedGWC",
    "FedGWCConfig",
    "FedGWCState",
    "IFCAState",
    "LocalConfig",
    "active_slots",
    "affinity",
    "cfl_check",
    "cfl_split",
    "class_cohesion_scores",
    "client_deltas",
    "convergence_step",
    "epoch_batch",
    "fedavg",
    "federated_round",
    "fixed_clusters",
    "gaussian_rewards",
    "ifca_assign",
    "ifca_init",
    "ifca_losses",
    "ifca_round",
    "ifca_run",
    "init",
    "local_batches",
    "local_only",
    "local_step",
    "local_train",
    "make_fedgwc",
    "make_ifca",
    "random_inits",
    "round_step",
    "run_rounds",
    "sample_clients",
    "select_split",
    "split_cluster",
    "train_clients",
    "triggered",
    "try_split",
    "tv_distances",
    "update_interaction",
]

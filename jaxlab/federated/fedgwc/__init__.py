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
  Adjusted Score (not in the official code).

Usage (jitted chunks of rounds; the rare clustering step on the host)::

    data = ClientData(x, y, count, noise)          # [K, n_max, d], [K, n_max], [K], [K]
    net = MLP(hidden=(64,), classes=10)
    config = FedGWCConfig(participation=0.1, local=LocalConfig(lr=0.05))
    state = init(net.init(key, x[0, :1]), K, config)
    run = jax.jit(run_rounds, static_argnums=(2, 3, 5))
    while int(state.rounds) < 3000:
        state, losses = run(state, key, 500, net.apply, data, config, until=3000)
        if bool(triggered(state).any()):           # some cluster's patience reached its target
            state, records = try_split(state, config)   # spectral clustering, DB < 1 gate
    # state.labels [K]: each client's cluster slot; state.params: one model per slot
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
)
from jaxlab.federated.fedgwc.clustering import affinity, select_split
from jaxlab.federated.fedgwc.cohesion import class_cohesion_scores, tv_distances
from jaxlab.federated.fedgwc.fedgwc import (
    FedGWCConfig,
    FedGWCState,
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
    MLP,
    ClientData,
    LocalConfig,
    fedavg,
    federated_round,
    local_step,
    local_train,
    sample_clients,
)

__all__ = [
    "CFLConfig",
    "IFCAState",
    "MLP",
    "ClientData",
    "ConvergenceState",
    "FedGWCConfig",
    "FedGWCState",
    "LocalConfig",
    "affinity",
    "cfl_check",
    "cfl_split",
    "class_cohesion_scores",
    "client_deltas",
    "fixed_clusters",
    "ifca_assign",
    "ifca_init",
    "ifca_losses",
    "ifca_round",
    "ifca_run",
    "local_only",
    "local_step",
    "convergence_step",
    "fedavg",
    "federated_round",
    "gaussian_rewards",
    "init",
    "local_train",
    "sample_clients",
    "round_step",
    "run_rounds",
    "select_split",
    "split_cluster",
    "triggered",
    "try_split",
    "tv_distances",
    "update_interaction",
]

"""FedGWC: interaction-aware Gaussian weighting for clustered federated learning (ICML 2025).

Licciardi, Leo, Fani, Caputo, Ciccone, "Interaction-Aware Gaussian Weighting for Clustered
Federated Learning" (spec ``papers/fedgwc.md``). Work in progress (issue 10): this package holds the
federated round, the server-side signal, the clustering step and the multi-cluster FedGWC state
with its early-stopping round loop; the baselines (IFCA, CFL, Local, Oracle), the experiment and
the benchmark follow.

- :mod:`.rounds`: client sampling (Gumbel-top-k among members), local SGD (``vmap`` over client
  slots of a ``lax.scan`` over steps, per-step losses recorded), FedAvg, one round;
- :mod:`.interaction`: Gaussian rewards from loss trajectories, the interaction-matrix EMA and the
  convergence statistic;
- :mod:`.fedgwc`: the static-shape state (cluster slots, stacked models, one interaction matrix),
  one round over all clusters, ``run_rounds`` (a ``while_loop`` that stops at a clustering
  trigger) and the host's ``try_split``;
- :mod:`.clustering`: the affinity (vectorised exclusion formula) and the official model selection
  (spectral embedding + ``cluster_qr`` spectral clustering, Davies-Bouldin < 1 gate).
"""

from jaxlab.federated.fedgwc.clustering import affinity, select_split
from jaxlab.federated.fedgwc.fedgwc import (
    FedGWCConfig,
    FedGWCState,
    init,
    round_step,
    run_rounds,
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
    local_train,
    sample_clients,
)

__all__ = [
    "MLP",
    "ClientData",
    "ConvergenceState",
    "FedGWCConfig",
    "FedGWCState",
    "LocalConfig",
    "affinity",
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
    "triggered",
    "try_split",
    "update_interaction",
]

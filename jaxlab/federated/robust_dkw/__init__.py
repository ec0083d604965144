"""Certified federated evaluation on unseen clients and shifted networks (ICML 2025).

Najafi, Mahdizadeh Sani, Farnia, "Certifiably Robust Model Evaluation in Federated Learning under
Meta-Distributional Shifts" (spec ``papers/robust_dkw.md``). A fixed model is evaluated on ``K``
clients that report only scalars (empirical risks, local adversarial risks); the server certifies
the risk distribution of unseen clients of the same network and of shifted target networks.

- :mod:`.dkw`: the same-network DKW band with the per-client Hoeffding shift, quantile and
  average-loss intervals, argument checks;
- :mod:`.fdiv`: the KL / chi-square robust tail certificate by the exact two-level reduction,
  its population limit and closed forms, the Dirichlet KL (a certified ``eps``);
- :mod:`.wasserstein`: local adversarial risks (closed form for linear models, gradient ascent
  otherwise; client axis sharded), the average-loss and fractional-knapsack tail bounds.

Every bound is elementwise or ``vmap``-able over thresholds, budgets and replicates. Example::

    band = dkw_band(r_hat, jnp.linspace(0, 1, 101), n_min=300, delta=0.05)
    tail = robust_tail_bound(r_hat, lam, eps=0.2, n=300, divergence="chi2")
"""

from jaxlab.federated.robust_dkw.dkw import (
    CDFBand,
    average_loss_interval,
    count_below,
    dkw_band,
    dkw_epsilon,
    ecdf,
    hoeffding_shift,
    quantile_interval,
    tail_fraction,
)
from jaxlab.federated.robust_dkw.fdiv import (
    DIVERGENCES,
    chi2_worst_tail,
    dirichlet_kl,
    divergence_constants,
    f_div,
    kl_bernoulli,
    kl_worst_tail,
    population_worst_tail,
    robust_tail_bound,
    two_level_weights,
)
from jaxlab.federated.robust_dkw.wasserstein import (
    adversarial_risk_ascent,
    knapsack_fraction,
    linear_margins,
    local_adversarial_risks,
    phi_zero_one,
    transport_costs,
    wasserstein_average_bound,
    wasserstein_tail_bound,
    wasserstein_terms,
)

__all__ = [
    "DIVERGENCES",
    "CDFBand",
    "adversarial_risk_ascent",
    "average_loss_interval",
    "chi2_worst_tail",
    "count_below",
    "dirichlet_kl",
    "divergence_constants",
    "dkw_band",
    "dkw_epsilon",
    "ecdf",
    "f_div",
    "hoeffding_shift",
    "kl_bernoulli",
    "kl_worst_tail",
    "knapsack_fraction",
    "linear_margins",
    "local_adversarial_risks",
    "phi_zero_one",
    "population_worst_tail",
    "quantile_interval",
    "robust_tail_bound",
    "tail_fraction",
    "transport_costs",
    "two_level_weights",
    "wasserstein_average_bound",
    "wasserstein_tail_bound",
    "wasserstein_terms",
]

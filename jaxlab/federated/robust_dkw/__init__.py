"""Certified federated evaluation on unseen clients and shifted networks (ICML 2025).

Najafi, Mahdizadeh Sani, Farnia, "Certifiably Robust Model Evaluation in Federated Learning under
Meta-Distributional Shifts" (spec ``papers/robust_dkw.md``). A fixed model is evaluated on ``K``
clients that report only scalars (empirical risks, local adversarial risks); the server certifies
the risk distribution of unseen clients of the same network and of shifted target networks.

- :mod:`.dkw`: the same-network DKW band with the per-client Hoeffding shift, quantile and
  average-loss intervals, the loss check (:func:`check_losses`);
- :mod:`.fdiv`: the KL / chi-square robust tail certificate by the exact two-level reduction,
  its population limit and closed forms, the Dirichlet KL (a certified ``eps``);
- :mod:`.wasserstein`: local adversarial risks (closed form for linear models, gradient ascent
  otherwise; client axis sharded), the average-loss and fractional-knapsack tail bounds;
- reference truths to check certificates against: :mod:`.gaussian` (binary Gaussian clients, LDA,
  their exact risks and adversarial risks), :mod:`.targets` (tilted and two-level targets of a
  Beta risk law at a given divergence), :mod:`.digits` (a logistic digits network and the exact
  risks of label-shifted, image-shifted clients).

The method is a statistic: plain module-level pure functions of the clients' reported scalars
(no config object, no state). Every bound is elementwise or ``vmap``-able over thresholds,
budgets and replicates; arguments are checked where concrete (errors name the argument).

Example::

    import jax
    import jax.numpy as jnp
    from jaxlab.federated.robust_dkw import dkw_band, robust_tail_bound

    r_hat = 0.3 * jax.random.uniform(jax.random.key(0), (200,))  # K = 200 clients' risks
    lam = jnp.linspace(0.0, 1.0, 11)
    band = dkw_band(r_hat, lam, n_min=300, delta=0.05)  # unseen clients of this network
    tail = robust_tail_bound(r_hat, lam, 0.2, n=300, divergence="chi2")  # chi2-shifted networks
    assert bool(jnp.all(band.lower <= band.upper)) and tail.shape == (11,)
"""

from jaxlab.federated.robust_dkw.digits import (
    DigitsModel,
    fit_digits_model,
    shifted_client_risks,
)
from jaxlab.federated.robust_dkw.dkw import (
    CDFBand,
    average_loss_interval,
    check_losses,
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
from jaxlab.federated.robust_dkw.gaussian import (
    class_margin_means,
    fit_lda,
    gaussian_client_risks,
    gaussian_piece,
    sample_gaussian_clients,
)
from jaxlab.federated.robust_dkw.targets import (
    beta_quadrature,
    tilt_divergence,
    tilt_tail,
    tilt_theta,
    two_level_target,
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
    "DigitsModel",
    "adversarial_risk_ascent",
    "average_loss_interval",
    "beta_quadrature",
    "check_losses",
    "chi2_worst_tail",
    "class_margin_means",
    "count_below",
    "dirichlet_kl",
    "divergence_constants",
    "dkw_band",
    "dkw_epsilon",
    "ecdf",
    "f_div",
    "fit_digits_model",
    "fit_lda",
    "gaussian_client_risks",
    "gaussian_piece",
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
    "sample_gaussian_clients",
    "shifted_client_risks",
    "tail_fraction",
    "tilt_divergence",
    "tilt_tail",
    "tilt_theta",
    "transport_costs",
    "two_level_target",
    "two_level_weights",
    "wasserstein_average_bound",
    "wasserstein_tail_bound",
    "wasserstein_terms",
]

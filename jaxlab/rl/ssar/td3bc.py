"""TD3+BC with SSAR's selective state-adaptive coefficient: the loss pieces (spec 2.3, 2.4).

Pure functions of arrays, so that one step serves the baseline and the method: the flags
``loosen`` and ``select`` are traced 0/1 floats and a fixed-strength baseline is ``beta`` frozen at
``1 / alpha`` with ``w = 1`` and both flags 0 (then :func:`actor_loss` is TD3+BC's loss divided by
``alpha``, gradients included).

- Critic target: ``a' = clip(pi_targ(s') + clip(N(0, (0.2 a_max)^2), +-0.5 a_max), +-a_max)``,
  ``y = r + gamma (1 - d) min_i Q_i^targ(s', a')``; ``L_Q = sum_i mean (Q_i(s, a) - y)^2``.
- Actor: ``L_pi = -lambda_Q mean Q_1(s, pi(s)) + mean_{B x A} beta~ (pi(s) - a)^2`` with
  ``lambda_Q = 1 / mean |Q_1(s, pi(s))|`` and ``beta~ = stopgrad(beta_phi(s)) (w if loosen)``
  (both stop-gradient).
- Coefficient: slack ``C_n - d(s, a)`` with ``d = mean_A min((pi(s) - a)^2, 1)`` (the clip is in
  the slack only) and ``C_n = (sigma_e n)^2``, ``sigma_e = 0.1``;
  ``L_beta = mean_B slack beta_phi(s) (w if select)``, on the **pre-update** policy: descent
  raises ``beta`` where the data action is farther than ``n sigma_e`` from the policy and lowers
  it where it is closer.
- Threshold schedule: every period, freeze ``n`` for good if the period's mean trusted slack is
  positive, else ``n <- min(n_end, n + (n_end - n_start) / 10)``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxlab.core.checks import check_array, check_rank, check_shape

__all__ = [
    "SIGMA_E",
    "actor_loss",
    "beta_loss",
    "coefficient_weights",
    "constraint_slack",
    "critic_loss",
    "smoothed_target_action",
    "td_target",
    "threshold_step",
]

SIGMA_E = 0.1  # the official `expl_noise`, in normalised action units


def smoothed_target_action(
    key: jax.Array,
    pi_next: jax.Array,
    max_action: float = 1.0,
    policy_noise: float = 0.2,
    noise_clip: float = 0.5,
) -> jax.Array:
    """TD3's target-policy smoothing: ``clip(pi_targ(s') + clipped noise, +-max_action)``."""
    noise = policy_noise * max_action * jax.random.normal(key, pi_next.shape, pi_next.dtype)
    noise = jnp.clip(noise, -noise_clip * max_action, noise_clip * max_action)
    return jnp.clip(pi_next + noise, -max_action, max_action)


def td_target(q_next: jax.Array, reward: jax.Array, terminal: jax.Array, gamma: float) -> jax.Array:
    """``r + gamma (1 - d) min_i Q_i^targ(s', a')`` from the target critics ``q_next [2, B]``
    (stop-gradient; ``d = 0`` on a time-limit truncation, so it keeps bootstrapping)."""
    check_rank(q_next, "q_next", 2)
    check_shape(reward, "reward", (q_next.shape[1],), "[B]")
    check_shape(terminal, "terminal", (q_next.shape[1],), "[B]")
    y = reward + gamma * (1.0 - terminal) * jnp.min(q_next, axis=0)
    return jax.lax.stop_gradient(y)


def critic_loss(q: jax.Array, y: jax.Array) -> jax.Array:
    """``sum_i mean_B (Q_i(s, a) - y)^2`` for ``q [2, B]``, ``y [B]``."""
    check_rank(q, "q", 2)
    check_shape(y, "y", (q.shape[1],), "[B]")
    return jnp.sum(jnp.mean((q - y[None, :]) ** 2, axis=1))


def coefficient_weights(beta: jax.Array, w: jax.Array, loosen) -> jax.Array:
    """``beta~ = stopgrad(beta) (w if loosen else 1)`` for the actor's BC term, ``[B]``; ``loosen``
    a 0/1 float (traced, so baselines and SSAR share one program)."""
    check_shape(w, "w", jnp.shape(beta), "like `beta`")
    return jax.lax.stop_gradient(beta) * (loosen * w + (1.0 - loosen))


def actor_loss(pi: jax.Array, a: jax.Array, q1_pi: jax.Array, beta_tilde: jax.Array) -> jax.Array:
    """``-lambda_Q mean Q_1(s, pi(s)) + mean_{B x A} beta~ (pi - a)^2`` with
    ``lambda_Q = 1 / mean|Q_1|`` (stop-gradient). ``pi, a: [B, A]``, ``q1_pi, beta_tilde: [B]``."""
    check_rank(pi, "pi", 2)
    check_shape(a, "a", pi.shape, "[B, A] like `pi`")
    check_shape(q1_pi, "q1_pi", pi.shape[:1], "[B]")
    check_shape(beta_tilde, "beta_tilde", pi.shape[:1], "[B]")
    lam = 1.0 / jax.lax.stop_gradient(jnp.mean(jnp.abs(q1_pi)))
    bc = jnp.mean(jax.lax.stop_gradient(beta_tilde)[:, None] * (pi - a) ** 2)
    return -lam * jnp.mean(q1_pi) + bc


def constraint_slack(pi: jax.Array, a: jax.Array, n, sigma_e: float = SIGMA_E) -> jax.Array:
    """``C_n - mean_A min((pi - a)^2, 1)`` per row, ``[B]``; ``pi`` is stop-gradient (the slack
    trains ``beta`` only). Positive: the data action is within ``n sigma_e`` of the policy."""
    check_rank(pi, "pi", 2)
    check_shape(a, "a", pi.shape, "[B, A] like `pi`")
    gap = jnp.mean(jnp.minimum((jax.lax.stop_gradient(pi) - a) ** 2, 1.0), axis=-1)
    return (sigma_e * n) ** 2 - gap


def beta_loss(beta: jax.Array, slack: jax.Array, w: jax.Array, select) -> jax.Array:
    """``mean_B slack beta_phi(s) (w if select else 1)``: dual descent on ``d <= C_n`` (rows with
    ``w = 0`` contribute exactly zero when ``select = 1``; the mean is over the whole batch)."""
    check_array(beta, "beta", ndim=1, finite=False)
    check_shape(slack, "slack", beta.shape, "[B]")
    check_shape(w, "w", beta.shape, "[B]")
    weight = select * w + (1.0 - select)
    return jnp.mean(jax.lax.stop_gradient(slack) * beta * weight)


def threshold_step(n, frozen, slack_mean, n_start: float, n_end: float):
    """One period of the threshold schedule: ``(n, frozen)`` after the period whose mean trusted
    slack is ``slack_mean``: frozen for good once it is positive, else ``n`` rises by
    ``(n_end - n_start) / 10``, never above ``n_end`` (traceable: ``lax`` selects, no host sync)."""
    delta = (n_end - n_start) / 10.0
    freeze = jnp.logical_or(frozen, slack_mean > 0)
    raised = jnp.minimum(n_end, n + delta)
    return jnp.where(freeze, n, raised), freeze

"""TD3+BC and TD3+BC+SSAR as one jitted step (spec 2.3, 2.4; issue 24).

One code path for the method and its baselines: a run is described by a :class:`RunSpec` of traced
floats (``alpha``, ``adapt``, ``select``, ``loosen``), so the runs of a dataset (seeds x configs)
are one ``vmap``-ped program. A fixed-strength TD3+BC baseline is ``adapt = 0`` (``beta`` frozen
at ``1 / alpha``), ``select = loosen = 0``; SSAR is ``adapt = 1`` with the flags on.

Per step (batch ``B`` uniform over the dataset, states normalised by the dataset's mean and
``std + 1e-3``): the critic step every step; every ``policy_freq`` steps the actor step, the
coefficient step on the **pre-update** policy (``beta``'s optimiser ``clip_by_global_norm(0.5)``
then Adam at ``lr_beta = beta_lr_budget / steps``), the running sums of the trusted slack and the
soft target updates (``tau``). Every ``period = update_frac * steps`` steps the threshold schedule
(:func:`~jaxlab.rl.ssar.td3bc.threshold_step`) sees the **period's running mean** of the trusted
slack (the official code looks at one batch's trusted rows, noisy when 15% of rows are trusted:
a documented deviation). Actor and beta updates are computed every step and applied where due
(under ``vmap`` a ``cond`` would compute both branches anyway).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.sharding import Mesh

from jaxlab.core import sharding
from jaxlab.core.checks import (
    check_array,
    check_instance,
    check_int,
    check_ints,
    check_key,
    check_scalar,
    is_concrete,
)
from jaxlab.core.training import all_finite
from jaxlab.rl.ssar import evaluation as E
from jaxlab.rl.ssar import td3bc as L
from jaxlab.rl.ssar.data import Transitions, _check_transitions, state_normaliser
from jaxlab.rl.ssar.nets import Actor, BetaNet, TwinCritic

__all__ = [
    "RunSpec",
    "TD3BCConfig",
    "TD3BCState",
    "Trainer",
    "make_trainer",
    "ssar_run",
    "stack_runs",
    "td3bc_run",
]


class _BudgetConfig:
    """What TD3BCConfig and CQLConfig share: the checks of their common fields and the budget
    properties ``lr_beta = beta_lr_budget / steps`` and ``period = update_frac * steps``."""

    def _check_shared(self) -> None:
        check_int(self.steps, "steps", minimum=1)
        check_int(self.batch, "batch", minimum=1)
        check_ints(self.hidden, "hidden", minimum=1)
        check_ints(self.beta_hidden, "beta_hidden", minimum=1)
        check_scalar(self.gamma, "gamma", 0.0, 1.0, high_open=True)
        check_scalar(self.tau, "tau", 0.0, 1.0, low_open=True)
        check_scalar(self.beta_lr_budget, "beta_lr_budget", 0.0)
        check_scalar(self.update_frac, "update_frac", 0.0, 1.0, low_open=True)
        check_scalar(self.n_start, "n_start", 0.0, low_open=True)
        check_scalar(self.n_end, "n_end", self.n_start)

    @property
    def lr_beta(self) -> float:
        return self.beta_lr_budget / self.steps

    @property
    def period(self) -> int:
        return max(1, round(self.update_frac * self.steps))


@dataclasses.dataclass(frozen=True)
class TD3BCConfig(_BudgetConfig):
    """TD3+BC(+SSAR) hyperparameters (official values unless noted; widths 64, official 256).

    Attributes:
      steps: ``T``, the run's gradient steps (sets ``lr_beta`` and the schedule period).
      batch: minibatch rows. hidden / beta_hidden: actor-critic and coefficient-net widths.
      gamma, tau, policy_freq, policy_noise, noise_clip, lr: TD3's.
      beta_lr_budget: ``lr_beta * T`` (official 3e-8 x 1M = 0.03), so a short run cannot
        silently freeze ``beta``.
      update_frac: schedule period ``U = update_frac * T`` (official 50k of 1M).
      n_start, n_end: the threshold multiplier's range. beta0: ``1 / alpha_TD3BC`` = 0.4.
    """

    steps: int = 8000
    batch: int = 256
    hidden: tuple[int, ...] = (64, 64)
    beta_hidden: tuple[int, ...] = (64, 64, 64)
    gamma: float = 0.99
    tau: float = 0.005
    policy_freq: int = 2
    policy_noise: float = 0.2
    noise_clip: float = 0.5
    lr: float = 3e-4
    beta_lr_budget: float = 0.03
    update_frac: float = 0.05
    n_start: float = 1.0
    n_end: float = 3.0
    beta0: float = 0.4

    def __post_init__(self):
        self._check_shared()
        check_int(self.policy_freq, "policy_freq", minimum=1)
        check_scalar(self.policy_noise, "policy_noise", 0.0)
        check_scalar(self.noise_clip, "noise_clip", 0.0)
        check_scalar(self.lr, "lr", 0.0, low_open=True)
        check_scalar(self.beta0, "beta0", 0.0, low_open=True)


class RunSpec(NamedTuple):
    """One run's traced settings (``[]`` float each, or ``[R]`` for ``R`` vmapped runs).

    alpha: TD3+BC's strength (the frozen ``beta = 1 / alpha`` when ``adapt = 0``); adapt: 1 trains
    ``beta_phi``; select: 1 trains it on trusted rows only; loosen: 1 applies the BC term on
    trusted rows only."""

    alpha: jax.Array
    adapt: jax.Array
    select: jax.Array
    loosen: jax.Array


def td3bc_run(alpha: float = 2.5) -> RunSpec:
    """The fixed-strength baseline TD3+BC(``alpha``)."""
    check_scalar(alpha, "alpha", 0.0, low_open=True)
    return RunSpec(*(jnp.float32(v) for v in (alpha, 0.0, 0.0, 0.0)))


def ssar_run(config: TD3BCConfig, select: bool = True, loosen: bool = True) -> RunSpec:
    """TD3+BC+SSAR (``alpha = 1 / beta0`` is only its initial strength)."""
    check_instance(config, "config", TD3BCConfig)
    return RunSpec(*(jnp.float32(v) for v in (1 / config.beta0, 1.0, select, loosen)))


@struct.dataclass
class TD3BCState:
    """A run's state (a pytree; leading ``[R]`` axis on every leaf when runs are vmapped).

    Attributes:
      step: ``[]`` int32 gradient steps done. actor, actor_target, critic, critic_target, beta:
        the networks' variables. actor_opt, critic_opt, beta_opt: their optimiser states.
      n: ``[]`` the threshold multiplier. frozen: ``[]`` bool, the schedule has stopped.
      slack_sum, slack_count: ``[]`` the period's running sums of trusted slack and trusted rows.
      key: ``[]`` PRNG key; step ``t`` draws from ``fold_in(key, t)``. run: the :class:`RunSpec`.
    """

    step: jax.Array
    actor: dict
    actor_target: dict
    critic: dict
    critic_target: dict
    beta: dict
    actor_opt: optax.OptState
    critic_opt: optax.OptState
    beta_opt: optax.OptState
    n: jax.Array
    frozen: jax.Array
    slack_sum: jax.Array
    slack_count: jax.Array
    key: jax.Array
    run: RunSpec


class Trainer(NamedTuple):
    """A trainer's pure functions (TD3+BC's and CQL's alike).

    - ``init(key, run) -> state`` (one run); ``init_runs(key, runs) -> state`` with a leading
      ``[R]`` axis (``runs`` a stacked :class:`RunSpec`), placed on the trainer's mesh (runs axis
      split over its devices) when it has one;
    - ``step(state, x=None) -> (state, metrics)`` (one run; ``vmap`` it, or ``run_chunked(...,
      vmap=True)``); the minibatch is drawn from the state's key, or ``x`` gives its ``[batch]``
      int row indices (a host-driven loop, as the official code samples batches);
    - ``evaluate(state) -> [E]`` episode returns from the trainer's fixed start states;
    - ``policy(state, obs) -> actions`` in ``[-1, 1]`` (raw observations, deterministic);
    - ``q_overestimation(state) -> []``: mean over the trainer's probe states (64 dataset states)
      of ``min_i Q_i(s, pi(s))`` minus the policy's discounted Monte Carlo return from ``s`` over
      1000 steps;
    - ``slack(state) -> [N]``: the coefficient step's slack on every dataset row at the run's
      current ``n`` (positive: the data action lies inside the policy's ``n``-threshold region;
      a trusted row with negative slack is a violation).
    """

    init: Callable
    step: Callable
    evaluate: Callable
    policy: Callable
    q_overestimation: Callable
    init_runs: Callable
    slack: Callable


PROBE_STATES = 64


def stack_runs(runs) -> RunSpec:
    """A list of one-run :class:`RunSpec` s as one ``[R]`` RunSpec."""
    runs = list(runs)
    for i, r in enumerate(runs):
        check_instance(r, f"runs[{i}]", RunSpec)
    if not runs:
        raise ValueError("stack_runs: `runs` is empty.")
    return RunSpec(
        *(jnp.stack([jnp.asarray(v, jnp.float32) for v in f]) for f in zip(*runs, strict=True))
    )


def check_selection(trust: jax.Array, run: RunSpec) -> None:
    """A run that selects (``select > 0``) needs a trust mask with a trusted row: else its
    coefficient never trains and its BC term vanishes. Skipped where either is traced."""
    if not (is_concrete(trust) and is_concrete(run.select)):
        return
    if float(jnp.sum(trust)) == 0.0 and bool(jnp.any(jnp.asarray(run.select) > 0)):
        raise ValueError("`trust` marks no transition as trusted, but `run` selects "
                         "(select > 0): no row would train beta or be regularised.")  # fmt: skip


def _assemble(state_type, init, step, policy, critic, norm, slack_of, data, trust, eval_key,
              eval_episodes, gamma, mesh) -> Trainer:  # fmt: skip
    """A :class:`Trainer` from a family's ``init`` (which checks its run with
    :func:`check_selection`), ``step``, deterministic ``policy(state, raw_obs)``, twin ``critic``
    module, state normaliser ``norm`` and ``slack_of(state) -> [N]``: the evaluation start
    states and Q-overestimation probes from ``eval_key``, and ``init_runs`` on ``mesh``."""
    starts = E.start_states(eval_key, eval_episodes)  # the starts of earlier measured runs
    probes = E.probe_states(
        data.obs, jax.random.fold_in(eval_key, 1), min(PROBE_STATES, data.obs.shape[0])
    )

    def evaluate(state):
        check_instance(state, "state", state_type)
        return E.episode_returns(lambda o: policy(state, o), starts)

    def q_overestimation(state):
        check_instance(state, "state", state_type)
        q = jnp.min(critic.apply(state.critic, norm(probes), policy(state, probes)), axis=0)
        return jnp.mean(q - E.mc_returns(lambda o: policy(state, o), probes, gamma))

    def slack(state):
        check_instance(state, "state", state_type)
        return slack_of(state)

    def init_runs(key, runs: RunSpec):
        key = check_key(key)
        check_instance(runs, "runs", RunSpec)
        r = jnp.shape(runs.alpha)
        if len(r) != 1 or any(jnp.shape(v) != r for v in runs):
            raise ValueError(f"init_runs: `runs` must hold [R] arrays, got shapes "
                             f"{[jnp.shape(v) for v in runs]} (see stack_runs).")  # fmt: skip
        if mesh is not None:
            sharding.check_divisible(r[0], mesh, "runs")
        check_selection(trust, runs)  # (the vmapped init below sees traced runs)
        state = jax.vmap(init)(jax.random.split(key, r[0]), runs)
        return state if mesh is None else sharding.shard_batch(state, mesh)

    return Trainer(init, step, evaluate, policy, q_overestimation, init_runs, slack)


def _batch_rows(x, key, batch: int, n_rows: int) -> jax.Array:
    """A step's minibatch rows: ``x`` (``None``: drawn uniformly from ``key``, as the trainer
    does) or caller-chosen int row indices ``[batch]`` (e.g. sampled on the host)."""
    if x is None:
        return jax.random.randint(key, (batch,), 0, n_rows)
    x = check_array(x, "x", shape=(batch,), dims="[batch] row indices", kind="int")
    if is_concrete(x) and x.size and (int(jnp.min(x)) < 0 or int(jnp.max(x)) >= n_rows):
        raise ValueError(f"`x` row indices must lie in [0, {n_rows}), got "
                         f"[{int(jnp.min(x))}, {int(jnp.max(x))}].")  # fmt: skip
    return x


def _soft(target, online, tau):
    return jax.tree_util.tree_map(lambda t, o: (1 - tau) * t + tau * o, target, online)


def _where(flag, new, old):
    return jax.tree_util.tree_map(lambda a, b: jnp.where(flag, a, b), new, old)


def schedule_update(state, slack, w, due, config):
    """The threshold schedule in the carry: ``(n, frozen, slack_sum, slack_count)`` after a step
    whose trusted slack ``slack * w`` joins the period's running sums where ``due``; at a period's
    end (``(step + 1) % config.period == 0``) :func:`~jaxlab.rl.ssar.td3bc.threshold_step` sees
    the period's mean (adaptive runs with trusted rows only) and the sums restart."""
    slack_sum = state.slack_sum + jnp.where(due, jnp.sum(slack * w), 0.0)
    slack_count = state.slack_count + jnp.where(due, jnp.sum(w), 0.0)
    period_end = ((state.step + 1) % config.period) == 0
    mean_slack = slack_sum / jnp.maximum(slack_count, 1.0)
    n_next, frozen_next = L.threshold_step(
        state.n, state.frozen, mean_slack, config.n_start, config.n_end
    )
    schedule = period_end & (state.run.adapt > 0) & (slack_count > 0)
    n = jnp.where(schedule, n_next, state.n)
    frozen = jnp.where(schedule, frozen_next, state.frozen)
    slack_sum = jnp.where(period_end, 0.0, slack_sum)
    slack_count = jnp.where(period_end, 0.0, slack_count)
    return n, frozen, slack_sum, slack_count


def coefficient_step(state, beta_net, beta_opt, s, slack, w, learn, due, config):
    """The coefficient's dual step (:func:`~jaxlab.rl.ssar.td3bc.beta_loss` on ``slack``,
    applied where ``learn``) and the threshold schedule (:func:`schedule_update`, fed where
    ``due``): ``(beta_loss, beta, beta_opt_state, (n, frozen, slack_sum, slack_count))``."""
    b_loss, b_grad = jax.value_and_grad(
        lambda p: L.beta_loss(beta_net.apply(p, s), slack, w, state.run.select)
    )(state.beta)
    b_upd, opt_state = beta_opt.update(b_grad, state.beta_opt, state.beta)
    beta = _where(learn, optax.apply_updates(state.beta, b_upd), state.beta)
    opt_state = _where(learn, opt_state, state.beta_opt)
    return b_loss, beta, opt_state, schedule_update(state, slack, w, due, config)


def trust_metrics(beta_used, slack, w) -> dict:
    """``beta_trusted`` (mean coefficient on the batch's trusted rows) and ``violation_frac``
    (their fraction with negative slack); 0 on a batch without trusted rows."""
    trusted = jnp.maximum(jnp.sum(w), 1.0)
    return {
        "beta_trusted": jnp.sum(beta_used * w) / trusted,
        "violation_frac": jnp.sum((slack < 0) * w) / trusted,
    }


def make_trainer(
    config: TD3BCConfig,
    data: Transitions,
    trust: jax.Array,
    eval_key: jax.Array,
    eval_episodes: int = 10,
    mesh: Mesh | None = None,
) -> Trainer:
    """A TD3+BC(+SSAR) trainer on ``data`` with trust mask ``trust [N]`` (0/1); ``eval_key``
    draws the ``eval_episodes`` start states shared by every run (returns depend on the start
    angle, so runs are compared on the same starts) and the probe states of
    ``q_overestimation``; ``mesh`` (:func:`jaxlab.core.sharding.data_mesh`) splits the runs
    axis of ``init_runs``' state over its devices (the data are replicated)."""
    check_instance(config, "config", TD3BCConfig)
    if mesh is not None:
        check_instance(mesh, "mesh", Mesh)
    _check_transitions(data)
    n_rows = data.obs.shape[0]
    trust = check_array(trust, "trust", shape=(n_rows,), kind="float")
    eval_key = check_key(eval_key, "eval_key")
    check_int(eval_episodes, "eval_episodes", minimum=1)
    a_dim = data.action.shape[1]
    norm = state_normaliser(data)
    obs, next_obs = norm(data.obs), norm(data.next_obs)
    actor, critic = Actor(a_dim, tuple(config.hidden)), TwinCritic(tuple(config.hidden))
    beta_net = BetaNet(config.beta0, tuple(config.beta_hidden))
    opt = optax.adam(config.lr)
    beta_opt = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(config.lr_beta))

    def init(key, run: RunSpec) -> TD3BCState:
        key = check_key(key)
        check_instance(run, "run", RunSpec)
        check_selection(trust, run)
        k_a, k_c, k_b, k_run = jax.random.split(key, 4)
        s0, a0 = obs[:1], data.action[:1]
        ap, cp, bp = actor.init(k_a, s0), critic.init(k_c, s0, a0), beta_net.init(k_b, s0)
        f32 = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
        return TD3BCState(
            jnp.zeros((), jnp.int32), ap, ap, cp, cp, bp, opt.init(ap), opt.init(cp),
            beta_opt.init(bp), f32(config.n_start), jnp.zeros((), bool), f32(0.0), f32(0.0),
            k_run, RunSpec(*(f32(v) for v in run)),
        )  # fmt: skip

    def step(state: TD3BCState, x=None):
        check_instance(state, "state", TD3BCState)
        run = state.run
        k_idx, k_noise = jax.random.split(jax.random.fold_in(state.key, state.step))
        idx = _batch_rows(x, k_idx, config.batch, n_rows)
        s, a, r, s2 = obs[idx], data.action[idx], data.reward[idx], next_obs[idx]
        d, w = data.terminal[idx], trust[idx]

        # critic (every step)
        a2 = L.smoothed_target_action(
            k_noise, actor.apply(state.actor_target, s2), 1.0, config.policy_noise,
            config.noise_clip,
        )  # fmt: skip
        y = L.td_target(critic.apply(state.critic_target, s2, a2), r, d, config.gamma)
        c_loss, c_grad = jax.value_and_grad(lambda p: L.critic_loss(critic.apply(p, s, a), y))(
            state.critic
        )
        c_upd, critic_opt = opt.update(c_grad, state.critic_opt, state.critic)
        critic_p = optax.apply_updates(state.critic, c_upd)

        # actor and coefficient (applied every policy_freq steps)
        pi_pre = actor.apply(state.actor, s)
        beta = beta_net.apply(state.beta, s)
        beta_used = run.adapt * beta + (1.0 - run.adapt) / run.alpha
        beta_t = L.coefficient_weights(beta_used, w, run.loosen)

        def a_loss_fn(p):
            pi = actor.apply(p, s)
            return L.actor_loss(pi, a, critic.apply(critic_p, s, pi)[0], beta_t)

        a_loss, a_grad = jax.value_and_grad(a_loss_fn)(state.actor)
        a_upd, actor_opt = opt.update(a_grad, state.actor_opt, state.actor)
        actor_p = optax.apply_updates(state.actor, a_upd)
        slack = L.constraint_slack(pi_pre, a, state.n)
        due = (state.step % config.policy_freq) == 0
        learn_beta = due & (run.adapt > 0)  # n may be frozen; beta keeps learning
        b_loss, beta_new, beta_opt_s, schedule = coefficient_step(
            state, beta_net, beta_opt, s, slack, w, learn_beta, due, config
        )
        actor_new = _where(due, actor_p, state.actor)
        actor_opt = _where(due, actor_opt, state.actor_opt)
        actor_t = _where(due, _soft(state.actor_target, actor_new, config.tau), state.actor_target)
        critic_t = _where(
            due, _soft(state.critic_target, critic_p, config.tau), state.critic_target
        )
        n, frozen, slack_sum, slack_count = schedule

        metrics = {
            "critic_loss": c_loss,
            "actor_loss": a_loss,
            "beta_loss": b_loss,
            **trust_metrics(beta_used, slack, w),
            "n": n,
            "finite": all_finite(c_loss, a_loss, critic_p, actor_new, beta_new),
        }
        new = state.replace(
            step=state.step + 1, actor=actor_new, actor_target=actor_t, critic=critic_p,
            critic_target=critic_t, beta=beta_new, actor_opt=actor_opt, critic_opt=critic_opt,
            beta_opt=beta_opt_s, n=n, frozen=frozen, slack_sum=slack_sum,
            slack_count=slack_count,
        )  # fmt: skip
        return new, metrics

    def policy(state: TD3BCState, raw_obs: jax.Array) -> jax.Array:
        return actor.apply(state.actor, norm(raw_obs))

    def slack_of(state: TD3BCState) -> jax.Array:
        return L.constraint_slack(actor.apply(state.actor, obs), data.action, state.n)

    return _assemble(TD3BCState, init, step, policy, critic, norm, slack_of, data, trust,
                     eval_key, eval_episodes, config.gamma, mesh)  # fmt: skip

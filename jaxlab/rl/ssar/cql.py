"""CQL and CQL+SSAR: the loss pieces and one jitted step (spec 2.5; issue 24).

The backbone is CORL's CQL (the one SSAR's code builds on): a SAC tanh-Gaussian actor with
automatic entropy tuning (target entropy ``-|A|``, ``log alpha_ent`` starts at 0, its Adam at the
actor's learning rate), twin LayerNorm critics with soft targets every step, no entropy backup,
and the conservative gap

    ``Delta_i(s) = T logsumexp_30(Q_i(s, a_unif) - log 0.5^|A|, Q_i(s, a_pi(s')) - log pi(a|s'),
    Q_i(s, a_pi(s)) - log pi(a|s)) / T - Q_i(s, a_data)``

from 10 uniform actions and 10 policy samples at ``s`` and at ``s'`` (all evaluated at ``s``,
detached, with their detached joint log-probabilities: the importance corrections). The critic
loss is ``sum_i [mean (Q_i - y)^2 + mean_B beta~(s) Delta_i(s)]`` with
``beta~ = stopgrad(beta) (w if loosen)``; CQL is ``beta`` frozen at ``cql_alpha`` (the
:class:`~jaxlab.rl.ssar.RunSpec`'s ``alpha``) with ``w = 1`` and the flags off.

The coefficient step comes **after** the actor and critic updates, on the updated policy, per
action dimension (:func:`coefficient_slack`): ``l_data = log pi(a|s)`` (dataset actions clipped
to ``+-(1 - 1e-4)``), floored at ``l_10``; ``l_n`` = min over ``+-`` of ``log pi(a_+-|s)`` with
``a_+- = tanh(mu +- n sigma)`` clamped to ``+-0.99999`` and to within ``0.1 n`` of ``tanh mu``;
slack ``= mean_A(l_data - l_n)``, positive when the data action is more likely than the
``n``-sigma action (inside the region: descent lowers ``beta`` there); the dataset's actions are
clipped once, for the critics as well, as the official code does. Densities are numpyro's
``Normal`` + ``TanhTransform`` (:func:`~jaxlab.rl.ssar.nets.tanh_gaussian`). Not built: the
Lagrange variant, max-backup and the other AntMaze-only options.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import optax
from flax import struct
from jax.sharding import Mesh

from jaxlab.core.checks import (
    check_array,
    check_instance,
    check_int,
    check_key,
    check_rank,
    check_scalar,
    check_shape,
)
from jaxlab.core.training import all_finite
from jaxlab.rl.ssar import td3bc as L
from jaxlab.rl.ssar.data import Transitions, _check_transitions, state_normaliser
from jaxlab.rl.ssar.nets import BetaNet, CQLCritic, TanhGaussianActor, tanh_gaussian
from jaxlab.rl.ssar.train import (
    RunSpec,
    Trainer,
    _assemble,
    _batch_rows,
    _BudgetConfig,
    _soft,
    check_selection,
    coefficient_step,
    trust_metrics,
)

__all__ = [
    "ACTION_CLIP",
    "CQLConfig",
    "CQLState",
    "coefficient_slack",
    "cql_gap",
    "cql_run",
    "cql_ssar_run",
    "entropy_loss",
    "log_prob_away_from_mean",
    "make_cql_trainer",
    "sac_policy_loss",
]

ACTION_CLIP = 1.0 - 1e-4  # dataset actions for the log-density (atanh(+-1) is infinite)


@dataclasses.dataclass(frozen=True)
class CQLConfig(_BudgetConfig):
    """CQL(+SSAR) hyperparameters (CORL / SSAR values unless noted; widths 64, official 256).

    Attributes:
      steps: ``T`` (sets ``lr_beta`` and the schedule period). batch: minibatch rows.
      hidden: actor and critic hidden widths (3 layers). beta_hidden: the coefficient net's.
      gamma, tau: discount and the critics' soft-update rate (every step).
      policy_lr, critic_lr: Adam rates of the actor (and the entropy temperature) and critics.
        ``policy_lr`` defaults to the official 3e-5, set for a 1M-step run; at a few thousand
        steps the actor barely moves at that rate (the ``ssar`` experiment uses 3e-4).
      n_actions: samples per source (uniform, pi(s), pi(s')) in the gap. temperature: its ``T``.
      cql_alpha: the fixed gap weight of CQL, and SSAR's ``beta0``.
      beta_lr_budget: ``lr_beta * T`` (official 1e-8 x 1M = 0.01).
      update_frac, n_start, n_end: the threshold schedule's period fraction and range.
    """

    steps: int = 8000
    batch: int = 256
    hidden: tuple[int, ...] = (64, 64, 64)
    beta_hidden: tuple[int, ...] = (64, 64, 64)
    gamma: float = 0.99
    tau: float = 5e-3
    policy_lr: float = 3e-5
    critic_lr: float = 3e-4
    n_actions: int = 10
    temperature: float = 1.0
    cql_alpha: float = 5.0
    beta_lr_budget: float = 0.01
    update_frac: float = 0.05
    n_start: float = 1.0
    n_end: float = 3.0

    def __post_init__(self):
        self._check_shared()
        check_scalar(self.policy_lr, "policy_lr", 0.0, low_open=True)
        check_scalar(self.critic_lr, "critic_lr", 0.0, low_open=True)
        check_int(self.n_actions, "n_actions", minimum=1)
        check_scalar(self.temperature, "temperature", 0.0, low_open=True)
        check_scalar(self.cql_alpha, "cql_alpha", 0.0, low_open=True)

    @property
    def beta0(self) -> float:
        return self.cql_alpha


def cql_run(cql_alpha: float = 5.0) -> RunSpec:
    """The fixed-strength baseline CQL(``cql_alpha``): ``beta`` frozen at ``cql_alpha``."""
    check_scalar(cql_alpha, "cql_alpha", 0.0, low_open=True)
    return RunSpec(*(jnp.float32(v) for v in (cql_alpha, 0.0, 0.0, 0.0)))


def cql_ssar_run(config: CQLConfig, select: bool = True, loosen: bool = True) -> RunSpec:
    """CQL+SSAR (``beta`` starts near ``beta0 = cql_alpha``)."""
    check_instance(config, "config", CQLConfig)
    return RunSpec(*(jnp.float32(v) for v in (config.cql_alpha, 1.0, select, loosen)))


def cql_gap(
    q_data: jax.Array,
    q_rand: jax.Array,
    q_curr: jax.Array,
    q_next: jax.Array,
    logp_curr: jax.Array,
    logp_next: jax.Array,
    action_dim: int,
    temperature: float = 1.0,
) -> jax.Array:
    """``[C, B]`` conservative gaps from ``q_data [C, B]`` and the sampled actions' values
    ``q_rand, q_curr, q_next [C, B, K]`` (uniform, ``pi(s)``, ``pi(s')``, all at ``s``) with the
    samples' joint log-probabilities ``logp_curr, logp_next [B, K]`` (stop-gradient)."""
    check_rank(q_data, "q_data", 2)
    shape = (*q_data.shape, q_rand.shape[-1] if q_rand.ndim == 3 else -1)
    for name, q in (("q_rand", q_rand), ("q_curr", q_curr), ("q_next", q_next)):
        check_shape(q, name, shape, "[C, B, K]")
    for name, lp in (("logp_curr", logp_curr), ("logp_next", logp_next)):
        check_shape(lp, name, shape[1:], "[B, K]")
    log_uniform = action_dim * math.log(0.5)  # the uniform density on [-1, 1]^A
    sg = jax.lax.stop_gradient
    cat = jnp.concatenate(
        [q_rand - log_uniform, q_next - sg(logp_next)[None], q_curr - sg(logp_curr)[None]], -1
    )
    return temperature * jax.nn.logsumexp(cat / temperature, axis=-1) - q_data


def sac_policy_loss(log_pi: jax.Array, q_pi: jax.Array, alpha_ent) -> jax.Array:
    """``mean_B(alpha_ent log pi(a~|s) - min_i Q_i(s, a~))`` (``alpha_ent`` stop-gradient)."""
    check_rank(log_pi, "log_pi", 1)
    check_shape(q_pi, "q_pi", log_pi.shape, "[B]")
    return jnp.mean(jax.lax.stop_gradient(alpha_ent) * log_pi - q_pi)


def entropy_loss(log_alpha: jax.Array, log_pi: jax.Array, target_entropy: float) -> jax.Array:
    """``-mean(log alpha_ent stopgrad(log pi + target_entropy))``: descent raises the
    temperature when the policy's entropy is below target."""
    return -jnp.mean(log_alpha * jax.lax.stop_gradient(log_pi + target_entropy))


def log_prob_away_from_mean(mean: jax.Array, log_std: jax.Array, n) -> jax.Array:
    """``l_n [..., A]``: per dimension the smaller log-density of ``a_+- = tanh(mu +- n sigma)``,
    each clamped to ``+-0.99999`` and then to ``[tanh mu - 0.1 n, tanh mu + 0.1 n]`` (the second
    clamp binds when ``sigma`` is large)."""
    check_shape(log_std, "log_std", jnp.shape(mean), "like `mean`")
    d = tanh_gaussian(mean, log_std)
    centre, width, std = jnp.tanh(mean), 0.1 * n, jnp.exp(log_std)

    def lp(sign):
        a = jnp.clip(jnp.tanh(mean + sign * n * std), -0.99999, 0.99999)
        return d.log_prob(jnp.clip(a, centre - width, centre + width))

    return jnp.minimum(lp(1.0), lp(-1.0))


def coefficient_slack(mean: jax.Array, log_std: jax.Array, action: jax.Array, n) -> jax.Array:
    """``[B]`` slack ``mean_A(max(log pi(a|s), l_10) - l_n)`` of CQL+SSAR's coefficient step
    (dataset actions clipped to ``+-ACTION_CLIP``; stop-gradient: it trains ``beta`` only)."""
    check_rank(mean, "mean", 2)
    check_shape(action, "action", mean.shape, "[B, A] like `mean`")
    d = tanh_gaussian(mean, log_std)
    data = d.log_prob(jnp.clip(action, -ACTION_CLIP, ACTION_CLIP))
    data = jnp.maximum(data, log_prob_away_from_mean(mean, log_std, 10.0))
    slack = jnp.mean(data - log_prob_away_from_mean(mean, log_std, n), axis=-1)
    return jax.lax.stop_gradient(slack)


def _sample(key, mean, log_std, count: int | None = None):
    """Reparameterised tanh-Gaussian actions and their joint log-probabilities: ``[B, A]``,
    ``[B]`` (``count=None``) or ``[B, K, A]``, ``[B, K]``."""
    if count is not None:  # [B, K, A] parameters (numpyro's sample_shape needs rank promotion)
        shape = (mean.shape[0], count, mean.shape[-1])
        mean = jnp.broadcast_to(mean[:, None, :], shape)
        log_std = jnp.broadcast_to(log_std[:, None, :], shape)
    d = tanh_gaussian(mean, log_std)
    a, inter = d.sample_with_intermediates(key)
    return a, d.log_prob(a, inter).sum(-1)


@struct.dataclass
class CQLState:
    """A CQL(+SSAR) run's state (a pytree; leading ``[R]`` axis when runs are vmapped).

    Attributes:
      step: ``[]`` int32 gradient steps done. actor, critic, critic_target, beta: variables.
      log_alpha: ``[]`` the entropy temperature's log. actor_opt, critic_opt, alpha_opt,
        beta_opt: optimiser states. n: ``[]`` threshold multiplier. frozen: ``[]`` bool.
      slack_sum, slack_count: ``[]`` the period's running trusted-slack sums.
      key: ``[]`` PRNG key (step ``t`` draws from ``fold_in(key, t)``). run: the RunSpec.
    """

    step: jax.Array
    actor: dict
    critic: dict
    critic_target: dict
    beta: dict
    log_alpha: jax.Array
    actor_opt: optax.OptState
    critic_opt: optax.OptState
    alpha_opt: optax.OptState
    beta_opt: optax.OptState
    n: jax.Array
    frozen: jax.Array
    slack_sum: jax.Array
    slack_count: jax.Array
    key: jax.Array
    run: RunSpec


def make_cql_trainer(
    config: CQLConfig,
    data: Transitions,
    trust: jax.Array,
    eval_key: jax.Array,
    eval_episodes: int = 10,
    mesh: Mesh | None = None,
) -> Trainer:
    """A CQL(+SSAR) trainer on ``data`` with trust mask ``trust [N]``: the same
    :class:`~jaxlab.rl.ssar.Trainer` functions as :func:`~jaxlab.rl.ssar.make_trainer` (shared
    start and probe states from ``eval_key``; ``mesh`` splits the runs axis)."""
    check_instance(config, "config", CQLConfig)
    if mesh is not None:
        check_instance(mesh, "mesh", Mesh)
    _check_transitions(data)
    n_rows = data.obs.shape[0]
    trust = check_array(trust, "trust", shape=(n_rows,), kind="float")
    eval_key = check_key(eval_key, "eval_key")
    check_int(eval_episodes, "eval_episodes", minimum=1)
    a_dim = data.action.shape[1]
    target_entropy = -float(a_dim)
    norm = state_normaliser(data)
    obs, next_obs = norm(data.obs), norm(data.next_obs)
    actions = jnp.clip(data.action, -ACTION_CLIP, ACTION_CLIP)  # everywhere, as the official code
    actor, critic = TanhGaussianActor(a_dim, tuple(config.hidden)), CQLCritic(config.hidden)
    beta_net = BetaNet(config.beta0, tuple(config.beta_hidden))
    actor_opt = optax.adam(config.policy_lr)
    alpha_opt = optax.adam(config.policy_lr)
    critic_opt = optax.adam(config.critic_lr)
    beta_opt = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(config.lr_beta))
    k_act = config.n_actions

    def init(key, run: RunSpec) -> CQLState:
        key = check_key(key)
        check_instance(run, "run", RunSpec)
        check_selection(trust, run)
        k_a, k_c, k_b, k_run = jax.random.split(key, 4)
        s0, a0 = obs[:1], data.action[:1]
        ap, cp, bp = actor.init(k_a, s0), critic.init(k_c, s0, a0), beta_net.init(k_b, s0)
        log_alpha = jnp.zeros((), jnp.float32)
        f32 = lambda v: jnp.asarray(v, jnp.float32)  # noqa: E731
        return CQLState(
            jnp.zeros((), jnp.int32), ap, cp, cp, bp, log_alpha, actor_opt.init(ap),
            critic_opt.init(cp), alpha_opt.init(log_alpha), beta_opt.init(bp),
            f32(config.n_start), jnp.zeros((), bool), f32(0.0), f32(0.0), k_run,
            RunSpec(*(f32(v) for v in run)),
        )  # fmt: skip

    def step(state: CQLState, x=None):
        check_instance(state, "state", CQLState)
        run = state.run
        keys = jax.random.split(jax.random.fold_in(state.key, state.step), 6)
        idx = _batch_rows(x, keys[0], config.batch, n_rows)
        s, a, r, s2 = obs[idx], actions[idx], data.reward[idx], next_obs[idx]
        d, w = data.terminal[idx], trust[idx]
        alpha_ent = jnp.exp(state.log_alpha)

        # actor (SAC, current critics) and the entropy temperature
        def actor_loss_fn(p):
            a_pi, log_pi = _sample(keys[1], *actor.apply(p, s))
            q_pi = jnp.min(critic.apply(state.critic, s, a_pi), axis=0)
            return sac_policy_loss(log_pi, q_pi, alpha_ent), log_pi

        (a_loss, log_pi), a_grad = jax.value_and_grad(actor_loss_fn, has_aux=True)(state.actor)
        al_loss, al_grad = jax.value_and_grad(entropy_loss)(state.log_alpha, log_pi,
                                                            target_entropy)  # fmt: skip

        # critics: TD target from the current actor at s' and the target critics; the CQL gap
        pi_s2 = actor.apply(state.actor, s2)  # one forward pass for the target and the gap
        a2, _ = _sample(keys[2], *pi_s2)
        y = L.td_target(critic.apply(state.critic_target, s2, a2), r, d, config.gamma)
        a_rand = jax.random.uniform(keys[3], (config.batch, k_act, a_dim), minval=-1.0, maxval=1)
        a_cur, lp_cur = _sample(keys[4], *actor.apply(state.actor, s), k_act)
        a_nxt, lp_nxt = _sample(keys[5], *pi_s2, k_act)
        a_cur, a_nxt = jax.lax.stop_gradient(a_cur), jax.lax.stop_gradient(a_nxt)
        s_rep = jnp.broadcast_to(s[:, None, :], (config.batch, k_act, s.shape[-1]))
        beta = beta_net.apply(state.beta, s)
        beta_used = run.adapt * beta + (1.0 - run.adapt) * run.alpha
        beta_t = L.coefficient_weights(beta_used, w, run.loosen)

        def critic_loss_fn(p):
            q = critic.apply(p, s, a)
            gap = cql_gap(q, critic.apply(p, s_rep, a_rand), critic.apply(p, s_rep, a_cur),
                          critic.apply(p, s_rep, a_nxt), lp_cur, lp_nxt, a_dim,
                          config.temperature)  # fmt: skip
            cons = jnp.sum(jnp.mean(gap * beta_t[None, :], axis=1))
            return L.critic_loss(q, y) + cons, jnp.mean(gap)

        (c_loss, gap), c_grad = jax.value_and_grad(critic_loss_fn, has_aux=True)(state.critic)

        al_upd, alpha_opt_s = alpha_opt.update(al_grad, state.alpha_opt, state.log_alpha)
        log_alpha = optax.apply_updates(state.log_alpha, al_upd)
        a_upd, actor_opt_s = actor_opt.update(a_grad, state.actor_opt, state.actor)
        actor_p = optax.apply_updates(state.actor, a_upd)
        c_upd, critic_opt_s = critic_opt.update(c_grad, state.critic_opt, state.critic)
        critic_p = optax.apply_updates(state.critic, c_upd)

        # the coefficient step on the updated policy
        mean, log_std = actor.apply(actor_p, s)
        slack = coefficient_slack(mean, log_std, a, state.n)
        b_loss, beta_p, beta_opt_s, schedule = coefficient_step(
            state, beta_net, beta_opt, s, slack, w, run.adapt > 0, True, config
        )
        n, frozen, slack_sum, slack_count = schedule

        metrics = {
            "critic_loss": c_loss,
            "actor_loss": a_loss,
            "alpha_loss": al_loss,
            "entropy_alpha": alpha_ent,
            "cql_gap": gap,
            "beta_loss": b_loss,
            **trust_metrics(beta_used, slack, w),
            "n": n,
            "finite": all_finite(c_loss, a_loss, critic_p, actor_p, beta_p, log_alpha),
        }
        new = state.replace(
            step=state.step + 1, actor=actor_p, critic=critic_p,
            critic_target=_soft(state.critic_target, critic_p, config.tau), beta=beta_p,
            log_alpha=log_alpha, actor_opt=actor_opt_s, critic_opt=critic_opt_s,
            alpha_opt=alpha_opt_s, beta_opt=beta_opt_s, n=n, frozen=frozen,
            slack_sum=slack_sum, slack_count=slack_count,
        )  # fmt: skip
        return new, metrics

    def policy(state: CQLState, raw_obs: jax.Array) -> jax.Array:
        return jnp.tanh(actor.apply(state.actor, norm(raw_obs))[0])

    def slack_of(state: CQLState) -> jax.Array:
        return coefficient_slack(*actor.apply(state.actor, obs), actions, state.n)

    return _assemble(CQLState, init, step, policy, critic, norm, slack_of, data, trust,
                     eval_key, eval_episodes, config.gamma, mesh)  # fmt: skip

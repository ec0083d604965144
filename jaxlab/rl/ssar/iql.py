"""The ``iql`` trust mask: an IQL critic marks the transitions with a non-negative advantage.

Spec 2.6: twin ``Q`` and ``V`` (2 x 64 here, official 2 x 256; no LayerNorm), ``V`` fitted by the
expectile loss at ``tau`` to ``min_i Q_i^targ(s, a)``, ``Q`` to ``r + gamma (1 - d) V(s')``, Adam
3e-4, soft target updates 0.005; ``w = 1{min_i Q_i(s, a) >= V(s)}``. States are normalised by the
dataset's mean and ``std + 1e-3`` as in the trainer. The whole fit is one jitted ``lax.scan``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import optax

from jaxlab.core.checks import check_int, check_ints, check_key, check_scalar
from jaxlab.core.nn import MLP
from jaxlab.rl.ssar.data import Transitions, _check_transitions, state_normaliser
from jaxlab.rl.ssar.nets import TwinCritic

__all__ = ["expectile_loss", "iql_trust"]


def expectile_loss(diff: jax.Array, tau) -> jax.Array:
    """``mean |tau - 1{diff < 0}| diff^2``: the asymmetric square whose minimiser over a constant
    ``v`` (``diff = q - v``) is the ``tau``-expectile of ``q`` (the mean at 0.5, the max as
    ``tau -> 1``)."""
    weight = jnp.where(diff > 0, tau, 1.0 - tau)
    return jnp.mean(weight * diff**2)


def iql_trust(
    key: jax.Array,
    data: Transitions,
    tau: float = 0.7,
    steps: int = 10_000,
    batch: int = 256,
    hidden: tuple[int, ...] = (64, 64),
    gamma: float = 0.99,
) -> jax.Array:
    """``[N]`` float 0/1 trust of every transition from an IQL critic fitted for ``steps`` steps."""
    key = check_key(key)
    _check_transitions(data)
    check_scalar(tau, "tau", 0.0, 1.0, low_open=True, high_open=True)
    check_int(steps, "steps", minimum=1)
    check_int(batch, "batch", minimum=1)
    hidden = check_ints(hidden, "hidden", minimum=1)
    check_scalar(gamma, "gamma", 0.0, 1.0, high_open=True)
    return _iql_trust(key, data, float(tau), steps, batch, hidden, float(gamma))


@functools.partial(jax.jit, static_argnums=(2, 3, 4, 5, 6))
def _iql_trust(key, data, tau, steps, batch, hidden, gamma):
    norm = state_normaliser(data)
    obs, nxt = norm(data.obs), norm(data.next_obs)
    q_net = TwinCritic(hidden, layer_norm=False)
    v_net = MLP((*hidden, 1), activation="relu", init_scheme="torch")
    k_q, k_v, k_run = jax.random.split(key, 3)
    qp, vp = q_net.init(k_q, obs[:1], data.action[:1]), v_net.init(k_v, obs[:1])
    opt = optax.adam(3e-4)
    n = obs.shape[0]

    def v_of(p, s):
        return v_net.apply(p, s)[..., 0]

    def step(carry, k):
        qp, q_targ, vp, q_opt, v_opt = carry
        idx = jax.random.randint(k, (batch,), 0, n)
        s, a, r, s2, d = obs[idx], data.action[idx], data.reward[idx], nxt[idx], data.terminal[idx]
        target_q = jnp.min(q_net.apply(q_targ, s, a), axis=0)
        y = jax.lax.stop_gradient(r + gamma * (1.0 - d) * v_of(vp, s2))  # pre-update V (CORL)
        v_loss, v_grad = jax.value_and_grad(
            lambda p: expectile_loss(jax.lax.stop_gradient(target_q) - v_of(p, s), tau)
        )(vp)
        v_upd, v_opt = opt.update(v_grad, v_opt, vp)
        vp = optax.apply_updates(vp, v_upd)
        q_loss, q_grad = jax.value_and_grad(
            lambda p: jnp.sum(jnp.mean((q_net.apply(p, s, a) - y[None, :]) ** 2, axis=1))
        )(qp)
        q_upd, q_opt = opt.update(q_grad, q_opt, qp)
        qp = optax.apply_updates(qp, q_upd)
        q_targ = jax.tree_util.tree_map(lambda t, o: 0.995 * t + 0.005 * o, q_targ, qp)
        return (qp, q_targ, vp, q_opt, v_opt), (q_loss, v_loss)

    carry = (qp, qp, vp, opt.init(qp), opt.init(vp))
    (qp, _, vp, _, _), _ = jax.lax.scan(step, carry, jax.random.split(k_run, steps))
    advantage = jnp.min(q_net.apply(qp, obs, data.action), axis=0) - v_of(vp, obs)
    return (advantage >= 0).astype(jnp.float32)

"""Policy evaluation on gymnax ``Pendulum-v1``, shared by the TD3+BC and CQL trainers.

- :func:`start_states`: one fixed set of reset states (returns depend on the start angle, so every
  run of a comparison plays from the same starts);
- :func:`episode_returns`: undiscounted 200-step returns of a deterministic policy from them,
  ``vmap``-ped over episodes and ``scan``-ned over steps;
- :func:`probe_states` / :func:`mc_returns`: Q overestimation's reference, the discounted Monte
  Carlo return of the policy over ``horizon`` steps (1000: ``gamma^1000 = 4e-5``) from dataset
  states (``step_env`` has no time limit, so the rollout runs past 200 steps).
"""

from __future__ import annotations

from collections.abc import Callable

import gymnax
import jax
import jax.numpy as jnp
from gymnax.environments.classic_control.pendulum import EnvState

from jaxlab.rl.ssar.data import EPISODE_LEN, MAX_TORQUE

__all__ = ["episode_returns", "mc_returns", "probe_states", "start_states"]

Policy = Callable[[jax.Array], jax.Array]  # raw observations [N, 3] -> actions [N, 1] in [-1, 1]


def _env():
    return gymnax.make("Pendulum-v1")


def start_states(key: jax.Array, episodes: int) -> EnvState:
    """``episodes`` reset states drawn from ``key`` (a batched ``EnvState``)."""
    env, params = _env()
    return jax.vmap(lambda k: env.reset(k, params)[1])(jax.random.split(key, episodes))


def _play(policy: Policy, states: EnvState, steps: int, gamma: float) -> jax.Array:
    env, params = _env()

    def body(carry, t):
        states, ret = carry
        obs = jax.vmap(env.get_obs)(states)
        u = MAX_TORQUE * policy(obs)
        step = lambda s, a: env.step_env(jax.random.key(0), s, a, params)  # noqa: E731
        _, states, reward, _, _ = jax.vmap(step)(states, u)
        return (states, ret + gamma**t * reward), None

    ret0 = jnp.zeros(states.theta.shape, jnp.float32)
    t = jnp.arange(steps, dtype=jnp.float32)
    (_, ret), _ = jax.lax.scan(body, (states, ret0), t)
    return ret


def episode_returns(policy: Policy, starts: EnvState) -> jax.Array:
    """``[E]`` undiscounted returns of ``EPISODE_LEN`` steps from the batched ``starts``."""
    return _play(policy, starts, EPISODE_LEN, 1.0)


def probe_states(obs: jax.Array, key: jax.Array, count: int) -> jax.Array:
    """``[count, 3]`` raw observations drawn without replacement from the dataset's ``obs``."""
    idx = jax.random.choice(key, obs.shape[0], (count,), replace=False)
    return obs[idx]


def mc_returns(policy: Policy, obs: jax.Array, gamma: float, horizon: int = 1000) -> jax.Array:
    """``[N]`` discounted returns ``sum_t gamma^t r_t`` of ``policy`` over ``horizon`` steps from
    the raw observations ``obs [N, 3]`` (``theta = atan2(sin, cos)``, clock at 0)."""
    states = EnvState(
        theta=jnp.arctan2(obs[:, 1], obs[:, 0]),
        theta_dot=obs[:, 2],
        last_u=jnp.zeros(obs.shape[:1]),
        time=jnp.zeros(obs.shape[:1], jnp.int32),
    )
    return _play(policy, states, horizon, gamma)

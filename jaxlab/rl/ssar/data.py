"""Pendulum offline datasets, behaviour policies, score references and trust masks (SSAR stand-in).

D4RL cannot run here, so SSAR's experiments use offline data from gymnax ``Pendulum-v1`` (issue 24,
spec section 5). Conventions:

- **Actions** live in ``[-1, 1]`` and the torque is ``2 a`` (``MAX_TORQUE = 2``), so the spec's
  threshold ``sigma_e = 0.1`` and the per-dimension clip at 1 keep their meaning.
- **Episodes** are ``EPISODE_LEN = 200`` steps from ``env.reset``, rolled out with ``step_env``
  (``step`` would auto-reset and return the reset observation at ``t = 200``). The stored
  terminal is always 0: gymnax's ``done`` at ``t = 200`` is a time-limit truncation, so a
  Bellman target must keep bootstrapping there.
- **Behaviour policies** (the spec's, in torque units, ``theta`` wrapped to ``[-pi, pi)``):
  ``random`` ``u ~ U[-2, 2]``; ``expert``, the analytic energy-pumping controller (PD at the top
  when ``|theta| < 0.6``, else ``clip(1.5 (E* - E) sign(theta_dot), +-2)`` with
  ``E = theta_dot^2 / 2 + 15 cos theta``, ``E* = 15``); ``noisy`` expert + ``N(0, sigma^2)``
  torque noise (clipped); ``eps`` a uniform action with probability ``p``, else the expert's.
- **Datasets** (:data:`DATASETS`): ``D-re`` 85 random + 15 expert episodes, ``D-graded`` 20
  episodes each of ``eps`` with ``p in {1, .75, .5, .25, 0}``, ``D-me`` 50 ``noisy(sigma = 2)``
  + 50 expert.
- **Scores**: ``100 (R - R_random) / (R_expert - R_random)`` with both references recomputed by
  :func:`reference_returns` (500 episodes each; the spec measured about -1230 and -154).
- **Trust** ``w``: :func:`traj_trust` marks every transition of an episode whose return exceeds
  ``ref_return`` (the official ``traj`` selection; episodes are cut at terminals, at breaks
  ``obs[t + 1] != next_obs[t]`` and at the maximum length).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import gymnax
import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.checks import (
    check_array,
    check_choice,
    check_int,
    check_key,
    check_number,
    check_scalar,
)

__all__ = [
    "DATASETS",
    "EPISODE_LEN",
    "MAX_TORQUE",
    "POLICIES",
    "Transitions",
    "episode_ids",
    "expert_torque",
    "make_dataset",
    "normalised_score",
    "policy_action",
    "reference_returns",
    "rollout",
    "state_normaliser",
    "traj_trust",
]

EPISODE_LEN = 200
MAX_TORQUE = 2.0
POLICIES = ("random", "expert", "noisy", "eps")
# dataset name -> ((policy, parameter, episodes), ...)
DATASETS = {
    "D-re": (("random", 0.0, 85), ("expert", 0.0, 15)),
    "D-graded": tuple(("eps", p, 20) for p in (1.0, 0.75, 0.5, 0.25, 0.0)),
    "D-me": (("noisy", 2.0, 50), ("expert", 0.0, 50)),
}
_E_TOP = 15.0  # energy of the upright pendulum at rest, 3 g / (2 l) with g = 10, l = 1


class Transitions(NamedTuple):
    """Offline transitions, ``N = episodes * EPISODE_LEN`` rows in rollout order.

    Attributes:
      obs: ``[N, 3]`` ``(cos theta, sin theta, theta_dot)``.
      action: ``[N, 1]`` in ``[-1, 1]`` (torque / 2).
      reward: ``[N]`` gymnax's ``-(theta^2 + 0.1 theta_dot^2 + 0.001 u^2)``.
      next_obs: ``[N, 3]``.
      terminal: ``[N]`` float, always 0 (time-limit truncation only).
      episode_return: ``[E]`` the return of each rolled-out episode.
    """

    obs: jax.Array
    action: jax.Array
    reward: jax.Array
    next_obs: jax.Array
    terminal: jax.Array
    episode_return: jax.Array


def _env():
    env, params = gymnax.make("Pendulum-v1")
    return env, params


def expert_torque(obs: jax.Array) -> jax.Array:
    """The analytic expert's torque in ``[-2, 2]`` for observations ``[..., 3]`` (module doc)."""
    check_array(obs, "obs", kind="float", finite=False)
    if np.shape(obs)[-1:] != (3,):
        raise ValueError(f"`obs` must be [..., 3] (cos, sin, theta_dot), got {np.shape(obs)}.")
    theta = jnp.arctan2(obs[..., 1], obs[..., 0])  # wrapped to [-pi, pi]
    theta_dot = obs[..., 2]
    energy = 0.5 * theta_dot**2 + _E_TOP * jnp.cos(theta)
    pump = 1.5 * (_E_TOP - energy) * jnp.sign(theta_dot)
    balance = -10.0 * theta - 2.0 * theta_dot
    u = jnp.where(jnp.abs(theta) < 0.6, balance, pump)
    return jnp.clip(u, -MAX_TORQUE, MAX_TORQUE)


def _check_policy(policy: str, param) -> None:
    check_choice(policy, "policy", POLICIES)
    if policy == "noisy":
        check_scalar(param, "param", 0.0)  # torque noise SD
    elif policy == "eps":
        check_scalar(param, "param", 0.0, 1.0)  # probability of a uniform action


def policy_action(key: jax.Array, obs: jax.Array, policy: str, param: float = 0.0) -> jax.Array:
    """One behaviour-policy action ``[..., 1]`` in ``[-1, 1]`` (``param``: the torque noise SD of
    ``noisy``, the uniform-action probability of ``eps``; unused otherwise)."""
    key = check_key(key)
    _check_policy(policy, param)
    return _action(key, obs, policy, param)


def _action(key, obs, policy: str, param):
    k_u, k_e = jax.random.split(key)
    uniform = jax.random.uniform(k_u, obs.shape[:-1], minval=-MAX_TORQUE, maxval=MAX_TORQUE)
    if policy == "random":
        u = uniform
    elif policy == "expert":
        u = expert_torque(obs)
    elif policy == "noisy":
        noise = param * jax.random.normal(k_e, obs.shape[:-1])
        u = jnp.clip(expert_torque(obs) + noise, -MAX_TORQUE, MAX_TORQUE)
    else:  # eps
        u = jnp.where(jax.random.uniform(k_e, obs.shape[:-1]) < param, uniform, expert_torque(obs))
    return (u / MAX_TORQUE)[..., None]


def rollout(
    key: jax.Array, episodes: int, policy: str, param: float = 0.0
) -> tuple[Transitions, jax.Array]:
    """``episodes`` Pendulum episodes of ``EPISODE_LEN`` steps under a behaviour policy, vmapped
    over episodes and scanned over steps; returns ``(transitions, returns [episodes])``."""
    key = check_key(key)
    check_int(episodes, "episodes", minimum=1)
    _check_policy(policy, param)
    return _rollout(key, episodes, policy, float(param))


@functools.partial(jax.jit, static_argnums=(1, 2))
def _rollout(key, episodes: int, policy: str, param: float):
    env, params = _env()

    def episode(k):
        k_reset, k_steps = jax.random.split(k)
        obs, state = env.reset(k_reset, params)

        def step(carry, k_t):
            obs, state = carry
            k_act, k_env = jax.random.split(k_t)
            a = _action(k_act, obs, policy, param)
            next_obs, state, reward, _, _ = env.step_env(k_env, state, MAX_TORQUE * a, params)
            return (next_obs, state), (obs, a, reward, next_obs)

        _, out = jax.lax.scan(step, (obs, state), jax.random.split(k_steps, EPISODE_LEN))
        return out

    obs, act, rew, nxt = jax.vmap(episode)(jax.random.split(key, episodes))
    returns = rew.sum(axis=1)
    n = episodes * EPISODE_LEN
    data = Transitions(
        obs.reshape(n, 3),
        act.reshape(n, 1),
        rew.reshape(n),
        nxt.reshape(n, 3),
        jnp.zeros((n,), jnp.float32),
        returns,
    )
    return data, returns


def make_dataset(key: jax.Array, name: str) -> Transitions:
    """Dataset ``name`` of :data:`DATASETS`, its parts rolled out from ``split(key)`` in order."""
    key = check_key(key)
    check_choice(name, "name", tuple(DATASETS))
    parts = [
        _rollout(k, episodes, policy, float(param))[0]
        for k, (policy, param, episodes) in zip(
            jax.random.split(key, len(DATASETS[name])), DATASETS[name], strict=True
        )
    ]
    return Transitions(*(jnp.concatenate(f) for f in zip(*parts, strict=True)))


def reference_returns(key: jax.Array, episodes: int = 500) -> dict[str, float]:
    """Mean returns of the random and the expert policy over ``episodes`` episodes each."""
    key = check_key(key)
    check_int(episodes, "episodes", minimum=1)
    k_r, k_e = jax.random.split(key)
    return {
        "random": float(_rollout(k_r, episodes, "random", 0.0)[1].mean()),
        "expert": float(_rollout(k_e, episodes, "expert", 0.0)[1].mean()),
    }


def normalised_score(returns, references: dict[str, float]):
    """``100 (R - R_random) / (R_expert - R_random)``."""
    if not isinstance(references, dict) or set(references) != {"random", "expert"}:
        raise ValueError(f"`references` must map 'random', 'expert' to returns, got {references}.")
    lo, hi = (check_scalar(references[k], f"references[{k!r}]") for k in ("random", "expert"))
    if not hi > lo:
        raise ValueError(f"`references` need expert > random, got {references}.")
    returns = check_array(returns, "returns", kind="float")
    return 100.0 * (returns - lo) / (hi - lo)


def episode_ids(data: Transitions, max_len: int = EPISODE_LEN) -> np.ndarray:
    """``[N]`` int episode index of each transition: an episode ends at a terminal, at a break
    ``obs[t + 1] != next_obs[t]`` or after ``max_len`` transitions (host-side, NumPy)."""
    _check_transitions(data)
    check_int(max_len, "max_len", minimum=1)
    obs, nxt = np.asarray(data.obs), np.asarray(data.next_obs)
    term = np.asarray(data.terminal) > 0
    ids = np.zeros(len(obs), np.int64)
    current, length = 0, 0
    for t in range(len(obs)):
        ids[t] = current
        length += 1
        last = t == len(obs) - 1
        if not last and (term[t] or length >= max_len or not np.array_equal(obs[t + 1], nxt[t])):
            current, length = current + 1, 0
    return ids


def traj_trust(data: Transitions, ref_return: float, max_len: int = EPISODE_LEN) -> jax.Array:
    """``[N]`` float 0/1: 1 on every transition of an episode whose return exceeds ``ref_return``
    (raw units; ``-inf`` trusts everything), episodes from :func:`episode_ids`."""
    check_number(ref_return, "ref_return")
    ids = episode_ids(data, max_len)
    returns = np.bincount(ids, weights=np.asarray(data.reward, np.float64))
    return jnp.asarray((returns > ref_return)[ids], jnp.float32)


def state_normaliser(data: Transitions):
    """``o -> (o - mean) / (std + 1e-3)`` with the dataset's per-feature state moments (the
    official TD3+BC / CORL normalisation, used by the trainer and the IQL critic alike)."""
    mean = data.obs.mean(0, keepdims=True)  # [1, S]: no rank promotion against [B, S]
    std = data.obs.std(0, keepdims=True) + 1e-3
    return lambda o: (o - mean) / std


def _check_transitions(data) -> None:
    if not isinstance(data, Transitions):
        raise TypeError(f"`data` must be Transitions (make_dataset / rollout), got {type(data)}.")
    n = np.shape(data.obs)[0] if np.ndim(data.obs) == 2 else -1
    shapes = {"obs": (n, 3), "action": (n, 1), "reward": (n,), "next_obs": (n, 3), "terminal": (n,)}
    for field, shape in shapes.items():
        check_array(getattr(data, field), f"data.{field}", shape=shape, kind="float")

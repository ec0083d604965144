"""SSAR: selective state-adaptive regularisation for offline RL (Luo et al., ICML 2025), on a
Pendulum stand-in for D4RL (issue 24).

Landed so far: the offline data (:mod:`~jaxlab.rl.ssar.data`: gymnax ``Pendulum-v1`` rollouts
under the spec's behaviour policies, the datasets ``D-re`` / ``D-graded`` / ``D-me``, score
references, the ``traj`` trust mask), the networks (:mod:`~jaxlab.rl.ssar.nets`: TD3 actor, twin
LayerNorm critics, the coefficient network ``BetaNet``) and TD3+BC+SSAR's loss pieces and
threshold schedule (:mod:`~jaxlab.rl.ssar.td3bc`). Not yet: the jitted step and trainer
(``make_trainer``), CQL+SSAR, the IQL trust mask, the experiment and the benchmark.

Example::

    import jax
    from jaxlab.rl import ssar

    data = ssar.make_dataset(jax.random.key(0), "D-re")       # 100 episodes x 200 transitions
    w = ssar.traj_trust(data, ref_return=-400.0)              # [20000] 0/1, whole episodes
    refs = ssar.reference_returns(jax.random.key(1), episodes=20)
    score = ssar.normalised_score(data.episode_return, refs)  # [100]
"""

from jaxlab.rl.ssar import nets, td3bc
from jaxlab.rl.ssar.data import (
    DATASETS,
    EPISODE_LEN,
    MAX_TORQUE,
    POLICIES,
    Transitions,
    episode_ids,
    expert_torque,
    make_dataset,
    normalised_score,
    policy_action,
    reference_returns,
    rollout,
    traj_trust,
)
from jaxlab.rl.ssar.nets import Actor, BetaNet, TwinCritic

__all__ = [
    "Actor",
    "BetaNet",
    "TwinCritic",
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
    "td3bc",
    "nets",
    "traj_trust",
]

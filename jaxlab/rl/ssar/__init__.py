"""SSAR: selective state-adaptive regularisation for offline RL (Luo et al., ICML 2025), on a
Pendulum stand-in for D4RL (issue 24).

Landed so far: the offline data (:mod:`~jaxlab.rl.ssar.data`): gymnax ``Pendulum-v1`` rollouts
under the spec's behaviour policies, the three datasets ``D-re`` / ``D-graded`` / ``D-me``, score
references and the ``traj`` trust mask. Not yet: the networks, the TD3+BC / CQL (+SSAR) steps,
the schedule, the trainer, the experiment and the benchmark.

Example::

    import jax
    from jaxlab.rl import ssar

    data = ssar.make_dataset(jax.random.key(0), "D-re")       # 100 episodes x 200 transitions
    w = ssar.traj_trust(data, ref_return=-400.0)              # [20000] 0/1, whole episodes
    refs = ssar.reference_returns(jax.random.key(1), episodes=20)
    score = ssar.normalised_score(data.episode_return, refs)  # [100]
"""

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
    "traj_trust",
]

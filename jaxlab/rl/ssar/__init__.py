"""SSAR: selective state-adaptive regularisation for offline RL (Luo et al., ICML 2025), on a
Pendulum stand-in for D4RL (issue 24).

Landed so far: the offline data (:mod:`~jaxlab.rl.ssar.data`: gymnax ``Pendulum-v1`` rollouts
under the spec's behaviour policies, the datasets ``D-re`` / ``D-graded`` / ``D-me``, score
references, the ``traj`` trust mask), the networks (:mod:`~jaxlab.rl.ssar.nets`: TD3 actor, twin
LayerNorm critics, the coefficient network ``BetaNet``) and TD3+BC+SSAR's loss pieces and
threshold schedule (:mod:`~jaxlab.rl.ssar.td3bc`), and the TD3+BC(+SSAR) trainer
(:func:`make_trainer`: one step for the method and its baselines, runs vmapped over
:class:`RunSpec`), the ``iql`` trust mask (:func:`iql_trust`). Not yet: CQL+SSAR and the
benchmark.

Example::

    import jax
    from jaxlab.rl import ssar

    data = ssar.make_dataset(jax.random.key(0), "D-re")       # 100 episodes x 200 transitions
    w = ssar.traj_trust(data, ref_return=-400.0)              # [20000] 0/1, whole episodes
    refs = ssar.reference_returns(jax.random.key(1), episodes=20)
    score = ssar.normalised_score(data.episode_return, refs)  # [100]

    config = ssar.TD3BCConfig(steps=20, batch=32)
    trainer = ssar.make_trainer(config, data, w, jax.random.key(2), eval_episodes=2)
    runs = [ssar.td3bc_run(2.5), ssar.ssar_run(config)]  # baseline and method: one program
    runs = ssar.RunSpec(*(jax.numpy.stack(v) for v in zip(*runs, strict=True)))
    state = jax.vmap(trainer.init)(jax.random.split(jax.random.key(3), 2), runs)
    state, metrics = jax.jit(jax.vmap(trainer.step))(state)  # metrics["beta_trusted"]: [2]
    returns = jax.vmap(trainer.evaluate)(state)                # [2 runs, 2 episodes]
"""

from jaxlab.rl.ssar import cql, evaluation, iql, nets, td3bc
from jaxlab.rl.ssar.cql import (
    CQLConfig,
    CQLState,
    cql_run,
    cql_ssar_run,
    make_cql_trainer,
)
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
    state_normaliser,
    traj_trust,
)
from jaxlab.rl.ssar.iql import expectile_loss, iql_trust
from jaxlab.rl.ssar.nets import (
    Actor,
    BetaNet,
    CQLCritic,
    TanhGaussianActor,
    TwinCritic,
    tanh_gaussian,
)
from jaxlab.rl.ssar.train import (
    RunSpec,
    TD3BCConfig,
    TD3BCState,
    Trainer,
    make_trainer,
    ssar_run,
    stack_runs,
    td3bc_run,
)

__all__ = [
    "Actor",
    "BetaNet",
    "CQLConfig",
    "CQLCritic",
    "CQLState",
    "RunSpec",
    "TD3BCConfig",
    "TD3BCState",
    "Trainer",
    "TanhGaussianActor",
    "TwinCritic",
    "cql",
    "cql_run",
    "cql_ssar_run",
    "evaluation",
    "make_cql_trainer",
    "make_trainer",
    "stack_runs",
    "tanh_gaussian",
    "ssar_run",
    "td3bc_run",
    "DATASETS",
    "EPISODE_LEN",
    "MAX_TORQUE",
    "POLICIES",
    "Transitions",
    "episode_ids",
    "expectile_loss",
    "expert_torque",
    "iql",
    "iql_trust",
    "make_dataset",
    "normalised_score",
    "policy_action",
    "reference_returns",
    "rollout",
    "state_normaliser",
    "td3bc",
    "nets",
    "traj_trust",
]

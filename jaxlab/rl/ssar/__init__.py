"""SSAR: selective state-adaptive regularisation for offline RL (Luo et al., ICML 2025), on a
Pendulum stand-in for D4RL (issue 24).

Modules: :mod:`~jaxlab.rl.ssar.data` (gymnax ``Pendulum-v1`` rollouts under the spec's behaviour
policies, the datasets ``D-re`` / ``D-graded`` / ``D-me``, score references, the ``traj`` trust
mask), :mod:`~jaxlab.rl.ssar.nets` (TD3 actor, twin LayerNorm critics, CQL's tanh-Gaussian actor
and orthogonal critics, the coefficient network ``BetaNet``), :mod:`~jaxlab.rl.ssar.td3bc`
(TD3+BC+SSAR's loss pieces and threshold schedule), :mod:`~jaxlab.rl.ssar.cql` (CQL+SSAR's gap,
SAC losses, the tanh-Gaussian slack and :func:`make_cql_trainer`), :mod:`~jaxlab.rl.ssar.iql`
(the ``iql`` trust mask) and :mod:`~jaxlab.rl.ssar.evaluation` (fixed start states, Q
overestimation against Monte Carlo returns). :func:`make_trainer` and :func:`make_cql_trainer`
return the same :class:`Trainer` functions: one jitted step for the method and its fixed-strength
baselines (a traced :class:`RunSpec`), so every run of a dataset is one vmapped program, its runs
axis split over a mesh by ``init_runs``. Not built: the Lagrange CQL variant, max-backup and the
other AntMaze-only options, offline-to-online fine-tuning.

Example::

    import jax
    from jaxlab.rl import ssar

    data = ssar.make_dataset(jax.random.key(0), "D-re")       # 100 episodes x 200 transitions
    w = ssar.traj_trust(data, ref_return=-400.0)              # [20000] 0/1, whole episodes
    refs = ssar.reference_returns(jax.random.key(1), episodes=20)
    score = ssar.normalised_score(data.episode_return, refs)  # [100]

    config = ssar.TD3BCConfig(steps=20, batch=32)
    trainer = ssar.make_trainer(config, data, w, jax.random.key(2), eval_episodes=2)
    runs = ssar.stack_runs([ssar.td3bc_run(2.5), ssar.ssar_run(config)])  # one program
    state = trainer.init_runs(jax.random.key(3), runs)        # [2] runs
    state, metrics = jax.jit(jax.vmap(trainer.step))(state)  # metrics["beta_trusted"]: [2]
    returns = jax.jit(jax.vmap(trainer.evaluate))(state)       # [2 runs, 2 episodes]
    slack = jax.jit(jax.vmap(trainer.slack))(state)            # [2, 20000]: < 0 = violation

    cql_config = ssar.CQLConfig(steps=20, batch=32, hidden=(16, 16, 16), n_actions=2)
    cql = ssar.make_cql_trainer(cql_config, data, w, jax.random.key(2), eval_episodes=2)
    state = cql.init_runs(jax.random.key(4), ssar.stack_runs(
        [ssar.cql_run(5.0), ssar.cql_ssar_run(cql_config)]))
    state, metrics = jax.jit(jax.vmap(cql.step))(state)      # metrics["cql_gap"]: [2]
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

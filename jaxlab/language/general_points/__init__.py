"""SFT memorizes, RL generalizes on GeneralPoints (Chu et al., ICML 2025), on a small LM.

The game: four cards, a rule stated in the prompt (ID: J, Q, K count as 10; OOD: as 11, 12, 13),
and the task of writing a formula that uses each card's number once and makes 24. Here the
formula is postfix and the LM a :class:`jaxlab.core.nn.Transformer` trained from scratch; the
study (pretraining, SFT-init, then SFT or PPO at matched FLOPs) is issue 28.

Modules (the experiment and the benchmark are still to come, see the issue):

- :mod:`~jaxlab.language.general_points.cards`: the rules, one exact table of all 7,680 postfix
  formulas of every hand (solvability, solutions for any target, the +1 prefix check), the
  official hand samplers and the ID-train / ID-test split of number multisets;
- :mod:`~jaxlab.language.general_points.tokens`: the vocabulary and the prompt / response format
  (thought = the NUM field, action = from FORM);
- :mod:`~jaxlab.language.general_points.verifier`: the official reward rules twice, a
  ``Fraction`` reference and a jitted, vmapped JAX evaluator on int32 rational stacks;
- :mod:`~jaxlab.language.general_points.data`: keyed generators of the pretraining (P1 rule
  translation, P2 arithmetic, never the GP tag or target 24) and SFT sequences;
- :mod:`~jaxlab.language.general_points.model`: the policy (LM and value MLP), response-only
  cross-entropy, the supervised trainer (method contract) and cached pretraining;
- :mod:`~jaxlab.language.general_points.ppo`: the jitted rollout (KV-cache sampling, attempts
  with feedback, the verifier inside), GAE over attempts and the official PPO update;
- :mod:`~jaxlab.language.general_points.evaluate`: greedy evaluation on fixed hands (success,
  format validity, the rule-reading probe) and the face-number probability probe;
- :mod:`~jaxlab.language.general_points.flops`: ``6 N`` / ``2 N`` FLOPs per token.

Example::

    import jax
    import numpy as np
    from jaxlab.language import general_points as G

    hands = G.sample_ood_hands(jax.random.key(0), 4)           # [4, 4] ranks, a face card each
    numbers = G.card_numbers(np.asarray(hands), "ood")
    print(G.solutions(numbers[0])[:2])                         # e.g. ['13 11 - 12 *', ...]
    cfg = G.LMTrainConfig(stream="sft", steps=2, batch_size=8, warmup_steps=1)
    trainer = G.make_lm_trainer(G.ModelConfig(d_model=16, num_heads=2, d_mlp=32), cfg)
    state = trainer.init(jax.random.key(1))
    state, metrics = jax.jit(trainer.step)(state)              # one SFT step on ID-train hands
    seqs = trainer.sample(jax.random.key(2), state.tables)     # 8 SFT sequences
    ranks = seqs.tokens[:, 9:13] - 15                          # the prompts' cards
    verdict = G.verify(G.card_numbers(ranks, "id"), seqs.tokens[:, G.GP_PROMPT_LEN:])
    print(verdict.reward)                                      # all 5.0: SFT targets solve it
"""

from jaxlab.language.general_points.cards import (
    TARGET,
    DeviceTables,
    card_numbers,
    device_tables,
    formula_table,
    id_split,
    sample_id_hands,
    sample_ood_hands,
    solutions,
    solvable,
)
from jaxlab.language.general_points.data import Sequences, sample_gp, sample_p1, sample_p2
from jaxlab.language.general_points.evaluate import evaluate, face_number_prob
from jaxlab.language.general_points.flops import (
    inference_flops,
    matmul_params,
    ppo_update_flops,
    training_flops,
)
from jaxlab.language.general_points.model import (
    LMState,
    LMTrainConfig,
    LMTrainer,
    ModelConfig,
    Policy,
    make_lm_trainer,
    make_policy,
    pretrain,
    sequence_loss,
)
from jaxlab.language.general_points.ppo import (
    PPO,
    PPOConfig,
    PPOState,
    Rollout,
    evaluate_actions,
    gae,
    make_ppo,
    rollout,
)
from jaxlab.language.general_points.tokens import GP_PROMPT_LEN, RESPONSE_LEN, VOCAB_SIZE
from jaxlab.language.general_points.verifier import (
    KINDS,
    Verdict,
    verify,
    verify_reference,
)

__all__ = [
    "GP_PROMPT_LEN",
    "KINDS",
    "RESPONSE_LEN",
    "TARGET",
    "VOCAB_SIZE",
    "DeviceTables",
    "LMState",
    "LMTrainConfig",
    "LMTrainer",
    "PPO",
    "PPOConfig",
    "PPOState",
    "Rollout",
    "ModelConfig",
    "Policy",
    "Sequences",
    "Verdict",
    "card_numbers",
    "device_tables",
    "evaluate",
    "evaluate_actions",
    "face_number_prob",
    "formula_table",
    "gae",
    "id_split",
    "inference_flops",
    "make_lm_trainer",
    "make_policy",
    "make_ppo",
    "matmul_params",
    "ppo_update_flops",
    "pretrain",
    "rollout",
    "sample_gp",
    "sample_id_hands",
    "sample_ood_hands",
    "sample_p1",
    "sample_p2",
    "sequence_loss",
    "solutions",
    "solvable",
    "training_flops",
    "verify",
    "verify_reference",
]

"""Benchmark of GeneralPoints RL (issue 28): one PPO iteration and the verifier.

(i) **One PPO iteration** on ``E`` episodes of the quick model (d 64, 2 layers; VIter 1; 4 epochs
x 4 minibatches), rollout and update timed apart:

- ``jit``: the library's jitted rollout (prefill, scan over attempts of a scan over tokens,
  verifier inside) and its jitted update (GAE, normalisation, the epochs x minibatches scan);
- ``python loop``: the usual RL-for-LM structure (RL4VLM / SFTvsRL): a Python loop over episodes
  around the same core.nn KV cache, one jitted batch-1 prefill and one jitted single-token step
  per token, sampling on the host (NumPy), the ``Fraction`` verifier, Python GAE, then the
  official update: minibatch 1 with gradient accumulation (a jitted batch-1 loss gradient per
  episode, summed on the host, one jitted Adam step per ``E / 4`` episodes), 4 epochs.

Equal work: the same model, episodes and tokens, the same loss. ``jit sharded`` rows run the
library's whole iteration (``make_ppo(..., mesh)``) on 1 and 2 devices (on forced host devices
they check the plumbing; the two cores are shared).

(ii) **Verifier**: ``B`` attempts (valid solutions, prefixes, random and broken responses)
scored by the ``Fraction`` reference in a Python loop and by the jitted JAX evaluator.

Goals of the issue at 256 episodes: rollout >= 20x, iteration >= 5x; verifier >= 100x at 4096.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core import sharding
from jaxlab.core.timing import result_row, time_call
from jaxlab.language import general_points as G
from jaxlab.language.general_points import ppo as P
from jaxlab.language.general_points import tokens as T
from jaxlab.language.general_points import verifier as V

NAME = "general_points_rl"
DESCRIPTION = (
    "one PPO iteration (jitted rollout + update vs a per-episode Python loop with host sampling, "
    "the Fraction verifier and minibatch-1 accumulation) and the verifier (Fraction vs JAX)"
)
SIZES = {
    "small": {"episodes": (64, 256), "verifier": (1024, 4096)},
    "large": {"episodes": (64, 256, 1024), "verifier": (1024, 4096, 16384)},
}
MC = G.ModelConfig()  # the quick model


@functools.cache
def setup(episodes: int, mesh=None):
    cfg = G.PPOConfig(updates=10, episodes=episodes, viter=1)
    ppo = G.make_ppo(MC, cfg, mesh=mesh)
    params = ppo.policy.init(jax.random.key(0))
    return ppo, ppo.init(jax.random.key(1), params)


# ---- jit ---------------------------------------------------------------------------------------


def jit_rollout(ppo):
    return jax.jit(ppo.collect)


def jit_update(ppo):
    return jax.jit(lambda train, ro, key: ppo.update(train, ro, key)[0].params)


# ---- the Python loop ---------------------------------------------------------------------------


@functools.cache
def _single(policy):
    lm = policy.lm

    @jax.jit
    def prefill(params, prompt):
        cache = lm.init_cache(1, P.sequence_length(1))
        pos = jnp.arange(P.PREFIX)[None, :]
        return lm.apply(params["lm"], prompt[:, : P.PREFIX], positions=pos, cache=cache)[1].cache

    @jax.jit
    def token(params, cache, tok, temperature):
        pos = jnp.broadcast_to(cache.index, (1, 1))
        logits, aux = lm.apply(params["lm"], tok[None, None], mask=(tok != T.PAD)[None, None],
                               positions=pos, cache=cache, return_hidden=True)  # fmt: skip
        value = policy.value.apply(params["value"], aux.hidden[:, 0])[0, 0]
        return P._scaled_log_probs(logits[0, 0], temperature), value, aux.cache

    return prefill, token


def loop_rollout(ppo, params, ranks, rng, greedy: bool = False):
    """Per-episode Python rollout (VIter 1): ``(tokens [E, S], response [E, 1, 14], reward [E,
    1], logp [E, 1], value [E, 1])`` as NumPy."""
    cfg = ppo.config
    prefill, token = _single(ppo.policy)
    prompts = np.asarray(T.gp_prompt(ranks, T.rule_values(cfg.rule)))
    numbers = np.asarray(G.card_numbers(np.asarray(ranks), cfg.rule))
    w = np.where(T.THOUGHT_MASK, cfg.thought_coef, 1.0)
    out = {k: [] for k in ("tokens", "response", "reward", "logp", "value")}
    for i in range(len(prompts)):
        cache = prefill(params, jnp.asarray(prompts[i : i + 1]))
        fed, resp, logp, value = int(prompts[i, -1]), [], 0.0, None
        for j in range(T.RESPONSE_LEN):
            lp, v, cache = token(params, cache, jnp.int32(fed), cfg.temperature)
            lp = np.asarray(lp, np.float64)
            value = float(v) if j == 0 else value
            if greedy:
                new = int(np.argmax(lp))
            else:
                p = np.exp(lp - lp.max())
                new = int(rng.choice(len(p), p=p / p.sum()))
            resp.append(new)
            logp += w[j] * lp[new]
            fed = new
            if new == T.EOS:
                break
        resp += [T.PAD] * (T.RESPONSE_LEN - len(resp))
        reward, _ = V.verify_reference(numbers[i], resp)
        out["tokens"].append(np.r_[prompts[i], resp])
        out["response"].append([resp])
        out["reward"].append([reward])
        out["logp"].append([logp])
        out["value"].append([value])
    return {k: np.asarray(v) for k, v in out.items()}


def python_gae(reward, value, gamma, lam):
    """GAE per episode in plain Python (every attempt valid, terminal after the last)."""
    adv = np.zeros_like(reward)
    for e in range(reward.shape[0]):
        g = 0.0
        for a in reversed(range(reward.shape[1])):
            nv = value[e, a + 1] if a + 1 < reward.shape[1] else 0.0
            last = a + 1 == reward.shape[1]
            g = reward[e, a] + gamma * nv - value[e, a] + (0.0 if last else gamma * lam * g)
            adv[e, a] = g
    return adv, adv + value


@functools.cache
def _single_grad(ppo):
    cfg = ppo.config
    kw = dict(temperature=cfg.temperature, thought_coef=cfg.thought_coef,
              clip_eps=cfg.clip_eps, value_coef=cfg.value_coef)  # fmt: skip

    @jax.jit
    def grad(params, batch):
        return jax.grad(lambda p: P.ppo_loss(ppo.policy, p, batch, **kw)[0])(params)

    @jax.jit
    def apply(train, grads):
        return train.apply_gradients(grads)

    return grad, apply


def loop_update(ppo, train, data, rng):
    """The official update: minibatch 1, gradients accumulated over ``E / minibatches``
    episodes, one Adam step each, ``epochs`` passes."""
    cfg = ppo.config
    grad, apply = _single_grad(ppo)
    adv, ret = python_gae(data["reward"], data["value"], cfg.gamma, cfg.gae_lambda)
    adv = (adv - adv.mean()) / (adv.std(ddof=1) + 1e-5)
    e = len(adv)
    accumulate = e // cfg.minibatches
    valid = np.ones_like(adv, bool)
    for _ in range(cfg.epochs):
        acc, count = None, 0
        for i in rng.permutation(e):
            batch = P.Batch(data["tokens"][i : i + 1], data["response"][i : i + 1],
                            valid[i : i + 1], data["logp"][i : i + 1].astype(np.float32),
                            data["value"][i : i + 1].astype(np.float32),
                            adv[i : i + 1].astype(np.float32),
                            ret[i : i + 1].astype(np.float32))  # fmt: skip
            g = grad(train.params, batch)
            acc = g if acc is None else jax.tree_util.tree_map(jnp.add, acc, g)
            count += 1
            if count == accumulate:
                train = apply(train, jax.tree_util.tree_map(lambda x, c=count: x / c, acc))
                acc, count = None, 0
    return train.params


# ---- rows --------------------------------------------------------------------------------------


def _attempts(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    hands = np.asarray(
        G.card_numbers(np.asarray(G.sample_id_hands(jax.random.key(seed), 64)), "id")
    )
    pool = np.r_[T.number_token(np.arange(1, 14)), T.op_token(np.arange(4))]
    nums, resp = [], []
    for _ in range(n):
        h = hands[rng.integers(len(hands))]
        sols = G.solutions(h)
        words = sols[rng.integers(len(sols))].split()
        f = [T.op_token("+-*/".index(x)) if x in "+-*/" else T.number_token(int(x)) for x in words]
        case = rng.integers(3)
        if case == 1:
            f = f[: rng.integers(0, 7)]
        elif case == 2:
            f = [int(x) for x in rng.choice(pool, size=7)]
        r = ([T.NUM, *T.number_token(h).tolist(), T.FORM, *f, T.EOS] + [T.PAD] * 14)[:14]
        nums.append(h)
        resp.append(r)
    return np.asarray(nums, np.int32), np.asarray(resp, np.int32)


def iteration_rows(size: str, episodes_list, n_runs: int = 3) -> list[dict]:
    rows = []
    for e in episodes_list:
        ppo, state = setup(e)
        common = {"episodes": e, "viter": 1}
        roll = jit_rollout(ppo)
        t = time_call(roll, state, n_warmup=1, n_runs=n_runs)
        rows.append(result_row(NAME, "jit", size, t, work=e, unit="episodes",
                               phase="rollout", **common))  # fmt: skip
        ro = roll(state)
        upd = jit_update(ppo)
        t = time_call(upd, state.train, ro, jax.random.key(3), n_warmup=1, n_runs=n_runs)
        rows.append(result_row(NAME, "jit", size, t, work=e, unit="episodes",
                               phase="update", **common))  # fmt: skip
        ranks = np.asarray(G.sample_id_hands(jax.random.key(4), e, "train"))
        rng = np.random.default_rng(0)
        params = state.train.params
        loop_rollout(ppo, params, ranks[:2], rng)  # compiles the batch-1 programs
        t = time_call(loop_rollout, ppo, params, ranks, rng, n_warmup=0, n_runs=1)
        rows.append(result_row(NAME, "python loop", size, t, work=e, unit="episodes",
                               phase="rollout", **common))  # fmt: skip
        data = loop_rollout(ppo, params, ranks, rng)
        loop_update(ppo, state.train, {k: v[:8] for k, v in data.items()}, rng)  # compile
        t = time_call(loop_update, ppo, state.train, data, rng, n_warmup=0, n_runs=1)
        rows.append(result_row(NAME, "python loop", size, t, work=e, unit="episodes",
                               phase="update", **common))  # fmt: skip
    return rows


def sharded_rows(size: str, e: int, n_runs: int = 3) -> list[dict]:
    rows = []
    for d in (1, 2):
        if d > jax.device_count() or (e // 4) % d:
            continue
        ppo, state = setup(e, sharding.data_mesh(jax.devices()[:d]))
        t = time_call(jax.jit(ppo.step), state, n_warmup=1, n_runs=n_runs)
        rows.append(result_row(NAME, "jit sharded", size, t, work=e, unit="episodes",
                               devices=d, phase="iteration", episodes=e, viter=1))  # fmt: skip
    return rows


def _reference_all(nums, resp):
    return [V.verify_reference(n, r) for n, r in zip(nums, resp, strict=True)]


def verifier_rows(size: str, batches, n_runs: int = 5) -> list[dict]:
    rows = []
    for b in batches:
        nums, resp = _attempts(b)
        t = time_call(_reference_all, nums, resp, n_warmup=1, n_runs=1)
        rows.append(result_row(NAME, "Fraction loop", size, t, work=b, unit="attempts",
                               phase="verifier", batch=b))  # fmt: skip
        tables = G.device_tables()
        n_j, r_j = jnp.asarray(nums), jnp.asarray(resp)
        t = time_call(V.verify_core, tables, n_j, r_j, n_warmup=1, n_runs=n_runs)
        rows.append(result_row(NAME, "jax", size, t, work=b, unit="attempts",
                               phase="verifier", batch=b))  # fmt: skip
    return rows


def run(size: str) -> list[dict]:
    spec = SIZES[size]
    return (
        verifier_rows(size, spec["verifier"])
        + iteration_rows(size, spec["episodes"])
        + sharded_rows(size, 256)
    )

"""Retrieval heads behind synthetic context extension (issue 27).

Run: ``python -m experiments run retrieval_heads --preset quick`` (base 600 steps; ``real``,
``templated_diverse``, ``symbolic_kv`` fine-tuned 80 steps at context 256; one seed) or
``--preset full`` (base 1500 steps; the seven variants, 2 fine-tuning seeds on one base, 250
steps).

One base model is pretrained at context 64 (cached by a hash of its config and seed) and
context-extended to 256 tokens with RoPE interpolation (64 / 256) by fine-tuning only its
attention on each variant's data (same recipe, same base). On the real task: exact-match
accuracy on 512 evaluation examples, Wu et al.'s retrieval scores on 256 disjoint detection
examples (top-1 argmax, token copy inside the gold span, successful instances only), the head
sets ``H_tau`` (tau 0.1) and top-K (K 3), recall and precision of each model's heads against the
same seed's real model, knockout (uniform attention) of ``H_real`` in the real model against 5
draws of as many non-retrieval heads, and patching of the real model's per-head residual terms
into every other model (``H_real``, all heads, 5 random sets).

Differences from the paper (which has no public code): a toy world instead of MDQA / MuSiQue /
SummHay and 7-8B instruct models; context 64 -> 256 instead of 8K -> 32K+; the sizes of the
issue (context 256, not the spec's 384; 250 fine-tuning steps in full, not 400).

Differences from the issue (each measured; see the README): the transformer uses smeared keys and
the world puts the entity right before the value (without both the base never binds the entity
in its budget); the other values of the query's relation share no token with the gold pair (else
the second answer token is a random pick among copies of the first); base documents have 2
sentences and the world 4 relations; fine-tuning lr 6e-3 and a cosine schedule (not constant
1e-3); quick fine-tunes 80 steps (not 150), evaluates on 256 examples and scores on 128
(512 / 256 in full): the issue's quick budget takes 5.0 min here. One pool of ``workers``
threads runs the whole experiment: the base trains beside the drawing of the evaluation sets and the
compiling of every later program; fine-tuning + scoring per model, knockout and patching per
target follow as independent jobs.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax
import matplotlib.pyplot as plt
import numpy as np

from experiments import _common
from experiments._config import COUNT, NONNEG, UNIT, Choice, Range
from jaxlab.language import retrieval_heads as R

NAME = "retrieval_heads"
PAPER = (
    "Zhao, Yin & Durrett, Understanding Synthetic Context Extension via Retrieval Heads (ICML 2025)"
)
CLAIM = (
    "Synthetic context-extension data that underperforms real data finds fewer of the real "
    "model's retrieval heads; their recall predicts accuracy, knocking them out breaks "
    "retrieval, and patching them in closes part of the gap"
)


@dataclasses.dataclass(frozen=True)
class Config:
    """Attributes:
    seed: the base model's seed (fine-tuning seeds ``0 .. ft_seeds - 1`` on it).
    base_steps, base_batch, base_lr: base pretraining (context 64, AdamW, warm-up + cosine).
    variants: fine-tuned variants (``real`` first; ``no_ft`` is always evaluated).
    ft_seeds: fine-tuning seeds per variant.
    ft_steps, ft_batch, ft_lr: attention-only fine-tuning (Adam).
    ft_schedule, ft_warmup: ``"cosine"`` (linear warm-up of ``ft_warmup`` steps, then cosine
      decay to 0) or ``"constant"`` (the issue's Adam 1e-3; measured, seed 5, real at 256:
      constant 3e-3 0.54, cosine 3e-3 0.59, cosine 6e-3 0.60, cosine 1e-2 0.58).
    length: the extended context.
    n_detection, n_eval: real-task detection and evaluation examples.
    tau, top_k: the head sets H_tau and top-K.
    n_random: random head sets per control.
    d_model, num_layers, num_heads, d_mlp: the transformer.
    cache_base: reuse a cached base (off: train it, for timing).
    workers: threads running independent jobs (fine-tuning runs, per-model evaluation,
      knockout and patching jobs) side by side; 1 runs them in order (same results).
    chunk: examples per evaluation call (scores, accuracy, knockout, patching). 16 is the
      fastest here (2 CPU cores; the attention rows stay in cache): knockout of 7 head sets on
      256 examples 12 s against 25 s at 128; raise it on an accelerator.
    """

    seed: int = 0
    base_steps: int = 600
    base_batch: int = 32
    base_lr: float = 3e-3
    variants: tuple[str, ...] = ("real", "templated_diverse", "symbolic_kv")
    ft_seeds: int = 1
    ft_steps: int = 150
    ft_batch: int = 16
    ft_lr: float = 6e-3
    ft_schedule: str = "cosine"
    ft_warmup: int = 10
    length: int = 256
    n_detection: int = 256
    n_eval: int = 512
    tau: float = 0.1
    top_k: int = 3
    n_random: int = 5
    d_model: int = 64
    num_layers: int = 4
    num_heads: int = 4
    d_mlp: int = 256
    cache_base: bool = True
    workers: int = 2
    chunk: int = 16


LIMITS = {
    "base_steps": COUNT,
    "base_batch": COUNT,
    "base_lr": Range(0, low_open=True),
    "variants": Choice(*R.VARIANTS, min_items=1),
    "ft_seeds": COUNT,
    "ft_steps": COUNT,
    "ft_batch": COUNT,
    "ft_lr": Range(0, low_open=True),
    "ft_schedule": Choice("cosine", "constant"),
    "ft_warmup": NONNEG,
    "length": Range(64, 2048),
    "n_detection": COUNT,
    "n_eval": COUNT,
    "tau": UNIT,
    "top_k": COUNT,
    "n_random": COUNT,
    "d_model": Range(8, 1024),
    "num_layers": Range(1, 32),
    "num_heads": Range(1, 64),
    "d_mlp": COUNT,
    "workers": Range(1, 16),
    "chunk": COUNT,
}

PRESETS = {
    # the quick budget (base 600 steps, fine-tuning 150, 512 / 256 examples) takes 5.0
    # min here (seed 7); fine-tuning 80 steps (one compiled chunk) and 256 evaluation / 128
    # detection examples fit 3 min. Base steps are kept: the base phase waits for the drawing
    # and compiling beside it (450 steps: still 94 s, and the base drops to 0.875, seed 15)
    "quick": Config(n_eval=256, n_detection=128, ft_steps=80),
    "full": Config(
        base_steps=1500,
        variants=R.VARIANTS,
        ft_seeds=2,
        ft_steps=250,
    ),
}


def _null(x):
    """JSON-safe: NaN -> None, arrays -> lists."""
    a = np.asarray(x, float)
    return (
        np.where(np.isnan(a), None, a).tolist() if a.ndim else (None if np.isnan(a) else float(a))
    )


def run(config: Config, out_dir: Path) -> dict:
    if config.variants[0] != "real":
        raise ValueError("`variants` must start with 'real' (every comparison is against it).")
    timer: dict = {}
    t0 = time.perf_counter()
    world = R.World()
    mc = R.ModelConfig(config.d_model, config.num_layers, config.num_heads, config.d_mlp)
    base_cfg = dataclasses.replace(
        R.BASE_TRAIN,
        steps=config.base_steps,
        batch_size=config.base_batch,
        learning_rate=config.base_lr,
        warmup_steps=max(1, config.base_steps // 10),
    )
    # one FIFO pool for the whole run: the base trains beside the drawing of the evaluation
    # sets (compiling a generator takes ~8 s here), then fine-tuning, scoring, knockout and
    # patching jobs share it (a job only waits for jobs submitted before it: no deadlock)
    pool = ThreadPoolExecutor(config.workers)
    try:
        return _run(config, out_dir, pool, world, mc, base_cfg, timer, t0)
    finally:
        pool.shutdown()


def _run(config, out_dir, pool, world, mc, base_cfg, timer, t0) -> dict:
    f_base = pool.submit(
        R.pretrain_base,
        mc,
        world,
        base_cfg,
        config.seed,
        cache_dir=None if config.cache_base else False,
    )
    ft_cfg = R.TrainConfig(
        steps=config.ft_steps,
        batch_size=config.ft_batch,
        length=config.length,
        learning_rate=config.ft_lr,
        schedule=config.ft_schedule,
        chunk_size=config.ft_steps,  # one chunk: one compile (80 = 50 + 30 compiled two)
        warmup_steps=min(config.ft_warmup, config.ft_steps - 1)
        if config.ft_schedule == "cosine"
        else 0,
    )
    # one program for every variant run (each variant in the switch adds to its compile)
    trainer = R.make_trainer(mc, world, ft_cfg, stream=tuple(config.variants))
    short = R.make_model(mc, world)
    long_ = R.make_model(mc, world, config.length)
    plain = R.make_model(mc, world, config.length, interpolation=1.0)
    none_mask = np.zeros((config.num_layers, config.num_heads), bool)
    p_len = R.prompt_length(config.length)
    ch = config.chunk

    def draw(split, length, n):
        return R.sample_batch(R.split_key(config.seed, split), world, "real", length, n)

    def prepare():
        """Beside the base training (which keeps about one core busy): draw the evaluation
        sets and compile the fine-tuning chunk and every evaluation program on a template
        model (one chunk of examples each), so that none of it waits for the base."""
        template = trainer.init(jax.random.key(0), variant=config.variants[0])
        trainer.precompile(template)
        p0 = template.train.params
        data = (
            draw("evaluation", 64, config.n_eval),
            draw("detection", config.length, config.n_detection),
            draw("evaluation", config.length, config.n_eval),
        )
        ev_short, det, ev = data
        few, few_short = ev.tokens[:ch], ev_short.tokens[:ch]
        masks = np.zeros((2 + config.n_random,) + none_mask.shape, bool)
        for model, tokens in ((short, few_short), (plain, few), (long_, few)):
            R.knockout_accuracy(model, p0, tokens, none_mask, chunk=ch)
        R.knockout_accuracy(long_, p0, few, masks, chunk=ch)
        R.patched_accuracy(long_, p0, p0, few, masks, chunk=ch)
        with warnings.catch_warnings():  # a random model scores nothing (NaN, warned)
            warnings.simplefilter("ignore")
            R.retrieval_scores(
                long_, p0, np.asarray(det.tokens)[:ch, :p_len], det.span[:ch], chunk=ch
            )
        return data

    ev_short, det, ev = pool.submit(prepare).result()
    base, info = f_base.result()
    timer["base"] = time.perf_counter() - t0
    timer["base_cached"] = bool(info["cached"])
    det_prompt = np.asarray(det.tokens)[:, :p_len]

    def accuracy(model, params, tokens=ev.tokens):
        return float(R.knockout_accuracy(model, params, tokens, none_mask, chunk=ch)[0])

    def scores(params):
        return R.retrieval_scores(long_, params, det_prompt, det.span, chunk=ch)

    metrics: dict = {
        "accuracy": {},
        "scores": {},
        "activation_frequency": {},
        "n_scored": {},
    }
    if info["loss"] is not None:
        metrics["base_loss_last"] = float(np.mean(info["loss"][-20:]))
    t1 = time.perf_counter()
    # one job per model: fine-tune (not no_ft), then accuracy and scores; no_ft last, beside
    # the last fine-tuning run
    jobs = [(v, s) for v in config.variants for s in range(config.ft_seeds)] + [("no_ft", 0)]

    def finetune_and_evaluate(job):
        v, s = job
        params, loss = base, None
        if v == "no_ft":  # the base's own accuracies too
            metrics["base_accuracy"] = accuracy(short, base, ev_short.tokens)
            metrics["accuracy_no_interp"] = accuracy(plain, base)
        else:
            key = jax.random.fold_in(jax.random.key(config.seed), 100 + s)
            state, m = trainer.run(trainer.init(key, base, variant=v), desc=f"{v} {s}")
            params, loss = state.train.params, float(np.mean(m["loss"][-10:]))
        return params, loss, accuracy(long_, params), scores(params)

    n_seeds = config.ft_seeds
    rng_key = jax.random.fold_in(jax.random.key(config.seed), 999)
    targets = ["no_ft"] + [v for v in config.variants if v != "real"]
    causal_jobs = [("knockout", s) for s in range(n_seeds)]
    causal_jobs += [(v, s) for v in targets for s in range(n_seeds)]

    def causal(job):  # waits for the models it needs (always submitted before it)
        v, s = job
        real = futures[("real", s)].result()
        h = R.threshold_heads(real[3].scores, config.tau)
        salt = s if v == "knockout" else 100 + s
        draws = R.random_head_sets(
            jax.random.fold_in(rng_key, salt), h, int(h.sum()), config.n_random
        )
        if v == "knockout":
            masks = np.concatenate([none_mask[None], h[None], draws])
            return R.knockout_accuracy(long_, real[0], ev.tokens, masks, chunk=ch)
        target = futures[(v, 0 if v == "no_ft" else s)].result()[0]  # no_ft: one model
        masks = np.concatenate([h[None], np.ones_like(h)[None], draws])
        return R.patched_accuracy(long_, real[0], target, ev.tokens, masks, chunk=ch)

    futures = {job: pool.submit(finetune_and_evaluate, job) for job in jobs}
    causal_futures = {job: pool.submit(causal, job) for job in causal_jobs}
    out = [futures[j].result() for j in jobs]
    timer["finetune_and_evaluate"] = time.perf_counter() - t1
    causal_out = {job: f.result() for job, f in causal_futures.items()}
    timer["knockout_and_patching_after"] = time.perf_counter() - t1 - timer["finetune_and_evaluate"]

    order = sorted(range(len(jobs)), key=lambda i: i != len(jobs) - 1)  # no_ft first
    ft_loss, sc = {}, {}
    for i in order:
        (v, _), (_, loss, a, r) = jobs[i], out[i]
        if v != "no_ft":
            ft_loss.setdefault(v, []).append(loss)
        metrics["accuracy"].setdefault(v, []).append(a)
        sc.setdefault(v, []).append(r.scores)
        metrics["scores"].setdefault(v, []).append(_null(r.scores))
        metrics["activation_frequency"].setdefault(v, []).append(_null(r.frequency))
        metrics["n_scored"].setdefault(v, []).append(int(r.success.sum()))
    metrics["finetune_loss_last"] = ft_loss

    heads = {v: [R.threshold_heads(s, config.tau) for s in ss] for v, ss in sc.items()}
    topk = {v: [R.top_k_heads(s, config.top_k) for s in ss] for v, ss in sc.items()}
    metrics["retrieval_heads"] = {
        v: [np.argwhere(h).tolist() for h in hs] for v, hs in heads.items()
    }
    metrics["top_k_heads"] = {v: [np.argwhere(h).tolist() for h in hs] for v, hs in topk.items()}
    ref = heads["real"]
    ref_k = topk["real"]
    for name, sets, refs in (("", heads, ref), ("_topk", topk, ref_k)):
        metrics["recall" + name] = _versus_real(R.head_recall, sets, refs, n_seeds)
        metrics["precision" + name] = _versus_real(R.head_precision, sets, refs, n_seeds)
    metrics["correlation"] = _correlations(metrics, sc, ref, config)

    ko = {"none": [], "retrieval": [], "random": []}
    for s in range(n_seeds):
        acc = causal_out[("knockout", s)]
        ko["none"].append(float(acc[0]))
        ko["retrieval"].append(float(acc[1]))
        ko["random"].append(acc[2:].tolist())
    metrics["knockout"] = ko

    patch, gap = {}, {}
    for v in targets:
        patch[v] = {"retrieval": [], "all": [], "random": []}
        gap[v] = {"retrieval": [], "all": []}
        for s in range(n_seeds):
            t = 0 if v == "no_ft" else s
            acc = causal_out[(v, s)]
            patch[v]["retrieval"].append(float(acc[0]))
            patch[v]["all"].append(float(acc[1]))
            patch[v]["random"].append(acc[2:].tolist())
            real_acc = metrics["accuracy"]["real"][s]
            syn_acc = metrics["accuracy"][v][t]
            for kind, a in (("retrieval", acc[0]), ("all", acc[1])):
                g = real_acc - syn_acc
                gap[v][kind].append(None if abs(g) < 0.05 else float((a - syn_acc) / g))
    metrics["patching"] = patch
    metrics["gap_closed"] = gap
    metrics["timing"] = timer
    metrics["claims"] = claims(metrics, config)
    _figures(metrics, sc, config, out_dir)
    _report(metrics, config, out_dir)
    return metrics


def _versus_real(metric, sets: dict, refs: list, n_seeds: int) -> dict:
    """``{variant: [metric(H[variant][s], H_real[s]) per seed]}``; ``no_ft`` (one model) is
    compared with every seed's real model."""
    out = {
        v: [_null(metric(hs[s], refs[s])) for s in range(len(hs))]
        for v, hs in sets.items()
        if v != "no_ft"
    }
    out["no_ft"] = [_null(metric(sets["no_ft"][0], refs[s])) for s in range(n_seeds)]
    return out


def _correlations(metrics: dict, sc: dict, ref, config: Config) -> dict:
    """Over every fine-tuned model (``no_ft`` excluded): recall vs accuracy (Spearman, Pearson),
    the summed score of the real model's heads vs accuracy, and recall over synthetic ones."""
    rec, acc, ssum, syn_rec, syn_acc = [], [], [], [], []
    for v in config.variants:
        for s, a in enumerate(metrics["accuracy"][v]):
            r = metrics["recall"][v][s]
            r = np.nan if r is None else r
            rec.append(r)
            acc.append(a)
            ssum.append(float(np.nansum(np.where(ref[s], sc[v][s], 0.0))))
            if v != "real":
                syn_rec.append(r)
                syn_acc.append(a)
    c = R.correlations(rec, acc)
    return {
        "spearman": _null(c["spearman"]),
        "pearson": _null(c["pearson"]),
        "spearman_score_sum": _null(R.correlations(ssum, acc)["spearman"]),
        "spearman_synthetic": _null(R.correlations(syn_rec, syn_acc)["spearman"]),
        "n_models": c["n"],
    }


def _mean(xs) -> float:
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else float("nan")


def claims(metrics: dict, cfg: Config) -> dict:
    """The figures the issue's acceptance reads (raw values and the quick checks)."""
    acc = {v: _mean(a) for v, a in metrics["accuracy"].items()}
    syn = [v for v in cfg.variants if v != "real"]
    real_scores = np.array(
        [[np.nan if x is None else x for x in row] for row in metrics["scores"]["real"][0]]
    )
    n_heads = int(np.sum(np.nan_to_num(real_scores, nan=-1) > cfg.tau))
    ko = metrics["knockout"]
    none, ret = _mean(ko["none"]), _mean(ko["retrieval"])
    rand = _mean([np.mean(r) for r in ko["random"]])
    drop = lambda a: (none - a) / none if none > 0 else float("nan")  # noqa: E731
    out = {
        "base_accuracy": metrics["base_accuracy"],
        "accuracy_real": acc["real"],
        "accuracy_no_ft": acc["no_ft"],
        "real_minus_no_ft": acc["real"] - acc["no_ft"],
        "real_minus_best_synthetic": acc["real"] - max((acc[v] for v in syn), default=np.nan),
        "best_synthetic_minus_no_ft": max((acc[v] for v in syn), default=np.nan) - acc["no_ft"],
        "real_heads_above_tau": n_heads,
        "real_top_score": float(np.nanmax(real_scores)) if np.isfinite(real_scores).any() else None,
        "knockout_relative_drop": drop(ret),
        "random_relative_drop": drop(rand),
        "patching_all_minus_real": {
            v: _mean(metrics["patching"][v]["all"]) - acc["real"] for v in metrics["patching"]
        },
    }
    out["quick_checks"] = {
        "base_accuracy>=0.8": out["base_accuracy"] >= 0.8,
        "real>=0.6": acc["real"] >= 0.6,
        "real>=no_ft+0.2": acc["real"] >= acc["no_ft"] + 0.2,
        "real>=each_synthetic-0.05": all(acc["real"] >= acc[v] - 0.05 for v in syn),
        "1<=heads<=8": 1 <= n_heads <= 8,
        "top>=0.3": (out["real_top_score"] or 0) >= 0.3,
        "knockout<=0.5xnone": ret <= 0.5 * none,
        "drop-random_drop>=0.2": drop(ret) - drop(rand) >= 0.2,
        "patch_all==real": all(
            abs(x) <= 1.0 / cfg.n_eval + 1e-9 for x in out["patching_all_minus_real"].values()
        ),
    }
    return out


def _figures(metrics: dict, sc: dict, cfg: Config, out_dir: Path) -> None:
    names = list(sc)
    fig, axes = plt.subplots(1, len(names), figsize=(2.6 * len(names), 2.8), squeeze=False)
    for ax, v in zip(axes[0], names, strict=True):
        im = ax.imshow(np.nan_to_num(sc[v][0], nan=0.0), vmin=0, vmax=1, cmap="viridis")
        ax.set(title=f"{v}\nacc {metrics['accuracy'][v][0]:.2f}", xlabel="head", ylabel="layer")
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8)
    _common.save_figure(fig, out_dir, "score_heatmaps")

    fig, ax = plt.subplots(figsize=(4.5, 3.6))
    for v in cfg.variants:
        r = [np.nan if x is None else x for x in metrics["recall"][v]]
        ax.scatter(r, metrics["accuracy"][v], label=v)
    ax.set(xlabel="recall of H_real", ylabel="accuracy", title="recall vs accuracy")
    ax.legend(fontsize=7)
    _common.save_figure(fig, out_dir, "recall_vs_accuracy")

    fig, ax = plt.subplots(figsize=(6, 3.6))
    ko = metrics["knockout"]
    labels = ["real", "real - H_real", "real - random"]
    vals = [_mean(ko["none"]), _mean(ko["retrieval"]), _mean([np.mean(r) for r in ko["random"]])]
    for v, p in metrics["patching"].items():
        labels += [v, f"{v} + H_real", f"{v} + random"]
        vals += [
            _mean(metrics["accuracy"][v]),
            _mean(p["retrieval"]),
            _mean([np.mean(r) for r in p["random"]]),
        ]
    ax.bar(range(len(vals)), vals, color=["C0", "C3", "C7"] * (len(vals) // 3))
    ax.set_xticks(range(len(vals)), labels, rotation=75, fontsize=7)
    ax.set(ylabel="accuracy", title="knockout (real) and patching (real -> variant)")
    _common.save_figure(fig, out_dir, "knockout_patching")


def _report(metrics: dict, cfg: Config, out_dir: Path) -> None:
    rows = []
    for v in ["no_ft", *cfg.variants]:
        rows.append(
            [
                v,
                round(_mean(metrics["accuracy"][v]), 3),
                _mean(metrics["recall"][v]),
                _mean(metrics["precision"][v]),
                np.mean([len(h) for h in metrics["retrieval_heads"][v]]),
                (
                    round(_mean(metrics["patching"][v]["retrieval"]), 3)
                    if v in metrics["patching"]
                    else None
                ),
            ]
        )
    c = metrics["claims"]
    ko = metrics["knockout"]
    sections = [
        f"Base (context 64, {cfg.base_steps} steps) accuracy {metrics['base_accuracy']:.3f}; "
        f"context {cfg.length} with RoPE interpolation, no fine-tuning "
        f"{_mean(metrics['accuracy']['no_ft']):.3f}, "
        f"without interpolation {metrics['accuracy_no_interp']:.3f}. Fine-tuning: attention only, "
        f"{cfg.ft_steps} steps x {cfg.ft_batch}, {cfg.ft_seeds} seed(s). Scores on "
        f"{cfg.n_detection} detection examples, accuracy on {cfg.n_eval} evaluation examples.",
        _common.markdown_table(
            ["model", "accuracy", "recall", "precision", "|H_tau|", "patched H_real"], rows
        ),
        f"Knockout of H_real in the real model: {_mean(ko['none']):.3f} -> "
        f"{_mean(ko['retrieval']):.3f} (relative drop {c['knockout_relative_drop']:.2f}); "
        f"random heads: relative drop {c['random_relative_drop']:.2f}.",
        "Correlation (fine-tuned models): "
        + ", ".join(f"{k} {v}" for k, v in metrics["correlation"].items()),
        "Quick checks: " + ", ".join(f"{k}: {v}" for k, v in c["quick_checks"].items()),
    ]
    _common.write_report(out_dir, f"{NAME}: {CLAIM}", *sections)

"""Simulated LLMs: the node labeller (answer strings + the official parser) and the edge judge
that estimates the homophily ratio ``r_hat`` (the official ``pred_r.py`` protocol).

The GPT-4o labeller and GPT-4o-mini judge cannot run here; these oracles have the same
interfaces and a tunable accuracy, so the estimator's bias and the class-embedding builder are
exercised as in the official pipeline.

- :func:`label_nodes`: an answer string per node, naming the true class with probability
  ``a_node`` and otherwise a uniformly drawn wrong class; with probability ``p_fail`` the answer
  names no class or two (half each), which the parser drops.
- :func:`parse_answers`: the official ``catch_answer``: each class name with parenthesised parts
  removed is searched case-insensitively in the answer (escaped here, the official passes the name
  as a regular expression); no match gives -1, more than one -2.
- :func:`judge_edges`: ``m`` edges drawn uniformly with replacement, ``trials`` independent
  judgements each (right with probability ``a_edge``), an edge counted "same" on a majority
  (``>= 3`` of 5); ``r_hat`` = the fraction. ``resample_per_trial=True`` is what the official
  script does when its five trials run in one process: every trial draws its own ``m`` edges and
  the votes are summed by position, so a "vote" pools five different edges.
- :func:`predicted_r_hat`: ``E[r_hat] = h A + (1 - h)(1 - A)``, ``A = P(Bin(trials, a) >= 3)``;
  with resampling ``P(Bin(trials, q) >= majority)``, ``q = h a + (1 - h)(1 - a)``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
from scipy.stats import binom

from jaxlab.core.checks import check_in_range, check_int

__all__ = ["judge_edges", "label_nodes", "parse_answers", "predicted_r_hat"]


def label_nodes(
    labels: np.ndarray,
    class_names: Sequence[str],
    rng: np.random.Generator,
    *,
    a_node: float = 0.8,
    p_fail: float = 0.05,
) -> list[str]:
    """One answer string per node in ``labels`` (see the module docstring)."""
    check_in_range(a_node, "a_node", 0.0, 1.0)
    check_in_range(p_fail, "p_fail", 0.0, 1.0)
    n_classes = len(class_names)
    if n_classes < 2:
        raise ValueError(f"`class_names` must name at least 2 classes, got {n_classes}.")
    labels = np.asarray(labels)
    if labels.size and (labels.min() < 0 or labels.max() >= n_classes):
        raise ValueError(
            f"`labels` must lie in [0, {n_classes}), got {labels.min()}..{labels.max()}."
        )
    answers = []
    for y in labels:
        u = rng.random()
        if u < p_fail / 2:
            answers.append("I cannot tell which category this text belongs to.")
            continue
        if u < p_fail:
            a, b = rng.choice(n_classes, size=2, replace=False)
            answers.append(f"It could be {class_names[a]} or {class_names[b]}.")
            continue
        c = (
            int(y)
            if rng.random() < a_node
            else (int(y) + 1 + rng.integers(n_classes - 1)) % n_classes
        )
        answers.append(f"The category is {class_names[c]}.")
    return answers


def parse_answers(answers: Sequence[str], class_names: Sequence[str]) -> np.ndarray:
    """``int32 [len(answers)]``: the class named, -1 for none, -2 for more than one."""
    patterns = [
        re.compile(re.escape(re.sub(r"\(.*?\)", "", name).strip()), re.IGNORECASE)
        for name in class_names
    ]
    out = np.full(len(answers), -1, np.int32)
    for i, text in enumerate(answers):
        for c, pattern in enumerate(patterns):
            if pattern.search(text):
                if out[i] == -1:
                    out[i] = c
                else:
                    out[i] = -2
                    break
    return out


def judge_edges(
    edges: np.ndarray,
    labels: np.ndarray,
    rng: np.random.Generator,
    *,
    m: int = 100,
    a_edge: float = 0.85,
    trials: int = 5,
    resample_per_trial: bool = False,
) -> float:
    """``r_hat``: the fraction of ``m`` sampled edges the simulated judge calls same-class."""
    check_int(m, "m", minimum=1)
    check_int(trials, "trials", minimum=1)
    check_in_range(a_edge, "a_edge", 0.0, 1.0)
    edges, labels = np.asarray(edges), np.asarray(labels)
    if edges.ndim != 2 or edges.shape[1] != 2 or len(edges) == 0:
        raise ValueError(f"`edges` must have shape [E >= 1, 2], got {edges.shape}.")
    votes = np.zeros(m, np.int64)
    picks = rng.integers(len(edges), size=m)
    for _ in range(trials):
        if resample_per_trial:
            picks = rng.integers(len(edges), size=m)
        same = labels[edges[picks, 0]] == labels[edges[picks, 1]]
        right = rng.random(m) < a_edge
        votes += np.where(right, same, ~same)
    return float(np.mean(votes >= trials // 2 + 1))


def predicted_r_hat(
    h: float | np.ndarray, a_edge: float, *, trials: int = 5, resample_per_trial: bool = False
) -> float | np.ndarray:
    """The expected ``r_hat`` at true edge homophily ``h`` (see the module docstring)."""
    check_int(trials, "trials", minimum=1)
    check_in_range(a_edge, "a_edge", 0.0, 1.0)
    check_in_range(h, "h", 0.0, 1.0)
    need = trials // 2 + 1
    h = np.asarray(h, np.float64)
    if resample_per_trial:
        q = h * a_edge + (1 - h) * (1 - a_edge)
        out = binom.sf(need - 1, trials, q)
    else:
        agree = binom.sf(need - 1, trials, a_edge)
        out = h * agree + (1 - h) * (1 - agree)
    return float(out) if out.ndim == 0 else out

"""FedGWC on sklearn digits: does the Gaussian-weighted interaction signal recover client groups
with different data domains, and leave an IID network alone? (Work in progress: FedAvg and FedGWC;
IFCA, CFL, Local and Oracle are to come.)

Run: ``python -m experiments run fedgwc --preset quick`` (S1 and S0, 3000 rounds each).

Data (spec section 5): digits pixels /16, standardised with training statistics; a stratified
1437 / 360 train / test split. Each of the ``clients`` clients draws ``samples`` training and
``test_samples`` test images with replacement from the pools, following its label distribution
(overlap across clients is accepted). Scenarios, with known ground-truth groups:

- ``s0``: IID control (every client clean, uniform labels);
- ``s1``: minority noise: 75% clean, 25% with fresh Gaussian pixel noise of SD ``noise_sigma`` on
  every access (train and test);
- ``s2``: multi-domain: 60% clean, 25% noise SD 1.0, 15% noise SD 2.5;
- ``s3``: label skew: 4 equal groups owning the classes {0,1,2}, {3,4,5}, {6,7}, {8,9};
- ``s4``: symmetric concept shift: 4 equal groups whose labels are permuted differently.

Methods share the round machinery of :mod:`jaxlab.federated.fedgwc` (same client sampler, local
steps, model, rounds): ``fedavg`` (one model, ``m`` clients per round) and ``fedgwc`` (the official
algorithm; ``m`` clients per cluster per round, so its ``client_updates`` grow with the clusters).
Each client is tested with its own cluster's model.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

from experiments import _common
from jaxlab.federated import fedgwc as F

NAME = "fedgwc"
PAPER = "Licciardi, Leo, Fani, Caputo, Ciccone, Interaction-Aware Gaussian Weighting for Clustered Federated Learning (ICML 2025)"  # noqa: E501
CLAIM = (
    "Clients' local loss trajectories alone (Gaussian rewards -> interaction matrix -> spectral "
    "clustering) separate clients of different domains and leave IID networks unsplit"
)
SCENARIOS = ("s0", "s1", "s2", "s3", "s4")
METHODS = ("fedavg", "fedgwc")


@dataclasses.dataclass(frozen=True)
class Config:
    """Network, training and budget.

    Attributes:
      seed: PRNG seed (data, sampling, training).
      scenarios: which of ``SCENARIOS`` to run; methods: which of ``METHODS``.
      clients, samples, test_samples: ``K`` and the per-client train / test draws.
      noise_sigma: the noisy group's pixel-noise SD in ``s1``.
      rounds, chunk: rounds per method and the rounds per jitted ``while_loop`` call.
      participation, steps, batch_size, lr, hidden: ``m = participation K``; local SGD; the MLP.
      max_clusters: FedGWC's cluster slots.
    """

    seed: int = 0
    scenarios: tuple[str, ...] = ("s1", "s0")
    methods: tuple[str, ...] = METHODS
    clients: int = 100
    samples: int = 100
    test_samples: int = 50
    noise_sigma: float = 1.5
    rounds: int = 3000
    chunk: int = 500
    participation: float = 0.1
    steps: int = 7
    batch_size: int = 64
    lr: float = 0.05
    hidden: tuple[int, ...] = (64,)
    max_clusters: int = 4

    def __post_init__(self):
        bad = [s for s in self.scenarios if s not in SCENARIOS]
        bad += [m for m in self.methods if m not in METHODS]
        if bad:
            raise ValueError(f"unknown scenario(s) / method(s) {bad}; choose from {SCENARIOS}, "
                             f"{METHODS}")  # fmt: skip


PRESETS = {
    "quick": Config(),
    "full": Config(scenarios=SCENARIOS),
}


# ---- data ----------------------------------------------------------------------------------------


def _pools():
    x_tr, x_te, y_tr, y_te = _common.digits_split()
    mean, sd = x_tr.mean(0), x_tr.std(0) + 1e-6
    return (x_tr - mean) / sd, y_tr, (x_te - mean) / sd, y_te


def scenario(name: str, config: Config, rng: np.random.Generator):
    """``(groups [K], noise [K], classes: list of allowed-class arrays, perms [K, 10])``."""
    k = config.clients
    groups = np.zeros(k, int)
    noise = np.zeros(k, np.float32)
    allowed = [np.arange(10)] * k
    perms = np.tile(np.arange(10), (k, 1))
    if name == "s1":
        groups[int(0.75 * k) :] = 1
        noise[groups == 1] = config.noise_sigma
    elif name == "s2":
        groups[int(0.6 * k) :] = 1
        groups[int(0.85 * k) :] = 2
        noise[groups == 1], noise[groups == 2] = 1.0, 2.5
    elif name in ("s3", "s4"):
        groups = np.arange(k) * 4 // k
        if name == "s3":
            sets = [np.arange(0, 3), np.arange(3, 6), np.arange(6, 8), np.arange(8, 10)]
            allowed = [sets[g] for g in groups]
        else:
            table = np.stack([np.arange(10)] + [rng.permutation(10) for _ in range(3)])
            perms = table[groups]
    return groups, noise, allowed, perms


def client_data(name: str, config: Config, rng: np.random.Generator, pools):
    """Training :class:`~jaxlab.federated.fedgwc.ClientData` and test arrays for a scenario."""
    x_tr, y_tr, x_te, y_te = pools
    groups, noise, allowed, perms = scenario(name, config, rng)

    def draw(x, y, n):
        by_class = [np.flatnonzero(y == c) for c in range(10)]
        xs, ys = [], []
        for a, p in zip(allowed, perms, strict=True):
            cls = rng.choice(a, n)
            idx = np.array([rng.choice(by_class[c]) for c in cls])
            xs.append(x[idx])
            ys.append(p[y[idx]])
        return np.stack(xs), np.stack(ys)

    xt, yt = draw(x_tr, y_tr, config.samples)
    xe, ye = draw(x_te, y_te, config.test_samples)
    train = F.ClientData(jnp.asarray(xt), jnp.asarray(yt), jnp.full((config.clients,),
                         config.samples), jnp.asarray(noise))  # fmt: skip
    return train.check(config.batch_size), (xe, ye), groups


# ---- methods -------------------------------------------------------------------------------------


def _gwc_config(config: Config, clusters: int) -> F.FedGWCConfig:
    local = F.LocalConfig(steps=config.steps, batch_size=config.batch_size, lr=config.lr)
    return F.FedGWCConfig(participation=config.participation, local=local, max_clusters=clusters,
                          seed=config.seed)  # fmt: skip


def run_method(method: str, config: Config, data: F.ClientData, key) -> dict:
    """Train ``method`` for ``config.rounds`` rounds; FedGWC splits on the host when triggered."""
    net = F.MLP(hidden=config.hidden)
    params = net.init(jax.random.fold_in(key, 1), jnp.zeros((1, 64)))
    gwc = _gwc_config(config, config.max_clusters if method == "fedgwc" else 1)
    state = F.init(params, config.clients, gwc)
    if method == "fedavg":  # one model, no interaction signal: the same rounds without clustering
        state = state.replace(splittable=jnp.zeros_like(state.splittable))
    run = jax.jit(F.run_rounds, static_argnums=(2, 3, 5))
    attempts, r_before, first_labels = [], None, None
    k_train = jax.random.fold_in(key, 2)
    while int(state.rounds) < config.rounds:
        todo = min(config.chunk, config.rounds - int(state.rounds))
        state, _ = run(state, k_train, todo, net.apply, data, gwc)
        if bool(jnp.any(F.triggered(state))):
            r_at = np.asarray(state.r)
            state, records = F.try_split(state, gwc)
            attempts += records
            if r_before is None and any(rec["split_sizes"] for rec in records):
                r_before, first_labels = r_at, np.asarray(state.labels)
    return {"state": state, "net": net, "attempts": attempts, "r_at_split": r_before,
            "labels_after_first_split": first_labels}  # fmt: skip


def evaluate(out: dict, test, noise: np.ndarray, key) -> np.ndarray:
    """Per-client test accuracy with the client's own cluster model (fresh noise for noisy
    clients)."""
    state, net = out["state"], out["net"]
    xe, ye = test
    x = jnp.asarray(xe) + jnp.asarray(noise)[:, None, None] * jax.random.normal(key, xe.shape)

    @jax.jit
    def acc(params_stack, labels, x, y):
        def one(c, xi, yi):
            p = jax.tree_util.tree_map(lambda a: a[c], params_stack)
            return jnp.mean(jnp.argmax(net.apply(p, xi), -1) == yi)

        return jax.vmap(one)(labels, x, y)

    return np.asarray(acc(state.params, state.labels, x, jnp.asarray(ye)))


# ---- run -----------------------------------------------------------------------------------------


def run(config: Config, out_dir: Path) -> dict:
    out = Path(out_dir)
    pools = _pools()
    keys = ("ari", "ari_after_first_split", "nmi", "n_clusters", "first_split_round", "accuracy",
            "group_accuracy", "client_updates", "attempts")  # fmt: skip
    metrics = {k: {} for k in keys}
    figs = {}
    for i, name in enumerate(config.scenarios):
        rng = np.random.default_rng([config.seed, i])
        data, test, groups = client_data(name, config, rng, pools)
        key = jax.random.fold_in(jax.random.key(config.seed), i)
        for name_m in keys:
            metrics[name_m][name] = {}
        for method in config.methods:
            res = run_method(method, config, data, jax.random.fold_in(key, 7))
            state = res["state"]
            labels = np.asarray(state.labels)
            acc = evaluate(res, test, np.asarray(data.noise), jax.random.fold_in(key, 9))
            splits = [a["round"] for a in res["attempts"] if a["split_sizes"]]
            metrics["ari"][name][method] = float(adjusted_rand_score(groups, labels))
            first = res["labels_after_first_split"]
            metrics["ari_after_first_split"][name][method] = (
                None if first is None else float(adjusted_rand_score(groups, first))
            )
            metrics["nmi"][name][method] = float(normalized_mutual_info_score(groups, labels))
            metrics["n_clusters"][name][method] = int(len(np.unique(labels)))
            metrics["first_split_round"][name][method] = splits[0] if splits else None
            metrics["accuracy"][name][method] = float(acc.mean())
            metrics["group_accuracy"][name][method] = {
                str(g): float(acc[groups == g].mean()) for g in np.unique(groups)
            }
            metrics["client_updates"][name][method] = int(state.client_updates)
            metrics["attempts"][name][method] = [
                {**a, "scores": {str(n): s for n, s in a["scores"].items()}}
                for a in res["attempts"]
            ]
            if method == "fedgwc":
                figs[name] = (res["r_at_split"], np.asarray(state.r), groups, labels)
    _figures(out, figs, metrics, config)
    rows = [
        [s, m, metrics["ari"][s][m], metrics["n_clusters"][s][m],
         metrics["first_split_round"][s][m], metrics["accuracy"][s][m],
         metrics["client_updates"][s][m]]
        for s in config.scenarios for m in config.methods
    ]  # fmt: skip
    _common.write_report(
        out,
        "FedGWC on digits",
        f"{PAPER}\n\nClaim: {CLAIM}.",
        f"{config.rounds} rounds, K = {config.clients}, m = "
        f"{round(config.participation * config.clients)} per cluster per round.",
        _common.markdown_table(
            ["scenario", "method", "ARI", "clusters", "first split", "accuracy", "client updates"],
            rows,
        ),
        "Figures: `interaction_<scenario>.png` (interaction matrix ordered by true group at the "
        "first split and at the end), `group_accuracy.png`.",
    )
    return metrics


def _figures(out: Path, figs: dict, metrics: dict, config: Config) -> None:
    for name, (r_split, r_end, groups, labels) in figs.items():
        order = np.lexsort((labels, groups))
        fig, axes = plt.subplots(1, 2, figsize=(9, 4))
        for ax, r, title in ((axes[0], r_split, "at the first split"), (axes[1], r_end, "end")):
            if r is None:
                ax.set_axis_off()
                ax.set_title(f"{title}: no split")
                continue
            ax.imshow(r[np.ix_(order, order)].T, cmap="viridis")
            ax.set_title(f"R^T {title} (ordered by true group)")
        _common.save_figure(fig, out, f"interaction_{name}")
    fig, ax = plt.subplots(figsize=(6, 3.5))
    width = 0.8 / max(len(config.methods), 1)
    labels = []
    for j, method in enumerate(config.methods):
        vals = [v for s in config.scenarios
                for v in metrics["group_accuracy"][s][method].values()]  # fmt: skip
        labels = [
            f"{s}:g{g}" for s in config.scenarios for g in metrics["group_accuracy"][s][method]
        ]
        ax.bar(np.arange(len(vals)) + j * width, vals, width, label=method)
    ax.set_xticks(np.arange(len(labels)) + width / 2, labels, fontsize=7)
    ax.set(ylabel="test accuracy (own cluster model)", title="Accuracy per true group")
    ax.legend()
    _common.save_figure(fig, out, "group_accuracy")

"""Neural ETC on the controlled Lorenz system: triggers, inter-event times and stability.

Run: ``python -m experiments run neural_etc --preset quick`` (a few minutes on 2 CPU cores) or
``--preset full`` (paper settings, 5 test states, sigma ablation for MC).

Methods, trained on the same seed and evaluated on the same test initial states (uniform in
``[-10, 10]^3``, fixed by the seed) with the same float64 event-triggered simulator
(diffrax Tsit5, rtol = atol = 1e-8, horizon 2, at most 2000 triggers):

- ``etc_mc``: Neural ETC, Monte Carlo algorithm (MC event function);
- ``etc_pi``: Neural ETC, path-integral algorithm (PI event function);
- ``etc_pi_projected``: the PI controller passed through the analytic projection (Thm 4.1);
- ``nlc``: neural Lyapunov control with the standard relative event rule;
- ``lqr``: LQR on the linearisation with the Heemels-style rule (sigma = 0.99: the sampling error
  may use only 1% of the LQR decrease before a trigger);
- ``lqr_official`` (extra): the LQR baseline exactly as the official ``lorenz/LQR.py`` runs it,
  which differs from the rule above in two ways that we reproduce only to explain the paper's
  LQR row (2000 triggers): the control is ``u = +K x`` (the MATLAB gain with the sign of
  ``u = -K x`` applied as positive feedback, so the loop is unstable) and the event term
  ``2 x^T S K e`` is computed as ``2 x_1 sum(S K e)`` (the scalar first coordinate instead of the
  state vector).

Choices (see the module docstring of :mod:`jaxlab.control.neural_etc.train`): every learner
draws fresh training states each step (``resample``; with the official fixed sample the MC
controller kept spurious equilibria between samples in 4 of 6 seeds), and PI uses the official
code's event-time gradient (``pi_state_gradient_only``: torchdiffeq gives no gradient through the
event function's own parameters) with its lambda_2 = 0.05; the full preset also trains PI with the
full implicit-function gradient at lambda_2 in {0.005, 0.05} (``pi_ift_ablation``).

The PI study (``pi_configs``) runs in the full preset: every row of :data:`PI_STUDY_ROWS` on
5 training seeds ``seed .. seed + 4``, vmapped. It is off in quick, where even one official row
on one seed would take the run past 3 minutes; any preset can run rows with
``--set 'pi_study_rows=["official"]'``. The study trains PI with the
official configuration (:data:`~jaxlab.control.neural_etc.OFFICIAL_PI`: 2000 fixed states,
501 + 99 steps, event starts drawn with replacement, PyTorch init, first trigger by
:data:`~jaxlab.control.neural_etc.OFFICIAL_PI_TRIGGER`), with one of our deviations put back
at a time, and ours; every trained controller is simulated from the same 10 unselected test
states with its trained V (and, as the official table does, with an untrained V). Per row:
``triggers_mean`` / ``triggers_max`` over all seeds x states, ``min_gap`` (smallest inter-event
time, the first interval included), ``late_mse`` (mean over seeds of each seed's mean late
MSE; null if a run diverged), ``stabilised_seeds`` (seeds with mean late MSE <= 1e-3) and the
per-seed values.

Metrics per method: ``triggers`` (mean count over test states), ``min_inter_event`` (smallest
inter-event time over all test states), ``temporal_mse`` (mean ``||x(t)||^2`` on [1.8, 2]),
``mse_at_10th_trigger``, ``diverged`` (test states whose run left the ball of radius
``escape_radius``; their trigger count stops there and ``temporal_mse`` is null),
``solver_ok``, ``train_seconds`` (wall, including compilation) and ``violation_rate``
(fraction of 1e5 uniform points of the box violating the method's own decrease condition:
``L V + V <= 0`` for PI and projected PI, ``L V + alpha(||x||) <= 0`` for MC, ``L V < 0`` for NLC
and LQR).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import matplotlib.pyplot as plt
import numpy as np

from experiments import _common
from experiments._config import COUNT, NONNEG, POSITIVE, Choice, Range
from jaxlab.control import neural_etc as E
from jaxlab.control.neural_etc import ETCConfig, make_trainer, run_schedule
from jaxlab.core.checks import check_choice, check_int

NAME = "neural_etc"
PAPER = "Yang, Zhang, Zhu, Lin, Neural Event-Triggered Control with Optimal Scheduling (ICML 2025)"
CLAIM = "Neural ETC stabilises Lorenz with ~10x fewer triggers than NLC/LQR event-triggered control"
METHODS = ("etc_mc", "etc_pi", "etc_pi_projected", "nlc", "lqr", "lqr_official")


@dataclasses.dataclass(frozen=True)
class Config:
    """Lorenz, sigma = 0.5 for the neural event functions.

    Attributes:
      seed: training seed; test states come from ``seed + 1000``.
      n_test_states: initial states evaluated per method.
      horizon, max_triggers, n_grid, mse_from: evaluation settings.
      mc_steps, mc_samples, mc_weight: MC Adam steps, training states, lambda_2.
      pi_warmup, pi_event_steps, pi_samples, pi_weight, pi_batch: PI settings.
      nlc_steps, nlc_samples: NLC baseline.
      learning_rate: Adam step size for every learner.
      sigma, lqr_sigma: event parameters.
      n_violation_points: uniform points for ``violation_rate``.
      escape_radius: a simulation stops, flagged diverged, once ``||x||`` exceeds this.
      mc_sigma_ablation: extra sigmas to train MC with (full preset).
      pi_ift_ablation: lambda_2 values to train PI with the full IFT event-time gradient (full).
      resample: fresh training states every step for every learner.
      pi_state_gradient_only: PI event-time gradient as in the official code.
      pi_study_rows: the PI training configurations of the ``pi_configs`` study (names in
        :data:`PI_STUDY_ROWS`); empty skips the study.
      pi_study_seeds: training seeds per study row (``seed, seed + 1, ...``), vmapped.
      pi_study_test_states: unselected test states per seed (uniform, key ``seed + 3000``).
      pi_official_schedule, pi_ours_schedule: (warm-up, event) steps of the official
        configuration (501, 99) and of ours (200, 20).
    """

    seed: int = 0
    n_test_states: int = 3
    horizon: float = 2.0
    max_triggers: int = 2000
    n_grid: int = 1000
    mse_from: float = 1.8
    mc_steps: int = 600
    mc_samples: int = 5000
    mc_weight: float = 0.1
    pi_warmup: int = 200
    pi_event_steps: int = 20
    pi_samples: int = 2000
    pi_weight: float = 0.05
    pi_batch: int = 10
    nlc_steps: int = 300
    nlc_samples: int = 5000
    learning_rate: float = 0.05
    sigma: float = 0.5
    lqr_sigma: float = 0.99
    n_violation_points: int = 100_000
    escape_radius: float = 1000.0
    mc_sigma_ablation: tuple[float, ...] = ()
    pi_ift_ablation: tuple[float, ...] = ()
    resample: bool = True
    pi_state_gradient_only: bool = True
    pi_study_rows: tuple[str, ...] = ()
    pi_study_seeds: int = 1
    pi_study_test_states: int = 10
    pi_official_schedule: tuple[int, int] = (501, 99)
    pi_ours_schedule: tuple[int, int] = (200, 20)

    def __post_init__(self):
        for row in self.pi_study_rows:
            check_choice(row, "pi_study_rows", PI_STUDY_ROWS)
        check_int(self.pi_study_seeds, "pi_study_seeds", minimum=1)
        check_int(self.pi_study_test_states, "pi_study_test_states", minimum=1)


# The PI study (``pi_configs``): the official training, ours, and the official one with one of
# our deviations put back at a time. Rows ending in "_untrained_v" are evaluation variants.
PI_STUDY_ROWS = (
    "official",  # OFFICIAL_PI with OFFICIAL_PI_TRIGGER
    "official_untrained_v",  # official controllers, event function with a fresh ICNN V (table)
    "official_as_run",  # + the CPU quirk: t0 and e0 of the trigger solves trained by Adam
    "resample",  # (a) fresh training states every step
    "schedule",  # (b) our quick schedule (200 warm-up + 20 event steps)
    "adaptive_trigger",  # (c) adaptive Tsit5 + exact root, t_max 5, no gradient without trigger
    "lecun_init",  # (d) LeCun-normal controller kernels, zero biases
    "ours",  # (a)-(d) and event starts without replacement: the quick preset's etc_pi
)

_SIGMA = Range(0, 1, low_open=True, high_open=True)  # event parameters, in (0, 1)
# the range of every field of Config (checked before a run starts); steps may be 0 (an untrained
# learner is still evaluated), the late-MSE window needs grid points, hence n_grid >= 2
LIMITS = {
    "n_test_states": COUNT,
    "horizon": POSITIVE,
    "max_triggers": COUNT,
    "n_grid": Range(2),
    "mse_from": NONNEG,
    "mc_steps": NONNEG,
    "mc_samples": COUNT,
    "mc_weight": NONNEG,
    "pi_warmup": NONNEG,
    "pi_event_steps": NONNEG,
    "pi_samples": COUNT,
    "pi_weight": NONNEG,
    "pi_batch": COUNT,
    "nlc_steps": NONNEG,
    "nlc_samples": COUNT,
    "learning_rate": POSITIVE,
    "sigma": _SIGMA,
    "lqr_sigma": _SIGMA,
    "n_violation_points": COUNT,
    "escape_radius": POSITIVE,
    "mc_sigma_ablation": _SIGMA,
    "pi_ift_ablation": NONNEG,
    "pi_study_rows": Choice(*PI_STUDY_ROWS),
    "pi_study_seeds": COUNT,
    "pi_study_test_states": COUNT,
    "pi_official_schedule": NONNEG,
    "pi_ours_schedule": NONNEG,
}

STABILISED_MSE = 1e-3  # a seed stabilises when its mean late MSE over the test states is below

PRESETS = {
    "quick": Config(),
    "full": Config(
        n_test_states=5,
        pi_warmup=500,
        pi_event_steps=100,
        nlc_steps=600,
        mc_sigma_ablation=(0.3, 0.5, 0.8),
        pi_ift_ablation=(0.005, 0.05),
        pi_study_rows=PI_STUDY_ROWS,
        pi_study_seeds=5,
    ),  # fmt: skip
}


def _train(system, etc_cfg: ETCConfig, key, out_dir=None, tag=""):
    """The learner's whole schedule (``run_schedule``: MC / NLC ``steps``; PI ``warmup_steps``
    then ``event_steps``), checkpointed per phase in ``out_dir/checkpoints/<tag>[_event]``."""
    trainer = make_trainer(system, etc_cfg)
    start = time.perf_counter()
    state = jax.jit(trainer.init)(key)  # one program instead of ~100 eager initialiser ops

    def checkpointer(phase):
        if out_dir is None:
            return None
        return _common.checkpointer(out_dir, tag + "_event" if phase == "event" else tag)

    state, metrics = run_schedule(trainer, state, checkpointer=checkpointer)
    jax.block_until_ready(state.params)
    return trainer, state, time.perf_counter() - start, metrics


def _evaluate(system, controller, event, params, x0s, config: Config) -> dict:
    sim = jax.jit(
        jax.vmap(
            lambda x0: E.simulate_etc(
                system, controller, event, x0, params, config.horizon, config.max_triggers,
                config.n_grid, escape_radius=config.escape_radius,
            )
        )
    )  # fmt: skip
    traj = sim(x0s)
    n = np.asarray(traj.n_triggers)
    times = np.asarray(traj.trigger_times)
    grid = np.asarray(traj.grid[0])
    states = np.asarray(traj.states)
    min_gap = _min_gaps(n, times, config.horizon)
    late = grid >= config.mse_from
    tenth = [
        float(np.sum(np.asarray(traj.trigger_states)[i, 9] ** 2)) if n[i] >= 10 else None
        for i in range(len(n))
    ]
    return {
        "triggers": float(n.mean()),
        "triggers_per_state": n.tolist(),
        "min_inter_event": float(min(min_gap)),
        "min_inter_event_per_state": min_gap,
        # nan (written as null) if a run diverged: its states after the escape are nan
        "temporal_mse": float(np.mean(np.sum(states[:, late] ** 2, axis=-1))),
        "diverged": int(np.sum(np.asarray(traj.diverged))),
        "mse_at_10th_trigger": tenth,
        "solver_ok": bool(np.all(np.asarray(traj.ok))),
        "_traj": traj,
    }


def _pi_study_setup(name: str, config: Config):
    """``(ETCConfig, solver_config)`` of a training row of :data:`PI_STUDY_ROWS`."""
    warm, event = config.pi_official_schedule
    official = dataclasses.replace(E.OFFICIAL_PI, warmup_steps=warm, event_steps=event)
    warm, event = config.pi_ours_schedule
    ours_schedule = dict(warmup_steps=warm, event_steps=event)
    trigger = E.OFFICIAL_PI_TRIGGER
    if name == "official":
        return official, trigger
    if name == "official_as_run":
        return dataclasses.replace(official, train_event_start=True), trigger
    if name == "resample":
        return dataclasses.replace(official, resample=True), trigger
    if name == "schedule":
        return dataclasses.replace(official, **ours_schedule), trigger
    if name == "adaptive_trigger":
        return official, None  # the library default: TRAINING_SOLVER, t_max 5
    if name == "lecun_init":
        return dataclasses.replace(official, controller_init="lecun"), trigger
    assert name == "ours", name
    ours = dataclasses.replace(official, resample=True, controller_init="lecun",
                               event_replace=False, **ours_schedule)  # fmt: skip
    return ours, None


def _pi_study(system, config: Config) -> dict:
    """Train each row on ``pi_study_seeds`` seeds (vmapped) and evaluate every trained controller
    with its trained V on the same ``pi_study_test_states`` unselected states."""
    n_seeds, n_states = config.pi_study_seeds, config.pi_study_test_states
    seeds = config.seed + jnp.arange(n_seeds)
    keys = jax.vmap(jax.random.key)(seeds)
    r = system.domain
    x0s = jax.random.uniform(jax.random.key(config.seed + 3000), (n_states, system.state_dim),
                             jnp.float64, -r, r)  # fmt: skip
    # every row has the same networks (the init scheme only changes the initial values), so one
    # compiled simulator serves all of them
    model = E.make_model(system, E.OFFICIAL_PI)

    def simulate(params, x0):
        return E.simulate_etc(system, model.controller, model.event, x0, params, config.horizon,
                              config.max_triggers, config.n_grid,
                              escape_radius=config.escape_radius)  # fmt: skip

    sim = jax.jit(jax.vmap(jax.vmap(simulate, (None, 0)), (0, None)))
    trained, rows = {}, {}
    for name in config.pi_study_rows:
        base = name.removesuffix("_untrained_v")
        if base not in trained:
            cfg, solver = _pi_study_setup(base, config)
            trainer = make_trainer(system, cfg, solver_config=solver)
            start = time.perf_counter()
            state = jax.jit(jax.vmap(trainer.init))(keys)
            state, _ = run_schedule(trainer, state, chunks=1, vmap=True)
            params = jax.vmap(trainer.model.prepare)(state.params)
            params.pop("event_start", None)  # official_as_run: evaluation starts at t = 0, e = 0
            trained[base] = (jax.block_until_ready(params), time.perf_counter() - start)
        params, secs = trained[base]
        if name != base:  # the official table's event function: a fresh, untrained ICNN V
            fresh = jax.vmap(model.init)(jax.vmap(jax.random.key)(seeds + 369))
            params = {**params, "lyapunov": fresh["lyapunov"]}
        start = time.perf_counter()
        traj = sim(params, x0s)
        jax.block_until_ready(traj.states)
        rows[name] = {**_study_metrics(traj, config), "train_seconds": secs,
                      "eval_seconds": time.perf_counter() - start}  # fmt: skip
    return {
        "rows": rows,
        "test_states": np.asarray(x0s).tolist(),
        "seeds": np.asarray(seeds).tolist(),
    }


def _study_metrics(traj, config: Config) -> dict:
    """Triggers, gaps and late MSE of ``[S, K]`` runs (seeds x test states)."""
    n = np.asarray(traj.n_triggers)
    times = np.asarray(traj.trigger_times)
    late = np.asarray(traj.grid[0, 0]) >= config.mse_from
    # [S, K]; nan for a run that diverged (its states after the escape are nan)
    mse = np.mean(np.sum(np.asarray(traj.states)[:, :, late] ** 2, axis=-1), axis=-1)
    per_seed = mse.mean(axis=1)  # nan if any of the seed's runs diverged
    return {
        "triggers_mean": float(n.mean()),
        "triggers_max": int(n.max()),
        "min_gap": min(_min_gaps(n.ravel(), times.reshape(n.size, -1), config.horizon)),
        "late_mse": float(per_seed.mean()),
        "late_mse_median_seed": float(np.median(per_seed)),
        "stabilised_seeds": int(np.sum(per_seed <= STABILISED_MSE)),
        "seeds": int(n.shape[0]),
        "triggers_per_seed": n.mean(axis=1).tolist(),
        "late_mse_per_seed": per_seed.tolist(),
        "diverged": int(np.sum(np.asarray(traj.diverged))),
        "solver_ok": bool(np.all(np.asarray(traj.ok))),
    }


def _min_gaps(n: np.ndarray, times: np.ndarray, horizon: float) -> list[float]:
    """Smallest inter-event time of each run (``n [R]`` triggers at ``times [R, K]``), the first
    interval from 0 included; the horizon for a run without triggers."""
    gaps = [np.diff(np.concatenate([[0.0], t[:k]])) for k, t in zip(n, times, strict=True)]
    return [float(g.min()) if g.size else float(horizon) for g in gaps]


def _violation_rate(condition, params, points) -> float:
    values = jax.jit(jax.vmap(condition, in_axes=(None, 0)))(params, points)
    return float(np.mean(np.asarray(values) > 0))  # count / n, in float64


def run(config: Config, out_dir: Path) -> dict:
    with jax.enable_x64(True):
        return _run(config, out_dir)


def _run(config: Config, out_dir: Path) -> dict:
    system = E.lorenz()
    key = jax.random.key(config.seed)
    r = system.domain
    x0s = jax.random.uniform(jax.random.key(config.seed + 1000), (config.n_test_states, 3),
                             jnp.float64, -r, r)  # fmt: skip
    points = jax.random.uniform(jax.random.key(config.seed + 2000),
                                (config.n_violation_points, 3), jnp.float64, -r, r)  # fmt: skip
    results, trajectories = {}, {}
    common = dict(learning_rate=config.learning_rate, sigma=config.sigma, resample=config.resample)

    # Neural ETC, Monte Carlo
    mc_cfg = ETCConfig(method="mc", n_samples=config.mc_samples, event_weight=config.mc_weight,
                       steps=config.mc_steps, **common)  # fmt: skip
    mc, mc_state, secs, _ = _train(system, mc_cfg, key, out_dir=out_dir, tag="mc")
    m = mc.model
    mc_params = m.prepare(mc_state.params)  # spectral norms once, not per controller call
    res = _evaluate(system, m.controller, m.event, mc_params, x0s, config)
    lie = E.lie_derivative(system, m.controller, m.lyapunov)
    res["violation_rate"] = _violation_rate(
        lambda p, x: lie(p, x) + m.alpha(p, jnp.sqrt(x @ x)), mc_params, points
    )
    results["etc_mc"] = {**res, "train_seconds": secs}

    # Neural ETC, path integral (+ projection at evaluation)
    pi_cfg = ETCConfig(method="pi", n_samples=config.pi_samples, event_weight=config.pi_weight,
                       warmup_steps=config.pi_warmup, event_steps=config.pi_event_steps,
                       event_batch=config.pi_batch,
                       state_gradient_only=config.pi_state_gradient_only, **common)  # fmt: skip
    pi, pi_state, secs, _ = _train(system, pi_cfg, key, out_dir=out_dir, tag="pi")
    m = pi.model
    pi_params = m.prepare(pi_state.params)
    res = _evaluate(system, m.controller, m.event, pi_params, x0s, config)
    lie = E.lie_derivative(system, m.controller, m.lyapunov)
    res["violation_rate"] = _violation_rate(
        lambda p, x: lie(p, x) + m.lyapunov(p, x), pi_params, points
    )
    results["etc_pi"] = {**res, "train_seconds": secs}
    projected = pi.projected_controller
    event = E.pi_event(system, projected, m.lyapunov, config.sigma)
    res = _evaluate(system, projected, event, pi_params, x0s, config)
    lie_p = E.lie_derivative(system, projected, m.lyapunov)
    res["violation_rate"] = _violation_rate(
        lambda p, x: lie_p(p, x) + m.lyapunov(p, x) - 1e-9 * (1 + jnp.abs(m.lyapunov(p, x))),
        pi_params, points,
    )  # fmt: skip
    results["etc_pi_projected"] = {**res, "train_seconds": secs}

    # NLC baseline
    nlc_cfg = ETCConfig(method="nlc", n_samples=config.nlc_samples, steps=config.nlc_steps,
                        **common)  # fmt: skip
    nlc, nlc_state, secs, _ = _train(system, nlc_cfg, key, out_dir=out_dir, tag="nlc")
    m = nlc.model
    res = _evaluate(system, m.controller, m.event, nlc_state.params, x0s, config)
    lie = E.lie_derivative(system, m.controller, m.lyapunov)
    res["violation_rate"] = _violation_rate(lie, nlc_state.params, points)
    results["nlc"] = {**res, "train_seconds": secs}

    # LQR-ETC
    start = time.perf_counter()
    gains = E.lqr(system, np.diag([5.0, 10.0, 5.0]), 0.1 * np.eye(3))
    secs = time.perf_counter() - start
    res = _evaluate(system, gains.controller, E.lqr_event(system, gains, config.lqr_sigma), None,
                    x0s, config)  # fmt: skip
    lie = E.lie_derivative(system, gains.controller, gains.lyapunov)
    res["violation_rate"] = _violation_rate(lie, None, points)
    results["lqr"] = {**res, "train_seconds": secs}

    # the official LQR baseline as run (positive feedback, scalar x_1 in the event; see above)
    K, S, Q1 = (jnp.asarray(m) for m in (gains.K, gains.S, gains.Q1))

    def lqr_official_event(y, _):
        x, e = y[:3], y[3:]
        return (config.lqr_sigma - 1.0) * x @ Q1 @ x + 2.0 * x[0] * jnp.sum(S @ (K @ e))

    res = _evaluate(system, lambda p, x: K @ x, lqr_official_event, None, x0s, config)
    res["violation_rate"] = _violation_rate(
        E.lie_derivative(system, lambda p, x: K @ x, gains.lyapunov), None, points
    )
    results["lqr_official"] = {**res, "train_seconds": secs}

    pi_ift = {}
    for weight in config.pi_ift_ablation:
        cfg = dataclasses.replace(pi_cfg, event_weight=weight, state_gradient_only=False)
        trainer, state, secs, _ = _train(system, cfg, key, out_dir=out_dir, tag=f"pi_ift{weight}")
        res = _evaluate(system, trainer.model.controller, trainer.model.event,
                        trainer.model.prepare(state.params), x0s, config)  # fmt: skip
        pi_ift[str(weight)] = {k: v for k, v in res.items() if not k.startswith("_")}
        pi_ift[str(weight)]["train_seconds"] = secs

    ablation = {}
    for sigma in config.mc_sigma_ablation:
        cfg = dataclasses.replace(mc_cfg, sigma=sigma)
        trainer, state, secs, _ = _train(system, cfg, key, out_dir=out_dir, tag=f"mc_sigma{sigma}")
        res = _evaluate(system, trainer.model.controller, trainer.model.event,
                        trainer.model.prepare(state.params), x0s, config)  # fmt: skip
        ablation[str(sigma)] = {k: v for k, v in res.items() if not k.startswith("_")}

    for name, res in results.items():
        trajectories[name] = res.pop("_traj")
    _figures(trajectories, config, out_dir)
    metrics = {
        "methods": results,
        "triggers": {k: v["triggers"] for k, v in results.items()},
        "min_inter_event": {k: v["min_inter_event"] for k, v in results.items()},
        "temporal_mse": {k: v["temporal_mse"] for k, v in results.items()},
        "train_seconds": {k: v["train_seconds"] for k, v in results.items()},
        "violation_rate": {k: v["violation_rate"] for k, v in results.items()},
        "test_states": np.asarray(x0s).tolist(),
    }
    if ablation:
        metrics["mc_sigma_ablation"] = ablation
    if pi_ift:
        metrics["pi_ift_ablation"] = pi_ift
    if config.pi_study_rows:
        study = _pi_study(system, config)
        metrics["pi_configs"] = study.pop("rows")
        metrics["pi_study"] = {**study, "stabilised_mse": STABILISED_MSE}
    _report(metrics, config, out_dir)
    return metrics


def _figures(trajectories: dict, config: Config, out_dir: Path) -> None:
    fig, axes = plt.subplots(1, len(trajectories), figsize=(3.2 * len(trajectories), 3),
                             sharey=True)  # fmt: skip
    for ax, (name, traj) in zip(axes, trajectories.items(), strict=True):
        grid = np.asarray(traj.grid[0])
        norms = np.linalg.norm(np.asarray(traj.states[0]), axis=-1)
        ax.semilogy(grid, np.maximum(norms, 1e-12), lw=1)
        n = int(traj.n_triggers[0])
        t = np.asarray(traj.trigger_times[0, :n])
        ax.plot(t, np.maximum(np.linalg.norm(np.asarray(traj.trigger_states[0, :n]), axis=-1),
                              1e-12), "r|", ms=8)  # fmt: skip
        ax.set_title(f"{name}: {n} triggers", fontsize=9)
        ax.set_xlabel("t")
    axes[0].set_ylabel("||x(t)|| (red: triggers)")
    _common.save_figure(fig, out_dir, "trajectories")

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for name, traj in trajectories.items():
        for i in range(traj.n_triggers.shape[0]):
            n = int(traj.n_triggers[i])
            t = np.asarray(traj.trigger_times[i, :n])
            gaps = np.diff(np.concatenate([[0.0], t]))
            if gaps.size:
                ax.semilogy(np.arange(1, n + 1), gaps, ".", ms=3,
                            label=name if i == 0 else None)  # fmt: skip
    ax.set_xscale("log")
    ax.set_xlabel("trigger index")
    ax.set_ylabel("inter-event time")
    ax.legend(fontsize=7)
    _common.save_figure(fig, out_dir, "inter_event_times")


def _report(metrics: dict, config: Config, out_dir: Path) -> None:
    rows = [
        [name, r["triggers"], r["min_inter_event"], r["temporal_mse"], r["violation_rate"],
         r["train_seconds"], r["solver_ok"], r["diverged"]]
        for name, r in metrics["methods"].items()
    ]  # fmt: skip
    table = _common.markdown_table(
        ["method", "triggers (mean)", "min inter-event", "temporal MSE [1.8,2]", "violation rate",
         "train s", "solves ok", "diverged"], rows,
    )  # fmt: skip
    text = (
        f"Controlled Lorenz, {config.n_test_states} test states from seed {config.seed + 1000}, "
        f"horizon {config.horizon}, sigma {config.sigma} (LQR {config.lqr_sigma}); MC "
        f"{config.mc_steps} steps, PI {config.pi_warmup}+{config.pi_event_steps} steps, NLC "
        f"{config.nlc_steps} steps."
    )
    sections = [table, text, "![trajectories](trajectories.png)",
                "![inter-event times](inter_event_times.png)"]  # fmt: skip
    for key, label in (("pi_ift_ablation", "PI, full IFT gradient, lambda_2"),
                       ("mc_sigma_ablation", "MC sigma")):  # fmt: skip
        if key in metrics:
            sections.append(_common.markdown_table(
                [label, "triggers", "min inter-event", "temporal MSE"],
                [[v, r["triggers"], r["min_inter_event"], r["temporal_mse"]]
                 for v, r in metrics[key].items()],
            ))  # fmt: skip
    if "pi_configs" in metrics:
        study = metrics["pi_study"]
        sections.append(
            f"PI training configurations (`pi_configs`): {len(study['seeds'])} training seeds "
            f"{study['seeds']} (vmapped), each evaluated with its trained V on the same "
            f"{len(study['test_states'])} unselected test states; a seed is stabilised when its "
            f"mean late MSE is <= {study['stabilised_mse']}. Official schedule "
            f"{config.pi_official_schedule[0]}+{config.pi_official_schedule[1]}, ours "
            f"{config.pi_ours_schedule[0]}+{config.pi_ours_schedule[1]}. Trigger counts exclude "
            "the official evaluator's terminal pseudo-event (add 1 to compare)."
        )
        sections.append(_common.markdown_table(
            ["configuration", "triggers mean", "triggers max", "min gap", "late MSE (mean)",
             "late MSE (median seed)", "stabilised", "diverged", "train s"],
            [[name, r["triggers_mean"], r["triggers_max"], r["min_gap"], r["late_mse"],
              r["late_mse_median_seed"], f"{r['stabilised_seeds']}/{r['seeds']}", r["diverged"],
              r["train_seconds"]] for name, r in metrics["pi_configs"].items()],
        ))  # fmt: skip
    _common.write_report(out_dir, "Neural ETC on Lorenz", *sections)

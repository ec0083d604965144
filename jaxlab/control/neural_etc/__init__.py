"""Neural ETC: learned event-triggered controllers with optimal scheduling (ICML 2025).

Yang, Zhang, Zhu, Lin, "Neural Event-Triggered Control with Optimal Scheduling". Official code:
https://github.com/jingddong-zhang/Neural-Event-triggered-Control (PyTorch, float64).

Contents: systems (:mod:`.systems`), networks (:mod:`.models`), event-triggered simulation and
differentiable first-trigger times with diffrax (:mod:`.events`), the projection
(:mod:`.projection`), the LQR baseline (:mod:`.lqr`) and the MC / PI / NLC trainers
(:mod:`.train`: :class:`ETCConfig`, :func:`make_trainer` -> ``init(key)`` /
``step(state, x=None) -> (state, metrics)``, and :func:`run_schedule`, which runs a method's
whole schedule, PI's warm-up then event phase included). Measured on Lorenz (README, Results):
the MC controller needs 8-30 triggers on every seed, the PI one is seed-fragile, and a correctly
implemented LQR-ETC needs about 30, so the paper's 10x reduction over LQR does not hold here.

Simulations are meant to run in float64: wrap calls in ``with jax.enable_x64(True):`` and pass
float64 states (the library never switches x64 on globally).

:func:`run_schedule` runs ``steps`` steps for MC / NLC; for ``method="pi"`` it runs
``warmup_steps`` stability steps, then ``event_steps`` steps with the event loss.

Example (a tiny MC learner on Lorenz through its whole schedule)::

    import jax
    from jaxlab.control.neural_etc import ETCConfig, lorenz, make_trainer, run_schedule

    with jax.enable_x64(True):
        config = ETCConfig(method="mc", n_samples=64, steps=8, lyapunov_hidden=(8, 1),
                           controller_hidden=(8, 8), alpha_hidden=(4, 4))
        trainer = make_trainer(lorenz(), config)
        state = jax.jit(trainer.init)(jax.random.key(0))    # ETCState, data [64, 3] float64
        state, metrics = run_schedule(trainer, state)       # {"train": {"loss": [8], ...}}
        assert metrics["train"]["loss"][-1] < metrics["train"]["loss"][0]
        u = trainer.model.controller(state.params, state.data[0])   # [3] control
"""

from jaxlab.control.neural_etc.events import (
    EVALUATION_SOLVER,
    TRAINING_SOLVER,
    ETCTrajectory,
    FixedStepTrigger,
    ODESolverConfig,
    augmented_field,
    first_trigger_time,
    mc_event,
    pi_event,
    simulate_etc,
)
from jaxlab.control.neural_etc.lqr import LQR, lqr, lqr_event
from jaxlab.control.neural_etc.models import (
    ClassK,
    Controller,
    ICNNLyapunov,
    SpectralDense,
    clenshaw_curtis,
    smooth_relu,
    spectral_norm,
    with_spectral_norms,
)
from jaxlab.control.neural_etc.projection import lie_derivative, project
from jaxlab.control.neural_etc.systems import ControlSystem, closed_loop, grn, lorenz
from jaxlab.control.neural_etc.train import (
    OFFICIAL_PI,
    OFFICIAL_PI_TRIGGER,
    ETCConfig,
    ETCModel,
    ETCState,
    Phase,
    Trainer,
    make_model,
    make_trainer,
    run_schedule,
)

__all__ = [
    "OFFICIAL_PI",
    "OFFICIAL_PI_TRIGGER",
    "ClassK",
    "ControlSystem",
    "Controller",
    "ETCConfig",
    "ETCModel",
    "ETCState",
    "ETCTrajectory",
    "EVALUATION_SOLVER",
    "FixedStepTrigger",
    "ICNNLyapunov",
    "LQR",
    "ODESolverConfig",
    "Phase",
    "SpectralDense",
    "TRAINING_SOLVER",
    "Trainer",
    "augmented_field",
    "clenshaw_curtis",
    "closed_loop",
    "first_trigger_time",
    "grn",
    "lie_derivative",
    "lorenz",
    "lqr",
    "lqr_event",
    "make_model",
    "make_trainer",
    "mc_event",
    "pi_event",
    "project",
    "run_schedule",
    "simulate_etc",
    "smooth_relu",
    "spectral_norm",
    "with_spectral_norms",
]

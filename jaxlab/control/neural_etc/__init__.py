"""Neural ETC: learned event-triggered controllers with optimal scheduling (ICML 2025).

Yang, Zhang, Zhu, Lin, "Neural Event-Triggered Control with Optimal Scheduling". Official code:
https://github.com/jingddong-zhang/Neural-Event-triggered-Control (PyTorch, float64).

Contents: systems (:mod:`.systems`), networks (:mod:`.models`), event-triggered simulation and
differentiable first-trigger times with diffrax (:mod:`.events`), the projection
(:mod:`.projection`), the LQR baseline (:mod:`.lqr`) and the MC / PI / NLC trainers
(:mod:`.train`). Measured on Lorenz (README, Results): the MC controller needs 8-30 triggers on
every seed, the PI one is seed-fragile, and a correctly implemented LQR-ETC needs about 30, so
the paper's 10x reduction over LQR does not hold here.

Simulations are meant to run in float64: wrap calls in ``with jax.enable_x64(True):`` and pass
float64 states (the library never switches x64 on globally).
"""

from jaxlab.control.neural_etc.events import (
    ETCTrajectory,
    SolverConfig,
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
)
from jaxlab.control.neural_etc.projection import lie_derivative, project
from jaxlab.control.neural_etc.systems import ControlSystem, closed_loop, grn, lorenz

__all__ = [
    "LQR",
    "ClassK",
    "ControlSystem",
    "Controller",
    "ETCTrajectory",
    "ICNNLyapunov",
    "SolverConfig",
    "SpectralDense",
    "augmented_field",
    "clenshaw_curtis",
    "closed_loop",
    "first_trigger_time",
    "grn",
    "lie_derivative",
    "lorenz",
    "lqr",
    "lqr_event",
    "mc_event",
    "pi_event",
    "project",
    "simulate_etc",
    "smooth_relu",
]

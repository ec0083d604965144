"""Shapes and solver configs shared by the convex_markov unit, experiment and example tests.

``solve_games`` caches its exact-gradient program per ``(epsilon, inner_steps,
num_steps // eval_every, mesh)`` with the method, ``mu``, ``eta_x``, ``eta_y``, ``eval_every``
and ``gap_iters`` as inputs; the unit tests, the package example
and the experiment's tiny config use these shapes and methods, so the Alt-PGDA and Nest-PG
programs on ``N_GAMES`` games of ``N_STATES`` x ``N_ACTIONS`` are compiled once per test process.
"""

from __future__ import annotations

from jaxlab.games import convex_markov as M

N_GAMES, N_STATES, N_ACTIONS, GAMMA = 4, 3, 2, 0.8
# Alt-PGDA as in the package example and the experiment's ``alt_pgda`` at ``eta_y / eta_x = 5``
ALT = M.SolverConfig("alternating", mu=0.05, eta_x=0.1, eta_y=0.5)
STEPS, EVERY = 200, 100
# Nest-PG as the experiment's ``nest_pg`` at ratio 5 (10 inner steps per outer step)
NEST = M.SolverConfig("nested", mu=0.05, eta_x=0.1, eta_y=0.5)
NESTED_STEPS, NESTED_EVERY = 4, 2

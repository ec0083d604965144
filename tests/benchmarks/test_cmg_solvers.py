"""The cmg_solvers benchmark's NumPy loop computes the same step and gap as the library."""

import jax
import numpy as np
import pytest

from benchmarks import cmg_solvers as bench
from jaxlab.games import convex_markov as M


def test_numpy_reference_matches_the_library():
    with jax.enable_x64(True):
        games, x, y = bench._problem(3, 2)
        np_games = bench._numpy_games(games, 2)
        for i in range(2):
            game = jax.tree.map(lambda a, i=i: a[i], games)
            jx, jy = bench._one_step(game, x[i], y[i])
            nx, ny = bench.numpy_alt_step(np_games[i], np.asarray(x[i]), np.asarray(y[i]))
            np.testing.assert_allclose(nx, jx, atol=1e-12)
            np.testing.assert_allclose(ny, jy, atol=1e-12)
            gap = float(M.nash_gap(game, x[i], y[i], bench.CFG.epsilon).gap)
            np_gap = bench.numpy_gap(np_games[i], np.asarray(x[i]), np.asarray(y[i]))
            assert np_gap == pytest.approx(gap, abs=1e-9)

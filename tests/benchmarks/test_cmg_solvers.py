"""The cmg_solvers benchmark's NumPy loop computes the same step and gap as the library."""

import jax
import numpy as np
import pytest

from benchmarks import cmg_solvers as bench


def test_numpy_reference_matches_the_library():
    with jax.enable_x64(True):
        games, x, y = jax.jit(bench._problem, static_argnums=(0, 1))(3, 2)
        np_games = bench._numpy_games(games, 2)
        # one program each for the two games (the benchmark's per-game functions, game as input)
        one_step, one_gap = jax.jit(bench._one_step), jax.jit(bench._one_gap)
        for i in range(2):
            game = jax.tree.map(lambda a, i=i: a[i], games)
            jx, jy = one_step(game, x[i], y[i])
            nx, ny = bench.numpy_alt_step(np_games[i], np.asarray(x[i]), np.asarray(y[i]))
            np.testing.assert_allclose(nx, jx, atol=1e-12)
            np.testing.assert_allclose(ny, jy, atol=1e-12)
            assert not np.allclose(nx, np.asarray(x[i]))  # the step moved the policy
            gap = float(one_gap(game, x[i], y[i]))
            np_gap = bench.numpy_gap(np_games[i], np.asarray(x[i]), np.asarray(y[i]))
            assert np_gap == pytest.approx(gap, abs=1e-9)
            assert gap > 1e-3  # off the uniform start: the oracle does real work
        assert one_step._cache_size() == 1 and one_gap._cache_size() == 1

"""jaxlab.core.training: scan loops, chunking, vmap over seeds, tracing, known answers."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.core.training import progress_bar, run_chunked, scan_steps


def random_walk_step(state, _):
    """A stochastic step whose key comes from fold_in(key, t): restarts cannot change the stream."""
    noise = jax.random.normal(jax.random.fold_in(state["key"], state["t"]), ())
    new = {"key": state["key"], "t": state["t"] + 1, "x": 0.9 * state["x"] + noise}
    return new, {"x": new["x"], "t": new["t"]}


def walk_init(seed):
    return {"key": jax.random.key(seed), "t": jnp.int32(0), "x": jnp.float32(0.0)}


def test_scan_steps_closed_form():
    # state_{t+1} = state_t + x_t: metrics are the prefix sums of xs.
    xs = jnp.arange(1.0, 11.0)
    final, metrics = scan_steps(lambda s, x: (s + x, s + x), jnp.float32(0.0), 10, xs)
    np.testing.assert_allclose(final, 55.0)
    np.testing.assert_allclose(metrics, np.cumsum(np.arange(1.0, 11.0)))


@pytest.mark.parametrize("chunk_size", [1, 4, 5, 20, 50])
def test_chunked_equals_unchunked(chunk_size):
    state0 = walk_init(3)
    final_ref, metrics_ref = jax.jit(scan_steps, static_argnums=(0, 2))(
        random_walk_step, state0, 20
    )
    final, metrics = run_chunked(random_walk_step, state0, 20, chunk_size=chunk_size)
    np.testing.assert_array_equal(metrics["x"], np.asarray(metrics_ref["x"]))
    np.testing.assert_array_equal(metrics["t"], np.arange(1, 21))
    np.testing.assert_array_equal(final["x"], final_ref["x"])


def test_chunked_with_xs_matches_closed_form():
    xs = {"inc": jnp.arange(12.0)}
    final, metrics = run_chunked(
        lambda s, x: (s + x["inc"], s + x["inc"]), jnp.float32(0.0), 12, chunk_size=5, xs=xs
    )
    np.testing.assert_allclose(metrics, np.cumsum(np.arange(12.0)))
    np.testing.assert_allclose(final, 66.0)


def test_vmap_over_seeds_matches_vmapped_whole_run():
    seeds = jnp.arange(3)
    states = jax.vmap(walk_init)(seeds)
    whole = jax.jit(jax.vmap(lambda s: scan_steps(random_walk_step, s, 12)))(states)
    final, metrics = run_chunked(random_walk_step, states, 12, chunk_size=5, vmap=True)
    assert metrics["x"].shape == (3, 12)  # [seeds, steps], like vmap over a whole run
    np.testing.assert_allclose(metrics["x"], np.asarray(whole[1]["x"]), rtol=1e-6)
    np.testing.assert_allclose(final["x"], whole[0]["x"], rtol=1e-6)
    assert len({float(v) for v in final["x"]}) == 3  # seeds really differ


@pytest.mark.parametrize(("n_steps", "chunk_size"), [(20, 5), (22, 5)])
def test_step_traced_once(n_steps, chunk_size):
    traces = []

    def step(state, x):
        traces.append(1)
        return random_walk_step(state, x)

    run_chunked(step, walk_init(0), n_steps, chunk_size=chunk_size)
    # Every chunk (and the eval_shape for the metrics buffers, and a shorter last chunk) reuses
    # the one trace of the step.
    assert len(traces) == 1


def test_on_chunk_called_once_per_chunk_with_progress():
    calls = []
    run_chunked(
        random_walk_step,
        walk_init(0),
        11,
        chunk_size=4,
        on_chunk=lambda done, m: calls.append((done, m["x"].shape)),
    )
    assert calls == [(4, (4,)), (8, (4,)), (11, (3,))]


def test_gradient_descent_reaches_known_minimum():
    """Adam on f(w) = ||w - c||^2 through run_chunked ends at c."""
    target = jnp.array([1.0, -2.0, 3.0])
    opt = optax.adam(0.1)

    def step(state, _):
        params, opt_state = state
        loss, grads = jax.value_and_grad(lambda w: jnp.sum((w - target) ** 2))(params)
        updates, opt_state = opt.update(grads, opt_state)
        return (optax.apply_updates(params, updates), opt_state), {"loss": loss}

    params = jnp.zeros(3)
    (final, _), metrics = run_chunked(step, (params, opt.init(params)), 500, chunk_size=100)
    np.testing.assert_allclose(final, target, atol=1e-3)
    assert metrics["loss"][0] == pytest.approx(14.0)
    assert metrics["loss"][-1] < 1e-5


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="`n_steps` must be >= 1"):
        run_chunked(random_walk_step, walk_init(0), 0, chunk_size=1)
    with pytest.raises(ValueError, match="`chunk_size` must be >= 1"):
        run_chunked(random_walk_step, walk_init(0), 5, chunk_size=0)
    with pytest.raises(ValueError, match="`xs` leading axes"):
        run_chunked(random_walk_step, walk_init(0), 5, chunk_size=2, xs=jnp.zeros(4))


def test_progress_bar_callback_tracks_steps():
    import io

    out = io.StringIO()
    with progress_bar(10, "walk", metric="x", file=out, disable=False) as cb:
        run_chunked(random_walk_step, walk_init(0), 10, chunk_size=3, on_chunk=cb)
    text = out.getvalue()
    assert "walk" in text and "10/10" in text and "x=" in text

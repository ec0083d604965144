"""jaxlab.core.training: scan loops, chunking, vmap over seeds, tracing, known answers."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxlab.core.training import (
    TrainState,
    chunked_runner,
    fit,
    map_in_chunks,
    minibatch_epochs,
    next_token_loss,
    precompile_chunked,
    progress_bar,
    run_chunked,
    scan_steps,
)


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


def test_compiled_chunk_is_reused_across_calls_and_caller_state_survives_donation():
    traces = []

    def step(state, x):
        traces.append(1)
        return random_walk_step(state, x)

    state0 = walk_init(4)
    first = run_chunked(step, state0, 10, chunk_size=5)
    second = run_chunked(step, state0, 10, chunk_size=5)  # same step object: nothing recompiled
    assert len(traces) == 1
    np.testing.assert_array_equal(first[1]["x"], second[1]["x"])
    assert float(state0["x"]) == 0.0  # the caller's arrays were not donated away
    undonated = run_chunked(step, state0, 10, chunk_size=5, donate=False)
    np.testing.assert_array_equal(undonated[1]["x"], first[1]["x"])


def _quadratic_problem():
    a = jnp.array([[3.0, 1.0], [1.0, 2.0]])
    b = jnp.array([1.0, -1.0])
    return a, b, jnp.linalg.solve(a, b)


class FitTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_fit_reaches_the_closed_form_minimum(self):
        a, b, w_star = _quadratic_problem()
        loss = lambda w: 0.5 * w @ a @ w - b @ w  # noqa: E731
        run = self.variant(lambda w0: fit(loss, w0, optax.sgd(0.2), 300))
        w, losses = run(jnp.zeros(2))
        np.testing.assert_allclose(w, w_star, atol=1e-5)
        assert losses.shape == (300,) and losses[0] == 0.0
        np.testing.assert_allclose(losses[-1], -0.5 * b @ w_star, rtol=1e-5)


def test_fit_equals_hand_written_loop_with_keys_and_xs():
    opt = optax.adam(0.05)
    xs = jnp.linspace(0.0, 1.0, 7)
    key = jax.random.key(3)

    def loss(w, k, x):
        return jnp.sum((w - x - 0.1 * jax.random.normal(k, w.shape)) ** 2)

    w, losses = jax.jit(lambda w0: fit(loss, w0, opt, 7, key=key, xs=xs))(jnp.zeros(3))
    ref, s = jnp.zeros(3), opt.init(jnp.zeros(3))
    for t, k in enumerate(jax.random.split(key, 7)):
        val, g = jax.value_and_grad(loss)(ref, k, xs[t])
        u, s = opt.update(g, s, ref)
        ref = optax.apply_updates(ref, u)
        np.testing.assert_allclose(losses[t], val, rtol=1e-6)
    np.testing.assert_allclose(w, ref, rtol=1e-6)


def test_minibatch_epochs_equals_hand_written_epochs():
    x = jnp.arange(22.0).reshape(11, 2)
    y = jnp.arange(11.0)
    opt = optax.sgd(0.01)
    key = jax.random.key(5)

    def loss(w, batch, k):
        xb, yb = batch
        return jnp.mean((xb @ w - yb) ** 2) + 0.0 * jax.random.normal(k, ())

    w, losses = jax.jit(
        lambda w0: minibatch_epochs(loss, w0, opt, (x, y), key, epochs=3, batch_size=4)
    )(jnp.zeros(2))
    ref, s, means = jnp.zeros(2), opt.init(jnp.zeros(2)), []
    for k in jax.random.split(key, 3):
        order = np.asarray(jax.random.permutation(k, 11))[:8].reshape(2, 4)  # 2 batches, 3 dropped
        batch_losses = []
        for i, idx in enumerate(order):
            val, g = jax.value_and_grad(loss)(ref, (x[idx], y[idx]), jax.random.fold_in(k, i))
            u, s = opt.update(g, s, ref)
            ref = optax.apply_updates(ref, u)
            batch_losses.append(val)
        means.append(np.mean(batch_losses))
    np.testing.assert_allclose(w, ref, rtol=1e-6)
    np.testing.assert_allclose(losses, means, rtol=1e-6)
    with pytest.raises(ValueError, match="different lengths"):
        minibatch_epochs(loss, w, opt, (x, y[:5]), key, epochs=1, batch_size=4)


def test_train_state_apply_gradients_and_step_keys():
    opt = optax.adam(0.1)
    params = {"w": jnp.ones(3)}
    state = TrainState.create(params, opt, key=jax.random.key(0))
    grads = {"w": jnp.array([1.0, -1.0, 0.5])}
    new = jax.jit(lambda s: s.apply_gradients(grads))(state)
    u, _ = opt.update(grads, opt.init(params), params)
    np.testing.assert_allclose(new.params["w"], optax.apply_updates(params, u)["w"])
    assert int(new.step) == 1
    assert (
        jax.random.key_data(new.step_key()).tolist()
        != jax.random.key_data(state.step_key()).tolist()
    )
    np.testing.assert_array_equal(
        jax.random.key_data(state.step_key()),
        jax.random.key_data(jax.random.fold_in(jax.random.key(0), 0)),
    )
    leaves = jax.tree_util.tree_leaves(state)
    assert all(hasattr(leaf, "shape") for leaf in leaves)  # tx is static, not a leaf
    with pytest.raises(ValueError, match="without a `key`"):
        TrainState.create(params, opt).step_key()
    with pytest.raises(AssertionError):  # a gradient of another shape is refused, not broadcast
        state.apply_gradients({"w": jnp.ones((1, 3))})


@pytest.mark.parametrize("chunk", [None, 3, 4, 10, 50])
def test_map_in_chunks_equals_one_call_and_compiles_once(chunk):
    traces = []

    @jax.jit
    def fn(a, b):
        traces.append(a.shape)
        return {"s": a.sum(-1) + b, "p": a * b[:, None]}

    a = jnp.arange(30.0).reshape(10, 3)
    b = jnp.arange(10.0)
    out = map_in_chunks(fn, (a, b), chunk)
    ref = fn(a, b)
    np.testing.assert_array_equal(out["s"], ref["s"])
    np.testing.assert_array_equal(out["p"], ref["p"])
    assert len(set(traces)) <= 2  # the chunk shape (padded) and the reference call's shape
    with pytest.raises(ValueError, match="`chunk` must be >= 1"):
        map_in_chunks(fn, (a, b), 0)


def test_precompile_chunked_leaves_nothing_to_compile_for_the_run():
    compiles = []

    def listener(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:

        def fresh_step():  # a new step object: its chunks are compiled anew
            return lambda state, x: random_walk_step(state, x)

        run_chunked(fresh_step(), walk_init(0), 7, chunk_size=3)  # eager helpers warmed up
        compiles.clear()
        run_chunked(fresh_step(), walk_init(2), 7, chunk_size=3)
        assert len(compiles) == 2  # without precompiling: chunks of 3 and of 1
        step = fresh_step()
        template = jax.tree_util.tree_map(jnp.zeros_like, walk_init(1))  # shapes only
        precompile_chunked(step, template, 7, chunk_size=3)
        compiles.clear()
        state, m = run_chunked(step, walk_init(2), 7, chunk_size=3)
        assert compiles == []  # the run only traced
        want = run_chunked(random_walk_step, walk_init(2), 7, chunk_size=7)[1]["x"]
        np.testing.assert_array_equal(m["x"], want)
    finally:
        jax.monitoring.clear_event_listeners()


def test_chunked_runner_equals_one_scan_and_defaults():
    run, precompile = chunked_runner(random_walk_step, 7, 3, metric="x")
    precompile(walk_init(1))  # compiles the 3-step chunk and the 1-step remainder
    final, metrics = run(walk_init(1))
    ref_final, ref = scan_steps(random_walk_step, walk_init(1), 7)
    np.testing.assert_allclose(metrics["x"], ref["x"], rtol=1e-6)
    assert int(final["t"]) == 7
    _, short = run(walk_init(1), n_steps=2)
    np.testing.assert_allclose(short["x"], ref["x"][:2], rtol=1e-6)
    with pytest.raises(ValueError, match="n_steps"):
        run(walk_init(1), n_steps=0)


def test_next_token_loss_against_a_hand_computation():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 4, 5)).astype(np.float32)
    tokens = np.array([[0, 3, 1, 4], [2, 2, 0, 1]])
    weights = np.array([[0, 1.0, 0.5, 0], [9, 0, 1, 1]], np.float32)  # column 0 is unused
    logits[0, 0, 3] = logits[0, 1, 1] = 50.0  # row 0: both weighted targets are the argmax
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    ce = -np.take_along_axis(logp[:, :-1], tokens[:, 1:, None], -1)[..., 0]
    want = (ce * weights[:, 1:]).sum() / weights[:, 1:].sum()
    loss, acc = next_token_loss(jnp.asarray(logits), jnp.asarray(tokens), jnp.asarray(weights))
    assert float(loss) == pytest.approx(want, rel=1e-5)
    row1_right = all(logits[1, j].argmax() == tokens[1, j + 1] for j in (1, 2))
    assert float(acc) == pytest.approx((1 + row1_right) / 2)
    # `scored` picks the positions the accuracy reads (weights still weigh the loss)
    scored = np.array([[0, 1, 1, 0], [0, 0, 0, 0]], bool)
    _, acc = next_token_loss(jnp.asarray(logits), jnp.asarray(tokens), jnp.asarray(weights),
                             scored=jnp.asarray(scored))  # fmt: skip
    assert float(acc) == 1.0

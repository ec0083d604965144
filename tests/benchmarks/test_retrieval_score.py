"""The retrieval_score benchmark times equal work: its per-instance Python loops (the official
structure) and its NumPy check give the library scan's tokens and scores, and the Python and
NumPy per-step checks equal the library's rule on hand-made attention rows."""

import jax
import numpy as np

from benchmarks import retrieval_score as bench
from jaxlab.language.retrieval_heads import scores as S


def test_loops_equal_the_jitted_scan():
    context = 16
    model, params, world = bench._model(context)
    prompt, span = bench.instances(4, context, world, seed=1)
    cache = bench.jit_prefill(model, chunk=2)(params, prompt)  # two chunks in the lax.map
    per, success = bench.jit_decode_score(model, chunk=2)(params, cache, prompt, span)
    ref = S.decode_argmax(model, params, prompt, bench.STEPS)
    caches = bench.loop_prefill(model)(params, prompt)
    for check in (bench.check_python, bench.check_numpy):
        got, ok, tokens = bench.loop_decode_score(model, check)(params, caches, prompt, span)
        np.testing.assert_array_equal(tokens, ref.tokens)
        np.testing.assert_allclose(got, per, atol=1e-6)
        np.testing.assert_array_equal(ok, success)


def test_step_checks_equal_the_rule_on_hand_made_rows():
    rng = np.random.default_rng(0)
    n_steps, layers, heads, p = 5, 3, 4, 12
    prompt = rng.integers(7, 9, size=p).astype(np.int32)  # two tokens: many matches
    tokens = rng.integers(7, 9, size=n_steps).astype(np.int32)
    rows = rng.random((n_steps, layers, heads, p + n_steps))
    span = np.array([2, 8], np.int32)
    a, b = np.zeros((layers, heads)), np.zeros((layers, heads))
    for t in range(n_steps):
        bench.check_python(rows[t], int(tokens[t]), prompt, 2, 8, a)
        bench.check_numpy(rows[t], int(tokens[t]), prompt, 2, 8, b)
    want = S.score_rule(jax.numpy.asarray(rows.argmax(-1)), tokens, prompt, span,
                        eos_id=bench.NO_EOS)[0]  # fmt: skip
    assert np.asarray(want).sum() > 0.5  # the rows do hit
    np.testing.assert_allclose(a, want, atol=1e-6)
    np.testing.assert_allclose(b, want, atol=1e-6)
    assert bench.rouge1_recall([7, 8, 8], [8, 9]) == 0.5
    assert bench.rouge1_recall([8, 8], [8, 8]) == 1.0

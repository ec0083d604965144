"""retrieval_heads: the score rule on hand-made attention, the decode scan against a full-forward
NumPy reference, greedy == teacher-forced accuracy, knockout and patching identities, attention-
only fine-tuning, head-set metrics, the data generator's invariants, sharding, one trace."""

import dataclasses
import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.language import retrieval_heads as R
from jaxlab.language.retrieval_heads import data as D
from jaxlab.language.retrieval_heads import scores as S
from tests.helpers import assert_compiles_once

WORLD = R.World()
CFG = R.ModelConfig(d_model=16, num_layers=2, num_heads=2, d_mlp=32, base_length=64)
LENGTH = 80
P = R.prompt_length(LENGTH)


@functools.cache
def setup():
    model = R.make_model(CFG, WORLD, LENGTH)
    batch = R.sample_batch(jax.random.key(3), WORLD, "real", LENGTH, 8)
    params = model.init(jax.random.key(0), batch.tokens)
    return model, params, batch


# ---- the score rule on hand-made records ---------------------------------------------------


def _record(argmax_steps, emitted):
    """A 1-layer, 2-head record: head 0 follows ``argmax_steps``, head 1 always looks at 0."""
    n = len(emitted)
    top = np.zeros((n, 1, 2), np.int32)
    top[:, 0, 0] = argmax_steps
    return jnp.asarray(top), jnp.asarray(emitted, jnp.int32)


PROMPT = jnp.asarray([9, 7, 11, 12, 5, 11, 3], jnp.int32)  # answer span [2, 4) = (11, 12)
SPAN = jnp.asarray([2, 4], jnp.int32)


@functools.partial(jax.jit, static_argnames="dedup")
def _jit_rule(argmax, emitted, dedup):
    return S.score_rule(argmax, emitted, PROMPT, SPAN, dedup=dedup)


def _rule(argmax, emitted, dedup=False):
    s, copied, recall, ok = _jit_rule(argmax, emitted, dedup)
    return np.asarray(s), np.asarray(copied), float(recall), bool(ok)


def test_rule_copy_inside_span_scores_one():
    s, copied, recall, ok = _rule(*_record([2, 3, 0], [11, 12, D.EOS]))
    assert s[0, 0] == pytest.approx(1.0) and s[0, 1] == 0.0  # head 1 looks at position 0
    assert copied[0, 0] and not copied[0, 1] and recall == 1.0 and ok


def test_rule_zero_cases():
    # the matching token outside the span (position 5 also holds 11), or the other span token
    s, *_ = _rule(*_record([5, 2, 0], [11, 12, D.EOS]))
    assert s[0, 0] == 0.0
    # steps after the first EOS never count
    s, *_ = _rule(*_record([0, 2, 3], [D.EOS, 11, 12]))
    assert s[0, 0] == 0.0


def test_rule_repeat_exceeds_one_unless_dedup():
    rec = _record([2, 2, 3], [11, 11, 12])
    s, _, recall, ok = _rule(*rec)
    assert s[0, 0] == pytest.approx(1.5) and recall == 1.0 and ok
    s, *_ = _rule(*rec, dedup=True)
    assert s[0, 0] == pytest.approx(1.0)


def test_rouge_filter_and_all_failed_is_nan():
    _, _, recall, ok = _rule(*_record([2, 0, 0], [11, D.EOS, D.EOS]))
    assert recall == 0.5 and not ok  # the official rule: strictly above 0.5
    per = np.ones((3, 1, 2))
    with pytest.warns(RuntimeWarning, match="no instance"):
        scores, freq = R.aggregate(per, per > 0, np.zeros(3, bool))
    assert np.isnan(scores).all() and np.isnan(freq).all()
    scores, freq = R.aggregate(per * [[[1.0, 0.0]]], per > 0, np.array([True, False, True]))
    np.testing.assert_allclose(scores, [[1.0, 0.0]])


# ---- the decode scan --------------------------------------------------------------------------


def _reference(model, params, prompt, n_steps):
    """Greedy decode by full forwards (no cache) and each head's argmax in the emitting row.

    The sequence is right-padded to its final length, so one jitted forward serves every step
    (causal attention: the padding after the emitting position changes nothing before it)."""
    b, p = prompt.shape
    seq = np.concatenate([np.asarray(prompt), np.full((b, n_steps), D.PAD)], 1)
    forward = jax.jit(lambda x: model.apply(params, x, mask=x != D.PAD, return_attention=True))
    tops, toks = [], []
    for s in range(n_steps):
        logits, aux = forward(jnp.asarray(seq))
        at = p - 1 + s  # the emitting position
        row = np.asarray(aux.attention)[:, :, :, at, :]  # [L, B, H, S]
        tops.append(row.argmax(-1).transpose(1, 0, 2))
        nxt = np.asarray(logits)[:, at].argmax(-1)
        toks.append(nxt)
        seq[:, at + 1] = nxt
    return np.stack(toks, 1), np.stack(tops, 1)


def test_decode_scan_equals_full_forward_reference():
    model, params, batch = setup()
    prompt = batch.tokens[:, :P]
    d = R.decode_argmax(model, params, prompt, 3)
    toks, tops = _reference(model, params, prompt, 3)
    np.testing.assert_array_equal(np.asarray(d.tokens), toks)
    np.testing.assert_array_equal(np.asarray(d.argmax), tops)
    # the rule on the reference record (filter off: every instance) equals the library's
    per = jax.jit(jax.vmap(S.score_rule))(d.argmax, d.tokens, prompt, batch.span)[0]
    span = np.asarray(batch.span)
    ref = np.zeros_like(np.asarray(per))
    for i in range(len(span)):
        for s in range(3):
            if s > 0 and (toks[i, :s] == D.EOS).any():
                break
            j = tops[i, s]
            hit = (j >= span[i, 0]) & (j < span[i, 1])
            hit &= np.asarray(prompt)[i][np.clip(j, 0, P - 1)] == toks[i, s]
            ref[i] += hit / 2
    np.testing.assert_allclose(np.asarray(per), ref)


def test_decode_traces_once():
    model, params, batch = setup()
    prompts = [batch.tokens[:, :P], jnp.roll(batch.tokens[:, :P], 1, axis=0)]
    before = S._decode._cache_size()
    for p in prompts:
        jax.block_until_ready(R.decode_argmax(model, params, p, 3))
    assert S._decode._cache_size() - before <= 1


def test_uniform_attention_ties_go_to_first_real_token():
    model, params, batch = setup()
    zero_q = jax.tree_util.tree_map_with_path(
        lambda path, x: jnp.zeros_like(x) if "query" in jax.tree_util.keystr(path) else x, params
    )
    d = R.decode_argmax(model, zero_q, batch.tokens[:, :P], 2)
    first_real = np.argmax(np.asarray(batch.tokens[:, :P]) != D.PAD, axis=1)
    np.testing.assert_array_equal(
        np.asarray(d.argmax), np.broadcast_to(first_real[:, None, None, None], d.argmax.shape)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the untrained model answers nothing
        s = R.retrieval_scores(model, zero_q, batch.tokens[:, :P], batch.span, n_steps=2)
    assert (s.per_instance == 0.0).all()  # the first real token (DOC) is outside every span


def test_greedy_exact_match_equals_teacher_forced():
    model, params, batch = setup()
    prompt = batch.tokens[:, :P]
    greedy = np.asarray(R.decode_argmax(model, params, prompt, 3).tokens)
    tokens = np.concatenate([np.asarray(prompt), greedy], 1)
    logits = model.apply(params, jnp.asarray(tokens), mask=jnp.asarray(tokens != D.PAD))
    assert np.asarray(R.answer_correct(logits, jnp.asarray(tokens))).all()
    wrong = tokens.copy()
    wrong[::2, -2] = (wrong[::2, -2] + 1) % WORLD.vocab_size  # second answer token changed
    logits = model.apply(params, jnp.asarray(wrong), mask=jnp.asarray(wrong != D.PAD))
    got = np.asarray(R.answer_correct(logits, jnp.asarray(wrong)))
    assert not got[::2].any() and got[1::2].all()


# ---- knockout and patching --------------------------------------------------------------------


def test_uniform_knockout_outputs_prefix_mean_value():
    model, params, batch = setup()
    tokens = batch.tokens
    mask = np.zeros((2, 2), bool)
    mask[0, 1] = True
    _, aux = model.apply(
        params, tokens, mask=tokens != D.PAD, uniform_heads=mask, return_head_outputs=True
    )
    # layer 0 input: the embeddings; the value vectors of head 1 of layer 0
    p = params["params"]
    x = p["embed"]["embedding"][tokens]
    ln = p["block_0"]["ln_attn"]
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    h = (x - mu) / jnp.sqrt(var + 1e-5) * ln["scale"][None, None] + ln["bias"][None, None]
    v = jnp.einsum("btd,dhe->bthe", h, p["block_0"]["attn"]["value"]["kernel"])[:, :, 1]
    real = np.asarray(tokens != D.PAD, np.float32)
    csum = np.cumsum(np.asarray(v) * real[..., None], axis=1)
    mean = csum / np.maximum(np.cumsum(real, 1), 1)[..., None]
    got = np.asarray(aux.head_outputs[0, :, :, 1])
    np.testing.assert_allclose(got[real > 0], mean[real > 0], atol=2e-5)
    plain = model.apply(params, tokens, mask=tokens != D.PAD)
    none = model.apply(params, tokens, mask=tokens != D.PAD, uniform_heads=np.zeros((2, 2), bool))
    np.testing.assert_array_equal(np.asarray(plain), np.asarray(none))
    acc = R.knockout_accuracy(model, params, tokens, np.stack([np.zeros((2, 2), bool), mask]))
    assert acc.shape == (2,)


@pytest.mark.parametrize("use_bias", [False, True])
def test_patching_all_heads_reproduces_source(use_bias):
    cfg = dataclasses.replace(CFG, use_bias=use_bias)
    model = R.make_model(cfg, WORLD, LENGTH)
    _, _, batch = setup()
    b = model.init(jax.random.key(1), batch.tokens)
    a = jax.tree_util.tree_map_with_path(  # differs from b in attention parameters only
        lambda path, x: (
            x + 0.3 * jnp.sin(7.0 * x + 1.0) if "attn" in jax.tree_util.keystr(path) else x
        ),
        b,
    )
    tokens = batch.tokens
    la = model.apply(a, tokens, mask=tokens != D.PAD)
    lb = model.apply(b, tokens, mask=tokens != D.PAD)
    all_heads = R.patched_logits(model, a, b, tokens, np.ones((2, 2), bool))
    no_heads = R.patched_logits(model, a, b, tokens, np.zeros((2, 2), bool))
    np.testing.assert_allclose(np.asarray(all_heads), np.asarray(la), atol=1e-4)
    np.testing.assert_allclose(np.asarray(no_heads), np.asarray(lb), atol=1e-5)
    assert np.abs(np.asarray(la) - np.asarray(lb)).max() > 1e-2  # the test can fail
    acc = R.patched_accuracy(model, a, b, tokens, np.stack([np.ones((2, 2), bool)] * 2))
    ka = R.knockout_accuracy(model, a, tokens, np.zeros((2, 2), bool))
    np.testing.assert_allclose(acc, [ka[0], ka[0]])


# ---- fine-tuning ------------------------------------------------------------------------------


@functools.cache
def finetune_setup(mesh=None):
    """A fixed-stream trainer (the traced-variant trainer is covered by the stream-switch test)
    and its jitted step."""
    cfg = R.TrainConfig(steps=2, batch_size=4, length=LENGTH, chunk_size=1)
    trainer = R.make_trainer(CFG, WORLD, cfg, stream="symbolic_kv", mesh=mesh)
    _, params, _ = setup()
    state = trainer.init(jax.random.key(5), params)
    return trainer, state, jax.jit(trainer.step)


def test_attention_only_step_leaves_the_rest_bitwise():
    _, state, step = finetune_setup()
    new, metrics = step(state)
    assert bool(metrics["finite"])
    labels = R.attention_labels(state.train.params)
    changed = jax.tree_util.tree_map(
        lambda a, b: bool(np.any(np.asarray(a) != np.asarray(b))),
        state.train.params,
        new.train.params,
    )
    flat_l, flat_c = jax.tree_util.tree_leaves(labels), jax.tree_util.tree_leaves(changed)
    assert all(not c for lab, c in zip(flat_l, flat_c, strict=True) if lab == "frozen")
    assert any(c for lab, c in zip(flat_l, flat_c, strict=True) if lab == "attention")
    assert "frozen" in flat_l and "attention" in flat_l


def test_sharded_step_and_scores_equal_unsharded(mesh):
    _, state, step = finetune_setup()
    _, _, sharded_step = finetune_setup(mesh)
    a, ma = step(state)
    b, mb = sharded_step(state)
    np.testing.assert_allclose(float(ma["loss"]), float(mb["loss"]), rtol=1e-5)
    for x, y in zip(
        jax.tree_util.tree_leaves(a.train.params),
        jax.tree_util.tree_leaves(b.train.params),
        strict=True,
    ):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), atol=1e-5)
    model, params, batch = setup()
    d1 = R.decode_argmax(model, params, batch.tokens[:, :P], 3)
    d2 = R.decode_argmax(model, params, batch.tokens[:, :P], 3, mesh=mesh)
    np.testing.assert_array_equal(np.asarray(d1.argmax), np.asarray(d2.argmax))
    np.testing.assert_array_equal(np.asarray(d1.tokens), np.asarray(d2.tokens))


def test_fresh_states_share_one_compiled_step():
    # the optimiser is static metadata of the state: one per trainer, not one per init
    trainer, state, step = finetune_setup()
    _, params, _ = setup()
    again = trainer.init(jax.random.key(6), params)
    assert_compiles_once(step, [(state,), (again,)], name="trainer.step")


def test_seeds_vmap_over_one_base():
    trainer, state, step = finetune_setup()
    _, params, _ = setup()
    keys = jax.random.split(jax.random.key(9), 2)
    states = jax.vmap(lambda k: trainer.init(k, params))(keys)
    _, metrics = trainer.run(states, 1, vmap=True)
    assert metrics["loss"].shape == (2, 1)
    _, m1 = step(trainer.init(keys[1], params))
    np.testing.assert_allclose(metrics["loss"][1, 0], float(m1["loss"]), rtol=1e-5)


def test_base_cache_roundtrip(tmp_path):
    cfg = dataclasses.replace(R.BASE_TRAIN, steps=2, batch_size=2, length=64, warmup_steps=1)
    p1, info1 = R.pretrain_base(CFG, WORLD, cfg, 3, cache_dir=tmp_path)
    p2, info2 = R.pretrain_base(CFG, WORLD, cfg, 3, cache_dir=tmp_path)
    assert not info1["cached"] and info2["cached"] and info1["path"] == info2["path"]
    for x, y in zip(jax.tree_util.tree_leaves(p1), jax.tree_util.tree_leaves(p2), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    other = R.base_cache_path(CFG, WORLD, cfg, 4, tmp_path)
    assert str(other) != info1["path"]


# ---- head sets --------------------------------------------------------------------------------


def test_head_sets_and_metrics():
    s = np.array([[0.5, np.nan], [0.05, 0.2]])
    np.testing.assert_array_equal(R.threshold_heads(s, 0.1), [[True, False], [False, True]])
    np.testing.assert_array_equal(R.top_k_heads(s, 1), [[True, False], [False, False]])
    np.testing.assert_array_equal(R.top_k_heads(s, 4).sum(), 3)  # NaN never selected
    h = R.threshold_heads(s, 0.1)
    empty = np.zeros_like(h)
    assert R.head_recall(h, h) == 1.0 and R.head_precision(h, h) == 1.0
    assert R.head_recall(empty, h) == 0.0 and np.isnan(R.head_precision(empty, h))
    assert np.isnan(R.head_recall(h, empty))
    one = np.array([[True, False], [False, False]])
    assert R.head_recall(one, h) == 0.5 and R.head_precision(one, h) == 1.0
    c = R.correlations([1, 2, 3, 4], [10, 20, 30, 50])
    assert c["spearman"] == pytest.approx(1.0) and c["n"] == 4
    draws = R.random_head_sets(jax.random.key(0), h, 2, 5)
    assert draws.shape == (5, 2, 2) and (draws.sum((1, 2)) == 2).all() and not (draws & h).any()


# ---- the data generator -----------------------------------------------------------------------


@pytest.mark.parametrize("stream", [s for s in D.STREAMS if s != "lm_only"])
def test_gold_span_once_and_no_duplicate_fact(stream):
    length = 64 if stream == "base" else LENGTH
    b = R.sample_batch(jax.random.key(11), WORLD, stream, length, 16)
    tok, span = np.asarray(b.tokens), np.asarray(b.span)
    p = R.prompt_length(length)
    for i in range(len(tok)):
        gold = tok[i, -3:-1]
        np.testing.assert_array_equal(tok[i, span[i, 0] : span[i, 1]], gold)
        if stream == "base":
            continue  # base questions may state extra facts after the context
        ctx = tok[i, :p]
        pairs = sum(ctx[j] == gold[0] and ctx[j + 1] == gold[1] for j in range(p - 1))
        assert pairs == 1
        # distinct_gold_tokens: each gold token occurs once, so the second one follows the first
        assert (ctx == gold[0]).sum() == 1 and (ctx == gold[1]).sum() == 1
        if stream in ("real", "realistic_syn", "templated_diverse"):
            ent, qw = tok[i, p - 1], tok[i, p - 2]  # question Q A qw e
            assert tok[i, p - 4] == D.Q and tok[i, p - 3] == D.A
            assert ctx[span[i, 0] - 1] == ent  # entity_last: the entity precedes the value
            # (e_q, r_q) is stated once: sentences of e_q carrying r_q's head word
            body = ctx[:-4]  # the context without the question
            sentences = np.split(body, np.flatnonzero(body == D.DOT) + 1)
            stated = [s for s in sentences if ent in s and qw in s]
            assert len(stated) == 1
    again = R.sample_batch(jax.random.key(11), WORLD, stream, length, 16)
    np.testing.assert_array_equal(np.asarray(again.tokens), tok)
    assert np.asarray(b.loss_mask)[:, -3:].all()


def test_disjoint_pairs_cover_every_pair_sharing_no_gold_token():
    n = 5
    for gold in range(n * (n - 1)):
        g = set(D._pair(gold, n))
        draws = D._disjoint_pair(jax.random.key(gold), gold, (400,), n)
        pairs = {tuple(int(x) for x in D._pair(d, n)) for d in np.asarray(draws)}
        want = {(a, b) for a in range(n) for b in range(n) if a != b and not {a, b} & g}
        assert pairs == want  # 6 pairs, 400 draws: all seen
    b = R.sample_batch(jax.random.key(11), D.World(distinct_gold_tokens=False), "real", LENGTH, 16)
    tok = np.asarray(b.tokens)
    repeats = [(t[: R.prompt_length(LENGTH)] == t[-3]).sum() for t in tok]
    assert max(repeats) > 1  # the rule: only the gold pair is excluded


def test_stream_switch_matches_named_stream():
    k = jax.random.key(4)
    # a subset in an order unlike VARIANTS: the traced index is a position in it (one compile;
    # the default `streams` is VARIANTS)
    sub = ("symbolic_kv_filler", "real")
    switch = jax.jit(R.sample_stream, static_argnums=(1, 3, 4, 5))
    for i, name in enumerate(sub):
        a = R.sample_batch(k, WORLD, name, LENGTH, 16)  # the shape of the gold-span test
        b = switch(k, WORLD, jnp.int32(i), LENGTH, 16, sub)
        np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
    lm = R.sample_batch(k, WORLD, "lm_only", LENGTH, 2)
    real = np.asarray(lm.tokens) != D.PAD
    real[:, 0] = False  # the first token is never a target
    np.testing.assert_array_equal(np.asarray(lm.loss_mask) > 0, real)


def test_interpolation_factor():
    m = R.make_model(CFG, WORLD, 128)
    assert m.rope_scale == pytest.approx(64 / 128)
    assert R.make_model(CFG, WORLD, 128, interpolation=1.0).rope_scale == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        R.make_model(CFG, WORLD)

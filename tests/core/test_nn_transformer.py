"""jaxlab.core.nn.Transformer: masking, KV cache, head knockout/patching, RoPE, sharding, decoding.

The suite is compile-bound, so one tiny model (d_model 16, 2 layers x 2 heads, vocab 13, T = 6,
B = 4) and its parameters are built once, and most checks go through one jitted ``probe`` per
model that takes every optional array (neutral values reproduce the plain call) and returns every
auxiliary output: each configuration compiles once. References are written in NumPy.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import erf

from jaxlab.core import sharding
from jaxlab.core.nn import Transformer, generate, rope, sinusoidal_embedding, smeared_keys
from tests.helpers import count_compilations

VOCAB, D, L, H, T, B = 13, 16, 2, 2, 6, 4
DH = D // H
MODEL = Transformer(d_model=D, num_layers=L, num_heads=H, d_mlp=32, vocab_size=VOCAB)


@functools.cache
def setup():
    """Tokens and random parameters (``N(0, 0.3^2)`` leaves, LayerNorm scales near 1): non-zero
    biases everywhere, so bias handling is checked too; no compiled ``init`` needed."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, VOCAB, (B, T)).astype(np.int32)
    shapes = jax.eval_shape(MODEL.init, jax.random.key(1), tokens)

    def draw(path, leaf):
        noise = rng.normal(size=leaf.shape).astype(np.float32)
        return 1.0 + 0.1 * noise if "scale" in jax.tree_util.keystr(path) else 0.3 * noise

    return tokens, jax.tree_util.tree_map_with_path(draw, shapes)


def to_np(tree):
    """Outputs as NumPy, so the tests' slicing runs no (separately compiled) eager JAX ops."""
    return jax.tree_util.tree_map(np.asarray, tree)


@functools.partial(jax.jit, static_argnames=("model",))
def _run(model, params, tokens):
    return model.apply(params, tokens)


def run(model, params, tokens):
    """The plain (default-path) forward pass."""
    return to_np(_run(model, params, tokens))


@functools.cache
def base_logits():
    tokens, params = setup()
    return run(MODEL, params, tokens)


@functools.partial(jax.jit, static_argnames=("model", "space"))
def _probe(model, params, tokens, mask, positions, head_mask, uniform, override, select, space):
    return model.apply(
        params,
        tokens,
        mask=mask,
        positions=positions,
        head_mask=head_mask,
        uniform_heads=uniform,
        head_override=override,
        override_heads=select,
        head_space=space,
        return_attention=True,
        return_head_outputs=True,
        return_hidden=True,
    )


def probe(params, tokens, model=MODEL, space="output", **given):
    """``(logits, aux)`` with every optional input; unspecified ones take neutral values."""
    width = DH if space == "output" else D
    neutral = {  # NumPy: no eager JAX ops (each would compile)
        "mask": np.ones((B, T), bool),
        "positions": np.arange(T, dtype=np.int32),
        "head_mask": np.ones((L, H), np.float32),
        "uniform": np.zeros((L, H), bool),
        "override": np.zeros((L, B, T, H, width), np.float32),
        "select": np.zeros((L, H), bool),
    }
    args = {**neutral, **given}
    return to_np(_probe(model, params, tokens, **args, space=space))


def perturb(tokens, t):
    """``tokens`` with position ``t`` changed in every row."""
    out = np.array(tokens)
    out[:, t] = (out[:, t] + 1) % VOCAB
    return out


def with_value(arr, index, value):
    """A NumPy copy of ``arr`` with ``arr[index] = value``."""
    out = np.array(arr)
    out[index] = value
    return out


def max_abs(a, b, axis=None):
    return np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)), axis=axis)


def np_params(params):
    return jax.tree_util.tree_map(lambda v: np.asarray(v, np.float64), params)["params"]


def np_layer_norm(x, p, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * p["scale"] + p["bias"]


# ------------------------------------------------------------------------------------------------
# masking and attention maps


def test_causal_mask_later_tokens_do_not_affect_earlier_logits():
    tokens, params = setup()
    logits = base_logits()
    changed = run(MODEL, params, perturb(tokens, 3))
    assert logits.shape == (B, T, VOCAB)
    np.testing.assert_allclose(changed[:, :3], logits[:, :3], atol=1e-6)
    per_position = max_abs(changed, logits, axis=(0, 2))
    assert np.all(per_position[3:] > 1e-4), per_position


def test_attention_probabilities_shape_rows_and_causal_triangle():
    tokens, params = setup()
    logits, aux = probe(params, tokens)
    np.testing.assert_allclose(logits, base_logits(), atol=1e-6)  # neutral inputs: plain output
    probs = np.asarray(aux.attention)
    assert probs.shape == (L, B, H, T, T)
    assert aux.head_outputs.shape == (L, B, T, H, DH) and aux.hidden.shape == (B, T, D)
    assert aux.cache is None
    np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
    upper = np.triu(np.ones((T, T), bool), k=1)
    assert np.all(probs[..., upper] == 0.0)
    assert np.all(probs[..., ~upper] > 0.0)


def test_bidirectional_differs_and_padded_keys_are_ignored():
    tokens, params = setup()
    bi = MODEL.clone(causal=False)
    logits, aux = probe(params, tokens, model=bi)
    assert max_abs(logits, base_logits()) > 1e-3
    # A later token now changes the first position, and the upper triangle carries weight.
    assert max_abs(probe(params, perturb(tokens, 3), model=bi)[0][:, 0], logits[:, 0]) > 1e-4
    assert np.all(np.asarray(aux.attention)[..., 0, 1:] > 0.0)

    # Right padding (bidirectional): the last two tokens are padding.
    right = np.broadcast_to(np.arange(T)[None, :] < T - 2, (B, T))
    padded, aux = probe(params, tokens, model=bi, mask=right)
    other, _ = probe(params, with_value(tokens, np.s_[:, T - 2 :], 0), model=bi, mask=right)
    np.testing.assert_allclose(other[:, : T - 2], padded[:, : T - 2], atol=1e-6)
    assert max_abs(padded[:, : T - 2], logits[:, : T - 2]) > 1e-4  # the mask did act
    assert np.all(np.asarray(aux.attention)[..., T - 2 :] == 0.0)
    # Left padding (causal): the first two tokens are padding.
    left = right[:, ::-1]
    padded, _ = probe(params, tokens, mask=left)
    other, _ = probe(params, with_value(tokens, np.s_[:, :2], 0), mask=left)
    np.testing.assert_allclose(other[:, 2:], padded[:, 2:], atol=1e-6)
    assert max_abs(padded[:, 2:], base_logits()[:, 2:]) > 1e-4


# ------------------------------------------------------------------------------------------------
# KV cache


@jax.jit
def _prefill(params, tokens):
    cache = MODEL.init_cache(B, T)
    return MODEL.apply(params, tokens, cache=cache, return_attention=True)


@jax.jit
def _step(params, tokens, cache):
    return MODEL.apply(params, tokens, cache=cache, return_attention=True)


def test_kv_cache_prefill_and_steps_equal_full_sequence():
    tokens, params = setup()
    full, full_aux = probe(params, tokens)
    logits, aux = to_np(_prefill(params, tokens[:, :3]))  # prefill 3 tokens
    np.testing.assert_allclose(logits, full[:, :3], atol=1e-5)
    np.testing.assert_allclose(aux.attention[..., :3], full_aux.attention[..., :3, :3], atol=1e-6)
    assert np.all(np.asarray(aux.attention)[..., 3:] == 0.0)  # empty slots get no weight
    cache = aux.cache
    for t in range(3, T):  # then one token per step
        logits, aux = to_np(_step(params, tokens[:, t : t + 1], cache))
        cache = aux.cache
        np.testing.assert_allclose(logits[:, 0], full[:, t], atol=1e-5)
        # The step's attention row over all S = T slots equals the full row (zeros past t).
        np.testing.assert_allclose(
            aux.attention[..., 0, :], full_aux.attention[..., t, :], atol=1e-6
        )
    assert int(cache.index) == T
    np.testing.assert_array_equal(cache.position, np.full((B,), T))
    assert np.all(np.asarray(cache.mask))


# ------------------------------------------------------------------------------------------------
# heads: knockout, uniform attention, patching


def mlp_only_reference(params, tokens):
    """Residual stream + MLPs alone, from the raw parameter tree in NumPy (attention removed; the
    output-projection bias, which belongs to no head, stays)."""
    p = np_params(params)
    x = p["embed"]["embedding"][np.asarray(tokens)]
    for layer in range(L):
        blk = p[f"block_{layer}"]
        x = x + blk["attn"]["out"]["bias"]
        h = np_layer_norm(x, blk["ln_mlp"])
        d0, d1 = blk["mlp"]["Dense_0"], blk["mlp"]["Dense_1"]
        h = h @ d0["kernel"] + d0["bias"]
        h = 0.5 * h * (1.0 + erf(h / np.sqrt(2.0)))  # exact (erf) GELU
        x = x + h @ d1["kernel"] + d1["bias"]
    x = np_layer_norm(x, p["ln_final"])
    return x @ p["head"]["kernel"] + p["head"]["bias"]


def test_knocking_out_every_head_leaves_the_mlp_path():
    tokens, params = setup()
    knocked, aux = probe(params, tokens, head_mask=np.zeros((L, H), np.float32))
    np.testing.assert_allclose(knocked, mlp_only_reference(params, tokens), atol=1e-5)
    assert np.all(np.asarray(aux.head_outputs) == 0.0)
    assert max_abs(knocked, base_logits()) > 1e-3  # attention did matter
    one, _ = probe(params, tokens, head_mask=with_value(np.ones((L, H), np.float32), (0, 1), 0))
    assert max_abs(one, base_logits()) > 1e-4 and max_abs(one, knocked) > 1e-4


def test_uniform_knockout_outputs_the_causal_mean_of_values():
    tokens, params = setup()
    uniform = with_value(np.zeros((L, H), bool), (0, 1), True)
    logits, aux = probe(params, tokens, uniform=uniform)
    p = np_params(params)
    blk = p["block_0"]
    x = np_layer_norm(p["embed"]["embedding"][np.asarray(tokens)], blk["ln_attn"])
    v = blk["attn"]["value"]
    values = np.einsum("btm,mhd->bthd", x, v["kernel"]) + v["bias"]
    prefix_mean = np.cumsum(values[:, :, 1], axis=1) / np.arange(1, T + 1)[None, :, None]
    np.testing.assert_allclose(aux.head_outputs[0, :, :, 1], prefix_mean, atol=1e-5)
    uniform_rows = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    np.testing.assert_allclose(aux.attention[0, :, 1], np.broadcast_to(uniform_rows, (B, T, T)))
    assert max_abs(logits, base_logits()) > 1e-4


def test_head_override_with_own_outputs_is_identity_and_one_head_changes_logits():
    tokens, params = setup()
    logits, aux = probe(params, tokens)
    own = aux.head_outputs
    same, _ = probe(params, tokens, override=own, select=np.ones((L, H), bool))
    np.testing.assert_allclose(same, logits, atol=1e-6)
    one = with_value(np.zeros((L, H), bool), (1, 0), True)
    changed, aux1 = probe(params, tokens, override=np.zeros(own.shape, np.float32), select=one)
    assert max_abs(changed, logits) > 1e-4
    assert np.all(np.asarray(aux1.head_outputs[1, :, :, 0]) == 0.0)
    np.testing.assert_allclose(aux1.head_outputs[0], own[0], atol=1e-6)  # layer 0 untouched


def test_residual_patching_of_all_heads_reproduces_the_source_model():
    """Models A and B differ only in attention parameters (output bias shared): B patched with
    every head's residual term from A computes A's logits (the retrieval-heads identity)."""
    tokens, params_a = setup()
    rng = np.random.default_rng(7)

    def change(path, leaf):
        name = jax.tree_util.keystr(path)
        if "attn" in name and "'out']['bias" not in name:
            return np.asarray(leaf) + 0.3 * rng.normal(size=leaf.shape).astype(np.float32)
        return leaf

    params_b = jax.tree_util.tree_map_with_path(change, params_a)
    logits_a, aux_a = probe(params_a, tokens, space="residual")
    np.testing.assert_allclose(logits_a, base_logits(), atol=1e-5)
    terms = aux_a.head_outputs
    assert terms.shape == (L, B, T, H, D)
    out_a = params_a["params"]["block_0"]["attn"]["out"]
    np.testing.assert_allclose(  # residual terms = per-head outputs times W_o[h]
        terms[0],
        np.einsum("bthd,hdm->bthm", probe(params_a, tokens)[1].head_outputs[0], out_a["kernel"]),
        atol=1e-5,
    )
    logits_b, _ = probe(params_b, tokens, space="residual")
    assert max_abs(logits_b, logits_a) > 1e-3
    patched_b, _ = probe(
        params_b, tokens, space="residual", override=terms, select=np.ones((L, H), bool)
    )
    np.testing.assert_allclose(patched_b, logits_a, atol=1e-5)


# ------------------------------------------------------------------------------------------------
# smeared keys (Olsson et al. 2022)

SMEAR = Transformer(
    d_model=D, num_layers=L, num_heads=H, d_mlp=32, vocab_size=VOCAB, smear_keys=True
)


@functools.cache
def smear_setup():
    """SMEAR's parameters: MODEL's plus per-head smear logits (weights ``alpha`` per layer)."""
    _, params = setup()
    alpha = np.array([[0.3, 0.8], [0.6, 0.1]])  # [L, H]
    logits = np.log(alpha / (1 - alpha))
    p = jax.tree_util.tree_map(np.asarray, params)["params"]
    p = {
        k: (
            {**v, "attn": {**v["attn"], "smear": logits[int(k[-1])].astype(np.float32)}}
            if k.startswith("block_")
            else v
        )
        for k, v in p.items()
    }
    return {"params": p}, logits


@jax.jit
def _smear_prefill(params, tokens, mask, positions):
    cache = SMEAR.init_cache(B, T)
    return SMEAR.apply(params, tokens, mask=mask, positions=positions, cache=cache)


@jax.jit
def _smear_step(params, tokens, cache):
    return SMEAR.apply(params, tokens, cache=cache)


def test_smeared_keys_match_a_numpy_reference_and_the_cache():
    tokens, params = setup()
    sp, logits = smear_setup()
    shapes = jax.eval_shape(SMEAR.init, jax.random.key(0), tokens)
    assert jax.tree_util.tree_structure(shapes) == jax.tree_util.tree_structure(sp)
    assert shapes["params"]["block_1"]["attn"]["smear"].shape == (H,)
    mask = np.ones((B, T), bool)
    mask[0, :2] = False  # a left-padded row
    positions = np.broadcast_to(np.cumsum(mask, 1) - 1, (B, T)).astype(np.int32)
    full, aux = probe(sp, tokens, model=SMEAR, mask=mask, positions=positions)
    # layer 0 attention from the raw parameters: k~_s = (1 - a) k_s + a k_{s-1}, k_{-1} = pad = 0
    p = np_params(sp)["block_0"]
    x = np_layer_norm(np_params(sp)["embed"]["embedding"][tokens], p["ln_attn"])
    q, k = (
        np.einsum("btd,dhe->bthe", x, p["attn"][n]["kernel"]) + p["attn"][n]["bias"]
        for n in ("query", "key")
    )
    q, k = rope_complex_reference(q, positions), rope_complex_reference(k, positions)
    a = 1 / (1 + np.exp(-logits[0]))[None, None, :, None]
    prev = np.concatenate([np.zeros_like(k[:, :1]), k[:, :-1]], 1)
    prev = prev * np.concatenate([np.zeros((B, 1), bool), mask[:, :-1]], 1)[:, :, None, None]
    ks = (1 - a) * k + a * prev
    got = smeared_keys(k.astype(np.float32), mask, logits[0].astype(np.float32))
    np.testing.assert_allclose(got, ks, atol=1e-5)  # the definition itself
    sc = np.einsum("bthe,bshe->bhts", q, ks) / np.sqrt(DH)
    ok = np.tril(np.ones((T, T), bool))[None, None] & mask[:, None, None, :]
    sc = np.where(ok, sc, -1e30)  # padded query rows (compared from slot 2 on) stay finite
    ref = np.exp(sc - sc.max(-1, keepdims=True))
    ref = ref / ref.sum(-1, keepdims=True)
    np.testing.assert_allclose(aux.attention[0][1:], ref[1:], atol=1e-5)
    np.testing.assert_allclose(aux.attention[0][0, :, 2:], ref[0, :, 2:], atol=1e-5)
    assert max_abs(full[1:], probe(params, tokens, mask=mask, positions=positions)[0][1:]) > 1e-3
    # the cache stores unsmeared keys and smears the scores over its slots (the full forward
    # smears the keys): prefill + steps == full
    logits_p, paux = to_np(_smear_prefill(sp, tokens[:, :4], mask[:, :4], positions[:, :4]))
    np.testing.assert_allclose(logits_p[1:], full[1:, :4], atol=1e-5)
    np.testing.assert_allclose(logits_p[0, 2:], full[0, 2:4], atol=1e-5)
    cache = paux.cache
    for t in range(4, T):
        step, saux = to_np(_smear_step(sp, tokens[:, t : t + 1], cache))
        cache = saux.cache
        np.testing.assert_allclose(step[:, 0], full[:, t], atol=1e-5)


# ------------------------------------------------------------------------------------------------
# RoPE


def rope_complex_reference(x, positions, base=10000.0):
    """Plain RoPE as a complex rotation (rotate-half pairing), float64 NumPy."""
    x = np.asarray(x, np.float64)
    d = x.shape[-1]
    theta = base ** (-np.arange(0, d, 2) / d)
    z = x[..., : d // 2] + 1j * x[..., d // 2 :]
    rotated = z * np.exp(1j * np.asarray(positions, np.float64)[:, :, None, None] * theta)
    return np.concatenate([rotated.real, rotated.imag], axis=-1)


S = 0.25


@jax.jit
def rope_variants(x, positions, q, k, pos_q, pos_k):
    return {
        "plain": rope(x, positions),
        "factor_1": rope(x, positions, scale=1.0),
        "factor_s": rope(x, positions, scale=S),
        "scaled_positions": rope(x, positions.astype(jnp.float32) * S),
        "dots": jnp.einsum("bthd,bthd->bt", rope(q, pos_q), rope(k, pos_k)),
    }


def test_rope_factor_one_is_plain_rope_and_factor_s_equals_scaled_positions():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 5, 3, 8)).astype(np.float32)
    positions = np.broadcast_to(np.arange(5, dtype=np.int32)[None, :] * 3, (2, 5))
    # The same q and k at position pairs (7, 4), (3, 0) (offset 3) and (7, 3) (offset 4).
    q = np.broadcast_to(x[:1, :1], (1, 3, 3, 8))
    k = np.broadcast_to(x[1:, :1], (1, 3, 3, 8))
    out = to_np(rope_variants(x, positions, q, k, np.array([[7, 3, 7]]), np.array([[4, 0, 3]])))
    np.testing.assert_allclose(out["plain"], rope_complex_reference(x, positions), atol=1e-5)
    np.testing.assert_array_equal(out["factor_1"], out["plain"])
    np.testing.assert_allclose(out["factor_s"], out["scaled_positions"], atol=1e-6)
    np.testing.assert_allclose(out["factor_s"], rope_complex_reference(x, positions * S), atol=1e-5)
    assert max_abs(out["factor_s"], out["plain"]) > 1e-3
    # q . k depends only on the offset.
    dots = np.asarray(out["dots"])[0]
    np.testing.assert_allclose(dots[0], dots[1], rtol=1e-5)
    assert abs(dots[0] - dots[2]) > 1e-4


def test_model_rope_scale_equals_scaled_positions():
    tokens, params = setup()
    half = MODEL.clone(rope_scale=0.5)
    # factor 0.5 at positions 2p equals factor 1 at positions p (the default arange).
    stretched, _ = probe(params, tokens, model=half, positions=2 * np.arange(T, dtype=np.int32))
    np.testing.assert_allclose(stretched, base_logits(), atol=1e-5)
    assert max_abs(probe(params, tokens, model=half)[0], base_logits()) > 1e-5


# ------------------------------------------------------------------------------------------------
# continuous inputs, per-token conditioning, learned positions, tied head


@functools.partial(jax.jit, static_argnames=("model",))
def _run_cond(model, params, x, cond):
    return model.apply(params, x, cond=cond)


def run_cond(model, params, x, cond):
    return to_np(_run_cond(model, params, x, cond))


def test_continuous_inputs_with_per_token_adaln_zero_conditioning():
    model = Transformer(
        d_model=D, num_layers=1, num_heads=H, d_mlp=32, output_dim=3, d_cond=5,
        position_encoding="learned", max_len=8,
    )  # fmt: skip
    rng = np.random.default_rng(4)
    x = rng.normal(size=(B, T, 4)).astype(np.float32)
    cond = rng.normal(size=(B, T, 5)).astype(np.float32)
    params = to_np(jax.jit(model.init)(jax.random.key(4), x, cond=cond))
    p = params["params"]
    assert {"input_proj", "pos_embed", "final_adaln", "head"} <= set(p)
    assert "embed" not in p and p["block_0"]["adaln"]["kernel"].shape == (5, 6 * D)
    out = run_cond(model, params, x, cond)
    assert out.shape == (B, T, 3)
    cond2 = with_value(cond, np.s_[:, 3], cond[:, 3] + 1.0)
    # adaLN-Zero: at initialisation the conditioning has no effect.
    np.testing.assert_array_equal(run_cond(model, params, x, cond2), out)

    def replace(params, name, fn):
        return jax.tree_util.tree_map_with_path(
            lambda path, v: fn(v) if name in jax.tree_util.keystr(path) else v, params
        )

    # Opened modulation: a token's cond changes that token and (causally) later ones only.
    opened = replace(params, "adaln", lambda v: 0.3 * rng.normal(size=v.shape).astype(np.float32))
    a, b = run_cond(model, opened, x, cond), run_cond(model, opened, x, cond2)
    np.testing.assert_allclose(b[:, :3], a[:, :3], atol=1e-6)
    assert np.all(max_abs(b, a, axis=(0, 2))[3:] > 1e-4)
    # The learned position table is used.
    no_pos = replace(params, "pos_embed", lambda v: np.zeros(v.shape, np.float32))
    assert max_abs(run_cond(model, no_pos, x, cond), out) > 1e-5


def test_tied_embeddings_logits_are_hidden_times_embedding_transpose():
    tokens, params = setup()
    tied = MODEL.clone(tie_embeddings=True)
    tied_params = {"params": {k: v for k, v in params["params"].items() if k != "head"}}
    assert jax.tree_util.tree_structure(jax.eval_shape(tied.init, jax.random.key(0), tokens)) == (
        jax.tree_util.tree_structure(tied_params)
    )
    logits, aux = probe(tied_params, tokens, model=tied)
    expected = np.asarray(aux.hidden, np.float64) @ np_params(params)["embed"]["embedding"].T
    np.testing.assert_allclose(logits, expected, atol=1e-5)
    np.testing.assert_allclose(aux.hidden, probe(params, tokens)[1].hidden, atol=1e-6)


def test_sinusoidal_embedding_values():
    emb = np.asarray(
        jax.jit(sinusoidal_embedding, static_argnums=1)(np.array([[0.0, 2.0]], np.float32), 8)
    )
    assert emb.shape == (1, 2, 8)
    np.testing.assert_allclose(emb[0, 0], [1, 1, 1, 1, 0, 0, 0, 0], atol=1e-7)
    np.testing.assert_allclose(emb[0, 1, [0, 4]], [np.cos(2.0), np.sin(2.0)], atol=1e-6)
    np.testing.assert_allclose(emb[0, 1, 1], np.cos(2.0 * 10000 ** (-1 / 4)), atol=1e-6)


# ------------------------------------------------------------------------------------------------
# sharding


def test_sharded_batch_equals_unsharded(mesh):
    tokens, params = setup()
    sharded_tokens = sharding.shard_batch(tokens, mesh)
    assert len({s.device for s in sharded_tokens.addressable_shards}) == 4
    out = run(MODEL, sharding.replicate(params, mesh), sharded_tokens)
    # per-shard programs may reorder float32 reductions: 1.25e-6 on logits of size ~2 measured
    # on an AMD EPYC host (XLA:CPU), so equality up to f32 rounding, not bitwise
    np.testing.assert_allclose(np.asarray(out), np.asarray(base_logits()), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------------------------------
# generate


def test_generate_matches_reference_loop_traces_once_and_samples_top_k():
    tokens, params = setup()
    prompt, n = tokens[:, :3], T - 3
    gen = lambda *a, **kw: to_np(
        generate(MODEL, params, *a, **{"max_new_tokens": n, "top_k": 1, "eos_id": -1, **kw})
    )
    keys = [jax.random.key(i) for i in range(3)]
    with count_compilations() as first:
        greedy = gen(prompt, keys[0], temperature=0.0)  # eos -1 never occurs
    assert len(first.traces) >= 1
    # Reference: full forward passes on a fixed [B, T] buffer, argmax at the last filled position.
    buffer = np.array(tokens)
    for i in range(n):
        logits = np.asarray(run(MODEL, params, buffer)[:, 2 + i], np.float64)
        buffer[:, 3 + i] = np.argmax(logits, axis=-1)
        ref_logp = logits - logits.max(-1, keepdims=True)
        ref_logp = ref_logp - np.log(np.exp(ref_logp).sum(-1, keepdims=True))
        chosen = np.take_along_axis(ref_logp, buffer[:, 3 + i, None], axis=-1)[:, 0]
        np.testing.assert_allclose(greedy.logprobs[:, i], chosen, atol=1e-5)
    np.testing.assert_array_equal(greedy.tokens, buffer[:, 3:])
    assert greedy.tokens.shape == (B, n) and np.all(np.asarray(greedy.mask))

    eos, flipped = int(greedy.tokens[0, 1]), np.array(prompt[::-1])
    left_mask = with_value(np.ones((B, 3), bool), (0, 0), False)  # row 0: 1 pad + 2 real tokens
    with count_compilations() as again:
        left = gen(with_value(prompt, (0, 0), 0), keys[0], temperature=0.0, prompt_mask=left_mask)
        # top-1 sampling at a high temperature is greedy (log-prob 0); eos = row 0's 2nd token.
        top1 = gen(prompt, keys[1], temperature=3.0, eos_id=eos, pad_id=VOCAB - 1)
        # top-3 sampling: every token among the reference's 3 largest, log-prob renormalised.
        top3 = gen(flipped, keys[2], temperature=1.5, top_k=3)
        top3_again = gen(flipped, keys[2], temperature=1.5, top_k=3)
    assert again.traces == []  # new values of the same shapes: no retrace
    # Left padding: the other rows are unchanged, row 0 decodes like its unpadded 2-token prompt.
    np.testing.assert_array_equal(left.tokens[1:], greedy.tokens[1:])
    buffer = with_value(tokens, (0, np.s_[:2]), prompt[0, 1:])
    for i in range(n):
        buffer[0, 2 + i] = np.argmax(run(MODEL, params, buffer)[0, 1 + i])
    np.testing.assert_array_equal(left.tokens[0], buffer[0, 2 : 2 + n])
    for row in range(B):
        g = list(np.asarray(greedy.tokens[row]))
        stop = g.index(eos) + 1 if eos in g else n
        np.testing.assert_array_equal(top1.tokens[row, :stop], g[:stop])
        assert np.all(np.asarray(top1.tokens[row, stop:]) == VOCAB - 1)
        np.testing.assert_array_equal(top1.mask[row], np.arange(n) < stop)
    assert not np.all(np.asarray(top1.mask))  # the stop token did stop row 0
    np.testing.assert_allclose(top1.logprobs, 0.0, atol=1e-6)
    np.testing.assert_array_equal(top3.tokens, top3_again.tokens)
    buffer = np.concatenate([flipped, np.asarray(top3.tokens)], axis=1)
    logits = np.asarray(run(MODEL, params, buffer)[:, 2:-1], np.float64) / 1.5  # [B, n, V]
    kth = np.sort(logits, axis=-1)[..., -3:-2]
    chosen = np.take_along_axis(logits, np.asarray(top3.tokens)[..., None], axis=-1)
    assert np.all(chosen >= kth)
    top = np.where(logits >= kth, logits, -np.inf)
    ref = chosen[..., 0] - np.log(np.exp(top - top.max(-1, keepdims=True)).sum(-1)) - top.max(-1)
    np.testing.assert_allclose(top3.logprobs, ref, atol=1e-5)

    # The decode loop is one scan: the program does not grow with the number of new tokens.
    def program_lines(m):
        fn = lambda p, pr, k: generate(MODEL, p, pr, k, max_new_tokens=m)
        return str(jax.make_jaxpr(fn)(params, prompt, keys[0])).count("\n")

    assert program_lines(2) == program_lines(7)


# ------------------------------------------------------------------------------------------------
# errors


def test_bad_inputs_raise_value_errors_naming_the_argument():
    tokens, params = setup()
    apply = lambda **kw: MODEL.apply(params, kw.pop("inputs", tokens), **kw)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="`d_model`.*`num_heads`"):
        Transformer(d_model=10, num_heads=3, vocab_size=VOCAB).init(key, tokens)
    with pytest.raises(ValueError, match="rope.*even"):
        Transformer(d_model=6, num_heads=2, vocab_size=VOCAB).init(key, tokens)
    with pytest.raises(ValueError, match="`position_encoding`"):
        MODEL.clone(position_encoding="alibi").apply(params, tokens)
    with pytest.raises(ValueError, match="`tie_embeddings=True`"):
        Transformer(tie_embeddings=True, output_dim=3).init(key, tokens)
    with pytest.raises(ValueError, match="`inputs`"):
        apply(inputs=tokens[0])
    with pytest.raises(ValueError, match="`inputs`"):
        apply(inputs=tokens.astype(np.float32))
    with pytest.raises(ValueError, match="`mask`"):
        apply(mask=np.ones((B, T - 1), bool))
    with pytest.raises(ValueError, match="`positions`"):
        apply(positions=np.arange(T + 1))
    with pytest.raises(ValueError, match="`cond`"):
        apply(cond=np.ones((B, T, 2)))
    with pytest.raises(ValueError, match="`head_mask`"):
        apply(head_mask=np.ones((L, H + 1)))
    with pytest.raises(ValueError, match="`override_heads`"):
        apply(head_override=np.zeros((L, B, T, H, DH)))
    with pytest.raises(ValueError, match="`head_override`"):
        apply(head_override=np.zeros((L, B, T, H, D)), override_heads=np.ones((L, H), bool))
    with pytest.raises(ValueError, match="`uniform_heads`"):
        apply(uniform_heads=np.ones((L, H)))
    with pytest.raises(ValueError, match="`head_space`"):
        apply(head_space="value")
    with pytest.raises(ValueError, match="`cache`"):
        apply(cache=MODEL.clone(num_layers=1).init_cache(B, T))
    with pytest.raises(ValueError, match="`x`"):
        rope(np.ones((1, 2, 1, 3)), np.arange(2))
    continuous = Transformer(d_model=D, num_heads=H, output_dim=2, d_cond=3)
    with pytest.raises(ValueError, match="`inputs`"):
        continuous.init(key, tokens)
    with pytest.raises(ValueError, match="`cond`"):
        continuous.init(key, np.ones((B, T, 4)))
    with pytest.raises(ValueError, match="`model`"):
        generate(continuous, params, tokens, key, max_new_tokens=2)
    with pytest.raises(ValueError, match="`prompt`"):
        generate(MODEL, params, tokens.astype(np.float32), key, max_new_tokens=2)
    with pytest.raises(ValueError, match="`max_new_tokens`"):
        generate(MODEL, params, tokens, key, max_new_tokens=0)
    with pytest.raises(ValueError, match="`top_k`"):
        generate(MODEL, params, tokens, key, max_new_tokens=2, top_k=VOCAB + 1)
    with pytest.raises(ValueError, match="`prompt_mask`"):
        generate(MODEL, params, tokens, key, max_new_tokens=2, prompt_mask=np.ones((B, T)))

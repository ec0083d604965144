"""The token world: documents of entity facts, questions, and the synthetic variants.

Every generator is a keyed JAX function with static shapes: a batch is ``tokens [B, T]`` int32,
``span [B, 2]`` (start, end) of the gold answer inside the context, stored by construction (no
token matching), and ``loss_mask [B, T]`` float32 (1 where ``tokens[:, t]`` is a target, predicted
from position ``t - 1``).

**Vocabulary** (:class:`World`): ``PAD DOC Q A EOS . =``, then two *pools* (0 = real, 1 =
synthetic) of entity tokens, one question word per relation, relation words (``rel_words`` per
relation: the first half builds the real paraphrase templates, the second half the synthetic
ones), value tokens per (pool, relation), and filler words. A value is an ordered pair of two
distinct value tokens of its relation (so ``|k| = 2``).

**A fact sentence** is ``t_1..t_m e v1 v2 .`` with a template of ``m`` in 2-4 relation words, or
the templated needle ``qw_r = e v1 v2 .``. **A document** is ``DOC`` and 2-4 fact sentences about
one entity with distinct relations. **A question** is ``Q A qw_r e`` (``Q A k1 k2 k3`` for
key-value data) and the answer is ``v1 v2 EOS``, the last three tokens of every sequence. This is
the default ``World.layout="entity_last"``; ``"entity_first"`` is the issue's order (``e t.. v1 v2
.``, ``e qw_r = v1 v2 .``, ``Q e qw_r A``, ``k1 k2 k3 = v1 v2 .``, ``Q k1 k2 k3 A``), kept for
comparison (see :class:`World`).

**Packing.** Whole units (documents, sentences or key-value pairs) are packed until the next one
would not fit; the gold unit sits at a uniform index among the packed units, and the unused
front of the context is ``PAD`` (masked as keys, see :func:`key_mask`). RoPE makes attention depend
on relative offsets only, so the left padding changes nothing but the number of tokens. Entities
are distinct within a context, so ``(e_q, r_q)`` is stated once; values of the query's relation in
other documents share no token with the gold pair (``World.distinct_gold_tokens``), so each gold
token occurs exactly once.

**Streams** (:data:`VARIANTS` and ``"base"``):

- ``base``: short-context pretraining (context 64): documents (2-4 sentences) whose
  entity comes from either pool, templates from either set, 20 % templated sentences, 20 % filler
  documents; then ``base_questions - 1`` question-answer blocks about distinct other facts and the
  final question (loss on every answer); every token any variant uses appears here.
- ``real``: the real task (real pools, real templates, hard distractors: the query's relation for
  other entities and the query entity's other relations).
- ``realistic_syn``: the same grammar on the synthetic pools and templates.
- ``templated_diverse``: the needle in the single template ``qw = e v``, distractors from the
  grammar (synthetic pools).
- ``templated_filler``: the templated needle inside one filler sentence repeated.
- ``symbolic_kv``: pairs ``= k1 k2 k3 v1 v2 .`` (keys of filler words), query a key.
- ``symbolic_kv_filler``: one key-value pair inside a repeated filler sentence.
- ``lm_only``: real-task documents filling the whole context, loss on every token (no question).

Real-task train / detection / evaluation sets are draws with different keys (:func:`split_key`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxlab.core.checks import check_bool, check_choice, check_int, check_key
from jaxlab.core.training import map_in_chunks

PAD, DOC, Q, A, EOS, DOT, EQ = range(7)
N_SPECIAL = 7
ANSWER_LEN = 3  # v1 v2 EOS
SPAN_LEN = 2
QA_WIDTH = 4 + ANSWER_LEN  # question (4) v1 v2 EOS
KEY_LEN = 3
FILLER_SENTENCE = 6  # filler words per filler sentence (then ".")
MAX_TEMPLATE = 4
SENT_WIDTH = 1 + MAX_TEMPLATE + SPAN_LEN + 1  # e, template, v1 v2, "."
MAX_SENTENCES = 4
DOC_WIDTH = 1 + MAX_SENTENCES * SENT_WIDTH

VARIANTS = (
    "real",
    "realistic_syn",
    "templated_diverse",
    "templated_filler",
    "symbolic_kv",
    "symbolic_kv_filler",
    "lm_only",
)
STREAMS = ("base", *VARIANTS)
SPLITS = ("train", "detection", "evaluation")
LAYOUTS = ("entity_last", "entity_first")

__all__ = [
    "ANSWER_LEN",
    "Batch",
    "SPLITS",
    "STREAMS",
    "VARIANTS",
    "World",
    "check_streams",
    "key_mask",
    "prompt_length",
    "sample_batch",
    "sample_stream",
    "split_key",
]


@dataclasses.dataclass(frozen=True)
class World:
    """The vocabulary and its fixed template table (frozen, hashable: a static ``jit`` argument).

    Attributes:
      n_entities: entity tokens per pool (two pools).
      n_relations: relations ``R`` (one question word each; default 4, the fewest that a
        4-sentence document allows: more same-relation distractors; measured, seed 3: base 0.87
        against 0.80 with 6).
      rel_words: relation words per relation (even; half real, half synthetic templates).
      n_templates: paraphrase templates per relation and template set.
      n_values: value tokens per (pool, relation); a value is an ordered pair of two of them.
      n_filler: filler words.
      p_templated: base stream: probability that a fact sentence uses the templated form.
      p_filler: base stream: probability that a distractor document is filler sentences.
      min_template: shortest template (tokens; the longest is 4).
      base_questions: base stream: questions per sequence (the last one is the real format;
        the others, about distinct other facts of the context, multiply the retrieval signal of
        a short pretraining run: 600 steps x 32 sequences learn nothing with one question).
      base_sentences: base stream: documents have ``min(2, this)`` to this many sentences
        (default 2: more entities per 64 tokens, so more questions with a same-relation
        distractor; measured with smeared keys, seed 0: first answer token right 0.88 / 0.69 at
        64 / 256 tokens against 0.85 / 0.46 with 2-4 sentences and 0.58 / 0.51 with 1).
      template_seed: seed of the fixed template table.
      layout: ``"entity_last"`` (default): the entity (or the key's last token) sits right before
        the value and ends the question, ``t_1..t_m e v1 v2 .`` and ``Q A qw_r e``;
        ``"entity_first"``: the issue's ``e t_1..t_m v1 v2 .`` and ``Q e qw_r A``. With the entity
        first the value's nearest tokens name only the relation, and the base (600 x 32, with or
        without smeared keys) copies a value of the asked relation at the rate of a random pick
        among them (measured: 0.76 against 0.75 at 64 tokens); the default layout lets one
        smeared-key head match the query's last token to the token before the value.
      distinct_gold_tokens: the other values of the query's relation in a context share no
        token with the gold pair (default), so the gold's first token occurs once and the second
        answer token is the one after it; ``False``: they only differ from the gold pair, as in
        the issue. Measured (seed 7, 256 tokens, the issue's rule): with the first token right,
        the second is right in 1.00 / 0.70 / 0.55 / 0.36 of the cases where that token occurs
        0 / 1 / 2 / 3 more times in the context, about a random pick among the copies, and the
        fine-tuned real model's second-token accuracy stays at 0.63-0.68 (first token 0.87-0.93):
        the miss is the ambiguity of the copy, not the retrieval the paper studies.
    """

    n_entities: int = 60
    n_relations: int = 4
    rel_words: int = 6
    n_templates: int = 3
    n_values: int = 8
    n_filler: int = 80
    p_templated: float = 0.2
    p_filler: float = 0.2
    min_template: int = 2
    base_questions: int = 4
    base_sentences: int = 2
    template_seed: int = 0
    layout: str = "entity_last"
    distinct_gold_tokens: bool = True

    def __post_init__(self):
        check_int(self.n_entities, "World.n_entities", minimum=24)
        check_int(self.n_relations, "World.n_relations", minimum=MAX_SENTENCES)
        check_int(self.rel_words, "World.rel_words", minimum=2)
        if self.rel_words % 2:
            raise ValueError(f"`World.rel_words` must be even, got {self.rel_words}.")
        check_int(self.n_templates, "World.n_templates", minimum=1)
        check_int(self.n_values, "World.n_values", minimum=4)
        check_int(self.n_filler, "World.n_filler", minimum=KEY_LEN)
        for name in ("p_templated", "p_filler"):
            p = getattr(self, name)
            if isinstance(p, bool) or not isinstance(p, int | float) or not 0 <= p <= 1:
                raise ValueError(f"`World.{name}` must be a probability in [0, 1], got {p!r}.")
        check_int(self.min_template, "World.min_template", minimum=2, maximum=MAX_TEMPLATE)
        check_int(self.base_questions, "World.base_questions", minimum=1, maximum=4)
        check_int(self.base_sentences, "World.base_sentences", minimum=1, maximum=MAX_SENTENCES)
        check_int(self.template_seed, "World.template_seed", minimum=0)
        check_choice(self.layout, "World.layout", LAYOUTS)
        check_bool(self.distinct_gold_tokens, "World.distinct_gold_tokens")

    @property
    def entity_last(self) -> bool:
        return self.layout == "entity_last"

    def question(self, entity, qword) -> jax.Array:
        """The 4-token question about ``(entity, relation word)`` in this layout."""
        order = (Q, A, qword, entity) if self.entity_last else (Q, entity, qword, A)
        return jnp.stack([jnp.asarray(t, jnp.int32) for t in order])

    # ---- token layout
    @property
    def entity0(self) -> int:
        return N_SPECIAL

    @property
    def qword0(self) -> int:
        return self.entity0 + 2 * self.n_entities

    @property
    def relword0(self) -> int:
        return self.qword0 + self.n_relations

    @property
    def value0(self) -> int:
        return self.relword0 + self.n_relations * self.rel_words

    @property
    def filler0(self) -> int:
        return self.value0 + 2 * self.n_relations * self.n_values

    @property
    def vocab_size(self) -> int:
        return self.filler0 + self.n_filler

    @property
    def n_pairs(self) -> int:
        """Values per (pool, relation): ordered pairs of distinct value tokens."""
        return self.n_values * (self.n_values - 1)

    def templates(self) -> tuple[jax.Array, jax.Array]:
        """``(tokens [R, 2, n_templates, 4], lengths [R, 2, n_templates])`` (set 0 real, 1 syn),
        fixed by ``template_seed``. A template of relation ``r`` has ``m`` tokens (``m`` uniform
        in ``min_template``-4): the relation's head word (its question word, as "capital" is in
        both "the capital of X is" and "what is the capital of X") at a random slot, and
        ``m - 1`` paraphrase words from half ``s`` of the relation's words (set ``s``)."""
        key = jax.random.key(self.template_seed)
        r, n, half = self.n_relations, self.n_templates, self.rel_words // 2
        k1, k2, k3 = jax.random.split(key, 3)
        words = jax.random.randint(k1, (r, 2, n, MAX_TEMPLATE), 0, half)
        base = self.relword0 + jnp.arange(r)[:, None, None, None] * self.rel_words
        tokens = base + jnp.arange(2)[None, :, None, None] * half + words
        lengths = jax.random.randint(k2, (r, 2, n), self.min_template, MAX_TEMPLATE + 1)
        slot = jax.random.randint(k3, (r, 2, n), 0, lengths)
        head = jnp.broadcast_to((self.qword0 + jnp.arange(r))[:, None, None, None], tokens.shape)
        is_head = jnp.arange(MAX_TEMPLATE)[None, None, None, :] == slot[..., None]
        tokens = jnp.where(is_head, head, tokens)
        return tokens.astype(jnp.int32), lengths.astype(jnp.int32)


class Batch(NamedTuple):
    """A batch of one stream.

    Fields:
      tokens: ``[B, T]`` int32 (context, question, ``v1 v2 EOS``; ``PAD`` in front).
      span: ``[B, 2]`` int32 ``(start, end)`` of the gold answer in the context (``end - start
        = 2``); ``(0, 0)`` for ``lm_only``.
      loss_mask: ``[B, T]`` float32, 1 where ``tokens[:, t]`` is a training target.
    """

    tokens: jax.Array
    span: jax.Array
    loss_mask: jax.Array


def prompt_length(length: int) -> int:
    """The prompt (context and question) of a sequence of ``length`` tokens: ``length - 3``."""
    return length - ANSWER_LEN


def key_mask(tokens: jax.Array) -> jax.Array:
    """``[..., T]`` bool, True for real (non-``PAD``) tokens."""
    return tokens != PAD


def split_key(seed: int, split: str) -> jax.Array:
    """The key of a real-task split (``"train"``, ``"detection"``, ``"evaluation"``) of a seed."""
    check_choice(split, "split", SPLITS)
    return jax.random.fold_in(jax.random.key(seed), 1000 + SPLITS.index(split))


# ---- building blocks (one instance; vmapped over the batch) -----------------------------------


def _concat(rows: jax.Array, lengths: jax.Array, width: int, offset=0) -> jax.Array:
    """Rows ``[U, W]`` (the first ``lengths[u]`` tokens of each) concatenated into ``[width]``
    from index ``offset``; the rest ``PAD``."""
    w = rows.shape[1]
    starts = offset + jnp.cumsum(lengths) - lengths
    target = starts[:, None] + jnp.arange(w)[None, :]
    valid = jnp.arange(w)[None, :] < lengths[:, None]
    target = jnp.where(valid, target, width)  # out of range: dropped
    return jnp.full((width,), PAD, jnp.int32).at[target].set(rows, mode="drop")


def _pair(index, n_values: int):
    """Value pair ``index`` in ``[0, n (n - 1))`` -> two distinct token offsets."""
    a = index // (n_values - 1)
    b = index % (n_values - 1)
    return a, b + (b >= a)


def _other(key, gold, n):
    """Uniform on ``[0, n)`` without ``gold`` (same shape as ``gold``)."""
    d = jax.random.randint(key, jnp.shape(gold), 0, n - 1)
    return d + (d >= gold)


def _pair_index(a, b, n_values: int):
    """The inverse of :func:`_pair`: distinct offsets ``(a, b)`` -> pair index."""
    return a * (n_values - 1) + b - (b > a)


def _disjoint_pair(key, gold, shape, n_values: int):
    """Pair indices ``shape``, uniform over the pairs sharing no token with pair ``gold``."""
    ga, gb = _pair(gold, n_values)
    lo, hi = jnp.minimum(ga, gb), jnp.maximum(ga, gb)
    a, b = _pair(jax.random.randint(key, shape, 0, (n_values - 2) * (n_values - 3)), n_values - 2)

    def skip(x):  # [0, n - 2) -> [0, n) without lo and hi
        x = x + (x >= lo)
        return x + (x >= hi)

    return _pair_index(skip(a), skip(b), n_values)


def _sentence(entity, template, tlen, v1, v2, entity_last: bool):
    """One fact sentence ``[SENT_WIDTH]`` and its length ``4 + tlen``: ``e t.. v1 v2 .`` or,
    ``entity_last``, ``t.. e v1 v2 .`` (the value at ``1 + tlen`` either way)."""
    i = jnp.arange(SENT_WIDTH)
    if entity_last:
        t = template[jnp.clip(i, 0, MAX_TEMPLATE - 1)]
        row = jnp.where(i < tlen, t, jnp.where(i == tlen, entity, PAD))
    else:
        t = template[jnp.clip(i - 1, 0, MAX_TEMPLATE - 1)]
        row = jnp.where(i == 0, entity, PAD)
        row = jnp.where((i >= 1) & (i <= tlen), t, row)
    row = jnp.where(i == 1 + tlen, v1, row)
    row = jnp.where(i == 2 + tlen, v2, row)
    row = jnp.where(i == 3 + tlen, DOT, row)
    return row.astype(jnp.int32), 4 + tlen


def _filler_sentence(key, world: World):
    """``[SENT_WIDTH]`` filler words then ``.``, length 7."""
    words = world.filler0 + jax.random.randint(key, (FILLER_SENTENCE,), 0, world.n_filler)
    row = jnp.concatenate([words, jnp.array([DOT]), jnp.full((SENT_WIDTH - 7,), PAD)])
    return row.astype(jnp.int32), jnp.int32(FILLER_SENTENCE + 1)


def _pack(key, units, lengths, budget: int, gold_offset):
    """Pack whole units (unit 0 holds the gold at ``gold_offset``) left-padded into ``[budget]``.

    Units are taken in order while they fit, the gold unit first; it is then moved to a uniform
    index among the packed units. Returns ``(context [budget], gold start)``.
    """
    fits = jnp.cumsum(lengths) <= budget
    n_fit = jnp.sum(fits)
    g = jax.random.randint(key, (), 0, n_fit)
    slot = jnp.arange(units.shape[0])
    unit_at = jnp.where(slot < g, slot + 1, jnp.where(slot == g, 0, slot))
    lens = jnp.where(slot < n_fit, lengths[unit_at], 0)
    offset = budget - jnp.sum(lens)
    ctx = _concat(units[unit_at], lens, budget, offset)
    gold_start = offset + jnp.sum(jnp.where(slot < g, lens, 0)) + gold_offset
    return ctx, gold_start


def _qa(context, question, v1, v2, length: int, gold_start):
    tokens = jnp.concatenate(
        [context, question, jnp.stack([v1, v2, jnp.int32(EOS)]).astype(jnp.int32)]
    )
    mask = (jnp.arange(length) >= length - ANSWER_LEN).astype(jnp.float32)
    span = jnp.stack([gold_start, gold_start + SPAN_LEN]).astype(jnp.int32)
    return tokens.astype(jnp.int32), span, mask


def _documents(key, world: World, n_docs: int, mode: str, templated_gold: bool):
    """``n_docs`` documents (doc 0 holds the gold fact). ``mode``: ``"real"``, ``"syn"`` or
    ``"mixed"`` (base: per-document pool from its entity, template set at random, templated
    sentences and filler documents mixed in). Returns units, lengths, the gold offset within doc 0
    and the question's entity, relation word and value tokens."""
    ks = jax.random.split(key, 12)
    r, ne, nv = world.n_relations, world.n_entities, world.n_values
    tmpl, tlens = world.templates()
    if mode == "mixed":
        ents = jax.random.permutation(ks[0], 2 * ne)[:n_docs]
        pool = ents // ne
        tset = jax.random.randint(ks[1], (n_docs,), 0, 2)
    else:
        p = 0 if mode == "real" else 1
        ents = p * ne + jax.random.permutation(ks[0], ne)[:n_docs]
        pool = jnp.full((n_docs,), p)
        tset = pool
    entity_tok = world.entity0 + ents
    lo, hi = (min(2, world.base_sentences), world.base_sentences) if mode == "mixed" else (2, 4)
    n_sent = jax.random.randint(ks[2], (n_docs,), lo, hi + 1)
    rels = jax.vmap(lambda k: jax.random.permutation(k, r)[:MAX_SENTENCES])(
        jax.random.split(ks[3], n_docs)
    )  # [D, 4]
    tid = jax.random.randint(ks[4], (n_docs, MAX_SENTENCES), 0, world.n_templates)
    gs = jax.random.randint(ks[5], (), 0, n_sent[0])  # the gold sentence of doc 0
    r_q = rels[0, gs]
    gold_val = jax.random.randint(ks[6], (), 0, world.n_pairs)
    if world.distinct_gold_tokens:
        vals = _disjoint_pair(ks[7], gold_val, (n_docs, MAX_SENTENCES), nv)
    else:
        vals = _other(ks[7], jnp.full((n_docs, MAX_SENTENCES), gold_val), world.n_pairs)
    is_gold = (jnp.arange(n_docs)[:, None] == 0) & (jnp.arange(MAX_SENTENCES)[None, :] == gs)
    # only the query relation must avoid the gold pair; others are free (disjoint tokens anyway)
    free = jax.random.randint(ks[8], (n_docs, MAX_SENTENCES), 0, world.n_pairs)
    vals = jnp.where(is_gold, gold_val, jnp.where(rels == r_q, vals, free))
    a, b = _pair(vals, nv)
    vbase = world.value0 + (pool[:, None] * r + rels) * nv
    v1, v2 = vbase + a, vbase + b
    template = tmpl[rels, tset[:, None], tid]  # [D, 4, 4]
    tlen = tlens[rels, tset[:, None], tid]
    qword = world.qword0 + rels
    templated_form = jnp.stack([qword, jnp.full_like(qword, EQ)], -1)  # [D, 4, 2]
    templated_form = jnp.pad(templated_form, ((0, 0), (0, 0), (0, MAX_TEMPLATE - 2)))
    use_templated = jnp.zeros((n_docs, MAX_SENTENCES), bool)
    if mode == "mixed":
        use_templated = jax.random.bernoulli(ks[9], world.p_templated, (n_docs, MAX_SENTENCES))
    if templated_gold:
        use_templated = use_templated | is_gold
    template = jnp.where(use_templated[..., None], templated_form, template)
    tlen = jnp.where(use_templated, 2, tlen)
    ents_b = jnp.broadcast_to(entity_tok[:, None], (n_docs, MAX_SENTENCES))
    sentence = functools.partial(_sentence, entity_last=world.entity_last)
    rows, lens = jax.vmap(jax.vmap(sentence))(ents_b, template, tlen, v1, v2)  # [D, 4, W]
    lens = jnp.where(jnp.arange(MAX_SENTENCES)[None, :] < n_sent[:, None], lens, 0)
    fact = (jnp.arange(MAX_SENTENCES)[None, :] < n_sent[:, None]) & ~is_gold
    if mode == "mixed":  # filler documents among the distractors
        fk = jax.random.split(ks[10], n_docs * MAX_SENTENCES)
        frows, flens = jax.vmap(lambda k: _filler_sentence(k, world))(fk)
        frows = frows.reshape(n_docs, MAX_SENTENCES, SENT_WIDTH)
        flens = flens.reshape(n_docs, MAX_SENTENCES)
        filler_doc = jax.random.bernoulli(ks[11], world.p_filler, (n_docs,))
        filler_doc = filler_doc & (jnp.arange(n_docs) > 0)
        fact = fact & ~filler_doc[:, None]
        rows = jnp.where(filler_doc[:, None, None], frows, rows)
        lens = jnp.where(
            filler_doc[:, None] & (jnp.arange(MAX_SENTENCES)[None, :] < n_sent[:, None]),
            flens,
            lens,
        )
    body = jax.vmap(lambda rw, ln: _concat(rw, ln, DOC_WIDTH - 1))(rows, lens)
    docs = jnp.concatenate([jnp.full((n_docs, 1), DOC, jnp.int32), body], axis=1)
    doc_len = 1 + lens.sum(1)
    gold_offset = 1 + jnp.sum(jnp.where(jnp.arange(MAX_SENTENCES) < gs, lens[0], 0))
    gold_offset = gold_offset + 1 + tlen[0, gs]
    facts = (ents_b, jnp.broadcast_to(qword, ents_b.shape), v1, v2, fact)  # [D, 4] each
    return docs, doc_len, gold_offset, entity_tok[0], qword[0, gs], v1[0, gs], v2[0, gs], facts


def _extra_questions(key, world: World, facts, n_packed, n: int):
    """``n`` question-answer blocks (question, then ``v1 v2 EOS``) about distinct other facts of
    the packed documents, and their validity ``[n]`` (a block without a fact left is ``PAD``)."""
    ent, qw, v1, v2, ok = (f.reshape(-1) for f in facts)
    ok = ok & (jnp.arange(ok.shape[0]) // MAX_SENTENCES < n_packed)
    score = jnp.where(ok, jax.random.gumbel(key, ok.shape), -jnp.inf)
    _, pick = jax.lax.top_k(score, n)  # without replacement
    valid = ok[pick]
    questions = jax.vmap(world.question)(ent[pick], qw[pick])  # [n, 4]
    answers = jnp.stack([v1[pick], v2[pick], jnp.full((n,), EOS)], axis=1)
    blocks = jnp.concatenate([questions, answers], axis=1)
    blocks = jnp.where(valid[:, None], blocks, PAD)
    return blocks.reshape(-1).astype(jnp.int32), valid


def _grammar_instance(key, world: World, length: int, mode: str, templated_gold: bool):
    k_docs, k_pack, k_q = jax.random.split(key, 3)
    extra = world.base_questions - 1 if mode == "mixed" else 0
    budget = prompt_length(length) - 4 - QA_WIDTH * extra
    n_docs = budget // (1 + min(2, world.base_sentences) * 6) + 1
    docs, lens, off, ent, qw, v1, v2, facts = _documents(
        k_docs, world, n_docs, mode, templated_gold
    )
    ctx, start = _pack(k_pack, docs, lens, budget, off)
    question = world.question(ent, qw)
    if not extra:
        return _qa(ctx, question, v1, v2, length, start)
    n_packed = jnp.sum(jnp.cumsum(lens) <= budget)
    blocks, valid = _extra_questions(k_q, world, facts, n_packed, extra)
    tokens, span, mask = _qa(jnp.concatenate([ctx, blocks]), question, v1, v2, length, start)
    i = jnp.arange(length) - budget
    in_block = (i >= 0) & (i < QA_WIDTH * extra)
    answers = in_block & (i % QA_WIDTH >= QA_WIDTH - ANSWER_LEN)
    answers = answers & valid[jnp.clip(i // QA_WIDTH, 0, extra - 1)]
    return tokens, span, jnp.maximum(mask, answers.astype(jnp.float32))


def _syn_value(key, world: World, shape=()):
    """A synthetic-pool value: relation and pair index combined, ``[0, R * n_pairs)``."""
    return jax.random.randint(key, shape, 0, world.n_relations * world.n_pairs)


def _value_tokens(world: World, index):
    rel, pair = index // world.n_pairs, index % world.n_pairs
    a, b = _pair(pair, world.n_values)
    base = world.value0 + (world.n_relations + rel) * world.n_values  # pool 1
    return base + a, base + b


def _kv_rows(keys, v1, v2, entity_last: bool):
    """``k1 k2 k3 = v1 v2 .`` or, ``entity_last``, ``= k1 k2 k3 v1 v2 .`` (value at 4 both)."""
    eq = jnp.full(keys.shape[:-1] + (1,), EQ)
    dot = jnp.full(keys.shape[:-1] + (1,), DOT)
    head = [eq, keys] if entity_last else [keys, eq]
    return jnp.concatenate([*head, v1[..., None], v2[..., None], dot], -1).astype(jnp.int32)


def _kv_instance(key, world: World, length: int, filler: bool):
    ks = jax.random.split(key, 5)
    budget = prompt_length(length) - (KEY_LEN + 2)
    width = KEY_LEN + 4
    n = budget // width + 1
    keys = world.filler0 + jax.random.randint(ks[0], (n, KEY_LEN), 0, world.n_filler)
    gold = _syn_value(ks[1], world)
    vals = _other(ks[2], jnp.full((n,), gold), world.n_relations * world.n_pairs)
    if world.distinct_gold_tokens:  # a value of the gold's relation shares none of its tokens
        same = vals // world.n_pairs == gold // world.n_pairs
        k_pair = jax.random.fold_in(ks[2], 1)
        pair = _disjoint_pair(k_pair, gold % world.n_pairs, (n,), world.n_values)
        vals = jnp.where(same, gold - gold % world.n_pairs + pair, vals)
    vals = vals.at[0].set(gold)
    v1, v2 = _value_tokens(world, vals)
    rows = _kv_rows(keys, v1, v2, world.entity_last)  # [n, 7]
    lens = jnp.full((n,), width, jnp.int32)
    if filler:
        sentence, slen = _filler_sentence(ks[3], world)
        n = budget // (FILLER_SENTENCE + 1) + 1
        reps = jnp.broadcast_to(sentence[:width], (n, width))
        rows = reps.at[0].set(rows[0])
        lens = jnp.full((n,), slen, jnp.int32).at[0].set(width)
    ctx, start = _pack(ks[4], rows, lens, budget, KEY_LEN + 1)
    parts = [[Q, A], keys[0]] if world.entity_last else [[Q], keys[0], [A]]
    question = jnp.concatenate([jnp.asarray(t, jnp.int32) for t in parts])
    return _qa(ctx, question, v1[0], v2[0], length, start)


def _templated_filler_instance(key, world: World, length: int):
    ks = jax.random.split(key, 6)
    budget = prompt_length(length) - 4
    rel = jax.random.randint(ks[0], (), 0, world.n_relations)
    ent = world.entity0 + world.n_entities + jax.random.randint(ks[1], (), 0, world.n_entities)
    pair = jax.random.randint(ks[2], (), 0, world.n_pairs)
    v1, v2 = _value_tokens(world, rel * world.n_pairs + pair)
    qw = world.qword0 + rel
    template = jnp.stack([qw, jnp.int32(EQ), jnp.int32(PAD), jnp.int32(PAD)])
    needle, nlen = _sentence(ent, template, 2, v1, v2, world.entity_last)
    sentence, slen = _filler_sentence(ks[3], world)
    n = budget // (FILLER_SENTENCE + 1) + 1
    rows = jnp.broadcast_to(sentence, (n, SENT_WIDTH)).at[0].set(needle)
    lens = jnp.full((n,), slen, jnp.int32).at[0].set(nlen)
    ctx, start = _pack(ks[4], rows, lens, budget, 3)
    question = world.question(ent, qw)
    return _qa(ctx, question, v1, v2, length, start)


def _lm_instance(key, world: World, length: int):
    k_docs, k_pack = jax.random.split(key)
    n_docs = length // (1 + 2 * 6) + 1
    docs, lens, *_ = _documents(k_docs, world, n_docs, "real", False)
    ctx, _ = _pack(k_pack, docs, lens, length, 0)
    mask = ((ctx != PAD) & (jnp.arange(length) > 0)).astype(jnp.float32)
    return ctx, jnp.zeros((2,), jnp.int32), mask


def _instance(key, world: World, stream: str, length: int):
    if stream == "base":
        return _grammar_instance(key, world, length, "mixed", False)
    if stream == "real":
        return _grammar_instance(key, world, length, "real", False)
    if stream == "realistic_syn":
        return _grammar_instance(key, world, length, "syn", False)
    if stream == "templated_diverse":
        return _grammar_instance(key, world, length, "syn", True)
    if stream == "templated_filler":
        return _templated_filler_instance(key, world, length)
    if stream in ("symbolic_kv", "symbolic_kv_filler"):
        return _kv_instance(key, world, length, stream == "symbolic_kv_filler")
    return _lm_instance(key, world, length)


def _min_length(stream: str, world: World | None = None) -> int:
    """Shortest sequence whose context holds one gold unit and the question(s)."""
    if stream in ("symbolic_kv", "symbolic_kv_filler"):
        return KEY_LEN + 4 + KEY_LEN + 2 + ANSWER_LEN
    extra = world.base_questions - 1 if stream == "base" and world is not None else 0
    return DOC_WIDTH + 4 + ANSWER_LEN + QA_WIDTH * extra


def _draw_keys(keys, world, stream, length) -> Batch:
    return Batch(*jax.vmap(lambda k: _instance(k, world, stream, length))(keys))


def _draw(key, world, stream, length, batch_size) -> Batch:
    return _draw_keys(jax.random.split(key, batch_size), world, stream, length)


_sample_keys = jax.jit(_draw_keys, static_argnames=("world", "stream", "length"))
HOST_CHUNK = 128  # sample_batch draws larger batches in chunks of this many (one compile)


def check_streams(streams, name: str = "streams") -> tuple:
    """``streams`` if it is a non-empty tuple of :data:`VARIANTS` names, else a ``ValueError``
    naming ``name``."""
    if not isinstance(streams, tuple) or not streams:
        raise ValueError(f"`{name}` must be a non-empty tuple of VARIANTS, got {streams!r}.")
    for s in streams:
        check_choice(s, name, VARIANTS)
    return streams


def _check_sizes(length, batch_size, stream, world=None):
    check_int(length, "length", minimum=_min_length(stream, world))
    check_int(batch_size, "batch_size", minimum=1)


def sample_batch(key: jax.Array, world: World, stream: str, length: int, batch_size: int) -> Batch:
    """Draw ``batch_size`` sequences of ``length`` tokens from ``stream`` (one of
    :data:`STREAMS`). Deterministic for a fixed key; traceable (call it inside ``jit``). From the
    host, batches above ``HOST_CHUNK`` are drawn in chunks of it (same draws, one compile)."""
    check_choice(stream, "stream", STREAMS)
    if not isinstance(world, World):
        raise TypeError(f"`world` must be a World, got {type(world).__name__}.")
    _check_sizes(length, batch_size, stream, world)
    keys = jax.random.split(check_key(key, "key"), batch_size)
    if batch_size <= HOST_CHUNK:
        return _sample_keys(keys, world, stream, length)
    # one compiled generator for every batch size above the chunk (compiling one takes ~8 s
    # here); the same keys as one call, so the same draws
    return map_in_chunks(lambda k: _sample_keys(k, world, stream, length), (keys,), HOST_CHUNK)


def sample_stream(
    key, world: World, index, length: int, batch_size: int, streams: tuple = VARIANTS
) -> Batch:
    """Like :func:`sample_batch` for ``streams[index]`` with a *traced* ``index`` (one compiled
    fine-tuning program serves every stream of ``streams``, default :data:`VARIANTS`:
    ``lax.switch`` runs only the chosen generator; each listed stream adds its generator to the
    compiled program)."""
    check_streams(streams, "streams")
    _check_sizes(length, batch_size, "real")
    branches = [
        functools.partial(_draw, world=world, stream=s, length=length, batch_size=batch_size)
        for s in streams
    ]
    return jax.lax.switch(index, branches, key)

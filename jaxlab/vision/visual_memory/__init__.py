"""Visual memory: an editable, persistent kNN memory with rank voting, pruning and sharded
search (Geirhos et al., *Towards flexible perception with visual memory*, ICML 2025; issue 25).

Modules: :mod:`~jaxlab.vision.visual_memory.memory` (the :class:`Memory` pytree, pure edits
``add`` / ``remove`` / ``relabel`` / ``reweight`` / ``compact``, orbax persistence with the
memory version as the checkpoint step), :mod:`~jaxlab.vision.visual_memory.search` (blocked exact
top-k as a ``lax.scan`` with a running top-k; ``approx_max_k``; memory rows sharded over a
``"mem"`` mesh with the per-device candidates all-gathered),
:mod:`~jaxlab.vision.visual_memory.aggregate` (Plurality, Distance, Softmax, Rank, SoftRank,
SoftPlurality for every ``k`` in one pass, the official tie rule; agreement, entropy, OOD score,
attribution), :mod:`~jaxlab.vision.visual_memory.pruning` (leave-one-out wrong / same-label
counts, hard exclusion, soft weights), :mod:`~jaxlab.vision.visual_memory.backends`
(``jax_exact``, ``jax_approx``, ``faiss``) and :mod:`~jaxlab.vision.visual_memory.encoders`
(E_weak PCA-16 whitening, E_cnn, linear-head baselines). Nothing in the memory is trained. Not
built: DinoV2 / CLIP encoders, the VLM aggregator, a zarr store for billion-scale memories, the
MiniLM text memory.

The method contract's ``make_* / init / step`` shape does not fit a memory (nothing iterates):
like ``cmi_test`` it is a set of pure functions over the :class:`Memory` pytree.

Example::

    import jax, numpy as np
    from jaxlab.vision import visual_memory as vm

    rng = np.random.default_rng(0)
    z = rng.normal(size=(200, 16)).astype(np.float32)
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    mem = vm.build_memory(z[:150], rng.integers(0, 3, 150), vocab=3)   # ids 0..149
    sims, ids = vm.search(z[150:], mem, k=10)                          # [50, 10] each
    nb = vm.neighbour_lookup(mem, ids)
    preds = vm.aggregate(nb["labels"], 1 - sims, 3, "rank")            # [50, 10]: every k
    mem = vm.remove(mem, ids[0, :2])                                   # unlearn two items
    mem = vm.add(mem, z[150:160], np.zeros(10, int))                   # ids 150..159
    counts = vm.neighbour_counts(mem, k=5)                             # W / C for pruning
    weights = vm.soft_weights(counts)                                  # [158]
"""

from jaxlab.vision.visual_memory import encoders
from jaxlab.vision.visual_memory.aggregate import (
    COUNTS,
    QUERY_CHUNK,
    RULES,
    accuracy_at_k,
    aggregate,
    agreement,
    attribution,
    label_entropy,
    ood_score,
    rule_weights,
)
from jaxlab.vision.visual_memory.backends import (
    BACKENDS,
    Backend,
    FaissBackend,
    JaxBackend,
    make_backend,
)
from jaxlab.vision.visual_memory.memory import (
    METRICS,
    Memory,
    MemoryMeta,
    add,
    build_memory,
    compact,
    empty_memory,
    fingerprint,
    live_rows,
    position_of,
    relabel,
    remove,
    restore_memory,
    reweight,
    save_memory,
    saved_versions,
)
from jaxlab.vision.visual_memory.pruning import (
    hard_exclusion,
    neighbour_counts,
    neighbour_lookup,
    soft_weights,
)
from jaxlab.vision.visual_memory.search import (
    DEFAULT_BLOCK,
    MEM_AXIS,
    group_size,
    memory_mesh,
    search,
    search_arrays,
    shard_memory,
)

__all__ = [
    "BACKENDS",
    "DEFAULT_BLOCK",
    "MEM_AXIS",
    "METRICS",
    "COUNTS",
    "QUERY_CHUNK",
    "RULES",
    "Backend",
    "FaissBackend",
    "JaxBackend",
    "Memory",
    "MemoryMeta",
    "accuracy_at_k",
    "add",
    "encoders",
    "agreement",
    "aggregate",
    "attribution",
    "build_memory",
    "compact",
    "empty_memory",
    "fingerprint",
    "group_size",
    "hard_exclusion",
    "label_entropy",
    "live_rows",
    "make_backend",
    "memory_mesh",
    "neighbour_counts",
    "neighbour_lookup",
    "ood_score",
    "position_of",
    "relabel",
    "remove",
    "restore_memory",
    "reweight",
    "rule_weights",
    "save_memory",
    "saved_versions",
    "search",
    "search_arrays",
    "shard_memory",
    "soft_weights",
]

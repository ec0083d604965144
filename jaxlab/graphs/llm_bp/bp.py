"""Loopy belief propagation with a homophily-ratio potential, its one-step approximation, and the
training-free aggregation baselines (LLM-BP, Wang et al., ICML 2025; official ``model_bp.py``).

The model: ``p(y) ∝ prod_i phi_i(y_i) prod_(i,j) psi(y_i, y_j)^(w_ij)`` with node priors
``phi_i = softmax(<h_i, q_c> / tau)`` and one edge potential fixed by a homophily ratio ``r``:

- ``potential="normalized"`` (default): ``psi = r`` on the diagonal, ``(1 - r) / (C - 1)`` off it
  (rows sum to 1, a label-transition matrix of edge homophily ``r``), neutral at ``r = 1 / C``;
- ``potential="code"`` (the official ``prepare_AGG_bp``): ``r`` and ``1 - r``, neutral at 1/2, so
  for C > 2 a graph with ``1/C < r < 1/2`` is treated as heterophilic.

``r`` is clipped to ``[clip, 1 - clip]`` (1e-3) so ``log psi`` stays finite; any positive C x C
matrix can be given instead (the O(C^2) path).

Loopy BP (synchronous, log domain, ``iterations`` = 5, the official fixed count; no run to a
tolerance): messages start at 1; at iteration t the cavity of the message j -> i is
``log b_j^(t-1) - log m_(i->j)^(t-1)`` (nothing subtracted at t = 1), the message is
``LSE_a [cavity(a) + w log psi(a, c)]`` normalised over c, and the belief
``log phi_i + sum_j log m_(j->i)`` normalised. Each undirected edge ``(u, v)`` is stored once with
both directed messages side by side, so the reverse message is at the same index (no reverse-edge
gather); :func:`reverse_edge_index` gives the official directed layout's map for comparison.
Incoming messages are ``jax.ops.segment_sum`` into nodes; iterations are a ``lax.scan``.
``message="closed"`` (two-valued psi) uses the exact O(C) form
``sum_a psi^w(a, c) mu(a) ∝ 1 + kappa_w mu(c)``, ``kappa_w = (alpha / beta)^w - 1``;
``"dense"`` the O(C^2) log-sum-exp. ``damping`` (off by default) mixes each message with its
previous value in the log domain from the second iteration on.

Edges can be sharded over a mesh (``mesh`` from :func:`jaxlab.core.sharding.data_mesh`): under
``shard_map`` every device computes its edges' messages and segment sums, one ``psum`` per
iteration combines them, beliefs stay replicated. Padding edges have weight 0 (their messages are
uniform and change nothing).

Approximation and baselines (the official ``zero_shot.py`` / ``few_shot.py``):
:func:`bp_appr_scores` ``s = p + kappa * sum_j p_j`` (``aggregation="sum"``, the zero-shot
operator; ``"mean"`` is what the few-shot script runs), ``kappa = 0.5 sign(r_hat - neutral)``;
:func:`na_features` ``h + w mean_j h_j`` renormalised; :func:`two_hop_features` the SGC-style
``A~^2 h`` with ``A~ = D^-1/2 (A + I) D^-1/2`` (a training-free 2-hop control).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxlab.core.checks import (
    check_array,
    check_choice,
    check_in_range,
    check_instance,
    check_int,
)
from jaxlab.core.training import all_finite

__all__ = [
    "AGGREGATIONS",
    "MESSAGES",
    "POTENTIALS",
    "BP",
    "BPConfig",
    "BPState",
    "Graph",
    "appr_kappa",
    "belief_propagation",
    "bp_appr_scores",
    "degree",
    "from_directed",
    "log_potential",
    "log_prior",
    "make_bp",
    "make_graph",
    "na_features",
    "neighbour_mean",
    "neighbour_sum",
    "neutral_r",
    "pad_graph",
    "reverse_edge_index",
    "run_bp",
    "two_hop_features",
]

POTENTIALS = ("normalized", "code")
MESSAGES = ("closed", "dense")
AGGREGATIONS = ("sum", "mean")


# ----------------------------------------------------------------------------------- the graph


@struct.dataclass
class Graph:
    """Undirected edges, each once.

    Attributes:
        src, dst: ``int32 [E]`` endpoints (``src < dst`` for real edges; padding is ``(0, 0)``).
        weight: ``float32 [E]`` edge weights ``w`` (psi^w); 0 for padding.
        n_nodes: static node count.
    """

    src: jax.Array
    dst: jax.Array
    weight: jax.Array
    n_nodes: int = struct.field(pytree_node=False)

    @property
    def n_edges(self) -> int:
        return int(self.src.shape[-1])


def make_graph(edges: Any, n_nodes: int, weight: Any = None) -> Graph:
    """A :class:`Graph` from ``edges [E, 2]`` (each undirected edge once, either orientation).

    Raises ``ValueError`` for endpoints outside ``[0, n_nodes)``, self-loops, an edge given twice
    (also as ``(u, v)`` and ``(v, u)``: use :func:`from_directed` for a directed list) and negative
    or non-finite weights.
    """
    check_int(n_nodes, "n_nodes", minimum=1)
    e = np.asarray(check_array(edges, "edges", ndim=2, kind="int"))
    if e.shape[1] != 2:
        raise ValueError(f"`edges` must have shape [E, 2], got {e.shape}.")
    if e.size and (e.min() < 0 or e.max() >= n_nodes):
        raise ValueError(f"`edges` endpoints must lie in [0, {n_nodes}), got {e.min()}..{e.max()}.")
    if np.any(e[:, 0] == e[:, 1]):
        raise ValueError(f"`edges` has {int(np.sum(e[:, 0] == e[:, 1]))} self-loop(s).")
    canon = np.sort(e, axis=1)
    if len(np.unique(canon, axis=0)) != len(canon):
        raise ValueError(
            "`edges` lists an undirected edge more than once (store each edge once; "
            "`from_directed` converts a symmetric directed list)."
        )
    if weight is None:
        w = np.ones(len(e), np.float32)
    else:
        w = np.asarray(check_array(weight, "weight", shape=(len(e),), kind="float"))
        if np.any(w < 0):
            raise ValueError(f"`weight` must be non-negative, got min {w.min()}.")
    return Graph(
        jnp.asarray(canon[:, 0], jnp.int32),
        jnp.asarray(canon[:, 1], jnp.int32),
        jnp.asarray(w, jnp.float32),
        int(n_nodes),
    )


def pad_graph(graph: Graph, n_edges: int) -> Graph:
    """``graph`` with weight-0 ``(0, 0)`` edges appended up to ``n_edges`` (for sharding and for
    stacking graphs of different sizes into one vmapped call)."""
    check_instance(graph, "graph", Graph)
    check_int(n_edges, "n_edges", minimum=graph.n_edges)
    extra = n_edges - graph.n_edges
    z = jnp.zeros((extra,), jnp.int32)
    return Graph(
        jnp.concatenate([graph.src, z]),
        jnp.concatenate([graph.dst, z]),
        jnp.concatenate([graph.weight, jnp.zeros((extra,), jnp.float32)]),
        graph.n_nodes,
    )


def reverse_edge_index(edge_index: Any) -> np.ndarray:
    """For a directed ``edge_index [2, E]`` holding both directions of every edge, ``rev [E]``
    with ``edge_index[:, rev[e]] == edge_index[::-1, e]`` (the official ``edge_rv``). Raises
    ``ValueError`` if an edge lacks its reverse or appears twice."""
    ei = np.asarray(check_array(edge_index, "edge_index", ndim=2, kind="int"))
    if ei.shape[0] != 2:
        raise ValueError(f"`edge_index` must have shape [2, E], got {ei.shape}.")
    n = int(ei.max()) + 1 if ei.size else 1
    key = ei[0].astype(np.int64) * n + ei[1]
    if len(np.unique(key)) != len(key):
        raise ValueError("`edge_index` has a directed edge more than once.")
    order = np.argsort(key)
    rkey = ei[1].astype(np.int64) * n + ei[0]
    pos = np.searchsorted(key, rkey, sorter=order)
    pos = np.minimum(pos, len(key) - 1)
    rev = order[pos]
    if len(key) and not np.array_equal(key[rev], rkey):
        missing = int(np.sum(key[rev] != rkey))
        raise ValueError(
            f"`edge_index` is not symmetric: {missing} directed edge(s) lack their reverse."
        )
    return rev


def from_directed(edge_index: Any, n_nodes: int, weight: Any = None) -> Graph:
    """A :class:`Graph` from a symmetric directed ``edge_index [2, E]`` (both directions of every
    edge, as PyG stores it); asymmetric input raises ``ValueError``. ``weight [E]`` must agree on
    the two directions."""
    rev = reverse_edge_index(edge_index)
    ei = np.asarray(edge_index)
    keep = ei[0] < ei[1]
    if np.any(ei[0] == ei[1]):
        raise ValueError(f"`edge_index` has {int(np.sum(ei[0] == ei[1]))} self-loop(s).")
    w = None
    if weight is not None:
        w = np.asarray(check_array(weight, "weight", shape=(ei.shape[1],), kind="float"))
        if not np.allclose(w, w[rev]):
            raise ValueError("`weight` differs between the two directions of an edge.")
        w = w[keep]
    return make_graph(ei[:, keep].T, n_nodes, w)


def _check_graph(graph: Any) -> Graph:
    check_instance(graph, "graph", Graph)
    return graph


# ----------------------------------------------------------------------------- potentials etc.


def neutral_r(n_classes: int, potential: str = "normalized") -> float:
    """The ``r`` at which psi is constant (BP returns the prior): 1/C or 1/2."""
    check_int(n_classes, "n_classes", minimum=2)
    check_choice(potential, "potential", POTENTIALS)
    return 1.0 / n_classes if potential == "normalized" else 0.5


def log_potential(
    r: Any, n_classes: int, potential: str = "normalized", clip: float = 1e-3
) -> jax.Array:
    """``log psi [..., C, C]`` for homophily ratio(s) ``r [...]`` in ``[0, 1]`` (traceable)."""
    check_int(n_classes, "n_classes", minimum=2)
    check_choice(potential, "potential", POTENTIALS)
    check_in_range(clip, "clip", 0.0, 0.5, low_open=True, high_open=True)
    r = check_array(r, "r", kind="float")
    check_in_range(r, "r", 0.0, 1.0)
    r = jnp.clip(r, clip, 1 - clip)[..., None, None]
    off = (1 - r) / (n_classes - 1) if potential == "normalized" else 1 - r
    eye = jnp.eye(n_classes, dtype=bool)
    return jnp.log(jnp.where(eye, r, off))


def log_prior(features: Any, class_emb: Any, tau: Any) -> jax.Array:
    """``log_softmax(features @ class_emb.T / tau) [..., n, K]`` (never ``log(softmax)``: at
    tau = 0.025 the softmax underflows). ``class_emb`` rows must be unit-norm and as wide as the
    features; ``tau > 0`` (a scalar or ``[...]`` for a vmapped sweep)."""
    f = check_array(features, "features", ndim=2, kind="float")
    q = check_array(class_emb, "class_emb", ndim=2, kind="float")
    if q.shape[1] != f.shape[1]:
        raise ValueError(
            f"`class_emb` must have width {f.shape[1]} (the features'), got {q.shape[1]}."
        )
    norms = np.linalg.norm(np.asarray(q), axis=1) if not isinstance(q, jax.core.Tracer) else None
    if norms is not None and not np.allclose(norms, 1.0, atol=1e-3):
        raise ValueError(f"`class_emb` rows must be unit-norm, got norms {np.round(norms, 4)}.")
    tau = check_array(tau, "tau", kind="float")
    check_in_range(tau, "tau", 0.0, low_open=True)
    return _log_prior(f, q, tau)


@jax.jit
def _log_prior(f, q, tau):
    return jax.nn.log_softmax((f @ q.T) / tau[..., None, None], axis=-1)


# --------------------------------------------------------------------------------- loopy BP


@dataclasses.dataclass(frozen=True)
class BPConfig:
    """Loopy BP settings (hashable; static under ``jit``).

    Attributes:
        iterations: synchronous iterations L (official 5).
        potential: ``"normalized"`` or ``"code"`` (module docstring), for a scalar ``r``.
        message: ``"closed"`` (O(C), two-valued psi) or ``"dense"`` (O(C^2) log-sum-exp).
        damping: in ``[0, 1)``; 0 (official) = none.
        clip: ``r`` is clipped to ``[clip, 1 - clip]``.
    """

    iterations: int = 5
    potential: str = "normalized"
    message: str = "closed"
    damping: float = 0.0
    clip: float = 1e-3

    def __post_init__(self):
        check_int(self.iterations, "iterations", minimum=1)
        check_choice(self.potential, "potential", POTENTIALS)
        check_choice(self.message, "message", MESSAGES)
        check_in_range(self.damping, "damping", 0.0, 1.0, high_open=True)
        check_in_range(self.clip, "clip", 0.0, 0.5, low_open=True, high_open=True)


@struct.dataclass
class BPState:
    """Loopy BP state.

    Attributes:
        log_prior: ``[n, C]`` normalised log priors ``log phi``.
        log_belief: ``[n, C]`` normalised log beliefs (the prior before the first step).
        msg_fwd: ``[E, C]`` log messages ``src -> dst`` (normalised; 0 = the initial ones).
        msg_bwd: ``[E, C]`` log messages ``dst -> src``.
        log_h: ``[C, C]`` log potential.
        t: ``int32 []`` iterations done.
    """

    log_prior: jax.Array
    log_belief: jax.Array
    msg_fwd: jax.Array
    msg_bwd: jax.Array
    log_h: jax.Array
    t: jax.Array


def _into_nodes(to_dst, to_src, graph: Graph):
    """Per-edge values arriving at ``dst`` (``to_dst``) and at ``src`` (``to_src``), summed per
    node: ``[n, ...]``."""
    n = graph.n_nodes
    return jax.ops.segment_sum(to_dst, graph.dst, n) + jax.ops.segment_sum(to_src, graph.src, n)


def _normalize(x):
    return x - jax.nn.logsumexp(x, axis=-1, keepdims=True)


def _messages(cavity, w, log_h, closed: bool):
    """Normalised log messages ``[E, C]`` from cavities ``[E, C]`` and weights ``[E]``."""
    if closed:
        kappa = jnp.expm1(w * (log_h[0, 0] - log_h[0, 1]))[:, None]
        raw = jnp.log1p(kappa * jax.nn.softmax(cavity, axis=-1))
    else:
        raw = jax.nn.logsumexp(cavity[:, :, None] + w[:, None, None] * log_h[None], axis=1)
    return _normalize(raw)


def _bp_step(state: BPState, graph: Graph, config: BPConfig, axis: str | None):
    closed = config.message == "closed"
    lb, w = state.log_belief, graph.weight
    fwd = _messages(lb[graph.src] - state.msg_bwd, w, state.log_h, closed)
    bwd = _messages(lb[graph.dst] - state.msg_fwd, w, state.log_h, closed)
    if config.damping > 0:
        d = jnp.where(state.t > 0, config.damping, 0.0)
        fwd = _normalize((1 - d) * fwd + d * state.msg_fwd)
        bwd = _normalize((1 - d) * bwd + d * state.msg_bwd)
    incoming = _into_nodes(fwd, bwd, graph)
    if axis is not None:
        incoming = jax.lax.psum(incoming, axis)
    log_belief = _normalize(state.log_prior + incoming)
    new = state.replace(log_belief=log_belief, msg_fwd=fwd, msg_bwd=bwd, t=state.t + 1)
    change = jnp.max(jnp.abs(log_belief - lb))
    if axis is not None:  # identical on every device already; keeps the replication explicit
        change = jax.lax.pmax(change, axis)
    return new, change


def _state_specs(axis: str) -> BPState:
    return BPState(P(), P(), P(axis), P(axis), P(), P())


def _graph_specs(axis: str, n_nodes: int) -> Graph:
    return Graph(P(axis), P(axis), P(axis), n_nodes)


def _make_step_fn(config: BPConfig, mesh: Mesh | None, n_nodes: int):
    if mesh is None:

        def step(state, graph):
            new, change = _bp_step(state, graph, config, None)
            return new, change

        return step
    axis = mesh.axis_names[0]
    return jax.shard_map(
        functools.partial(_bp_step, config=config, axis=axis),
        mesh=mesh,
        in_specs=(_state_specs(axis), _graph_specs(axis, n_nodes)),
        out_specs=(_state_specs(axis), P()),
    )


def _init_state(graph: Graph, log_prior: jax.Array, log_h: jax.Array) -> BPState:
    lp = _normalize(log_prior)
    zeros = jnp.zeros((graph.src.shape[-1], lp.shape[-1]), lp.dtype)
    return BPState(lp, lp, zeros, zeros, log_h.astype(lp.dtype), jnp.zeros((), jnp.int32))


def _run(graph, log_prior, log_h, config: BPConfig):
    """Unsharded loopy BP, ``config.iterations`` steps: ``-> log beliefs [n, C]`` (vmappable)."""
    step = _make_step_fn(config, None, graph.n_nodes)
    state = _init_state(graph, log_prior, log_h)
    state, _ = jax.lax.scan(lambda s, _: step(s, graph), state, None, length=config.iterations)
    return state.log_belief


def _coupling(coupling: Any, n_classes: int, config: BPConfig, name: str = "coupling"):
    """``log psi [C, C]`` from a scalar ``r`` or a positive ``[C, C]`` matrix."""
    c = check_array(coupling, name, kind="float")
    if c.ndim == 0:
        return log_potential(c, n_classes, config.potential, config.clip)
    check_array(c, name, shape=(n_classes, n_classes), dims="[C, C]", kind="float")
    if not isinstance(c, jax.core.Tracer):
        a = np.asarray(c)
        if np.any(a <= 0):
            raise ValueError(f"`{name}` must be positive everywhere, got min {a.min()}.")
        if config.message == "closed":
            off = a[~np.eye(n_classes, dtype=bool)]
            if not (np.allclose(np.diag(a), a[0, 0]) and np.allclose(off, off[0])):
                raise ValueError(
                    f"`{name}` is not two-valued (constant diagonal and off-diagonal): "
                    "use BPConfig(message='dense')."
                )
    return jnp.log(c)


def _check_prior(log_prior: Any, graph: Graph) -> jax.Array:
    lp = check_array(log_prior, "log_prior", ndim=2, kind="float")
    if lp.shape[0] != graph.n_nodes:
        raise ValueError(
            f"`log_prior` must have {graph.n_nodes} rows (the graph's nodes), got {lp.shape[0]}."
        )
    if lp.shape[1] < 2:
        raise ValueError(f"`log_prior` must have at least 2 classes, got {lp.shape[1]}.")
    return lp


def belief_propagation(
    graph: Graph, log_prior: Any, coupling: Any, config: BPConfig = BPConfig()
) -> jax.Array:
    """Log beliefs ``[n, C]`` after ``config.iterations`` of loopy BP (argmax = prediction).

    ``coupling`` is a homophily ratio ``r`` in ``[0, 1]`` (psi by ``config.potential``) or a
    positive ``[C, C]`` potential matrix. For sweeps, ``jax.vmap`` the jitted core
    :func:`run_bp` over ``(graph, log_prior, log_h)``.
    """
    graph = _check_graph(graph)
    check_instance(config, "config", BPConfig)
    lp = _check_prior(log_prior, graph)
    log_h = _coupling(coupling, lp.shape[1], config)
    return run_bp(graph, lp, log_h, config)


@functools.partial(jax.jit, static_argnames="config")
def run_bp(graph: Graph, log_prior: jax.Array, log_h: jax.Array, config: BPConfig) -> jax.Array:
    """The jitted, unchecked core of :func:`belief_propagation` with ``log psi`` given; vmap it
    over stacked graphs (equal ``E``, see :func:`pad_graph`), priors and potentials."""
    return _run(graph, log_prior, log_h, config)


class BP(NamedTuple):
    """Loopy BP on one graph (from :func:`make_bp`); BP draws no random numbers, so ``init``
    takes no key.

    - ``init(log_prior [n, C], coupling) -> BPState`` (``coupling``: ``r`` or a ``[C, C]`` psi);
    - ``step(state, x=None) -> (state, {"change", "finite"})``: one synchronous iteration
      (``change`` = max |log-belief change|);
    - ``run(state) -> (state, metrics [L])``: ``config.iterations`` steps as one ``lax.scan``.
    """

    init: Any
    step: Any
    run: Any
    graph: Graph
    config: BPConfig


def make_bp(config: BPConfig, graph: Graph, mesh: Mesh | None = None) -> BP:
    """Loopy BP on ``graph``; ``mesh`` (one axis) shards the edges (``E`` is padded with
    weight-0 edges to a multiple of the mesh size)."""
    check_instance(config, "config", BPConfig)
    graph = _check_graph(graph)
    if mesh is not None:
        check_instance(mesh, "mesh", Mesh)
        if len(mesh.axis_names) != 1:
            raise ValueError(f"`mesh` must have one axis, got {mesh.axis_names}.")
        size = mesh.devices.size
        graph = pad_graph(graph, -(-graph.n_edges // size) * size)
        axis = mesh.axis_names[0]
        graph = jax.device_put(graph, Graph(*(NamedSharding(mesh, P(axis)),) * 3, graph.n_nodes))
    raw_step = _make_step_fn(config, mesh, graph.n_nodes)

    @jax.jit
    def _step(state):
        new, change = raw_step(state, graph)
        return new, {"change": change, "finite": all_finite(new.log_belief)}

    @jax.jit
    def _run_all(state):
        return jax.lax.scan(lambda s, _: _step(s), state, None, length=config.iterations)

    def init(log_prior: Any, coupling: Any) -> BPState:
        lp = _check_prior(log_prior, graph)
        log_h = _coupling(coupling, lp.shape[1], config)
        state = _init_state(graph, lp, log_h)
        if mesh is not None:
            specs = _state_specs(mesh.axis_names[0])
            state = jax.device_put(
                state, jax.tree_util.tree_map(lambda s: NamedSharding(mesh, s), specs)
            )
        return state

    def _check_state(state):
        check_instance(state, "state", BPState)
        if state.msg_fwd.shape[0] != graph.n_edges or state.log_belief.shape[0] != graph.n_nodes:
            raise ValueError(
                f"`state` does not belong to this graph: messages {state.msg_fwd.shape}, "
                f"beliefs {state.log_belief.shape}; expected {graph.n_edges} edges and "
                f"{graph.n_nodes} nodes."
            )

    def step(state: BPState, x: Any = None):
        _check_state(state)
        if x is not None:
            raise ValueError(f"`x` must be None (BP takes no per-step input), got {type(x)}.")
        return _step(state)

    def run(state: BPState):
        _check_state(state)
        return _run_all(state)

    return BP(init, step, run, graph, config)


# ------------------------------------------------------------ approximation and baselines


def neighbour_sum(x: jax.Array, graph: Graph) -> jax.Array:
    """``sum_j w_ij x_j [n, ...]`` over both directions of every edge."""
    w = graph.weight.reshape((-1,) + (1,) * (x.ndim - 1)).astype(x.dtype)
    return _into_nodes(w * x[graph.src], w * x[graph.dst], graph)


def degree(graph: Graph) -> jax.Array:
    """Weighted degree ``[n]``."""
    return _into_nodes(graph.weight, graph.weight, graph)


def neighbour_mean(x: Any, graph: Graph) -> jax.Array:
    """Weighted neighbour mean ``[n, d]`` (0 for isolated nodes), PyG's ``aggr="mean"``."""
    graph = _check_graph(graph)
    x = check_array(x, "x", ndim=2, kind="float")
    return _neighbour_mean(x, graph)


@jax.jit
def _neighbour_mean(x, graph):
    deg = degree(graph)[:, None]
    return neighbour_sum(x, graph) / jnp.where(deg > 0, deg, 1.0)


def _unit(x):
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def na_features(features: Any, graph: Graph, weight: float = 1.0) -> jax.Array:
    """NA: ``normalize(h_i + weight * mean_j h_j)`` (official ``AGG``; ``weight=0`` is Raw)."""
    graph = _check_graph(graph)
    f = check_array(features, "features", ndim=2, kind="float")
    return _na(f, graph, jnp.float32(weight))


@jax.jit
def _na(f, graph, weight):
    return _unit(f + weight * _neighbour_mean(f, graph))


def two_hop_features(features: Any, graph: Graph) -> jax.Array:
    """``normalize(A~^2 h)``, ``A~ = D^-1/2 (A + I) D^-1/2`` (SGC, K = 2, no training)."""
    graph = _check_graph(graph)
    f = check_array(features, "features", ndim=2, kind="float")
    return _two_hop(f, graph)


@jax.jit
def _two_hop(f, graph):
    s = jax.lax.rsqrt(degree(graph) + 1.0)[:, None]

    def prop(x):
        return s * (neighbour_sum(s * x, graph) + s * x)

    return _unit(prop(prop(f)))


def appr_kappa(r_hat: Any, n_classes: int, potential: str = "normalized") -> jax.Array:
    """The official BP (appr.) coefficient: ``0.5 * sign(r_hat - neutral)`` (0 at neutral)."""
    return 0.5 * jnp.sign(jnp.asarray(r_hat, jnp.float32) - neutral_r(n_classes, potential))


def bp_appr_scores(prob: Any, graph: Graph, kappa: Any, aggregation: str = "sum") -> jax.Array:
    """BP (appr.): ``p + kappa * sum_j p_j`` (``"sum"``, zero-shot) or ``* mean_j p_j``
    (``"mean"``, the few-shot script's operator); ``prob [n, C]`` = ``softmax(h q^T / 0.01)``."""
    graph = _check_graph(graph)
    p = check_array(prob, "prob", ndim=2, kind="float")
    check_choice(aggregation, "aggregation", AGGREGATIONS)
    return _appr(p, graph, jnp.asarray(kappa, jnp.float32), aggregation == "mean")


@functools.partial(jax.jit, static_argnums=3)
def _appr(p, graph, kappa, mean):
    agg = _neighbour_mean(p, graph) if mean else neighbour_sum(p, graph)
    return p + kappa[..., None, None] * agg

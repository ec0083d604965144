"""The federated round shared by FedGWC and its baselines: client sampling, local SGD on each
sampled client (``vmap`` over client slots of a ``lax.scan`` over local steps) recording the
per-step minibatch losses, and FedAvg (spec sections 2.2 and 7).

Static shapes throughout: the ``K`` clients' data are padded to a common ``n_max`` with per-client
counts, a round's ``S`` client slots carry a mask (a cluster smaller than ``m`` fills fewer), and
client sampling is Gumbel-top-k over masked scores (uniform without replacement among members).

Local training follows the official client: ``T`` steps of SGD (weight decay added to the gradient,
optional momentum) on minibatches of ``batch_size``. ``LocalConfig.batching`` picks how they are
drawn: ``"draw"`` (one fresh draw without replacement per step) or ``"epoch"`` (the official
loader: ``shuffle=True, drop_last=True``, a fresh iterator every local training, so the ``T``
steps walk consecutive batches of one shuffle of the client's rows and reshuffle when an epoch of
``floor(n_k / b)`` batches runs out). With ``n_k < 2 b``, as in the spec's 100 samples and batch
64, an epoch is one batch and the two have the same law; with the official 500 samples, ``T = 7``
is exactly one epoch of 7 disjoint batches. "Noise" clients add fresh Gaussian pixel noise of
their own SD to every minibatch they read, as the official loader does on every access.

The model is any ``apply_fn(params, x [B, d]) -> logits [B, classes]``; the spec's digits
classifier is ``jaxlab.core.nn.MLP((64, 10))`` (``64 -> 64 -> 10``, ReLU).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from jax.sharding import Mesh

from jaxlab.core import sharding
from jaxlab.core.checks import (
    check_abstract_call,
    check_array,
    check_choice,
    check_int,
    check_key,
    check_rank,
    check_scalar,
    check_shape,
    is_concrete,
)

__all__ = [
    "ClientData",
    "LocalConfig",
    "epoch_batch",
    "fedavg",
    "federated_round",
    "local_batches",
    "local_step",
    "local_train",
    "sample_clients",
    "train_clients",
]


@dataclasses.dataclass(frozen=True)
class LocalConfig:
    """Local training of one client (official: 7 steps, batch 64, lr 0.01, weight decay 4e-4,
    momentum 0).

    Attributes:
      steps: ``T``, SGD steps per local training (>= 1).
      batch_size: minibatch rows per step, drawn without replacement (>= 1; every client needs at
        least this many samples, see :meth:`ClientData.check`).
      lr: SGD step size (> 0).
      weight_decay: L2 coefficient added to the gradient, PyTorch-style (>= 0).
      momentum: SGD momentum in ``[0, 1)`` (0: plain SGD).
      batching: ``"draw"`` (a fresh without-replacement draw per step) or ``"epoch"`` (the
        official loader's shuffled epochs without the last incomplete batch; module docstring).
    """

    steps: int = 7
    batch_size: int = 64
    lr: float = 0.01
    weight_decay: float = 4e-4
    momentum: float = 0.0
    batching: str = "draw"

    def __post_init__(self):
        check_choice(self.batching, "batching", ("draw", "epoch"))
        check_int(self.steps, "steps", minimum=1)
        check_int(self.batch_size, "batch_size", minimum=1)
        check_scalar(self.lr, "lr", 0.0, low_open=True)
        check_scalar(self.weight_decay, "weight_decay", 0.0)
        check_scalar(self.momentum, "momentum", 0.0, 1.0, high_open=True)

    def optimizer(self) -> optax.GradientTransformation:
        """PyTorch-style SGD: ``g + wd theta``, then momentum (if any), then ``-lr``."""
        return optax.chain(
            optax.add_decayed_weights(self.weight_decay),
            optax.sgd(self.lr, momentum=self.momentum or None),
        )


@struct.dataclass
class ClientData:
    """Every client's training data, padded to a common ``n_max`` rows.

    Attributes:
      x: ``[K, n_max, d]`` float inputs.
      y: ``[K, n_max]`` int labels.
      count: ``[K]`` int, real samples of each client (its first ``count_k`` rows).
      noise: ``[K]`` float, the SD of the fresh Gaussian input noise the client adds to every
        minibatch it reads (0: a clean client).
    """

    x: jax.Array
    y: jax.Array
    count: jax.Array
    noise: jax.Array

    def take(self, idx: jax.Array) -> ClientData:
        """The clients ``idx [S]`` (rows of every field), e.g. a round's sampled slots."""
        return jax.tree_util.tree_map(lambda a: a[idx], self)

    def check(self, batch_size: int = 1, name: str = "data") -> ClientData:
        """Raise on bad fields, a client with no data or fewer samples than a minibatch; return
        ``self``.

        Static (also under ``jit``): dtypes (``x`` / ``noise`` real, ``y`` / ``count`` int) and
        shapes (``x [K, n_max, d]``, ``y [K, n_max]``, ``count [K]``, ``noise [K]``). Where
        concrete: ``batch_size <= count <= n_max``, finite ``x`` and labels ``>= 0`` on the real
        rows, finite ``noise >= 0``. ``name`` is the argument named in the messages.
        """
        names = {f: f"{name}.{f}" for f in ("x", "y", "count", "noise")}
        for field, label in names.items():
            if not hasattr(getattr(self, field), "shape"):
                raise TypeError(f"`{label}` must be an array (jax or numpy), got "
                                f"{type(getattr(self, field)).__name__}.")  # fmt: skip
        _check_fields(self.x, self.y, self.count, self.noise, batch_size, names, batched=True)
        return self


def _check_fields(x, y, count, noise, batch_size: int, names: dict, *, batched: bool) -> None:
    """The checks of :meth:`ClientData.check` on ``K`` clients (``batched``: ``x [K, n_max, d]``,
    ``y [K, n_max]``, ``count [K]``, ``noise [K]``) or on one (``x [n_max, d]``, ``y [n_max]``,
    scalar ``count`` and ``noise``); ``names`` maps each field to the argument it names."""
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    for field, value, kind in (("x", x, "real"), ("y", y, "int"), ("count", count, "int"),
                               ("noise", noise, "real")):  # fmt: skip
        check_array(value, names[field], kind=kind, finite=False)
    b = 1 if batched else 0
    check_rank(x, names["x"], 2 + b)
    shape = tuple(np.shape(x))
    if min(shape) < 1:
        layout = "[K, n_max, d]" if batched else "[n_max, d]"
        raise ValueError(f"`{names['x']}` must be {layout} with every size >= 1, got shape "
                         f"{shape}.")  # fmt: skip
    lead, n_max = shape[:b], shape[b]
    check_shape(y, names["y"], (*lead, n_max), f"[{'K, ' * b}n_max] like `{names['x']}`")
    check_shape(count, names["count"], lead, "[K]" if batched else "a scalar")
    check_shape(noise, names["noise"], lead, "[K]" if batched else "a scalar")
    if not is_concrete(count):
        return  # traced: only the dtypes and shapes can be checked
    counts = np.asarray(jax.device_get(count)).reshape(-1)
    which = f"client(s) {list((counts < 1).nonzero()[0])} have" if batched else "it has"
    if (counts < 1).any():
        raise ValueError(f"`{names['count']}` must be >= 1: {which} no data.")
    if (counts < batch_size).any() or (counts > n_max).any():
        raise ValueError(
            f"`{names['count']}`: every client needs batch_size={batch_size} <= count <= "
            f"n_max={n_max} samples; got counts in [{counts.min()}, {counts.max()}]."
        )
    real = np.arange(n_max)[None, :] < counts[:, None]  # [K, n_max] real rows
    if is_concrete(x):
        xs = np.asarray(jax.device_get(x)).reshape(-1, n_max, shape[-1])
        bad = ~np.isfinite(xs).all(-1) & real
        if bad.any():
            raise ValueError(f"`{names['x']}` must be finite on the real rows (the first `count`); "
                             f"{int(bad.sum())} row(s) have NaN/inf.")  # fmt: skip
    if is_concrete(y):
        ys = np.asarray(jax.device_get(y)).reshape(-1, n_max)[real]
        if ys.min() < 0:
            raise ValueError(f"`{names['y']}` must be class indices >= 0, got {ys.min()}.")
    if is_concrete(noise):
        sd = np.asarray(jax.device_get(noise))
        if not (np.isfinite(sd).all() and sd.min() >= 0):
            bad = sd[~np.isfinite(sd) | (sd < 0)].ravel()[:4]
            raise ValueError(f"`{names['noise']}` must be finite and >= 0 (an SD); got "
                             f"{bad.tolist()}.")  # fmt: skip


def _check_local(config, name: str = "config") -> None:
    if not isinstance(config, LocalConfig):
        raise TypeError(f"`{name}` must be a LocalConfig, got {type(config).__name__}.")


def _one_client(x, y, count, noise, config, *, batched=False) -> tuple:
    """Boundary checks of the one-client (``batched``: ``S``-client) local-training functions;
    returns the four arrays (array-likes such as lists converted, arrays unchanged)."""
    _check_local(config)
    names = {f: f for f in ("x", "y", "count", "noise")}
    x, y, count, noise = (_as_array(v) for v in (x, y, count, noise))
    _check_fields(x, y, count, noise, config.batch_size, names, batched=batched)
    return x, y, count, noise


def _as_array(v):
    """``v`` unchanged if it is an array or a number, else ``jnp.asarray(v)`` (a list); what
    cannot be converted is left for the dtype check to name."""
    if isinstance(v, np.ndarray | jax.Array | int | float | np.number):
        return v
    try:
        return jnp.asarray(v)
    except (TypeError, ValueError):
        return v


def _check_count(x, name: str, low: int, high: int | None) -> None:
    """An int scalar / array (``step``, ``count``, row indices) in ``[low, high]`` where concrete;
    under ``jit`` only its int dtype is checked."""
    if isinstance(x, bool | np.bool_):
        raise TypeError(f"`{name}` must be an int, got the bool {x!r}.")
    check_array(x, name, kind="int", finite=False)
    if is_concrete(x):
        a = np.asarray(jax.device_get(x))
        if a.size and (a.min() < low or (high is not None and a.max() > high)):
            hi = "inf)" if high is None else f"{high}]"
            raise ValueError(f"`{name}` must lie in [{low}, {hi}; got values in [{a.min()}, "
                             f"{a.max()}].")  # fmt: skip


def _check_params(params, name: str = "params") -> None:
    """A non-empty pytree of real arrays (finite where concrete)."""
    leaves = jax.tree_util.tree_leaves(params)
    if not leaves:
        raise ValueError(f"`{name}` must be a non-empty pytree of arrays, got {params!r:.60}.")
    for leaf in leaves:
        check_array(leaf, name)


def _check_stacked(params, name: str, size: int, what: str) -> None:
    """:func:`_check_params`, with every leaf stacked on a leading axis of ``size``."""
    _check_params(params, name)
    for leaf in jax.tree_util.tree_leaves(params):
        shape = np.shape(leaf)
        if not shape or shape[0] != size:
            raise ValueError(f"every leaf of `{name}` must have a leading axis of {size} (one per "
                             f"{what}), got a leaf of shape {shape}.")  # fmt: skip


def _check_model_fit(
    apply_fn,
    params,
    data: ClientData,
    name: str = "params",
    finite: bool = True,
    y_name: str = "data.y",
) -> None:
    """``params`` are finite real arrays that ``apply_fn`` accepts on one row of the clients'
    inputs, giving ``[1, classes]`` logits with every label of ``data`` below ``classes`` (an
    abstract evaluation: nothing is compiled)."""
    if finite:
        _check_params(params, name)
    row = jax.ShapeDtypeStruct((1,) + data.x.shape[2:], data.x.dtype)
    what = f"`{name}` do not fit the model on the clients' inputs of shape {row.shape[1:]}"
    out = check_abstract_call(apply_fn, (params, row), what)
    if not hasattr(out, "shape") or len(out.shape) != 2 or out.shape[0] != 1:
        raise ValueError(f"`apply_fn(params, x [B, d])` must return logits [B, classes], got "
                         f"{getattr(out, 'shape', out)!r:.80} for B = 1.")  # fmt: skip
    classes = int(out.shape[1])
    if not is_concrete((data.y, data.count)):
        return
    y, count = np.asarray(jax.device_get(data.y)), np.asarray(jax.device_get(data.count))
    real = np.arange(y.shape[1])[None, :] < count[:, None]
    if y[real].max() >= classes:
        raise ValueError(f"`{y_name}` has the label {y[real].max()}, but the model gives only "
                         f"{classes} classes (labels must lie in [0, {classes})).")  # fmt: skip


def _fit_eager(apply_fn, params, x, y, count, *, stacked=False, batched=False, y_name="y"):
    """:func:`_check_model_fit` for an eager call (concrete arguments only): ``params`` (one model,
    or ``stacked`` models) on the inputs ``x`` of one client (``batched``: of ``S`` clients)."""
    if not callable(apply_fn):
        raise TypeError(f"`apply_fn` must be a callable, got {type(apply_fn).__name__}.")
    if not is_concrete((params, x, y, count)):
        return
    if stacked:
        params = jax.tree_util.tree_map(
            lambda a: jax.ShapeDtypeStruct(np.shape(a)[1:], a.dtype), params
        )
    lead = (lambda a: np.asarray(a)) if batched else (lambda a: np.asarray(a)[None])
    view = ClientData(lead(x), lead(y), lead(count), np.zeros(1))
    _check_model_fit(apply_fn, params, view, "params", finite=False, y_name=y_name)


def sample_clients(key: jax.Array, members: jax.Array, m: int) -> tuple[jax.Array, jax.Array]:
    """``m`` slots drawn uniformly without replacement among ``members [K]`` (bool).

    Returns ``(idx [m], mask [m])``; with fewer than ``m`` members the extra slots are masked
    (their indices point at non-members and must not be used).
    """
    key = check_key(key)
    members = _as_array(members)
    check_array(members, "members", ndim=1, kind="bool")
    k = int(np.shape(members)[0])
    check_int(m, "m", minimum=1, maximum=k)
    scores = jnp.where(members, jax.random.gumbel(key, members.shape), -jnp.inf)
    top, idx = jax.lax.top_k(scores, m)
    return idx, jnp.isfinite(top)


_EPOCH_STREAM = 0x45504F43  # fold_in tag of the epoch shuffles, apart from the step keys


def _row_scores(key, count, n_max):
    """Uniform scores for the first ``count`` of ``n_max`` rows, 2 (after all of them) for the
    padding: sorting them shuffles the real rows and puts the padding last."""
    return jnp.where(jnp.arange(n_max) < count, jax.random.uniform(key, (n_max,)), 2.0)


def _shuffled_rows(key, count, n_max):
    """The first ``count`` of ``n_max`` rows in a uniformly random order, then the padding."""
    return jnp.argsort(_row_scores(key, count, n_max))


def epoch_batch(key: jax.Array, count, n_max: int, batch_size: int, step) -> jax.Array:
    """Rows of local step ``step`` under the official loader (``shuffle=True, drop_last=True``,
    a new iterator per local training): epoch ``e = step // E`` with ``E = max(count // b, 1)``
    batches uses the shuffle ``fold_in(key, e)`` and this step takes its batch ``step % E``."""
    key = check_key(key)
    n_max = check_int(n_max, "n_max", minimum=1)
    batch_size = check_int(batch_size, "batch_size", minimum=1, maximum=n_max)
    _check_count(count, "count", batch_size, n_max)
    _check_count(step, "step", 0, None)
    check_rank(count, "count", 0)
    check_rank(step, "step", 0)
    per_epoch = jnp.maximum(count // batch_size, 1)
    order = _shuffled_rows(jax.random.fold_in(key, step // per_epoch), count, n_max)
    return jax.lax.dynamic_slice(order, ((step % per_epoch) * batch_size,), (batch_size,))


def _batch_rows(key, count, n_max: int, batch_size: int):
    """The rows of a ``"draw"`` minibatch: ``batch_size`` of the first ``count`` rows without
    replacement, the first ``batch_size`` of :func:`_shuffled_rows` (``top_k`` of the negated
    scores gives the same rows in the same order, ties to the lower index as the stable sort, at
    less than half the cost of sorting all ``n_max``)."""
    return jax.lax.top_k(-_row_scores(key, count, n_max), batch_size)[1]


def _noisy_batch(x, y, rows, noise, key):
    """Rows ``rows`` of ``x`` with fresh Gaussian noise of SD ``noise`` drawn from ``key``, and
    their labels."""
    return x[rows] + noise * jax.random.normal(key, (rows.shape[0], x.shape[-1])), y[rows]


def _sgd_step(apply_fn, params, opt_state, xb, yb, config: LocalConfig):
    """One SGD step on the minibatch ``(xb, yb)``; returns ``(params, opt_state, loss)``."""

    def loss_fn(p):
        logits = apply_fn(p, xb)
        return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = config.optimizer().update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def local_step(
    apply_fn: Callable,
    params,
    opt_state,
    x,
    y,
    count,
    noise,
    key,
    config: LocalConfig,
    rows: jax.Array | None = None,
) -> tuple[object, object, jax.Array]:
    """One local SGD step on one client: a minibatch of ``config.batch_size`` rows among the
    first ``count`` rows of ``x [n_max, d]`` / ``y [n_max]`` (``rows`` if given, else drawn without
    replacement from ``key``), fresh input noise of SD ``noise``; returns ``(params, opt_state,
    minibatch loss)``."""
    key = check_key(key)
    _check_params(params)
    x, y, count, noise = _one_client(x, y, count, noise, config)
    _fit_eager(apply_fn, params, x, y, count)
    want = jax.eval_shape(config.optimizer().init, params)
    want_leaves, want_tree = jax.tree_util.tree_flatten(want)
    got_leaves, got_tree = jax.tree_util.tree_flatten(opt_state)
    if want_tree != got_tree or [tuple(a.shape) for a in want_leaves] != [
        tuple(np.shape(a)) for a in got_leaves
    ]:
        raise ValueError("`opt_state` must be `config.optimizer().init(params)` (the optimizer "
                         "state of these parameters and this config).")  # fmt: skip
    if rows is not None:
        rows = _as_array(rows)
        check_array(rows, "rows", shape=(config.batch_size,), dims="[batch_size]", kind="int")
        _check_count(rows, "rows", 0, np.shape(y)[0] - 1)
    k_batch, k_noise = jax.random.split(key)
    if rows is None:
        rows = _batch_rows(k_batch, count, y.shape[0], config.batch_size)
    xb, yb = _noisy_batch(x, y, rows, noise, k_noise)
    return _sgd_step(apply_fn, params, opt_state, xb, yb, config)


def _batch_plan(key, count, n_max: int, config: LocalConfig) -> tuple[jax.Array, jax.Array]:
    """One local training's minibatch rows ``[T, b]`` and noise keys ``[T]``: step ``t`` uses the
    key ``split(key, T)[t]``, split once more into a row key and a noise key as in
    :func:`local_step`; with ``"epoch"`` batching the rows come from :func:`epoch_batch` with the
    shuffle key ``fold_in(key, _EPOCH_STREAM)`` (the step keys then only draw the noise)."""
    b = config.batch_size
    step_keys = jax.vmap(jax.random.split)(jax.random.split(key, config.steps))
    k_batch, k_noise = step_keys[:, 0], step_keys[:, 1]
    if config.batching == "epoch":
        epoch_key = jax.random.fold_in(key, _EPOCH_STREAM)
        steps = jnp.arange(config.steps)
        rows = jax.vmap(lambda t: epoch_batch(epoch_key, count, n_max, b, t))(steps)
    else:
        rows = jax.vmap(lambda k: _batch_rows(k, count, n_max, b))(k_batch)
    return rows, k_noise


def local_batches(x, y, count, noise, key, config: LocalConfig) -> tuple[jax.Array, jax.Array]:
    """Every minibatch of one client's local training, drawn before it runs:
    ``(xb [T, b, d], yb [T, b])``, the rows and fresh noise :func:`local_step` would draw at each
    step from the keys ``split(key, T)`` (every row read gets its own noise, as in the official
    loader)."""
    key = check_key(key)
    x, y, count, noise = _one_client(x, y, count, noise, config)
    rows, k_noise = _batch_plan(key, count, y.shape[0], config)
    return jax.vmap(_noisy_batch, in_axes=(None, None, 0, None, 0))(x, y, rows, noise, k_noise)


def train_clients(
    apply_fn: Callable, params, x, y, count, noise, keys, config: LocalConfig, *, shared=True
) -> tuple[object, jax.Array]:
    """:func:`local_train` on ``S`` clients at once: ``x [S, n_max, d]``, ``y [S, n_max]``,
    ``count``, ``noise``, ``keys [S]``; ``params`` one model for all (``shared``) or stacked
    ``[S, ...]``. Returns ``(params [S, ...], losses [S, T])``, equal to ``vmap(local_train)``.

    Laid out for speed: every client's minibatches (rows, gather, noise) are drawn up front,
    step-major ``[T, S, b, d]``, so the scan over steps carries only the clients' forward,
    backward and update and reads its inputs without a transpose.
    """
    x, y, count, noise = _one_client(x, y, count, noise, config, batched=True)
    s = int(np.shape(x)[0])
    keys = check_key(keys, "keys", batched=True)
    if keys.shape != (s,):
        raise ValueError(f"`keys` must hold one key per client, shape ({s},), got {keys.shape}.")
    if not isinstance(shared, bool):
        raise TypeError(f"`shared` must be a bool, got {shared!r}.")
    if shared:
        _check_params(params)
    else:
        _check_stacked(params, "params", s, "client")
    _fit_eager(apply_fn, params, x, y, count, stacked=not shared, batched=True)
    n_max = y.shape[1]
    rows, k_noise = jax.vmap(_batch_plan, in_axes=(0, 0, None, None))(keys, count, n_max, config)
    rows, k_noise = jnp.swapaxes(rows, 0, 1), jnp.swapaxes(k_noise, 0, 1)  # [T, S, ...]
    per_client = jax.vmap(_noisy_batch, in_axes=(0, 0, 0, 0, 0))
    xb, yb = jax.vmap(per_client, in_axes=(None, None, 0, None, 0))(x, y, rows, noise, k_noise)
    opt = config.optimizer()
    if shared:
        opt_state = opt.init(params)
        params, opt_state = jax.tree_util.tree_map(
            lambda a: jnp.broadcast_to(a, (y.shape[0], *jnp.shape(a))), (params, opt_state)
        )
    else:
        opt_state = jax.vmap(opt.init)(params)
    sgd = jax.vmap(_sgd_step, in_axes=(None, 0, 0, 0, 0, None))

    def step(carry, batch):
        p, s, loss = sgd(apply_fn, *carry, *batch, config)
        return (p, s), loss

    (params, _), losses = jax.lax.scan(step, (params, opt_state), (xb, yb))
    return params, losses.T


def local_train(
    apply_fn: Callable, params, x, y, count, noise, key, config: LocalConfig
) -> tuple[object, jax.Array]:
    """``config.steps`` local SGD steps on one client; returns ``(params, losses [T])``.

    ``x [n_max, d]``, ``y [n_max]``, ``count`` real rows, ``noise`` SD of the fresh input noise.
    The minibatches (rows and noise) are drawn up front by :func:`local_batches`, so the scan over
    steps holds only the forward, backward and update; the result equals :func:`local_step`
    applied ``T`` times with the keys ``split(key, T)`` (and, for ``"epoch"`` batching, the rows
    of :func:`epoch_batch`). Many clients at once: :func:`train_clients`.
    """
    key = check_key(key)
    _check_params(params)
    x, y, count, noise = _one_client(x, y, count, noise, config)
    _fit_eager(apply_fn, params, x, y, count)
    xb, yb = local_batches(x, y, count, noise, key, config)

    def step(carry, batch):
        p, s, loss = _sgd_step(apply_fn, *carry, *batch, config)
        return (p, s), loss

    init = (params, config.optimizer().init(params))
    (params, _), losses = jax.lax.scan(step, init, (xb, yb))
    return params, losses


def fedavg(client_params, weights: jax.Array):
    """Weighted mean over the leading (client) axis: ``sum_k w_k theta_k / sum_k w_k``.

    ``weights [S]`` finite, ``>= 0`` and not all zero (checked where concrete)."""
    weights = _as_array(weights)
    check_array(weights, "weights", ndim=1, finite=False)
    _check_stacked(client_params, "client_params", int(np.shape(weights)[0]), "weights")
    if is_concrete(weights):
        w_host = np.asarray(jax.device_get(weights))
        if not (np.isfinite(w_host).all() and w_host.min() >= 0 and w_host.sum() > 0):
            raise ValueError(f"`weights` must be finite, >= 0 and not all 0; got {w_host}.")
    w = weights / jnp.sum(weights)

    def mean(leaf):
        return jnp.tensordot(w, leaf, axes=1)

    return jax.tree_util.tree_map(mean, client_params)


def federated_round(
    apply_fn: Callable,
    params,
    data: ClientData,
    idx: jax.Array,
    mask: jax.Array,
    key: jax.Array,
    config: LocalConfig,
    mesh: Mesh | None = None,
):
    """One round: local training on the slots ``idx [S]`` (real where ``mask``), then FedAvg
    weighted by the clients' sample counts over the real slots.

    Returns ``(new params, client params [S, ...], losses [S, T])``; the client-slot axis is
    sharded over ``mesh``'s ``"data"`` axis when given (``S`` a multiple of the device count).
    With no real slot the parameters are returned unchanged.
    """
    key = check_key(key)
    _check_local(config)
    _check_params(params)
    if not isinstance(data, ClientData):
        raise TypeError(f"`data` must be a ClientData, got {type(data).__name__}.")
    data.check(config.batch_size)
    k = int(np.shape(data.count)[0])
    idx, mask = _as_array(idx), _as_array(mask)
    check_array(idx, "idx", ndim=1, kind="int")
    check_array(mask, "mask", shape=np.shape(idx), dims="[S] like `idx`", kind="bool")
    _check_count(idx, "idx", 0, k - 1)
    _fit_eager(apply_fn, params, data.x, data.y, data.count, batched=True, y_name="data.y")
    sub = sharding.constrain_batch(data.take(idx), mesh)
    keys = sharding.constrain_batch(jax.random.split(key, idx.shape[0]), mesh)
    local, losses = train_clients(
        apply_fn, params, sub.x, sub.y, sub.count, sub.noise, keys, config
    )
    weights = jnp.where(mask, sub.count, 0).astype(losses.dtype)
    any_real = jnp.sum(weights) > 0
    new = fedavg(local, jnp.where(any_real, weights, 1.0))
    new = jax.tree_util.tree_map(lambda a, b: jnp.where(any_real, a, b), new, params)
    return new, local, losses

"""FedGWC's server-side signal: Gaussian rewards from local loss trajectories, the running
interaction matrix, and its convergence statistic (spec ``papers/fedgwc.md`` sections 2.3-2.4,
read from the official ``ServerFedGWC``).

Naming follows the spec, not the official code (which swaps the two): ``R`` is the running
interaction matrix, ``A`` (in :mod:`.clustering`) the affinity.

Per round, every sampled client ``k in S`` reports its ``T`` local minibatch losses ``l_k``. With
weights ``v_k = n_k / N_S``::

    mu_t = sum_k v_k l_kt,   s2_t = sum_k v_k (l_kt - mu_t)^2 + floor_t,
    r_k = (1/T) sum_t exp(-(l_kt - mu_t)^2 / (2 s2_t))                       in (0, 1],
    R[i, j] <- (1 - alpha) R[i, j] + alpha r_i / sum_{k in S} r_k   for i, j in S (diagonal too),

with ``alpha = m / K_c``. A client whose trajectory is typical of the cohort gets a reward near 1,
an atypical one a small reward. ``floor_t = 1e-12 (1 + mu_t^2)`` replaces the official absolute
``1e-16``: with identical losses in float32 the weighted mean is off by an ulp, so ``(l - mu)^2``
and the variance are both ~1e-14 and the official reward is a noisy ratio of rounding errors
(spec pitfall); the relative floor makes it ``~1`` as intended. The optional synthetic-loss pooling
(``loss_sampling_size``, off by default in the official config) is not implemented.

Convergence: ``sse = sum_{i, j in S} (Delta R[i, j])^2``, ``mse <- (1 - alpha) mse + alpha sse /
m^2``; the patience counter grows while ``mse < eps`` (else resets) and clustering is attempted when
it reaches ``round(K_c / m)``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxlab.core.checks import check_array, check_scalar, is_concrete
from jaxlab.federated.fedgwc._checks import arr, index, instance, nonneg

__all__ = ["ConvergenceState", "convergence_step", "gaussian_rewards", "update_interaction"]


def _unit(x, name: str, ndim: int | None = None) -> None:
    """Real, in ``[0, 1]`` where concrete (an EMA weight)."""
    if isinstance(x, bool | np.bool_):
        raise TypeError(f"`{name}` must be a real number, got the bool {x!r}.")
    check_array(x, name, ndim=ndim)
    if is_concrete(x):
        a = np.asarray(jax.device_get(x))
        if not np.all((a >= 0) & (a <= 1)):
            raise ValueError(f"`{name}` must lie in [0, 1]; got {a}.")


def gaussian_rewards(losses: jax.Array, weights: jax.Array, mask: jax.Array) -> jax.Array:
    """Gaussian rewards of the sampled clients (module docstring).

    Args:
      losses: ``[S, T]`` per-step local losses of the ``S`` client slots.
      weights: ``[S]`` sample counts ``n_k`` (normalised over the real slots here).
      mask: ``[S]`` real slots (padding slots get reward 0 and no weight).

    Returns:
      ``[S]`` rewards in ``(0, 1]`` on real slots, 0 on padding.
    """
    losses = arr(losses, "losses", ndim=2, dims="[S, T]")
    s = np.shape(losses)[0]
    weights = nonneg(arr(weights, "weights", shape=(s,), dims="[S] like `losses`"), "weights")
    mask = arr(mask, "mask", shape=(s,), dims="[S] like `losses`", kind="bool")
    if is_concrete((weights, mask)):
        if not np.any(np.asarray(mask)) or np.sum(np.where(mask, weights, 0)) <= 0:
            raise ValueError("`weights` on the real slots (`mask`) must have a positive sum; got "
                             f"{np.asarray(weights)} with mask {np.asarray(mask)}.")  # fmt: skip
    w = jnp.where(mask, weights, 0.0)
    v = w / jnp.sum(w)
    mu = jnp.sum(v[:, None] * losses, axis=0)  # [T]
    dev2 = (losses - mu[None, :]) ** 2
    var = jnp.sum(v[:, None] * dev2, axis=0) + 1e-12 * (1.0 + mu**2)
    r = jnp.mean(jnp.exp(-dev2 / (2.0 * var[None, :])), axis=1)
    return jnp.where(mask, r, 0.0)


def update_interaction(
    r_matrix: jax.Array, idx: jax.Array, mask: jax.Array, rewards: jax.Array, alpha
) -> tuple[jax.Array, jax.Array]:
    """One EMA step of the interaction matrix on the sampled block.

    Args:
      r_matrix: ``[K, K]`` running interaction matrix (global indices; cross-cluster entries are
        never read).
      idx: ``[S]`` global client indices of the slots (padding slots may repeat an index).
      mask: ``[S]`` real slots; rewards: ``[S]``; alpha: EMA weight ``m / K_c``.

    Returns:
      ``(new R, sse)``: only ``R[i, j]`` with ``i, j`` real slots change, by
      ``alpha (r_i / sum r - R[i, j])``; ``sse`` is the sum of squared changes.
    """
    r_matrix = arr(r_matrix, "r_matrix", ndim=2, dims="[K, K]")
    k = np.shape(r_matrix)[0]
    if np.shape(r_matrix) != (k, k):
        raise ValueError(f"`r_matrix` must be square [K, K], got shape {np.shape(r_matrix)}.")
    idx = index(arr(idx, "idx", ndim=1, kind="int", dims="[S]"), "idx", 0, k)
    s = np.shape(idx)[0]
    mask = arr(mask, "mask", shape=(s,), dims="[S] like `idx`", kind="bool")
    rewards = nonneg(arr(rewards, "rewards", shape=(s,), dims="[S] like `idx`"), "rewards")
    _unit(alpha, "alpha", ndim=0)
    share = rewards / jnp.sum(jnp.where(mask, rewards, 0.0))
    pair = mask[:, None] & mask[None, :]
    block = r_matrix[idx[:, None], idx[None, :]]
    delta = jnp.where(pair, alpha * (share[:, None] - block), 0.0)
    # sampling is without replacement, so real slots never collide; padding adds exact zeros
    return r_matrix.at[idx[:, None], idx[None, :]].add(delta), jnp.sum(delta**2)


@struct.dataclass
class ConvergenceState:
    """Per-cluster convergence statistics (``[C]`` = the shape given to :meth:`init`;
    ``[C_max]`` in :class:`~.fedgwc.FedGWCState`).

    Attributes:
      mse: ``[C]`` float32, the running mean squared change of ``R`` (starts at 1).
      patience: ``[C]`` int32, consecutive rounds with ``mse < eps``.
    """

    mse: jax.Array
    patience: jax.Array

    @classmethod
    def init(cls, shape=()) -> ConvergenceState:
        """``mse = 1``, patience 0, of ``shape`` (an int or a tuple of ints >= 0)."""
        dims = (shape,) if isinstance(shape, int | np.integer) else shape
        if (
            not isinstance(dims, tuple | list)
            or any(isinstance(d, bool) or not isinstance(d, int | np.integer) for d in dims)
            or any(d < 0 for d in dims)
        ):
            raise ValueError(f"`shape` must be a tuple of ints >= 0, got {shape!r}.")
        return cls(jnp.ones(shape), jnp.zeros(shape, jnp.int32))


def convergence_step(state: ConvergenceState, sse, alpha, m, eps: float = 1e-5) -> ConvergenceState:
    """``mse <- (1 - alpha) mse + alpha sse / m^2``; patience ``+1`` while ``mse < eps``, else 0."""
    instance(state, "state", ConvergenceState)
    check_array(sse, "sse")
    nonneg(sse, "sse")
    _unit(alpha, "alpha")
    if isinstance(m, bool) or not isinstance(m, int | np.integer):
        check_array(m, "m", ndim=0, kind="int")
    elif m < 1:
        raise ValueError(f"`m` must be >= 1, got {m}.")
    check_scalar(eps, "eps", 0.0, low_open=True)
    mse = (1.0 - alpha) * state.mse + alpha * sse / (m * m)
    patience = jnp.where(mse < eps, state.patience + 1, 0)
    return ConvergenceState(mse, patience)

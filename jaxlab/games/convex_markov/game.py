"""Factored zero-sum convex Markov games, their utilities, exact policy gradients and Nash gaps.

A factored game: player 1 (the minimiser, policy ``x: [S1, A]``) controls MDP
``M1 = (p1, rho1)``, player 2 (the maximiser, ``y: [S2, B]``) controls ``M2 = (p2, rho2)``, with a
common discount. The joint state ``(s1, s2)`` moves factor-wise and each player conditions on its
own component, so ``lambda_1`` depends on ``x`` only and ``lambda_2`` on ``y`` only. The utility
(spec section 5) is

.. math::

    U(x, y) = \\lambda_1^T C \\lambda_2 + \\frac{\\kappa}{2}\\lVert\\lambda_1 - \\tau_1\\rVert^2,
    \\qquad U^\\mu = U - \\frac{\\mu}{2}\\lVert\\lambda_2\\rVert^2,

convex in ``lambda_1``, concave in ``lambda_2`` (hidden convex-concave), but nonconvex-nonconcave in
the policies. ``kappa = 0`` is a hidden-bilinear game; ``kappa > 0`` adds an imitation term that
no Bellman equation describes. A single-state game (``S1 = S2 = 1``) is a normal-form game, e.g.
:func:`rock_paper_scissors`.

Policies are *played* epsilon-greedily: ``x_played = (1 - eps) x + eps / |A|``. Utilities,
gradients and gaps are of the played policies; the gradient with respect to the parameter ``x`` is
``(1 - eps)`` times the gradient with respect to the played policy.

Exact gradients use pseudo-rewards ``c_i = grad_{lambda_i} U^mu`` in the policy-gradient theorem
(:func:`~jaxlab.games.convex_markov.mdp.policy_gradient`); ``jax.grad`` through the linear solves
gives the same numbers (tested). Every function here is per game; ``jax.vmap`` batches games.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core import checks
from jaxlab.core.checks import (
    check_bool,
    check_callable,
    check_count,
    check_distribution,
    check_float_dtype,
)
from jaxlab.games.convex_markov.mdp import (
    _check_gamma,
    _check_kernel,
    _greedy_policy,
    _kernel,
    _occupancy,
    _policy_gradient,
    _value_iteration,
)

__all__ = [
    "FactoredGame",
    "GapResult",
    "best_response",
    "check_game",
    "exact_gradients",
    "nash_gap",
    "occupancies",
    "occupancy_utility",
    "played",
    "random_factored_game",
    "rock_paper_scissors",
    "uniform_policies",
    "utility",
]


class FactoredGame(NamedTuple):
    """One factored zero-sum convex Markov game (a pytree; stack leaves to batch games).

    Attributes:
      p1: ``[S1, A, S1]`` transitions of the minimiser's MDP; rho1: ``[S1]``.
      p2: ``[S2, B, S2]`` transitions of the maximiser's MDP; rho2: ``[S2]``.
      payoff: ``C`` as ``[S1, A, S2, B]`` (``lambda_1^T C lambda_2`` contracts both pairs).
      tau1: ``[S1, A]`` reference occupancy of the imitation term.
      kappa: weight of the imitation term (scalar array).
      gamma: discount (scalar array).
    """

    p1: jax.Array
    rho1: jax.Array
    p2: jax.Array
    rho2: jax.Array
    payoff: jax.Array
    tau1: jax.Array
    kappa: jax.Array
    gamma: jax.Array


def _check_game(game, lead: tuple[int, ...] = (), name: str = "game") -> tuple[int, int, int, int]:
    """Shapes and dtypes of every field (always), values where concrete; ``lead`` is the batch
    shape in front of every field (``(G,)`` for a stack of games). Returns ``(S1, A, S2, B)``."""
    if not isinstance(game, FactoredGame):
        raise TypeError(
            f"`{name}` must be a FactoredGame (e.g. from random_factored_game), got "
            f"{type(game).__name__}."
        )
    for field in FactoredGame._fields:
        checks.check_real(getattr(game, field), field)
    k = len(lead)
    batch = "" if not k else f"{list(lead)} + "
    dims = {}
    for p, rho, (n, m) in (("p1", "rho1", ("S1", "A")), ("p2", "rho2", ("S2", "B"))):
        shape = tuple(np.shape(getattr(game, p)))
        if len(shape) != k + 3 or shape[:k] != lead or shape[k] != shape[k + 2] or 0 in shape:
            raise ValueError(
                f"`{p}` must have shape {batch}[{n}, {m}, {n}] with {n}, {m} >= 1, got {shape}."
            )
        dims[n], dims[m] = shape[k], shape[k + 1]
        checks.check_shape(getattr(game, rho), rho, (*lead, dims[n]), f"{batch}[{n}]")
    s1, a, s2, b = dims["S1"], dims["A"], dims["S2"], dims["B"]
    checks.check_shape(game.payoff, "payoff", (*lead, s1, a, s2, b), f"{batch}[S1, A, S2, B]")
    checks.check_shape(game.tau1, "tau1", (*lead, s1, a), f"{batch}[S1, A]")
    for field in ("kappa", "gamma"):
        got = np.shape(getattr(game, field))
        if got != lead:
            want = "a scalar" if not k else f"shape {lead}"
            raise ValueError(f"`{field}` must be {want}, got shape {got}.")
    if checks.is_concrete(game):
        host = FactoredGame(*(np.asarray(leaf) for leaf in jax.device_get(tuple(game))))
        for field in FactoredGame._fields:
            checks.check_finite(getattr(host, field), field)
        _check_kernel(host.p1, host.rho1, "p1", 1e-6)
        _check_kernel(host.p2, host.rho2, "p2", 1e-6)
        if k:
            checks.check_in_range(host.gamma, "gamma", 0.0, 1.0, low_open=True, high_open=True)
        else:
            _check_gamma(host.gamma)
        checks.check_in_range(host.kappa, "kappa", 0.0)
    return s1, a, s2, b


def check_game(game: FactoredGame) -> None:
    """Raise ``ValueError`` naming the bad field of a single (unbatched) game (``TypeError`` for
    a wrong type or dtype). Shapes and dtypes are checked always, values (transition rows and
    ``rho`` on the simplex, ``gamma`` in ``(0, 1)``, ``kappa >= 0``, no NaN / inf) where
    concrete."""
    _check_game(game)


def _as_game(game, lead: tuple[int, ...] = (), name: str = "game") -> FactoredGame:
    """:func:`_check_game`, then every field as a float array (float fields unchanged)."""
    _check_game(game, lead, name)
    pay = game.payoff
    dtype = getattr(pay, "dtype", None) or np.asarray(pay).dtype
    dtype = dtype if jnp.issubdtype(dtype, jnp.floating) else jnp.result_type(float)

    def as_float(x):
        if isinstance(x, jax.Array) and jnp.issubdtype(x.dtype, jnp.floating):
            return x  # tracers included: unchanged
        if isinstance(x, jax.Array):
            return x.astype(dtype)
        a = np.asarray(x)
        return jnp.asarray(a) if np.issubdtype(a.dtype, np.floating) else jnp.asarray(a, dtype)

    return FactoredGame(*(as_float(leaf) for leaf in game))


def _game_policies(game, x, y):
    """The checked game (float fields) and the policies ``x [S1, A]``, ``y [S2, B]``."""
    game = _as_game(game)
    (s1, a, _), (s2, b, _) = game.p1.shape, game.p2.shape
    return (
        game,
        check_distribution(x, "x", (s1, a), "[S1, A]"),
        check_distribution(y, "y", (s2, b), "[S2, B]"),
    )


def _check_epsilon(epsilon):
    return checks.check_scalar(epsilon, "epsilon", 0.0, 1.0)


def _check_mu(mu):
    return checks.check_scalar(mu, "mu", 0.0)


def _random_mdp(key, n_states: int, n_actions: int, concentration: float, dtype):
    p = jax.random.dirichlet(key, jnp.full(n_states, concentration), (n_states, n_actions))
    return p.astype(dtype), jnp.full(n_states, 1.0 / n_states, dtype)


def random_factored_game(
    key: jax.Array, n_states: int = 4, n_actions: int = 3, gamma: float = 0.8,
    kappa: float = 0.0, concentration: float = 0.5, dtype=None,
) -> FactoredGame:  # fmt: skip
    """The spec's random family: ``P(. | s, a) ~ Dirichlet(concentration 1)`` per player, uniform
    ``rho``, ``C_ij ~ U[-1, 1]``, ``tau_1`` the occupancy of a uniformly random policy of ``M1``;
    both players have ``n_states`` states and ``n_actions`` actions. ``dtype`` defaults to JAX's
    float (float64 under ``jax.enable_x64``)."""
    key = checks.check_key(key, "key")
    checks.check_int(n_states, "n_states", minimum=1)
    checks.check_int(n_actions, "n_actions", minimum=1)
    _check_gamma(gamma)
    checks.check_scalar(kappa, "kappa", 0.0)
    checks.check_scalar(concentration, "concentration", 0.0, low_open=True)
    check_float_dtype(dtype)
    dtype = jnp.result_type(float) if dtype is None else dtype
    k1, k2, k3, k4 = jax.random.split(key, 4)
    p1, rho1 = _random_mdp(k1, n_states, n_actions, concentration, dtype)
    p2, rho2 = _random_mdp(k2, n_states, n_actions, concentration, dtype)
    payoff = jax.random.uniform(k3, (n_states, n_actions, n_states, n_actions), dtype, -1.0, 1.0)
    ref = jax.random.dirichlet(k4, jnp.ones(n_actions), (n_states,)).astype(dtype)
    g = jnp.asarray(gamma, dtype)
    return FactoredGame(p1, rho1, p2, rho2, payoff, _occupancy(p1, rho1, ref, g),
                        jnp.asarray(kappa, dtype), g)  # fmt: skip


def rock_paper_scissors(gamma: float = 0.5, dtype=None) -> FactoredGame:
    """Single-state rock-paper-scissors: ``U = x^T C y`` with the antisymmetric win matrix
    (``C[i, j] = +1`` when ``y``'s action ``j`` beats ``x``'s ``i``). The unique equilibrium is
    uniform, and ``Gap = max_j (x^T C)_j - min_i (C y)_i``. ``gamma`` (in ``(0, 1)``) is
    immaterial."""
    _check_gamma(gamma)
    check_float_dtype(dtype)
    dtype = jnp.result_type(float) if dtype is None else dtype
    win = jnp.array([[0.0, 1.0, -1.0], [-1.0, 0.0, 1.0], [1.0, -1.0, 0.0]], dtype)
    one = jnp.ones((1, 3, 1), dtype)
    rho = jnp.ones(1, dtype)
    return FactoredGame(one, rho, one, rho, win.reshape(1, 3, 1, 3), jnp.full((1, 3), 1 / 3, dtype),
                        jnp.zeros((), dtype), jnp.asarray(gamma, dtype))  # fmt: skip


def uniform_policies(game: FactoredGame) -> tuple[jax.Array, jax.Array]:
    """``(x, y)`` uniform over actions in every state."""
    return _uniform_policies(_as_game(game))


def _uniform_policies(game):
    a, b = game.p1.shape[1], game.p2.shape[1]
    dtype = game.payoff.dtype
    return (
        jnp.full(game.p1.shape[:2], 1.0 / a, dtype),
        jnp.full(game.p2.shape[:2], 1.0 / b, dtype),
    )


def played(pi: jax.Array, epsilon) -> jax.Array:
    """Epsilon-greedy played policy ``(1 - eps) pi + eps / n_actions``: ``pi [..., n]`` with
    rows on the simplex, ``epsilon`` in ``[0, 1]``."""
    pi = checks.check_array(pi, "pi", kind="float")
    if pi.ndim < 1 or pi.shape[-1] < 1:
        raise ValueError(f"`pi` must have rank >= 1 and a last axis of size >= 1, got {pi.shape}.")
    check_distribution(pi, "pi", pi.shape)
    return _played(pi, _check_epsilon(epsilon))


def _played(pi, epsilon):
    return (1.0 - epsilon) * pi + epsilon / pi.shape[-1]


def occupancies(game: FactoredGame, x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(lambda_1 [S1, A], lambda_2 [S2, B])`` of the policies as given (no exploration)."""
    return _occupancies(*_game_policies(game, x, y))


def _occupancies(game, x, y):
    return (_occupancy(game.p1, game.rho1, x, game.gamma),
            _occupancy(game.p2, game.rho2, y, game.gamma))  # fmt: skip


def occupancy_utility(game: FactoredGame, lam1: jax.Array, lam2: jax.Array, mu=0.0) -> jax.Array:
    """``U^mu`` as a function of the occupancies ``lam1 [S1, A]``, ``lam2 [S2, B]`` (scalar)."""
    game = _as_game(game)
    (s1, a, _), (s2, b, _) = game.p1.shape, game.p2.shape
    lam1 = checks.check_array(lam1, "lam1", shape=(s1, a), dims="[S1, A]", kind="float")
    lam2 = checks.check_array(lam2, "lam2", shape=(s2, b), dims="[S2, B]", kind="float")
    return _occupancy_utility(game, lam1, lam2, _check_mu(mu))


def _occupancy_utility(game, lam1, lam2, mu=0.0):
    bilinear = jnp.einsum("sa,satb,tb->", lam1, game.payoff, lam2)
    imitation = 0.5 * game.kappa * jnp.sum((lam1 - game.tau1) ** 2)
    return bilinear + imitation - 0.5 * mu * jnp.sum(lam2**2)


def utility(game: FactoredGame, x: jax.Array, y: jax.Array, epsilon=0.0, mu=0.0) -> jax.Array:
    """``U^mu`` at the played policies of parameters ``(x, y)``."""
    game, x, y = _game_policies(game, x, y)
    return _utility(game, x, y, _check_epsilon(epsilon), _check_mu(mu))


def _utility(game, x, y, epsilon=0.0, mu=0.0):
    return _occupancy_utility(
        game, *_occupancies(game, _played(x, epsilon), _played(y, epsilon)), mu
    )


def exact_gradients(
    game: FactoredGame, x: jax.Array, y: jax.Array, epsilon=0.0, mu=0.0
) -> tuple[jax.Array, jax.Array]:
    """``(grad_x U^mu, grad_y U^mu)`` by the pseudo-reward policy-gradient formula.

    ``c_1 = C lambda_2 + kappa (lambda_1 - tau_1)``, ``c_2 = C^T lambda_1 - mu lambda_2`` (autodiff
    of :func:`occupancy_utility` in ``lambda``), then ``grad_x = (1 - eps) d_1 Q_{c_1}`` in ``M1``
    under the played ``x`` and likewise for ``y``. Four ``S x S`` solves per game.
    """
    game, x, y = _game_policies(game, x, y)
    return _exact_gradients(game, x, y, _check_epsilon(epsilon), _check_mu(mu))


def _exact_gradients(game, x, y, epsilon=0.0, mu=0.0):
    xp, yp = _played(x, epsilon), _played(y, epsilon)
    lam1, lam2 = _occupancies(game, xp, yp)
    c1, c2 = jax.grad(_occupancy_utility, argnums=(1, 2))(game, lam1, lam2, mu)
    gx = _policy_gradient(game.p1, game.rho1, xp, c1, game.gamma)
    gy = _policy_gradient(game.p2, game.rho2, yp, c2, game.gamma)
    return (1.0 - epsilon) * gx, (1.0 - epsilon) * gy


class GapResult(NamedTuple):
    """Nash gap of ``U^mu`` at the played policies.

    Attributes:
      gap: ``max_{y'} U(x, y') - min_{x'} U(x', y)`` from the best-response estimates (a lower
        bound of the true gap; exact when both sides are linear).
      certificate: sum of the two Frank-Wolfe duality gaps: the true gap lies in
        ``[gap, gap + certificate]``.
      max_value, min_value: the two best-response values.
      finite: ``True`` when the game, the policies and every number above are finite (no NaN /
        inf anywhere); read ``gap`` and ``certificate`` only where it is ``True``.
    """

    gap: jax.Array
    certificate: jax.Array
    max_value: jax.Array
    min_value: jax.Array
    finite: jax.Array


def best_response(
    p, rho, gamma, f: Callable[[jax.Array], jax.Array], lam0: jax.Array, minimize: bool,
    max_iter: int = 1000, tol: float = 1e-10,
) -> tuple[jax.Array, jax.Array]:  # fmt: skip
    """Optimise a smooth convex (``minimize``) or concave function ``f`` of one player's occupancy
    over the occupancy polytope of MDP ``(p, rho, gamma)`` by Frank-Wolfe. Returns
    ``(value, fw_gap)`` with ``|value - optimum| <= fw_gap``.

    Linear minimisation oracle: value iteration with reward ``grad f`` and the occupancy of its
    greedy policy (a vertex of the polytope). Step: exact line search along ``s - lambda`` using
    the curvature ``<d, H d>`` (a Hessian-vector product; exact for the quadratic utilities here,
    a clipped Newton step otherwise; a linear ``f`` is solved in one step). Stops when the duality
    gap ``<grad f, lambda - s>`` is below ``tol`` or after ``max_iter`` steps (``lax.while_loop``).
    """
    p, rho = _kernel(p, rho, gamma)
    check_callable(f, "f")
    s, a = p.shape[:2]
    lam0 = checks.check_array(lam0, "lam0", shape=(s, a), dims="[S, A]", kind="float")
    out = jax.eval_shape(f, lam0)
    if not isinstance(out, jax.ShapeDtypeStruct) or out.shape != ():
        raise ValueError(f"`f` must map an occupancy [S, A] to a scalar, got {out}.")
    check_bool(minimize, "minimize")
    check_count(max_iter, "max_iter", 1)
    checks.check_scalar(tol, "tol", 0.0)
    return _best_response(p, rho, gamma, f, lam0, minimize, max_iter, tol)


def _best_response(p, rho, gamma, f, lam0, minimize, max_iter=1000, tol=1e-10):
    sign = 1.0 if minimize else -1.0
    g_fn = jax.grad(lambda lam: sign * f(lam))

    def vertex(lam):
        g = g_fn(lam)
        q = _value_iteration(p, g, gamma, maximize=False)
        s = _occupancy(p, rho, _greedy_policy(q, maximize=False), gamma)
        return s, jnp.sum(g * (lam - s))

    def cond(carry):
        _, _, gap, i = carry
        return (gap > tol) & (i < max_iter)

    def body(carry):
        lam, s, gap, i = carry
        d = s - lam
        curvature = jnp.sum(d * jax.jvp(g_fn, (lam,), (d,))[1])
        t = jnp.where(curvature > 0, jnp.clip(gap / jnp.where(curvature > 0, curvature, 1.0),
                                              0.0, 1.0), 1.0)  # fmt: skip
        lam = lam + t * d
        s, gap = vertex(lam)
        return lam, s, gap, i + 1

    s0, gap0 = vertex(lam0)
    lam, _, gap, _ = jax.lax.while_loop(cond, body, (lam0, s0, gap0, 0))
    return f(lam), jnp.maximum(gap, 0.0)


def nash_gap(
    game: FactoredGame, x: jax.Array, y: jax.Array, epsilon=0.0, mu=0.0, max_iter: int = 1000,
    tol: float = 1e-10,
) -> GapResult:  # fmt: skip
    """Nash gap of ``U^mu`` at the played policies against unrestricted best responses.

    ``max_{y'} U^mu(x, y')`` over ``M2``'s occupancy polytope with ``lambda_1`` fixed, and
    ``min_{x'} U^mu(x', y)`` over ``M1``'s with ``lambda_2`` fixed, each by
    :func:`best_response` (for ``mu = 0`` and ``kappa = 0`` both are linear and exact: one
    value iteration each). Use ``mu = 0`` (the default) to measure the original game. Inside
    ``jit`` a NaN / inf anywhere shows in ``finite`` (``False``), never as a finite gap alone.
    """
    game, x, y = _game_policies(game, x, y)
    check_count(max_iter, "max_iter", 1)
    checks.check_scalar(tol, "tol", 0.0)
    return _nash_gap(game, x, y, _check_epsilon(epsilon), _check_mu(mu), max_iter, tol)


def _all_finite(*trees) -> jax.Array:
    leaves = jax.tree_util.tree_leaves(trees)
    return functools.reduce(jnp.logical_and, [jnp.all(jnp.isfinite(x)) for x in leaves])


def _nash_gap(game, x, y, epsilon=0.0, mu=0.0, max_iter=1000, tol=1e-10) -> GapResult:
    lam1, lam2 = _occupancies(game, _played(x, epsilon), _played(y, epsilon))
    hi, cert_hi = _best_response(game.p2, game.rho2, game.gamma,
                                 lambda l2: _occupancy_utility(game, lam1, l2, mu), lam2,
                                 minimize=False, max_iter=max_iter, tol=tol)  # fmt: skip
    lo, cert_lo = _best_response(game.p1, game.rho1, game.gamma,
                                 lambda l1: _occupancy_utility(game, l1, lam2, mu), lam1,
                                 minimize=True, max_iter=max_iter, tol=tol)  # fmt: skip
    gap, cert = hi - lo, cert_hi + cert_lo
    return GapResult(gap, cert, hi, lo, _all_finite(game, x, y, epsilon, mu, gap, cert))

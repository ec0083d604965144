"""Sample-quality metrics: Frechet distance on classifier features ("digits-FD"), classifier
entropy score and per-class coverage, the radially averaged power spectrum, and for 2-D toy data
sliced Wasserstein-2 and RBF-MMD.

Frechet distance between Gaussian fits ``N(m_a, S_a)``, ``N(m_b, S_b)``:

    FD = ||m_a - m_b||^2 + tr(S_a + S_b - 2 (S_a^(1/2) S_b S_a^(1/2))^(1/2)),

with every matrix square root taken by a symmetric eigendecomposition (the argument is symmetric
PSD, so this is exact and differentiable, unlike a general ``sqrtm``). Computed in the dtype of the
features; pass float64 arrays under ``jax.enable_x64(True)`` for 1e-6 agreement with SciPy.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core import checks
from jaxlab.generative.gan_onestep import _checks

__all__ = [
    "class_coverage",
    "classifier_score",
    "frechet_distance",
    "frechet_distance_stats",
    "fd_bootstrap",
    "fd_contrast_bootstrap",
    "gaussian_stats",
    "high_band_power_ratio",
    "mmd_rbf",
    "radial_power_spectrum",
    "sliced_wasserstein",
    "sqrtm_psd",
]


def _check_2d(x, name, min_rows=2):
    """Real ``[N, D]`` features, ``N >= min_rows``, ``D >= 1``, finite where concrete."""
    if getattr(x, "ndim", None) is None:
        raise TypeError(f"`{name}` must be an [N, D] array, got {type(x).__name__}: {x!r:.60}.")
    checks.check_real(x, name)
    if x.ndim != 2:
        raise ValueError(f"`{name}` must be [N, D] features, got shape {x.shape}.")
    if x.shape[0] < min_rows:
        what = "for a covariance" if min_rows == 2 else "(no samples)"
        raise ValueError(f"`{name}` needs >= {min_rows} samples {what}, got {x.shape[0]}.")
    if x.shape[1] < 1:
        raise ValueError(f"`{name}` must have >= 1 feature, got shape {x.shape}.")
    checks.check_finite(x, name)


def _check_square(a, name, psd=False, tol=1e-3):
    """A finite square ``[D, D]`` matrix; with ``psd``, where concrete, also symmetric and positive
    semi-definite up to ``tol`` relative to its largest entry / eigenvalue (float32 rounding of a
    computed covariance passes)."""
    checks.check_real(a, name)
    if np.ndim(a) != 2 or np.shape(a)[0] != np.shape(a)[1] or np.shape(a)[0] < 1:
        raise ValueError(f"`{name}` must be a square [D, D] matrix, got shape {np.shape(a)}.")
    checks.check_finite(a, name)
    if psd and checks.is_concrete(a):
        m = np.asarray(jax.device_get(a), np.float64)
        scale = max(float(np.max(np.abs(m))), 1e-30)
        if not np.all(np.abs(m - m.T) <= tol * scale):
            raise ValueError(f"`{name}` must be symmetric (a covariance), got {m[:3, :3]}...")
        low = float(np.min(np.linalg.eigvalsh(0.5 * (m + m.T))))
        if low < -tol * scale:
            raise ValueError(
                f"`{name}` must be positive semi-definite (a covariance); its smallest eigenvalue "
                f"is {low:.4g}."
            )


def sqrtm_psd(a: jax.Array) -> jax.Array:
    """Square root of a symmetric PSD matrix via ``eigh`` (negative round-off eigenvalues -> 0)."""
    _check_square(a, "a", psd=True)
    a = jnp.asarray(a)
    w, v = jnp.linalg.eigh(0.5 * (a + a.T))
    return (v * jnp.sqrt(jnp.maximum(w, 0.0))[None, :]) @ v.T


def gaussian_stats(feats: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Mean ``[D]`` and unbiased covariance ``[D, D]`` of ``feats [N, D]``."""
    _check_2d(feats, "feats")
    mean = jnp.mean(feats, axis=0)
    centred = feats - mean[None, :]
    return mean, centred.T @ centred / (feats.shape[0] - 1)


def frechet_distance_stats(m_a, s_a, m_b, s_b) -> jax.Array:
    """FD between ``N(m_a, s_a)`` and ``N(m_b, s_b)`` (the module formula): means ``[D]``,
    covariances ``[D, D]`` (symmetric PSD), all finite."""
    for name, s in (("s_a", s_a), ("s_b", s_b)):
        _check_square(s, name, psd=True)
    d = np.shape(s_a)[0]
    for name, m in (("m_a", m_a), ("m_b", m_b)):
        checks.check_real(m, name)
        checks.check_shape(m, name, (d,), "[D]")
        checks.check_finite(m, name)
    checks.check_shape(s_b, "s_b", (d, d), "[D, D] like `s_a`")
    m_a, s_a, m_b, s_b = (jnp.asarray(v) for v in (m_a, s_a, m_b, s_b))
    root_a = sqrtm_psd(s_a)
    cross = sqrtm_psd(root_a @ s_b @ root_a)
    return jnp.sum(jnp.square(m_a - m_b)) + jnp.trace(s_a) + jnp.trace(s_b) - 2 * jnp.trace(cross)


def frechet_distance(feats_a: jax.Array, feats_b: jax.Array) -> jax.Array:
    """FD between Gaussian fits of two feature sets ``[N_a, D]`` and ``[N_b, D]``."""
    _check_2d(feats_a, "feats_a")
    _check_2d(feats_b, "feats_b")
    if feats_a.shape[1] != feats_b.shape[1]:
        raise ValueError(
            f"frechet_distance: `feats_b` must have the {feats_a.shape[1]} features of `feats_a`, "
            f"got {feats_b.shape[1]}."
        )
    return frechet_distance_stats(*gaussian_stats(feats_a), *gaussian_stats(feats_b))


def fd_bootstrap(
    key: jax.Array,
    feats: jax.Array,
    reference: jax.Array,
    n_boot: int = 500,
) -> jax.Array:
    """Bootstrap replicates of every variant's seed-mean FD, ``mean_s FD(feats[s, v],
    reference[s])``, resampled hierarchically and paired: ``[n_boot, V]``.

    Each replicate draws seeds ``s`` with replacement; for each drawn seed one set of sample
    indices (with replacement) shared by every variant ``v`` (the variants were generated from the
    same noises, so the resampling is paired) and one set of reference indices. Because one
    replicate resamples every variant alike, any contrast of FDs is the replicates times its
    weights (:func:`fd_contrast_bootstrap`), and contrasts from one call are mutually consistent.

    Args:
      key: PRNG key of the resampling.
      feats: ``[S, V, N, D]``: features of ``N`` samples of ``V`` variants on ``S`` seeds, sample
        ``i`` of every variant from the same noise.
      reference: ``[S, M, D]``: the real reference features of each seed.
      n_boot: replicates.
    """
    key = checks.check_key(key)
    for name, v, rank in (("feats", feats, 4), ("reference", reference, 3)):
        if getattr(v, "ndim", None) is None:
            raise TypeError(f"`{name}` must be a rank-{rank} array, got {type(v).__name__}.")
        checks.check_real(v, name)
    n_boot = checks.check_int(n_boot, "n_boot", minimum=1)
    if feats.ndim != 4 or reference.ndim != 3 or reference.shape[0] != feats.shape[0]:
        raise ValueError(
            f"fd_bootstrap: `feats` must be [S, V, N, D] and `reference` [S, M, D] with "
            f"the same S, got {feats.shape} and {reference.shape}."
        )
    n_seeds, _, n, _ = feats.shape
    m = reference.shape[1]
    if min(feats.shape) < 1 or n < 2 or m < 2 or reference.shape[2] != feats.shape[3]:
        raise ValueError(
            f"fd_bootstrap: `feats` [S, V, N, D] and `reference` [S, M, D] need S, V, D >= 1, "
            f"N, M >= 2 and the same D, got {feats.shape} and {reference.shape}."
        )
    checks.check_finite(feats, "feats")
    checks.check_finite(reference, "reference")

    def replicate(k):
        k_seed, k_rows = jax.random.split(k)
        seeds = jax.random.randint(k_seed, (n_seeds,), 0, n_seeds)

        def one_seed(s, kk):
            k_gen, k_ref = jax.random.split(kk)
            rows = jax.random.randint(k_gen, (n,), 0, n)
            ref = reference[s][jax.random.randint(k_ref, (m,), 0, m)]
            stats_ref = gaussian_stats(ref)
            return jax.vmap(lambda f: frechet_distance_stats(*gaussian_stats(f[rows]), *stats_ref))(
                feats[s]
            )

        return jnp.mean(jax.vmap(one_seed)(seeds, jax.random.split(k_rows, n_seeds)), axis=0)

    return jax.lax.map(replicate, jax.random.split(key, n_boot))


def fd_contrast_bootstrap(
    key: jax.Array,
    feats: jax.Array,
    reference: jax.Array,
    weights: jax.Array,
    n_boot: int = 500,
) -> jax.Array:
    """Bootstrap replicates of a contrast of FDs, ``sum_v weights[v] * mean_s FD(feats[s, v],
    reference[s])``: :func:`fd_bootstrap` times ``weights`` (same arguments, ``[n_boot]``).

    A claim such as "FD(KD) >= 1.5 FD(D2O)" is the contrast ``weights = (1, -1.5)`` and is
    supported at level ``1 - alpha`` when the ``alpha / 2`` quantile of the replicates is above 0.
    """
    checks.check_real(weights, "weights")
    checks.check_finite(weights, "weights")
    if np.ndim(feats) == 4 and np.shape(weights) != (feats.shape[1],):
        raise ValueError(
            f"fd_contrast_bootstrap: `weights` must be [{feats.shape[1]}], got shape "
            f"{np.shape(weights)}."
        )
    weights = jnp.asarray(weights)
    return fd_bootstrap(key, feats, reference, n_boot) @ weights


def classifier_score(probs: jax.Array) -> jax.Array:
    """The entropy "IS": ``exp(E_x KL(p(y|x) || p(y)))`` from class probabilities ``[N, K]``
    (entries in [0, 1], rows summing to 1 within 1e-3 where concrete)."""
    _check_2d(probs, "probs", min_rows=1)
    checks.check_in_range(probs, "probs", 0.0, 1.0)
    if checks.is_concrete(probs):
        sums = np.asarray(jax.device_get(jnp.sum(probs, axis=1)), np.float64)
        if not np.all(np.abs(sums - 1.0) <= 1e-3):
            worst = sums[np.argmax(np.abs(sums - 1.0))]
            raise ValueError(
                f"`probs` rows must sum to 1 (class probabilities), got a row sum of {worst:.6g}."
            )
    if jnp.issubdtype(probs.dtype, jnp.integer):  # one-hot ints are fine
        probs = jnp.asarray(probs, jnp.float32)
    p_y = jnp.mean(probs, axis=0)
    logp = jnp.log(jnp.clip(probs, 1e-12))
    kl = jnp.sum(probs * (logp - jnp.log(jnp.clip(p_y, 1e-12))[None, :]), axis=1)
    return jnp.exp(jnp.mean(kl))


def class_coverage(labels: jax.Array, n_classes: int, threshold: float = 0.05) -> jax.Array:
    """Fraction of the ``n_classes`` classes predicted for at least ``threshold`` of the samples
    (``labels``: ``[N]`` ints in ``[0, n_classes)``, ``N >= 1``)."""
    n_classes = checks.check_int(n_classes, "n_classes", minimum=1)
    checks.check_scalar(threshold, "threshold", 0.0, 1.0)
    labels = checks.check_array(labels, "labels", ndim=1, kind="int")
    if labels.shape[0] < 1:
        raise ValueError("`labels` must have >= 1 entry, got shape (0,).")
    checks.check_in_range(labels, "labels", 0, n_classes - 1)
    freq = jnp.bincount(labels, length=n_classes) / labels.shape[0]
    return jnp.mean(freq >= threshold)


def radial_power_spectrum(images: jax.Array) -> jax.Array:
    """Mean power ``|FFT2|^2`` per integer radial frequency bin, ``[H // 2 + 1]``, averaged over
    images and channels (``images``: ``[B, H, W, C]``; the per-image mean is removed first)."""
    _checks.check_images(images, "images")
    _, h, w, _ = images.shape
    x = images - jnp.mean(images, axis=(1, 2), keepdims=True)
    power = jnp.mean(jnp.square(jnp.abs(jnp.fft.fft2(x, axes=(1, 2)))), axis=(0, 3))  # [H, W]
    fy = jnp.fft.fftfreq(h) * h
    fx = jnp.fft.fftfreq(w) * w
    radius = jnp.round(jnp.sqrt(fy[:, None] ** 2 + fx[None, :] ** 2)).astype(jnp.int32)
    n_bins = h // 2 + 1
    radius = jnp.minimum(radius, n_bins - 1)
    sums = jnp.zeros(n_bins).at[radius.ravel()].add(power.ravel())
    counts = jnp.zeros(n_bins).at[radius.ravel()].add(1.0)
    return sums / counts


def high_band_power_ratio(generated: jax.Array, data: jax.Array) -> jax.Array:
    """``sum P_gen / sum P_data`` over the top half of the radial frequency bins (``generated``
    and ``data``: ``[B, H, W, C]`` batches of the same image shape; ``data`` must have power in
    that band, where concrete)."""
    _checks.check_images(generated, "generated")
    _checks.check_images(data, "data")
    if generated.shape[1:] != data.shape[1:]:
        raise ValueError(
            f"`generated` images {generated.shape[1:]} and `data` images {data.shape[1:]} must "
            "have the same [H, W, C]."
        )
    p_gen, p_data = radial_power_spectrum(generated), radial_power_spectrum(data)
    top = p_gen.shape[0] // 2
    denominator = jnp.sum(p_data[top:])
    if checks.is_concrete(denominator) and not float(denominator) > 0:
        raise ValueError(
            "`data` has no power in the top half of the frequency bins (constant images?): the "
            "ratio is undefined."
        )
    return jnp.sum(p_gen[top:]) / denominator


def sliced_wasserstein(x: jax.Array, y: jax.Array, key: jax.Array, n_proj: int = 128):
    """Sliced W2 between equal-size point sets ``[N, D]``: ``sqrt(mean_theta W2^2(x.theta,
    y.theta))`` over ``n_proj`` random unit directions (sorted 1-D couplings)."""
    _check_2d(x, "x", min_rows=1)
    _check_2d(y, "y", min_rows=1)
    if x.shape != y.shape:
        raise ValueError(f"sliced_wasserstein: `x` {x.shape} and `y` {y.shape} must match.")
    key = checks.check_key(key)
    n_proj = checks.check_int(n_proj, "n_proj", minimum=1)
    if jnp.issubdtype(x.dtype, jnp.integer):  # ints are fine: compare them as floats
        x = jnp.asarray(x, jnp.float32)
    if jnp.issubdtype(y.dtype, jnp.integer):
        y = jnp.asarray(y, jnp.float32)
    theta = jax.random.normal(key, (x.shape[1], n_proj), x.dtype)
    theta = theta / jnp.linalg.norm(theta, axis=0, keepdims=True)
    px, py = jnp.sort(x @ theta, axis=0), jnp.sort(y @ theta, axis=0)
    return jnp.sqrt(jnp.mean(jnp.square(px - py)))


def mmd_rbf(x: jax.Array, y: jax.Array, bandwidth: float = 1.0) -> jax.Array:
    """Biased RBF-MMD^2 ``mean k(x,x') + mean k(y,y') - 2 mean k(x,y)``,
    ``k(a, b) = exp(-||a - b||^2 / (2 bandwidth^2))`` (``x [N, D]``, ``y [M, D]``, ``bandwidth``
    > 0)."""
    _check_2d(x, "x", min_rows=1)
    _check_2d(y, "y", min_rows=1)
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"mmd_rbf: `x` {x.shape} and `y` {y.shape} must have the same D.")
    checks.check_scalar(bandwidth, "bandwidth", 0.0, low_open=True)

    def k(a, b):
        d2 = jnp.sum(jnp.square(a[:, None, :] - b[None, :, :]), axis=-1)
        return jnp.exp(-d2 / (2.0 * bandwidth**2))

    return jnp.mean(k(x, x)) + jnp.mean(k(y, y)) - 2.0 * jnp.mean(k(x, y))

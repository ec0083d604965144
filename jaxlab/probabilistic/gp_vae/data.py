"""The "Health-Digits" data: longitudinal images with subject, time, binary and interaction effects.

Built from sklearn's bundled 8x8 digits (offline, :func:`jaxlab.core.data.load_digits`), as a
stand-in for Health-MNIST. Each of ``P``
subjects has a base digit image and static covariates age ``a_p ~ U(-1, 1)``, sex ``s_p`` and
disease ``d_p`` (Bernoulli 1/2), observed at ``T`` irregular times ``t ~ U(0, 1)``. The image at
time ``t`` is the base image

- rotated by ``25 sin(2 pi t) + 35 d_p t + b_p`` degrees (a shared time effect, a disease x time
  interaction and a subject effect ``b_p ~ N(0, 8^2)``),
- shifted horizontally by ``0.8 a_p`` pixels,
- scaled in intensity by ``1 - 0.3 s_p t``,

(bilinear warps with ``scipy.ndimage``), plus ``N(0, 0.05^2)`` pixel noise. Randomness comes
from a JAX key; the warps run on the host.

:func:`health_digits_components` is the additive GP prior the experiment fits to these covariates
(subject id, SE(t), SE(age), sex, disease, SE(t) x disease, SE(t) x id) and
:func:`health_digits_config` the full :class:`~.model.GPVAEConfig` built on it.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import scipy.ndimage

from jaxlab.core.checks import check_int, check_key, check_scalar
from jaxlab.core.data import load_digits
from jaxlab.probabilistic.gp_vae.model import (
    Component,
    Covariates,
    GPVAEConfig,
    binary,
    categorical,
    se,
    se_x_categorical,
)

__all__ = [
    "HEALTH_DIGITS_COMPONENTS",
    "HealthDigits",
    "health_digits",
    "health_digits_components",
    "health_digits_config",
    "render",
    "splits",
]

TIME_MEAN, TIME_STD = 0.5, 1.0 / np.sqrt(12.0)  # standardise t ~ U(0, 1)


class HealthDigits(NamedTuple):
    """``N = P T`` observations, subject-major.

    Attributes:
      images: ``[N, 64]`` noisy images in about ``[0, 1]``; ``clean``: the same without noise.
      subject, time, age, sex, disease, digit: ``[N]`` covariates (``time`` in ``[0, 1]``).
      rotation: ``[N]`` the rendered angle in degrees (ground truth for interpretability checks).
    """

    images: np.ndarray
    clean: np.ndarray
    subject: np.ndarray
    time: np.ndarray
    age: np.ndarray
    sex: np.ndarray
    disease: np.ndarray
    digit: np.ndarray
    rotation: np.ndarray

    def covariates(self) -> Covariates:
        """``continuous = [standardised t, age]``, ``categorical = [sex, disease, subject]``."""
        cont = np.stack([(self.time - TIME_MEAN) / TIME_STD, self.age], axis=1)
        cat = np.stack([self.sex, self.disease, self.subject], axis=1)
        return Covariates(jnp.asarray(cont, jnp.float32), jnp.asarray(cat, jnp.int32))


def render(base: np.ndarray, angle: float, shift: float, intensity: float) -> np.ndarray:
    """Warp one ``[8, 8]`` image: rotate (degrees), shift right (pixels), scale intensity."""
    img = scipy.ndimage.rotate(base, angle, reshape=False, order=1, mode="constant")
    img = scipy.ndimage.shift(img, (0.0, shift), order=1, mode="constant")
    return intensity * img


def health_digits(key: jax.Array, n_subjects: int, n_times: int = 20, noise: float = 0.05):
    """Simulate ``n_subjects`` subjects with ``n_times`` observations each."""
    key = check_key(key)
    n_subjects = check_int(n_subjects, "n_subjects", minimum=1)
    n_times = check_int(n_times, "n_times", minimum=1)
    check_scalar(noise, "noise", 0.0)
    pool, target = load_digits(scale="unit", layout="image", dtype=np.float64)  # [1797, 8, 8]
    keys = jax.random.split(key, 8)
    P, T = n_subjects, n_times
    pick = np.asarray(jax.random.randint(keys[0], (P,), 0, len(pool)))
    age = np.asarray(jax.random.uniform(keys[1], (P,), minval=-1.0, maxval=1.0), np.float64)
    sex = np.asarray(jax.random.bernoulli(keys[2], 0.5, (P,)), np.int64)
    disease = np.asarray(jax.random.bernoulli(keys[3], 0.5, (P,)), np.int64)
    offset = 8.0 * np.asarray(jax.random.normal(keys[4], (P,)), np.float64)
    times = np.sort(np.asarray(jax.random.uniform(keys[5], (P, T)), np.float64), axis=1)
    angle = 25.0 * np.sin(2 * np.pi * times) + 35.0 * disease[:, None] * times + offset[:, None]
    clean = np.empty((P, T, 64))
    for p in range(P):
        for j in range(T):
            img = render(pool[pick[p]], angle[p, j], 0.8 * age[p], 1.0 - 0.3 * sex[p] * times[p, j])
            clean[p, j] = img.reshape(-1)
    eps = noise * np.asarray(jax.random.normal(keys[6], (P, T, 64)), np.float64)
    rep = lambda v: np.repeat(v, T)  # noqa: E731
    return HealthDigits(
        images=(clean + eps).reshape(P * T, 64).astype(np.float32),
        clean=clean.reshape(P * T, 64).astype(np.float32),
        subject=rep(np.arange(P)),
        time=times.reshape(-1),
        age=rep(age),
        sex=rep(sex),
        disease=rep(disease),
        digit=rep(target[pick]),
        rotation=angle.reshape(-1),
    )


def splits(data: HealthDigits, key: jax.Array, new_fraction: float = 0.2, future_fraction=0.25):
    """Index sets ``(train, future, new_subject)``.

    ``new_fraction`` of the subjects are held out entirely; of the others, the last
    ``future_fraction`` of each subject's time points (times are sorted) form the future set.
    Raises when the training set would be empty.
    """
    if not isinstance(data, HealthDigits):
        raise TypeError(f"`data` must be a HealthDigits (from health_digits), got "
                        f"{type(data).__name__}.")  # fmt: skip
    key = check_key(key)
    check_scalar(new_fraction, "new_fraction", 0.0, 1.0, high_open=True)
    check_scalar(future_fraction, "future_fraction", 0.0, 1.0, high_open=True)
    P = int(data.subject.max()) + 1
    T = len(data.subject) // P
    perm = np.asarray(jax.random.permutation(key, P))
    new = np.sort(perm[: max(1, int(round(new_fraction * P)))])
    is_new = np.isin(data.subject, new)
    position = np.tile(np.arange(T), P)
    is_future = ~is_new & (position >= T - int(round(future_fraction * T)))
    train = ~is_new & ~is_future
    if not train.any():
        raise ValueError(f"`new_fraction`={new_fraction} / `future_fraction`={future_fraction} "
                         f"leave no training observation ({P} subjects x {T} times).")  # fmt: skip
    return np.flatnonzero(train), np.flatnonzero(is_future), np.flatnonzero(is_new)


# Component names of :func:`health_digits_components`, in order.
HEALTH_DIGITS_COMPONENTS = ("id", "t", "age", "sex", "disease", "t_x_disease", "t_x_id")


def health_digits_components(
    n_subjects: int,
    num_basis: int = 24,
    boundary: float = 4.0,
    exclude: tuple[str, ...] = (),
) -> tuple[Component, ...]:
    """The additive prior for :meth:`HealthDigits.covariates`, minus the components in ``exclude``.

    Continuous columns ``[t, age]``, categorical ``[sex, disease, subject]``; components (see
    :data:`HEALTH_DIGITS_COMPONENTS`): ``id`` (subject effect), ``t``, ``age`` (SE), ``sex``,
    ``disease`` (binary), ``t_x_disease`` (SE(t) x disease) and ``t_x_id`` (SE(t) x subject, a
    subject effect). Every SE kind has ``num_basis`` functions on ``[-boundary, boundary]``.
    """
    n_subjects = check_int(n_subjects, "n_subjects", minimum=1)
    if isinstance(exclude, str) or not isinstance(exclude, list | tuple | set | frozenset):
        raise ValueError(f"`exclude` must be a tuple of component names, got {exclude!r}.")
    unknown = set(exclude) - set(HEALTH_DIGITS_COMPONENTS)
    if unknown:
        raise ValueError(
            f"`exclude` names unknown components {sorted(unknown)}; known: "
            f"{HEALTH_DIGITS_COMPONENTS}."
        )
    m, j = num_basis, boundary
    comps = (
        categorical("id", 2, n_subjects, subject=True),
        se("t", 0, m, j),
        se("age", 1, m, j),
        binary("sex", 0),
        binary("disease", 1),
        se_x_categorical("t_x_disease", 0, 1, 2, m, j),
        se_x_categorical("t_x_id", 0, 2, n_subjects, m, j, subject=True),
    )
    return tuple(c for c in comps if c.name not in exclude)


def health_digits_config(
    n_subjects: int,
    num_basis: int = 24,
    boundary: float = 4.0,
    exclude: tuple[str, ...] = (),
    **fields,
) -> GPVAEConfig:
    """:class:`~.model.GPVAEConfig` on :func:`health_digits_components` for ``[N, 64]`` images.

    ``fields`` are the other ``GPVAEConfig`` fields (``latent_dim``, ``decoder_hidden``,
    ``dropout``, ``num_particles``, ``local_subject_samples``, ``fused``, ...); ``output_dim``
    defaults to 64, the 8 x 8 pixels.
    """
    known = {f.name for f in dataclasses.fields(GPVAEConfig)} - {"components"}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise TypeError(f"`fields` {unknown} are not GPVAEConfig fields; known: {sorted(known)}.")
    comps = health_digits_components(n_subjects, num_basis, boundary, exclude)
    return GPVAEConfig(comps, **{"output_dim": 64, **fields})

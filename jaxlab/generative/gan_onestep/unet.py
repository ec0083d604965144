"""A small SongUNet-style denoiser network ``F(x_in, c_noise)`` in Flax Linen.

Two layouts (``UNetConfig.layout``), both with ``n_blocks`` residual blocks per encoder level and
``n_blocks + 1`` per decoder level, each decoder block taking the matching encoder activation
concatenated on channels (SongUNet's skip layout):

- ``"song"`` (default; the official NCSN++ ``SongUNet`` structure, ``encoder_type="residual"``):
  ``conv_in`` (3x3); below the first level a resampling residual block ``enc{l}_down``
  (average pooling before its 3x3 conv and its 1x1 skip) whose output is averaged with
  ``enc{l}_aux_residual``, a 3x3 conv of the previous level's pooled auxiliary signal (the input
  image at level 1), as ``(h + aux) / sqrt(2)``; at the lowest resolution every encoder block is
  followed by self-attention. The decoder starts with ``dec{L}_in0`` (with attention) and
  ``dec{L}_in1`` at the lowest resolution, the last block of that level has attention too, and
  each higher level starts with a nearest-upsampling block ``dec{l}_up``. ``norm_out`` -> SiLU ->
  ``conv_out``.
- ``"compact"`` (the first landed net): average pooling / nearest upsampling instead of the
  resampling blocks, no auxiliary residual convs, no ``in0``/``in1`` blocks, one attention block
  after the last encoder block.

Noise embedding: sinusoidal features of ``c_noise`` (width ``channels[0]``) -> ``map_layer0`` ->
SiLU -> ``map_layer1`` -> SiLU, of width ``emb_dim`` (SongUNet: 4x the base channels).

Residual block (module names are the freeze rule's vocabulary)::

    h = conv0(resample(SiLU(norm0(x))))              # 3x3
    a = affine(emb)
    "shift" (SongUNet, adaptive_scale=False):   h = SiLU(norm1(h + a))
    "scale_shift" (AdaGN):  scale, shift = split(a); h = SiLU(norm1(h) * (1 + scale) + shift)
    h = conv1(h)                                     # 3x3
    out = (h + skip(resample(x))) / sqrt(2)          # skip: 1x1 conv when channels change or
                                                     # the block resamples

Attention block: ``qkv`` (1x1) of ``norm(x)``, multi-head softmax attention over the ``H W``
positions, ``proj`` (1x1), residual, divided by sqrt(2).

Every module is named so that a path filter selects a role: ``*block*|*_down|*_up|*_in0|*_in1``
with ``conv0``/``conv1`` (3x3 residual convolutions), ``*attn*/proj`` (attention output
projections), ``affine``, ``qkv``, ``skip``, ``norm*``, ``map_*``, ``*aux_residual``,
``conv_in``/``conv_out`` (see :mod:`.train` for D2O-F's rule).

What differs from the official SongUNet at this size: the noise embedding is sinusoidal (NCSN++
uses random Fourier features), resampling is 2x2 average pooling / nearest (NCSN++ uses the
[1, 3, 3, 1] filter), the auxiliary conv pools before convolving (NCSN++ fuses them), and
initialisation is Flax's default (SongUNet zero-initialises ``conv1`` and ``conv_out``); no
dropout (D2O fine-tunes with dropout 0).
"""

from __future__ import annotations

import dataclasses
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxlab.core import checks
from jaxlab.generative.gan_onestep import _checks

__all__ = ["UNet", "UNetConfig"]

LAYOUTS = ("song", "compact")
AFFINES = ("shift", "scale_shift")


@dataclasses.dataclass(frozen=True)
class UNetConfig:
    """Architecture of :class:`UNet`.

    Attributes:
      channels: channels per resolution level, highest resolution first (one level per entry;
        each level below the first halves the spatial size).
      n_blocks: residual blocks per encoder level (the decoder has ``n_blocks + 1``).
      attention: self-attention at the lowest resolution.
      n_heads: attention heads.
      emb_dim: noise-embedding width (``None``: 4x the first level's channels, SongUNet's
        ``channel_mult_emb = 4``).
      affine: the blocks' noise modulation, ``"shift"`` (SongUNet) or ``"scale_shift"`` (AdaGN).
      layout: ``"song"`` (the official SongUNet structure) or ``"compact"`` (module docstring).
      groups: GroupNorm groups (must divide every channel count).
      out_channels: image channels (1 for digits).
    """

    channels: tuple[int, ...] = (32, 64)
    n_blocks: int = 2
    attention: bool = True
    n_heads: int = 1
    emb_dim: int | None = None
    affine: str = "shift"
    layout: str = "song"
    groups: int = 8
    out_channels: int = 1

    def __post_init__(self):
        if not isinstance(self.channels, tuple | list) or not self.channels:
            raise ValueError(
                f"UNetConfig: `channels` must be a non-empty tuple of positive ints, got "
                f"{self.channels!r}."
            )
        for c in self.channels:
            checks.check_int(c, "channels", minimum=1)
        checks.check_int(self.groups, "groups", minimum=1)
        bad = [c for c in self.channels if c % self.groups]
        if bad:
            raise ValueError(f"UNetConfig: `groups`={self.groups} must divide channels {bad}.")
        checks.check_int(self.n_blocks, "n_blocks", minimum=1)
        checks.check_int(self.n_heads, "n_heads", minimum=1)
        if self.attention is not True and self.attention is not False:
            raise TypeError(f"UNetConfig: `attention` must be a bool, got {self.attention!r}.")
        if self.attention and self.channels[-1] % self.n_heads:
            raise ValueError(
                f"UNetConfig: `n_heads`={self.n_heads} must divide the attention level's "
                f"channels {self.channels[-1]}."
            )
        checks.check_choice(self.affine, "affine", AFFINES)
        checks.check_choice(self.layout, "layout", LAYOUTS)
        if self.emb_dim is not None:
            checks.check_int(self.emb_dim, "emb_dim", minimum=1)
        checks.check_int(self.out_channels, "out_channels", minimum=1)


def _sinusoidal(c_noise: jax.Array, dim: int) -> jax.Array:
    half = dim // 2
    freqs = jnp.exp(-math.log(10000.0) * jnp.arange(half, dtype=jnp.float32) / half)
    # c_noise = ln(sigma)/4 spans about [-1.6, 1.1]; scale it to use the high frequencies.
    angles = 250.0 * c_noise.astype(jnp.float32)[:, None] * freqs[None, :]
    return jnp.concatenate([jnp.cos(angles), jnp.sin(angles)], axis=-1)


def _down(x):
    return nn.avg_pool(x, (2, 2), (2, 2))


def _up(x):
    b, h, w, c = x.shape
    return jax.image.resize(x, (b, 2 * h, 2 * w, c), "nearest")


class ResBlock(nn.Module):
    out_ch: int
    groups: int
    affine_mode: str = "scale_shift"
    resample: str | None = None  # None, "down" or "up"

    @nn.compact
    def __call__(self, x, emb):
        res = {"down": _down, "up": _up, None: lambda t: t}[self.resample]
        h = nn.silu(nn.GroupNorm(self.groups, name="norm0")(x))
        h = nn.Conv(self.out_ch, (3, 3), name="conv0")(res(h))
        if self.affine_mode == "shift":
            shift = nn.Dense(self.out_ch, name="affine")(emb)
            h = nn.silu(nn.GroupNorm(self.groups, name="norm1")(h + shift[:, None, None, :]))
        else:
            scale, shift = jnp.split(nn.Dense(2 * self.out_ch, name="affine")(emb), 2, axis=-1)
            h = nn.GroupNorm(self.groups, name="norm1")(h)
            h = nn.silu(h * (1.0 + scale[:, None, None, :]) + shift[:, None, None, :])
        h = nn.Conv(self.out_ch, (3, 3), name="conv1")(h)
        if x.shape[-1] == self.out_ch and self.resample is None:
            skip = x
        else:
            skip = nn.Conv(self.out_ch, (1, 1), name="skip")(res(x))
        return (h + skip) / math.sqrt(2.0)


class AttnBlock(nn.Module):
    n_heads: int
    groups: int

    @nn.compact
    def __call__(self, x):
        b, hgt, wid, ch = x.shape
        qkv = nn.Conv(3 * ch, (1, 1), name="qkv")(nn.GroupNorm(self.groups, name="norm")(x))
        q, k, v = jnp.split(qkv.reshape(b, hgt * wid, 3, self.n_heads, ch // self.n_heads), 3, 2)
        q, k, v = (t[:, :, 0] for t in (q, k, v))  # [B, L, heads, dh]
        logits = jnp.einsum("blhd,bmhd->bhlm", q, k) / math.sqrt(ch // self.n_heads)
        a = jnp.einsum("bhlm,bmhd->blhd", jax.nn.softmax(logits, axis=-1), v)
        out = nn.Conv(ch, (1, 1), name="proj")(a.reshape(b, hgt, wid, ch))
        return (x + out) / math.sqrt(2.0)


class UNet(nn.Module):
    """``F(x_in [B, H, W, C], c_noise [B]) -> [B, H, W, out_channels]``; H, W divisible by
    ``2^(len(channels) - 1)``."""

    config: UNetConfig = UNetConfig()

    @nn.compact
    def __call__(self, x, c_noise):
        cfg = _checks.check_instance(self.config, "config", UNetConfig)
        _checks.check_images(x, "x", finite=False)
        scale = 2 ** (len(cfg.channels) - 1)
        if x.shape[1] % scale or x.shape[2] % scale:
            raise ValueError(
                f"`x` images must have H and W divisible by {scale} (one halving per level below "
                f"the first), got shape {x.shape}."
            )
        checks.check_real(c_noise, "c_noise")
        checks.check_shape(c_noise, "c_noise", (x.shape[0],), "[B] like `x`")
        emb_dim = cfg.emb_dim or 4 * cfg.channels[0]
        emb = _sinusoidal(c_noise, cfg.channels[0])
        emb = nn.silu(nn.Dense(emb_dim, name="map_layer0")(emb))
        emb = nn.silu(nn.Dense(emb_dim, name="map_layer1")(emb))
        if cfg.layout == "song":
            h = self._song(x, emb)
        else:
            h = self._compact(x, emb)
        h = nn.silu(nn.GroupNorm(cfg.groups, name="norm_out")(h))
        return nn.Conv(cfg.out_channels, (3, 3), name="conv_out")(h)

    def _block(self, ch, name, resample=None):
        cfg = self.config
        return ResBlock(ch, cfg.groups, cfg.affine, resample, name=name)

    def _attn(self, name):
        return AttnBlock(self.config.n_heads, self.config.groups, name=name)

    def _song(self, x, emb):
        cfg = self.config
        lowest = len(cfg.channels) - 1
        attend = lambda lvl: cfg.attention and lvl == lowest  # noqa: E731
        h = nn.Conv(cfg.channels[0], (3, 3), name="conv_in")(x)
        skips, aux = [h], x
        for lvl, ch in enumerate(cfg.channels):
            if lvl > 0:
                h = self._block(h.shape[-1], f"enc{lvl}_down", "down")(h, emb)
                aux_conv = nn.Conv(h.shape[-1], (3, 3), name=f"enc{lvl}_aux_residual")
                h = aux = (h + aux_conv(_down(aux))) / math.sqrt(2.0)
                skips.append(h)
            for i in range(cfg.n_blocks):
                h = self._block(ch, f"enc{lvl}_block{i}")(h, emb)
                if attend(lvl):
                    h = self._attn(f"enc{lvl}_block{i}_attn")(h)
                skips.append(h)
        for lvl in reversed(range(len(cfg.channels))):
            ch = cfg.channels[lvl]
            if lvl == lowest:
                h = self._block(h.shape[-1], f"dec{lvl}_in0")(h, emb)
                if cfg.attention:
                    h = self._attn(f"dec{lvl}_in0_attn")(h)
                h = self._block(h.shape[-1], f"dec{lvl}_in1")(h, emb)
            else:
                h = self._block(h.shape[-1], f"dec{lvl}_up", "up")(h, emb)
            for i in range(cfg.n_blocks + 1):
                h = jnp.concatenate([h, skips.pop()], axis=-1)
                h = self._block(ch, f"dec{lvl}_block{i}")(h, emb)
                if attend(lvl) and i == cfg.n_blocks:
                    h = self._attn(f"dec{lvl}_block{i}_attn")(h)
        return h

    def _compact(self, x, emb):
        cfg = self.config
        levels = len(cfg.channels)
        h = nn.Conv(cfg.channels[0], (3, 3), name="conv_in")(x)
        skips = [h]
        for lvl, ch in enumerate(cfg.channels):
            for i in range(cfg.n_blocks):
                h = self._block(ch, f"enc{lvl}_block{i}")(h, emb)
                if cfg.attention and lvl == levels - 1 and i == cfg.n_blocks - 1:
                    h = self._attn(f"enc{lvl}_attn")(h)
                skips.append(h)
            if lvl < levels - 1:
                h = _down(h)
                skips.append(h)
        for lvl in reversed(range(levels)):
            ch = cfg.channels[lvl]
            for i in range(cfg.n_blocks + 1):
                h = jnp.concatenate([h, skips.pop()], axis=-1)
                h = self._block(ch, f"dec{lvl}_block{i}")(h, emb)
            if lvl > 0:
                h = _up(h)
        return h

"""A small SongUNet-style denoiser network ``F(x_in, c_noise)`` in Flax Linen.

Layout (defaults: 8x8 inputs, channels 32 and 64, two residual blocks per level):

- noise embedding: sinusoidal features of ``c_noise`` -> ``map_layer0`` -> SiLU -> ``map_layer1``
  -> SiLU;
- ``conv_in`` (3x3) -> encoder: at each resolution ``n_blocks`` residual blocks, then (except at
  the lowest) an average-pool 2x; one self-attention block after the last block at the lowest
  resolution (``enc{L}_attn``);
- decoder: at each resolution, from the lowest, ``n_blocks + 1`` residual blocks, each taking
  the matching encoder activation concatenated on channels (SongUNet's skip layout), then nearest
  upsampling 2x; ``norm_out`` -> SiLU -> ``conv_out`` (3x3).

Residual block (module names are the freeze rule's vocabulary)::

    h = conv0(SiLU(norm0(x)))                        # 3x3
    scale, shift = split(affine(emb))                # the noise-level modulation (AdaGN)
    h = SiLU(norm1(h) * (1 + scale) + shift)
    h = conv1(h)                                     # 3x3
    out = (h + skip(x)) / sqrt(2)                    # skip: 1x1 conv when channels change

Attention block: ``qkv`` (1x1) of ``norm(x)``, multi-head softmax attention over the ``H W``
positions, ``proj`` (1x1), residual, divided by sqrt(2).

Every module is named so that a path filter selects a role: ``*/block*/conv0|conv1`` (3x3
residual convolutions), ``*/attn*/proj`` (attention output projections), ``affine``, ``qkv``,
``skip``, ``norm*``, ``map_*``, ``conv_in``/``conv_out`` (see :mod:`.train` for D2O-F's rule).
"""

from __future__ import annotations

import dataclasses
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

__all__ = ["UNet", "UNetConfig"]


@dataclasses.dataclass(frozen=True)
class UNetConfig:
    """Architecture of :class:`UNet`.

    Attributes:
      channels: channels per resolution level, highest resolution first (one level per entry;
        each level below the first halves the spatial size).
      n_blocks: residual blocks per encoder level (the decoder has ``n_blocks + 1``).
      attention: self-attention blocks at the lowest resolution.
      n_heads: attention heads.
      emb_dim: noise-embedding width (``None``: the first level's channels; SongUNet uses 4x, but
        at this size the per-block ``affine`` layers would then outweigh the convolutions and
        D2O-F's frozen fraction would drop below 0.8).
      groups: GroupNorm groups (must divide every channel count).
      out_channels: image channels (1 for digits).
    """

    channels: tuple[int, ...] = (32, 64)
    n_blocks: int = 2
    attention: bool = True
    n_heads: int = 1
    emb_dim: int | None = None
    groups: int = 8
    out_channels: int = 1

    def __post_init__(self):
        if not self.channels or any(c < 1 for c in self.channels):
            raise ValueError(f"UNetConfig: `channels` must be positive ints, got {self.channels}.")
        bad = [c for c in self.channels if c % self.groups]
        if bad:
            raise ValueError(f"UNetConfig: `groups`={self.groups} must divide channels {bad}.")
        if self.n_blocks < 1:
            raise ValueError(f"UNetConfig: `n_blocks` must be >= 1, got {self.n_blocks}.")


def _sinusoidal(c_noise: jax.Array, dim: int) -> jax.Array:
    half = dim // 2
    freqs = jnp.exp(-math.log(10000.0) * jnp.arange(half, dtype=jnp.float32) / half)
    # c_noise = ln(sigma)/4 spans about [-1.6, 1.1]; scale it to use the high frequencies.
    angles = 250.0 * c_noise.astype(jnp.float32)[:, None] * freqs[None, :]
    return jnp.concatenate([jnp.cos(angles), jnp.sin(angles)], axis=-1)


class ResBlock(nn.Module):
    out_ch: int
    groups: int

    @nn.compact
    def __call__(self, x, emb):
        h = nn.silu(nn.GroupNorm(self.groups, name="norm0")(x))
        h = nn.Conv(self.out_ch, (3, 3), name="conv0")(h)
        scale, shift = jnp.split(nn.Dense(2 * self.out_ch, name="affine")(emb), 2, axis=-1)
        h = nn.GroupNorm(self.groups, name="norm1")(h)
        h = nn.silu(h * (1.0 + scale[:, None, None, :]) + shift[:, None, None, :])
        h = nn.Conv(self.out_ch, (3, 3), name="conv1")(h)
        skip = x if x.shape[-1] == self.out_ch else nn.Conv(self.out_ch, (1, 1), name="skip")(x)
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
        cfg = self.config
        emb_dim = cfg.emb_dim or cfg.channels[0]
        emb = _sinusoidal(c_noise, cfg.channels[0])
        emb = nn.silu(nn.Dense(emb_dim, name="map_layer0")(emb))
        emb = nn.silu(nn.Dense(emb_dim, name="map_layer1")(emb))

        levels = len(cfg.channels)
        h = nn.Conv(cfg.channels[0], (3, 3), name="conv_in")(x)
        skips = [h]
        for lvl, ch in enumerate(cfg.channels):
            for i in range(cfg.n_blocks):
                h = ResBlock(ch, cfg.groups, name=f"enc{lvl}_block{i}")(h, emb)
                if cfg.attention and lvl == levels - 1 and i == cfg.n_blocks - 1:
                    h = AttnBlock(cfg.n_heads, cfg.groups, name=f"enc{lvl}_attn")(h)
                skips.append(h)
            if lvl < levels - 1:
                h = nn.avg_pool(h, (2, 2), (2, 2))
                skips.append(h)
        for lvl in reversed(range(levels)):
            ch = cfg.channels[lvl]
            for i in range(cfg.n_blocks + 1):
                h = jnp.concatenate([h, skips.pop()], axis=-1)
                h = ResBlock(ch, cfg.groups, name=f"dec{lvl}_block{i}")(h, emb)
            if lvl > 0:
                b, hh, ww, c = h.shape
                h = jax.image.resize(h, (b, 2 * hh, 2 * ww, c), "nearest")
        h = nn.silu(nn.GroupNorm(cfg.groups, name="norm_out")(h))
        return nn.Conv(cfg.out_channels, (3, 3), name="conv_out")(h)

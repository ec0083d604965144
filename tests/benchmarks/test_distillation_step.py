"""The distillation_step benchmark's host-loop sampler computes what the library's sampler does."""

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import distillation_step as bench
from jaxlab.generative import gan_onestep as G


def test_host_heun_matches_library_sampler():
    cfg = G.EDMConfig(sigma_data=0.4)
    den = G.gaussian_denoiser(0.3, 0.4)
    z = jax.random.normal(jax.random.key(0), (16, 2, 2, 1))
    sigmas = G.karras_steps(6, cfg)
    ref = G.heun_sample(den, cfg.sigma_max * z, sigmas)
    levels = [float(s) for s in sigmas]
    # traced once (one program instead of one per eager op); the loop is the benchmark's, unrolled
    host = jax.jit(
        lambda x: bench.host_heun(lambda x, s: den(x, jnp.full((x.shape[0],), s)), x, levels)
    )(cfg.sigma_max * z)
    np.testing.assert_allclose(host, ref, rtol=1e-5, atol=1e-5)

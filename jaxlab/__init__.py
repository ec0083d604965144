"""jaxlab: JAX-first functional implementations of nineteen ICML 2025 methods.

Each method lives in ``jaxlab.<field>.<method>`` as pure jitted functions (``init``/``step`` pairs
over pytree states) and Flax Linen modules. ``jaxlab.core`` holds only what more than one method
uses: sharding, scan-based training loops and checkpointing.

The library never configures JAX (no ``jax.config.update``, no ``XLA_FLAGS``); entry points
(``python -m experiments``, ``python -m benchmarks``, ``tests/conftest.py``) do.
"""

__version__ = "0.1.0"

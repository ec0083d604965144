"""jaxlab experiments: one module per paper, each reproducing its headline claim on 2 CPU cores.

Run ``python -m experiments list`` to see them. The module contract (``NAME``, ``PAPER``,
``CLAIM``, ``Config``, ``PRESETS``, ``run``) is documented in :mod:`experiments._runner`; shared
helpers for tables, figures and checkpoints are in :mod:`experiments._common`.
"""

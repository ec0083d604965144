"""jaxlab benchmarks: each hot core timed against its baselines on equal work.

Run ``python -m benchmarks list``. The module contract (``NAME``, ``DESCRIPTION``,
``run(size) -> list[dict]``) and the shared timing helper are in :mod:`benchmarks._timing`.
"""

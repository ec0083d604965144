"""Shared infrastructure: what more than one jaxlab method uses, and nothing else.

- :mod:`jaxlab.core.sharding`: the one way a hot core shards its batch axis.
- :mod:`jaxlab.core.training`: scan-based loops run in jitted chunks, with progress and checkpoints.
- :mod:`jaxlab.core.checkpoint`: saving and restoring pytrees with orbax-checkpoint.
"""

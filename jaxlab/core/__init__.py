"""Shared infrastructure (what more than one method uses) and the contract every method follows.

Modules:

- :mod:`jaxlab.core.nn`: ``MLP`` (activation, dropout, init schemes incl. PyTorch's default),
  ``ConvNet`` and ``Transformer`` (pre-LN, RoPE with interpolation, attention maps, head
  knockout/patching, KV cache, ``generate``);
- :mod:`jaxlab.core.text`: the all-MiniLM-L6-v2 sentence encoder as a Flax BERT;
- :mod:`jaxlab.core.data`: sklearn digits with seeded stratified splits;
- :mod:`jaxlab.core.training`: ``TrainState``, ``fit``, ``minibatch_epochs``, scan loops in
  jitted chunks (``run_chunked``), ``map_in_chunks``, progress bars;
- :mod:`jaxlab.core.checks`: argument checks at the API boundary (concrete values only);
- :mod:`jaxlab.core.sharding`: the one way a hot core shards its batch axis;
- :mod:`jaxlab.core.checkpoint`: saving and restoring pytrees with orbax-checkpoint;
- :mod:`jaxlab.core.timing`: compile time apart from steady state (benchmarks, experiments).

The method contract
-------------------

Every method package (``jaxlab.<field>.<method>``) has one shape, so that a user who has used one
method can use the next:

1. **Config.** One frozen dataclass per method (``<Method>Config``, or one per trainable piece),
   with documented defaults, validated in ``__post_init__``; an invalid field raises
   ``ValueError`` naming the field (use :mod:`jaxlab.core.checks`). Configs are hashable, so they
   can be static arguments of ``jit``.
2. **Factory.** ``make_<thing>(config, ..., mesh=None)`` returns a small ``NamedTuple`` of pure
   functions that close over the config, the networks and any fixed data (never a class with
   mutable state); ``mesh`` (a ``jax.sharding.Mesh`` from :func:`jaxlab.core.sharding.data_mesh`)
   shards the method's batch axis, ``None`` runs on one device with the same code. A method that
   is a statistic rather than an iterative procedure (``cmi_test``, ``robust_dkw``) exposes plain
   module-level pure functions instead, taking the config as an argument.
3. **State and steps.** ``init(key, ...) -> state`` and ``step(state, x=None) -> (state,
   metrics)``, where ``metrics`` is a ``dict`` of arrays (scalars or small arrays) and ``x`` is the
   per-step input (a batch) or ``None``. States are ``flax.struct.dataclass`` pytrees whose
   docstring lists every field with its shape. The PRNG key lives in the state; step ``t`` draws
   from ``jax.random.fold_in(state.key, t)`` (so chunked, resumed and one-shot runs agree). Whole
   loops are ``lax.scan`` over ``step`` (:func:`jaxlab.core.training.scan_steps`,
   :func:`~jaxlab.core.training.run_chunked`); seeds are ``vmap``-ped.
4. **Exports and example.** The public entry points are exported from the method's
   ``__init__.py``, whose docstring ends with a runnable ``Example::`` block (tiny sizes, a few
   seconds); ``tests/test_examples.py`` executes every one of them.
5. **Bad input is an error, never a number** (issue 23). Every public entry point (config
   ``__post_init__``, ``make_*``, ``init``, ``step``, the pure functions in ``__all__``) checks
   its arguments with :mod:`jaxlab.core.checks` before any tracing: type, rank, shape (also
   against each other and against the state's sizes, :func:`~jaxlab.core.checks.check_same_tree`),
   dtype, range, counts (ints, not ``2.5``), NaN / inf in data (where concrete), and keys through
   :func:`~jaxlab.core.checks.check_key` (typed keys and legacy ``uint32[2]``). Each raises
   ``ValueError`` / ``TypeError`` naming the argument, the expected and the received value. A
   jitted public function is a checking wrapper around its jitted core. Inside a jitted loop
   a value can still become non-finite: every ``step``'s metrics carry ``finite``
   (:func:`~jaxlab.core.training.all_finite`), a statistic that is NaN gives a NaN p-value and a
   ``finite`` field false (never 0). Each method has a table-driven test
   ``tests/<field>/test_<method>_bad_inputs.py``; experiments declare ``LIMITS`` for every
   config field, checked by the CLI before a run (one line, exit code 2).
6. **Shared pieces, not copies.** Networks come from :mod:`~jaxlab.core.nn`, data from
   :mod:`~jaxlab.core.data`, optimisation from :mod:`~jaxlab.core.training`, checks from
   :mod:`~jaxlab.core.checks`. A helper moves here when a second method needs it. ``jaxlab``
   never imports ``experiments`` or ``benchmarks`` (``tests/test_layering.py``).

Example (a landed method, through its factory)::

    import jax
    from jaxlab.games.auctions import AuctionGame, LearnerConfig, make_learner

    game = AuctionGame("fp", bidders_per_type=(2,))
    learner = make_learner(game, LearnerConfig(method="abr", market_samples=256))
    state = learner.init(jax.random.key(0))
    state, metrics = jax.jit(learner.step)(state)       # metrics: a dict of arrays
"""

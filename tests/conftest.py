"""Test-session setup: 4 forced host devices (before JAX starts), fast compiles, strict numerics,
the per-method budget and the xdist groups that share compiled programs.

Four fake CPU devices check sharded == unsharded and output shardings; they say nothing about
speed. Rank promotion raises (``[B] + [B, 1]`` is a bug, not a broadcast); a test that needs a
library's implicit rank promotion can wrap the call in ``jax.numpy_rank_promotion("allow")``.
Dtype promotion stays "standard": optax's own updates mix Python floats with int32 step counts,
which "strict" rejects. x64 stays off, so float64 cannot creep in.
"""

import os

_FLAG = "--xla_force_host_platform_device_count"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FLAG}=4".strip()
# The suite is compile-bound (hundreds of small jitted programs, each run a few times): LLVM at
# -O0 compiles them about 40% faster on XLA:CPU, and the tests check values, not speed.
_OPT = "--xla_backend_optimization_level"
if _OPT not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += f" {_OPT}=0"
# The legacy elemental emitters compile about 40% faster than XLA:CPU's fusion emitters here
# (measured: 17-20 s against 30-35 s of backend compile on the same three tests).
_EMITTERS = "--xla_cpu_use_fusion_emitters"
if _EMITTERS not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += f" {_EMITTERS}=false"
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# Two workers on two cores: one BLAS thread each (sklearn's solvers slowed ~40x oversubscribed).
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")

# JAXLAB_TEST_CACHE=<dir>: a persistent compilation cache outside the repository, for repeat runs
# (`make test` sets ~/.cache/jaxlab/jax-tests; `make test TEST_CACHE=0` runs cold). The suite must
# pass, and within its budget, without it. Plain `pytest` runs cold, so profiles stay honest.
# Programs that compile in under 0.05 s are not worth a disk entry.
_CACHE = os.environ.get("JAXLAB_TEST_CACHE", "")
if _CACHE not in ("", "0"):
    jax.config.update("jax_compilation_cache_dir", _CACHE)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.05)

N_DEVICES = 4

# ------------------------------------------------------------------------ the suite's budget
# `make test` runs on 2 cores with 2 pytest-xdist workers and must finish in 15 minutes for all
# nineteen methods (6 minutes for the first eight). That is about 40 s of suite (wall) time per
# method, i.e. about 80 s of summed test time over its test files (unit, experiment, benchmark),
# cold (no persistent compilation cache). Every method's tests are written to it:
# - the suite is compile-bound: build each expensive program once per module (functools.cache'd
#   builders, module fixtures) and reuse its shapes across tests; no eager jnp loops;
# - one tiny end-to-end config per experiment; quick presets never run here;
# - check with `JAXLAB_TEST_PROFILE=/tmp/p pytest -p no:xdist tests/<method files>`
#   (per-test trace / lower / compile seconds and program counts, below).
# All test files of one method run in one worker (one xdist group, named after the method), so a
# compiled setup cached in the library or a test helper is shared by its unit and experiment tests.
METHOD_BUDGET_S = 40
_GROUP_ALIASES = {  # test-file stem -> the method it belongs to (stems equal to the method: none)
    "convex_markov_games": "convex_markov",
    "cmg_solvers": "convex_markov",
    "cmi_bootstrap": "cmi_test",
    "distillation_step": "gan_onestep",
    "fedgwc_baselines": "fedgwc",
    "ssar_cql": "ssar",
    "ssar_steps": "ssar",
    "retrieval_score": "retrieval_heads",
    "knn_search": "visual_memory",
    "llm_bp_bad_inputs": "llm_bp",
    "retrieval_heads_bad_inputs": "retrieval_heads",
    "general_points_ppo": "general_points",
    "general_points_bad_inputs": "general_points",
    "general_points_rl": "general_points",
    "bp_inference": "llm_bp",
    "visual_memory_bad_inputs": "visual_memory",
}
_BY_FILE = {"core", "tests"}  # core and suite-wide tests: one group per file


def method_group(path) -> str:
    """The xdist group of a test file: its method's name; ``<dir>/<file>`` for core and suite-wide
    files (so a module fixture, e.g. the MiniLM encoder, is built in one worker, not both)."""
    from pathlib import Path

    path = Path(path)
    if path.parent.name in _BY_FILE:
        return f"{path.parent.name}/{path.stem}"
    stem = path.stem.removeprefix("test_")
    return _GROUP_ALIASES.get(stem, stem)


def pytest_configure(config):
    # registered here too, so that `-p no:xdist` runs (profiling one method) accept the marks
    config.addinivalue_line("markers", "xdist_group(name): run these tests in one xdist worker")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    methods, files = [], []
    for item in items:
        group = method_group(item.path)
        package = getattr(item, "callspec", None) and item.callspec.params.get("package")
        if item.path.name == "test_examples.py" and package and package.count(".") == 2:
            group = package.rsplit(".", 1)[1]  # a method's Example:: runs with its tests
        item.add_marker(pytest.mark.xdist_group(group))
        (files if "/" in group else methods).append(item)
    items[:] = methods + files  # the long method groups first; the short files fill the gaps


def _group_suffix(item) -> str:
    """The suffix xdist's loadgroup appends to a grouped test's node id ("" if ungrouped)."""
    groups = sorted(str(m.args[0]) for m in item.iter_markers("xdist_group"))
    return "@" + "_".join(groups) if groups else ""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids):
    # The scheduler sees each worker's node ids, and under `--dist loadgroup` it groups by the
    # "@<group>" suffix xdist appends to them (every test here has a group). Some pytest/xdist
    # pairs drop the suffix silently (pytest 9.2 with xdist 3.8, pytest-dev/pytest-xdist#1386):
    # then a method's tests run in either worker and compile its programs twice. Fail instead.
    if node.config.getoption("dist") == "loadgroup":
        lost = [i for i in ids if "@" not in i]
        if lost:
            raise pytest.UsageError(
                f"--dist loadgroup lost the xdist groups of {len(lost)} tests (e.g. {lost[0]}): "
                "this pytest / pytest-xdist pair does not group; use the constraints.txt versions."
            )


@pytest.fixture(scope="session")
def mesh():
    from jaxlab.core.sharding import data_mesh

    assert jax.device_count() == N_DEVICES, "XLA_FLAGS was set too late: JAX started first"
    return data_mesh()


@pytest.fixture
def key(request):
    """A PRNG key that differs per test (derived from the test's name), fixed across runs."""
    import zlib

    nodeid, suffix = request.node.nodeid, _group_suffix(request.node)
    if suffix and nodeid.endswith(suffix):  # xdist's loadgroup renames grouped tests
        nodeid = nodeid[: -len(suffix)]
    return jax.random.key(zlib.crc32(nodeid.encode()))


# ------------------------------------------------------------------ where the suite's time goes
# JAXLAB_TEST_PROFILE=path: per test, its wall seconds and end time, the seconds spent tracing,
# lowering and compiling with XLA, the number of programs compiled and the seconds per jitted
# function name (from jax.monitoring),
# written per worker as path.<worker>.json. Off by default.
_PROFILE_PATH = os.environ.get("JAXLAB_TEST_PROFILE")
_profile: dict[str, dict[str, float]] = {}
_current = ["<collection>"]

if _PROFILE_PATH:
    _EVENTS = {
        "/jax/core/compile/jaxpr_trace_duration": "trace",
        "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
        "/jax/core/compile/backend_compile_duration": "compile",
    }

    def _listen(event, duration, fun_name=None, **_):
        name = _EVENTS.get(event)
        if name:
            row = _profile.setdefault(_current[0], {})
            row[name] = row.get(name, 0.0) + duration
            if name == "compile":
                row["programs"] = row.get("programs", 0) + 1
            by_function = row.setdefault("by_function", {})  # trace + lower + compile seconds
            by_function[str(fun_name)] = by_function.get(str(fun_name), 0.0) + duration

    jax.monitoring.register_event_duration_secs_listener(_listen)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):
        import time

        _current[0] = item.nodeid
        start = time.perf_counter()
        yield
        row = _profile.setdefault(item.nodeid, {})
        row["wall"] = time.perf_counter() - start  # setup + call + teardown
        row["end"] = time.time()  # when it finished (the workers' timelines)
        _current[0] = "<between tests>"

    def pytest_sessionfinish(session):
        import json

        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        with open(f"{_PROFILE_PATH}.{worker}.json", "w") as f:
            json.dump(_profile, f, indent=1)

"""visual_memory: bad input at every public entry point is a clear error naming the argument."""

import numpy as np
import pytest

from jaxlab.vision import visual_memory as vm

RNG = np.random.default_rng(0)
Z = RNG.normal(size=(20, 4)).astype(np.float32)
Z /= np.linalg.norm(Z, axis=1, keepdims=True)
MEM = vm.build_memory(Z, np.arange(20) % 3, vocab=3, fingerprint="abc")
LAB = np.zeros((2, 3), np.int32)
DIST = np.zeros((2, 3), np.float32)

CASES = [
    ("add: wrong d", lambda: vm.add(MEM, Z[:2, :3], [0, 1]), ValueError, "`emb`.*d=4"),
    ("add: not unit norm", lambda: vm.add(MEM, 2 * Z[:2], [0, 1]), ValueError, "`emb`.*unit-norm"),
    ("add: NaN", lambda: vm.add(MEM, np.full((1, 4), np.nan), [0]), ValueError, "`emb`.*NaN"),
    ("add: label range", lambda: vm.add(MEM, Z[:1], [3]), ValueError, "`labels`"),
    ("add: label count", lambda: vm.add(MEM, Z[:2], [0]), ValueError, "`labels`"),
    (
        "add: duplicate ids",
        lambda: vm.add(MEM, Z[:2], [0, 0], ids=[30, 30]),
        ValueError,
        "`ids`.*duplicate",
    ),
    ("add: id in memory", lambda: vm.add(MEM, Z[:1], [0], ids=[5]), ValueError, "`ids`.*already"),
    ("add: weights <= 0", lambda: vm.add(MEM, Z[:1], [0], weights=[0.0]), ValueError, "`weights`"),
    ("remove: unknown id", lambda: vm.remove(MEM, [99]), ValueError, "`ids`.*99"),
    ("remove: removed id", lambda: vm.remove(vm.remove(MEM, [4]), [4]), ValueError, "`ids`.*4"),
    ("remove: twice", lambda: vm.remove(MEM, [1, 1]), ValueError, "`ids`.*twice"),
    ("relabel: range", lambda: vm.relabel(MEM, [1], [7]), ValueError, "`labels`"),
    ("reweight: nan", lambda: vm.reweight(MEM, [1], [np.nan]), ValueError, "`weights`"),
    ("search: k too large", lambda: vm.search(Z[:2], MEM, 21), ValueError, "`k`.*20 live"),
    ("search: k self", lambda: vm.search(Z[:2], MEM, 20, exclude_self=[0, 1]), ValueError, "`k`"),
    ("search: k = 0", lambda: vm.search(Z[:2], MEM, 0), ValueError, "`k`"),
    ("search: wrong d", lambda: vm.search(Z[:2, :3], MEM, 2), ValueError, "`queries`"),
    ("search: unnormalised", lambda: vm.search(3 * Z[:2], MEM, 2), ValueError, "`queries`"),
    ("search: block", lambda: vm.search(Z[:2], MEM, 2, block=3), ValueError, "`block`"),
    ("search: method", lambda: vm.search(Z[:2], MEM, 2, method="ivf"), ValueError, "`method`"),
    ("search: memory type", lambda: vm.search(Z[:2], Z, 2), TypeError, "`memory`"),
    (
        "search: self ids",
        lambda: vm.search(Z[:2], MEM, 2, exclude_self=[0]),
        ValueError,
        "`exclude_self`",
    ),
    ("aggregate: rule", lambda: vm.aggregate(LAB, DIST, 3, "vlm"), ValueError, "`rule`"),
    ("aggregate: shapes", lambda: vm.aggregate(LAB, DIST[:, :2], 3), ValueError, "`dists`"),
    ("aggregate: labels", lambda: vm.aggregate(LAB + 5, DIST, 3), ValueError, "`labels`"),
    ("aggregate: alpha", lambda: vm.aggregate(LAB, DIST, 3, alpha=0.0), ValueError, "`alpha`"),
    (
        "aggregate: temperature",
        lambda: vm.aggregate(LAB, DIST, 3, temperature=-1.0),
        ValueError,
        "`temperature`",
    ),
    (
        "aggregate: range",
        lambda: vm.aggregate(LAB, DIST, 3, dist_range=(1.0, 0.0)),
        ValueError,
        "`dist_range`",
    ),
    ("agreement: k", lambda: vm.agreement(LAB, LAB, 4), ValueError, "`k`"),
    ("ood: k", lambda: vm.ood_score(DIST, 0), ValueError, "`k`"),
    ("counts: k", lambda: vm.neighbour_counts(MEM, k=20), ValueError, "`k`"),
    (
        "hard: variant",
        lambda: vm.hard_exclusion({"W100": [0], "C100": [0]}, 1, variant="x"),
        ValueError,
        "`variant`",
    ),
    ("backend: name", lambda: vm.make_backend("scann"), ValueError, "`name`"),
    ("empty: vocab", lambda: vm.empty_memory(4, vocab=0), ValueError, "`vocab`"),
]


@pytest.mark.parametrize("fn, exc, match", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_names_the_argument(fn, exc, match):
    with pytest.raises(exc, match=match):
        fn()


def test_restore_with_another_fingerprint_or_nothing_saved(tmp_path):
    vm.save_memory(tmp_path / "m", MEM)
    with pytest.raises(ValueError, match="`fingerprint`"):
        vm.restore_memory(tmp_path / "m", fingerprint="xyz")
    with pytest.raises(ValueError, match="`version`"):
        vm.restore_memory(tmp_path / "m", version=99)
    with pytest.raises(ValueError, match="`directory`"):
        vm.restore_memory(tmp_path / "empty")

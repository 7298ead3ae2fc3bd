"""perf/levers.py's tree bounds against a brute force over every tree shape (small piece counts).

The bounds say how far a reduction tree of another shape could take the reduction (perf/README.md,
"What the open goals would need"); here each is recomputed independently: every ordered rooted tree
of p pieces is built, its merges scheduled one at a time (a merge starts when the parent is free
and the child's message has arrived), and the best shape kept.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import lru_cache
from pathlib import Path

import pytest

MERGE, MESSAGE = 2400.0, 300.0


def _levers():
    path = Path(__file__).resolve().parents[1] / "perf" / "levers.py"
    spec = importlib.util.spec_from_file_location("levers", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["levers"] = mod
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


@lru_cache(maxsize=None)
def trees(p: int) -> tuple:
    """Every ordered rooted tree of p nodes, as a tuple of child subtrees (merge order)."""
    return tuple((forest) for forest in forests(p - 1))


@lru_cache(maxsize=None)
def forests(n: int) -> tuple:
    if n == 0:
        return ((),)
    out = []
    for first in range(1, n + 1):
        for t in trees(first):
            for rest in forests(n - first):
                out.append((t,) + rest)
    return tuple(out)


def finish(tree: tuple) -> float:
    """Equal local work (done at 0): the root merges its children in order, each when both it is free
    and the child's message has arrived."""
    t = 0.0
    for child in tree:
        t = max(t, finish(child) + MESSAGE) + MERGE
    return t


def loss(tree: tuple, deadline: float = 0.0) -> float:
    """Sized pieces, the root's partial due at 0: the local work the tree's pieces cannot do against
    p pieces working until 0. A piece with subtree deadline D and d children works until D - d x MERGE;
    its i-th child (0-based, merged d - i merges before D) has deadline D - (d - i) x MERGE - MESSAGE."""
    d = len(tree)
    own = -(deadline - d * MERGE)
    return own + sum(loss(child, deadline - (d - i) * MERGE - MESSAGE) for i, child in enumerate(tree))


def test_tree_enumeration_counts_catalan_numbers() -> None:
    assert [len(trees(p)) for p in range(1, 8)] == [1, 1, 2, 5, 14, 42, 132]


@pytest.mark.parametrize("p", range(1, 8))
def test_best_equal_tree_is_the_fastest_shape(p: int) -> None:
    levers = _levers()
    assert levers.best_equal_tree(p, MERGE, MESSAGE) == pytest.approx(min(finish(t) for t in trees(p)))
    # the binomial tree is one of the shapes: never faster than the best one
    assert levers.binomial_loss(p, MERGE, MESSAGE) >= levers.best_equal_tree(p, MERGE, MESSAGE) - 1e-9


@pytest.mark.parametrize("p", range(1, 8))
def test_best_loaded_tree_is_the_least_loss_shape(p: int) -> None:
    levers = _levers()
    assert levers.best_loaded_tree(p, MERGE, MESSAGE) == pytest.approx(min(loss(t) for t in trees(p)) / p)

"""Room on the frame stack: a call runs as it would, and deep recursion under it stops mapping
new pieces of CPython's frame stack."""

from __future__ import annotations

import sys

import pytest

from loopcheck.lint.stack_room import with_room


def test_the_call_is_unchanged() -> None:
    assert with_room(lambda a, b=2: (a, b), 1, b=5) == (1, 5)
    assert with_room(sorted, [3, 1, 2], reverse=True) == [3, 2, 1]
    with pytest.raises(ZeroDivisionError):
        with_room(lambda: 1 / 0)


def _depth(n: int) -> int:
    return 0 if n == 0 else 1 + _depth(n - 1)


def test_recursion_deeper_than_the_room() -> None:
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 12_000))
    try:
        assert with_room(_depth, 8_000) == 8_000  # past the room, the frame stack grows as usual
    finally:
        sys.setrecursionlimit(old)


def _back_and_forth() -> None:
    for i in range(3_000):
        _depth(100 + i % 400)


@pytest.mark.skipif(sys.implementation.name != "cpython" or sys.version_info < (3, 11) or sys.platform != "linux",
                    reason="the frame stack grows in mapped chunks in CPython 3.11+; faults counted on Linux")
def test_recursion_going_back_and_forth_maps_no_new_chunks() -> None:
    import resource

    def faults(fn) -> int:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        fn()
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    plain = faults(_back_and_forth)  # a fresh chunk, and its first page's fault, each time a chunk's end is crossed
    roomy = faults(lambda: with_room(_back_and_forth))
    assert plain > 2_000
    assert roomy < plain / 10

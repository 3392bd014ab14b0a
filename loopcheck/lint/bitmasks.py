"""Sets of rows as Python integers, built and read in C-speed steps.

Setting bit `i` of a big integer copies the integer, so a mask is built from one byte per row
and read back through the same bytes (`itertools.compress`): a mask of a thousand rows costs a
few microseconds either way.
"""

from __future__ import annotations

from collections import deque
from itertools import compress, repeat
from typing import Generic, Hashable, Iterable, Sequence, TypeVar

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)

_DIGITS = bytes.maketrans(b"\x00\x01", b"01")  # a row's flag byte -> its binary digit
_FLAGS = bytes.maketrans(b"01", b"\x00\x01")


def mask_of(rows: Iterable[int], size: int) -> int:
    """The mask with bit `i` set for each `i` in `rows` (each below `size`)."""
    flags = bytearray(size)
    deque(map(flags.__setitem__, rows, repeat(1)), 0)
    return int(flags.translate(_DIGITS)[::-1] or b"0", 2)


def selected(items: Sequence[T], mask: int) -> list[T]:
    """The items whose bits `mask` sets, in order (bits beyond `items` ignored)."""
    return list(compress(items, bin(mask)[:1:-1].encode().translate(_FLAGS)))


class Rows(Generic[K]):
    """Items numbered in the order they are first met, and masks over them."""

    def __init__(self) -> None:
        self.items: list[K] = []
        self.index: dict[K, int] = {}

    def mask(self, items: Sequence[K]) -> int:
        """The mask of `items`, numbering those met for the first time."""
        index = self.index
        if not index.keys() >= set(items):  # (a thousand items at a time: each step here is in C)
            for item in items:
                if item not in index:
                    index[item] = len(self.items)
                    self.items.append(item)
        return mask_of(map(index.__getitem__, items), len(self.items))

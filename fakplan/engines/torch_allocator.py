"""What PyTorch's CUDA caching allocator counts as allocated for a sequence of tensors.

vLLM's "Model loading took" is ``torch.cuda.max_memory_allocated()`` across the load
(docs/vllm-memory.md), and the allocator counts a *block*, not the bytes asked for: a
request is rounded up to 512 B, a large one gets a segment rounded up to 2 MiB (20 MiB
shared by requests of 1-10 MiB), and a block is split off its segment only when more than
1 MiB would be left over, so a tensor whose segment leaves <= 1 MiB spare is counted with
the spare (c10/cuda/CUDACachingAllocator.cpp ``should_split``/``get_allocation_size``/
``round_size``; kMinBlockSize, kSmallSize, kMinLargeAlloc and kRoundLarge as read in
c10/core/AllocatorConfig.h:17-25 of torch 2.13's headers, kLargeBuffer = 20 MiB beside the
allocator; the same values in the allocator sources of earlier 2.x releases). A free block
is reused best-fit, with the same split rule.

A sequence may hold temporaries (``Temporary``, freed by a later ``Release``): a freed block
merges with free neighbours in its segment and is reused best-fit like any other, so the
tensors created after a large temporary is freed (the rotary caches' float32 intermediates)
are carved out of it, where a fresh segment might have left them <= 1 MiB spare. Where a
sequence names none, only what stays allocated is modelled.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

MIN_BLOCK = 512  # kMinBlockSize
SMALL_SIZE = 1 << 20  # kSmallSize: requests up to this come from the small pool
MIN_LARGE_ALLOC = 10 << 20  # kMinLargeAlloc: below it, a request shares a 20 MiB segment
LARGE_BUFFER = 20 << 20  # kLargeBuffer
ROUND_LARGE = 2 << 20  # kRoundLarge


def _rounded(size: int) -> int:
    return max(MIN_BLOCK, -(-size // MIN_BLOCK) * MIN_BLOCK)


def _segment(size: int) -> int:
    if size < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-size // ROUND_LARGE) * ROUND_LARGE


@dataclass(frozen=True)
class Temporary:
    """A tensor a load creates and frees later in the sequence (``Release`` with its key)."""

    size: int
    key: str


@dataclass(frozen=True)
class Release:
    """The point where the ``Temporary`` of this key is freed."""

    key: str


Step = int | Temporary | Release


@dataclass(eq=False)
class _Block:
    segment: int
    offset: int
    size: int


def allocated_bytes(steps: Iterable[Step]) -> int:
    """The allocator's allocated bytes at the end of ``steps``: each int a tensor that stays
    (bytes, in the order they are created), each ``Temporary`` one freed at its ``Release``,
    on an allocator that holds no free block at the start."""
    pool = _LargePool()
    small = 0  # the small pool splits down to 512 B: the rounded sizes
    live: dict[str, _Block | int] = {}
    for step in steps:
        if isinstance(step, Release):
            held = live.pop(step.key)
            if isinstance(held, int):
                small -= held
            else:
                pool.release(held)
            continue
        size = _rounded(step if isinstance(step, int) else step.size)
        block: _Block | int = size if size <= SMALL_SIZE else pool.allocate(size)
        if isinstance(block, int):
            small += block
        if isinstance(step, Temporary):
            live[step.key] = block
    return small + pool.allocated


class _LargePool:
    """The large pool's segments, each a run of blocks by offset, and its free blocks."""

    def __init__(self) -> None:
        self.segments: list[list[_Block]] = []
        self.free: set[_Block] = set()
        self.allocated = 0

    def allocate(self, size: int) -> _Block:
        """The best-fitting free block (a fresh segment where none fits), split where more
        than 1 MiB would remain."""
        fits = [b for b in self.free if b.size >= size]
        if fits:
            found = min(fits, key=lambda b: (b.size, b.segment, b.offset))
            self.free.remove(found)
        else:
            found = _Block(len(self.segments), 0, _segment(size))
            self.segments.append([found])
        blocks = self.segments[found.segment]
        if found.size - size > SMALL_SIZE:
            rest = _Block(found.segment, found.offset + size, found.size - size)
            blocks.insert(blocks.index(found) + 1, rest)
            self.free.add(rest)
            found.size = size
        self.allocated += found.size
        return found

    def release(self, block: _Block) -> None:
        """Free a block, merged with the free blocks beside it in its segment."""
        self.allocated -= block.size
        blocks = self.segments[block.segment]
        at = blocks.index(block)
        if at + 1 < len(blocks) and blocks[at + 1] in self.free:
            after = blocks.pop(at + 1)
            self.free.remove(after)
            block.size += after.size
        if at > 0 and blocks[at - 1] in self.free:
            before = blocks[at - 1]
            before.size += blocks.pop(at).size
            block = before
        self.free.add(block)

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

Only what stays allocated is modelled: temporaries a load frees (the rotary cache's float32
intermediates) can leave a free block a later tensor fits with <= 1 MiB to spare, which
this does not see.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable

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


def allocated_bytes(sizes: Iterable[int]) -> int:
    """The allocator's allocated bytes once every tensor of ``sizes`` (bytes, in the order
    they are created) is alive, on an allocator that holds no free block at the start."""
    free: list[int] = []  # the large pool's free blocks, sorted
    total = 0
    for size in sizes:
        block = _rounded(size)
        if block <= SMALL_SIZE:
            total += block  # the small pool splits down to 512 B: the rounded size
            continue
        at = bisect.bisect_left(free, block)
        found = free.pop(at) if at < len(free) else _segment(block)
        if found - block > SMALL_SIZE:
            bisect.insort(free, found - block)
            total += block
        else:
            total += found
    return total

"""PyTorch's CUDA caching allocator as fakplan models it, by hand (torch_allocator).

The rules: 512 B rounding; up to 1 MiB from the small pool (exactly the rounded size);
1-10 MiB in shared 20 MiB segments; larger in segments rounded up to 2 MiB; a block is
split off only when more than 1 MiB would remain; a free block is reused best-fit; a
released temporary's block merges with its free neighbours.
"""

from __future__ import annotations

from fakplan.engines.torch_allocator import Release, Temporary, allocated_bytes

MIB = 1 << 20


def test_small_requests_round_to_512_bytes() -> None:
    assert allocated_bytes([1, 512, 513, MIB]) == 512 + 512 + 1024 + MIB


def test_a_segment_with_at_most_1_mib_spare_is_not_split() -> None:
    # 31.5 MiB in a 32 MiB segment: 0.5 MiB spare, counted whole
    assert allocated_bytes([31 * MIB + MIB // 2]) == 32 * MIB
    # exactly 1 MiB spare is not "more than" 1 MiB
    assert allocated_bytes([11 * MIB]) == 12 * MIB
    # 24.5 MiB in 26 MiB: 1.5 MiB spare, split off
    assert allocated_bytes([24 * MIB + MIB // 2]) == 24 * MIB + MIB // 2


def test_mid_sized_requests_share_a_20_mib_segment() -> None:
    # 8 MiB + 8 MiB in one 20 MiB segment, then 3.5 MiB: 0.5 MiB would remain, so the
    # third takes the rest of the segment
    assert allocated_bytes([8 * MIB, 8 * MIB, 3 * MIB + MIB // 2]) == 20 * MIB


def test_a_free_remainder_is_reused_best_fit() -> None:
    # 24.5 MiB leaves 1.5 MiB free; a 1.25 MiB request takes it (0.25 MiB would remain:
    # whole, 1.5 MiB counted); the next one needs a fresh 20 MiB segment and is split
    quarter = MIB // 4
    assert allocated_bytes([24 * MIB + 2 * quarter, MIB + quarter, MIB + quarter]) == (
        24 * MIB + 2 * quarter + (MIB + 2 * quarter) + (MIB + quarter)
    )


def test_a_released_temporary_frees_its_block_for_later_tensors() -> None:
    """A 64 MiB temporary freed, then 60 MiB and 3 MiB tensors: both are carved out of the
    freed segment (the second leaves 1 MiB: counted whole, 4 MiB), where fresh segments
    would hold 60 MiB and a 20 MiB buffer's 3 MiB."""
    steps = [Temporary(64 * MIB, "t"), Release("t"), 60 * MIB, 3 * MIB]
    assert allocated_bytes(steps) == 60 * MIB + 4 * MIB
    # a temporary that stays alive takes nothing from what follows, and counts
    assert allocated_bytes([Temporary(64 * MIB, "t"), 60 * MIB]) == 124 * MIB


def test_freed_neighbours_merge_within_their_segment() -> None:
    """Two 8 MiB temporaries share a 20 MiB segment; freed, they merge with the 4 MiB left
    after them into one 20 MiB block, which then holds a 19.5 MiB tensor whole (0.5 MiB
    spare). Unmerged, no free block would fit it, and a fresh 20 MiB segment would."""
    steps = [
        Temporary(8 * MIB, "a"), Temporary(8 * MIB, "b"), Release("a"), Release("b"),
        19 * MIB + MIB // 2,
    ]  # fmt: skip
    assert allocated_bytes(steps) == 20 * MIB
    # the same tensors with the temporaries alive: a fresh segment for the 19.5 MiB one
    assert allocated_bytes(steps[:2] + steps[4:]) == 16 * MIB + 20 * MIB


def test_a_small_temporary_returns_its_rounded_bytes() -> None:
    assert allocated_bytes([Temporary(1000, "t"), 600, Release("t")]) == 1024

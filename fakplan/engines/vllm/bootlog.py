"""vLLM's boot-ledger format, V1 and the V0 era: its ranks, when a boot is complete, and
the figures that follow from printed ones. The lines themselves are data in ``bootlog_rows``.

Line prefixes (``(EngineCore_DP0 pid=7) INFO 07-06 22:52:09 [gpu_worker.py:508]``) are
not matched by the rows; ``rank`` reads the process name from them.
"""

from __future__ import annotations

import re

from fakplan.engines.vllm.bootlog_rows import ROWS
from fakplan.ledger.patterns import DerivedFigures

__all__ = ["FORMAT", "ROWS", "VllmFormat"]

_PROCESS = re.compile(r"\((?P<proc>[A-Za-z_][\w ]*?(?: rank=\d+)?) pid=(?P<pid>\d+)(?:, [^)]*)?\)")
_RANK_TOKEN = re.compile(r"(?:DP|TP|PP|EP|DCP|PCP)\d+")
_RANK_NUMBER = re.compile(r"rank=(\d+)")
_COMPLETE = frozenset({"kv_tokens", "num_blocks", "boot_failed"})


class VllmFormat:
    """vLLM, V0 and V1."""

    name = "vllm"
    title = "vLLM"
    rows = ROWS

    def rank(self, text: str) -> str | None:
        """The rank from the process prefix: ``(Worker_PP1_TP0 pid=9)`` is ``PP1 TP0``.

        V0 worker processes name no rank (``(VllmWorkerProcess pid=486)``): their pid is
        the label. The engine core and API server (``(EngineCore pid=107)``) are no rank.
        """
        match = _PROCESS.search(text, 0, 200)
        if match is None:
            return None
        proc = match["proc"]
        tokens = _RANK_TOKEN.findall(proc)
        if tokens:
            return " ".join(tokens)
        number = _RANK_NUMBER.search(proc)
        if number:
            return f"rank {number[1]}"
        if "Worker" in proc:
            return f"pid {match['pid']}"
        return None

    def complete(self, names: set[str]) -> bool:
        return bool(names & _COMPLETE)

    def derive(self, figures: DerivedFigures) -> None:
        """V0 prints blocks, not tokens: tokens = blocks x block size (docs/engines.md §1.10)."""
        blocks = figures.value("num_blocks")
        if not isinstance(blocks, int) or figures.value("kv_tokens") is not None:
            return
        size = figures.value("block_size")
        source = "fakplan: num_gpu_blocks x block_size (V0 vllm/worker/cache_engine.py)"
        if size is None:
            default = figures.default("block_size")
            if default is None:
                return  # the block size is unknown: kv_tokens stays null
            figures.derive(
                "block_size",
                default.value,
                f"not printed: {default.value}, {default.why}",
                main="num_blocks",
                source=source,
            )
            size, where = default.value, "the default block size, not printed"
        else:
            where = f"block size {figures.cite('block_size')}"
        if isinstance(size, int):
            figures.derive(
                "kv_tokens",
                blocks * size,
                f"{figures.cite('num_blocks')} GPU blocks x {size} tokens per block ({where})",
                main="num_blocks",
                source=source,
            )


FORMAT = VllmFormat()

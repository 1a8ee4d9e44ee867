"""llama.cpp's boot-ledger format (llama-server, llama-cpp-python): one process, so no
ranks; the totals are derived from the per-device buffers, the KV tokens from cells x
streams. The lines themselves are data in ``bootlog_rows``.
"""

from __future__ import annotations

from fakplan.engines.llamacpp.bootlog_rows import ROWS
from fakplan.ledger.patterns import DerivedFigures

__all__ = ["FORMAT", "ROWS", "LlamaCppFormat"]

_COMPLETE = frozenset({"kv_bytes", "kv_cells", "recurrent_bytes", "boot_failed"})
_SUM = "fakplan: the sum of the per-device buffers"


class LlamaCppFormat:
    """llama.cpp: llama-server and llama-cpp-python."""

    name = "llamacpp"
    title = "llama.cpp"
    rows = ROWS

    def rank(self, text: str) -> str | None:
        return None  # one process; devices, not ranks

    def complete(self, names: set[str]) -> bool:
        return bool(names & _COMPLETE) or any(".kv_bytes" in n for n in names)

    def derive(self, figures: DerivedFigures) -> None:
        """Totals from per-device buffers; KV tokens from cells x streams."""
        for total, buffer in (
            ("weights_bytes", "model_bytes"),
            ("compute_bytes", "compute_bytes"),
            ("output_bytes", "output_bytes"),
            ("free_before_load_bytes", "free_bytes"),
            ("kv_bytes", "kv_bytes"),
            ("swa_kv_bytes", "swa_kv_bytes"),
            ("recurrent_bytes", "recurrent_bytes"),
        ):
            self._sum(figures, total, buffer)
        cells, streams = figures.value("kv_cells"), figures.value("n_stream")
        if isinstance(cells, int) and isinstance(streams, int) and streams > 1:
            figures.derive(
                "kv_tokens",
                cells * streams,
                f"{figures.cite('kv_cells')} cells per stream x {streams} streams",
                main="kv_cells",
                source="fakplan: cells x n_stream (src/llama-context.cpp, 0c1e57098)",
            )
        else:
            figures.copy("kv_cells", "kv_tokens")

    @staticmethod
    def _sum(figures: DerivedFigures, total: str, buffer: str) -> None:
        """``total`` from every device's ``buffer``: one device's is the printed figure itself,
        several add up to a derived one."""
        names = [n for n in figures.names("devices.") if n.endswith(f".{buffer}")]
        if len(names) == 1:
            figures.copy(names[0], total)
        elif names:
            values = [figures.value(n) for n in names]
            if all(isinstance(v, int) for v in values):
                parts = " + ".join(f"{n.split('.')[1]} {figures.cite(n)}" for n in names)
                figures.derive(
                    total,
                    sum(v for v in values if isinstance(v, int)),
                    parts,
                    main=names[0],
                    source=_SUM,
                )


FORMAT = LlamaCppFormat()

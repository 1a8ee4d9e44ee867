"""The "VRAM budget, per card" table a radiance boot prints, as data.

Source: an operator's KV/VRAM resize runbook for the radiance engine, which quotes
the table whole (``tests/data/ledgers/table-seed002.log``) and quotes as fragments
``mover: N slots can be lent out of the KV cache (X GiB)``, ``backs N sequences all
at M tokens at once`` and ``sampler: ... R rows``. Only what the runbook shows is
parsed. It elides the middle of the sampler line ("sampler: ... R rows"), so that
row's form between ``sampler:`` and ``rows`` is a guess: any text, then the number
of rows.

Sizes carry their binary unit beside them (``31.86 GiB``, ``477.30 MiB``).
The card ceiling is derived exactly as the runbook defines it:
``ceiling = (settled_free - engine_floor) + current pair``.
"""

from __future__ import annotations

import re

from fakplan.ledger.patterns import DerivedFigures, Q, Row, count, fig, quantity

SEED = "radiance boot, the VRAM budget table"

ROWS: tuple[Row, ...] = (
    Row("header", SEED, "VRAM budget, per card", r"VRAM budget, per card", starts_boot=True),
    Row(
        "card_total",
        SEED,
        "card total",
        rf"\bcard total\s+(?P<card_total_bytes>{Q})",
        (fig("card_total_bytes", quantity),),
        once=True,
    ),
    Row(
        "budget_row",
        SEED + " (vram_weights, vram_kv, ...)",
        "vram_",
        rf"(?:^|\s)(?P<row>vram_[a-z0-9_]+)\s+(?P<size>{Q})",
        (fig("budget_rows.{row}", quantity, "size"),),
        once=True,
    ),
    Row(
        "unclaimed",
        SEED,
        "unclaimed",
        rf"(?:^|\s)unclaimed\s+(?P<unclaimed_bytes>{Q})",
        (fig("unclaimed_bytes", quantity),),
    ),
    Row(
        "budgets_total",
        SEED,
        "VRAM budgets total",
        rf"VRAM budgets total (?P<pair>{Q}) of the card's (?P<card>{Q}), so (?P<rest>{Q}) is "
        r"neither",
        (
            fig("pair_bytes", quantity, "pair"),
            fig("card_total_bytes", quantity, "card"),
            fig("unbudgeted_bytes", quantity, "rest"),
        ),
    ),
    Row(
        "settled",
        SEED,
        "settled at",
        rf"\bcard \d+ settled at (?P<free>{Q}) free against (?P<floor>{Q})",
        (
            fig("settled_free_bytes", quantity, "free"),
            fig("engine_floor_bytes", quantity, "floor"),
        ),
        once=True,
    ),
    Row(
        "backs",
        "radiance boot, as a resize runbook quotes it",
        "tokens at once",
        r"\bbacks (?P<seqs>[\d,]+) sequences? all at (?P<tokens>[\d,]+) tokens at once",
        (fig("sequences_backed", count, "seqs"), fig("sequence_tokens", count, "tokens")),
    ),
    Row(
        "sampler",
        "radiance boot ('sampler: ... R rows', as a runbook quotes it: the middle is a guess)",
        "sampler:",
        # the number starts where no digit or comma precedes it: tried at every digit of a
        # long "1,1,1,..." run, [\d,]+ backtracked over the rest of it (hours on one line)
        r"\bsampler:.*?(?<![\w,])(?P<rows>[\d,]+) rows\b",
        (fig("sampler_rows", count, "rows"),),
    ),
    Row(
        "mover",
        "radiance boot, as a resize runbook quotes it",
        "slots can be lent out",
        rf"\bmover: (?P<slots>[\d,]+) slots can be lent out of the KV cache \((?P<size>{Q})\)",
        (fig("lendable_slots", count, "slots"), fig("lendable_bytes", quantity, "size")),
    ),
)

_CARD = re.compile(r"\bcard (\d+) settled at")
_COMPLETE = frozenset({"card_total_bytes", "settled_free_bytes", "sequences_backed"})
_SEED_CEILING = "the runbook's ceiling: (settled_free - engine_floor) + current pair"


class TableFormat:
    """The VRAM budget table a radiance boot prints."""

    name = "table"
    title = "VRAM budget table"
    rows = ROWS

    def rank(self, text: str) -> str | None:
        """``card 1 settled at ...`` comes from card 1; the table rows name no card."""
        match = _CARD.search(text)
        return f"card {match[1]}" if match else None

    def complete(self, names: set[str]) -> bool:
        return bool(names & _COMPLETE)

    def derive(self, figures: DerivedFigures) -> None:
        rows = figures.names("budget_rows.")
        values = [figures.value(n) for n in rows]
        if rows and all(isinstance(v, int) for v in values):
            figures.derive(
                "pair_bytes",
                sum(v for v in values if isinstance(v, int)),
                " + ".join(f"{n.split('.', 1)[1]} {figures.cite(n)}" for n in rows),
                main=rows[0],
                source="the table's budgets: the pair is their sum",
            )
        free, floor = figures.value("settled_free_bytes"), figures.value("engine_floor_bytes")
        pair = figures.value("pair_bytes")
        if isinstance(free, int) and isinstance(floor, int) and isinstance(pair, int):
            figures.derive(
                "ceiling_bytes",
                free - floor + pair,
                f"(settled free {figures.cite('settled_free_bytes')} - engine floor "
                f"{figures.cite('engine_floor_bytes')}) + pair {figures.cite('pair_bytes')}",
                main="settled_free_bytes",
                source=_SEED_CEILING,
            )


FORMAT = TableFormat()

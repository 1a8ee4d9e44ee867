"""The pool contract: what a KV pool must hold, and what a pool of a given size backs.

Everything here is integer bytes on one rank. A KV cost is stated per *page*
(``page_tokens`` tokens) so that rates such as 26 KiB per 4-token page stay
exact; the per-token rate is only ever a display of ``page_bytes / page_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from fakplan.units import human


@dataclass(frozen=True)
class CostComponent:
    """One part of the KV cost, with the arithmetic that produced it."""

    name: str
    kind: str
    page_bytes: int
    per_seq_bytes: int
    scales_with_dtype: bool
    derivation: str


@dataclass(frozen=True)
class KvCost:
    """What a token, a sequence slot and the pool itself cost on one rank."""

    dtype: str
    page_tokens: int
    components: tuple[CostComponent, ...]
    fixed_bytes: int = 0

    @property
    def page_bytes(self) -> int:
        return sum(c.page_bytes for c in self.components)

    @property
    def per_seq_bytes(self) -> int:
        return sum(c.per_seq_bytes for c in self.components)

    @property
    def rate(self) -> Fraction:
        """Bytes per token per rank (exact)."""
        return per_token_rate(self.page_bytes, self.page_tokens)


def per_token_rate(page_bytes: int, page_tokens: int) -> Fraction:
    return Fraction(page_bytes, page_tokens)


def exact_number(value: Fraction) -> int | float:
    """An int when the fraction is whole; otherwise a float for display and JSON."""
    return value.numerator if value.denominator == 1 else float(value)


def pages_for(tokens: int, page_tokens: int) -> int:
    return -(-tokens // page_tokens)


@dataclass(frozen=True)
class Requirement:
    bytes: int
    derivation: str


def contract_requirement(cost: KvCost, seqs: int, max_model_len: int) -> Requirement:
    """``seqs x max_model_len x rate + seqs x per_seq + fixed``, in whole pages."""
    pages = pages_for(max_model_len, cost.page_tokens)
    per_seq_window = pages * cost.page_bytes
    total = seqs * per_seq_window + seqs * cost.per_seq_bytes + cost.fixed_bytes
    rate = exact_number(cost.rate)
    window = (
        f"{seqs} seqs x {max_model_len:,} tokens x {rate:,} B/token"
        if pages * cost.page_tokens == max_model_len
        else f"{seqs} seqs x {pages:,} pages of {cost.page_tokens} tokens x {cost.page_bytes:,} B"
    )
    terms = [window]
    if cost.per_seq_bytes:
        terms.append(f"{seqs} x {cost.per_seq_bytes:,} B per seq")
    if cost.fixed_bytes:
        terms.append(f"{cost.fixed_bytes:,} B fixed")
    text = f"{' + '.join(terms)} = {total:,} B ({human(total, 'MiB', 2)})"
    return Requirement(total, text)


@dataclass(frozen=True)
class Capacity:
    """Tokens a pool backs, the way the engine counts them."""

    tokens: int
    pages: int
    usable_bytes: int
    derivation: str
    # engines whose cache is sized by a context length (llama.cpp's -c) rather than by the
    # pool: full windows served at once (slots bound it), the context one slot can reach,
    # and the bytes the cache takes (the rest of budget.kv is unclaimed)
    sessions: int | None = None
    slot_tokens: int | None = None
    slots_share: bool = False  # one cache every slot draws on (llama.cpp's unified cache)
    used_bytes: int | None = None
    # a speculative draft's KV as the boot will print it: (bytes summed over its context
    # lines, those lines, the derivation); None without a draft whose KV the engine prints
    draft_printed: tuple[int, int, str] | None = None


def windows_held(cells_per_stream: int, streams: int, slots: int, window: int) -> int:
    """Full windows served at once by an engine whose sequences each need a slot.

    A split cache gives each slot a stream of its own, so a slot holds the window or it
    does not; a unified one (one stream) is shared, so the slots hold what fits."""
    if streams > 1:
        return streams if cells_per_stream >= window else 0
    return min(slots, cells_per_stream // window)


def paged_capacity(cost: KvCost, pool_bytes: int, seqs: int) -> Capacity:
    """Whole pages after per-sequence state and fixed bytes come out of the pool."""
    reserved = seqs * cost.per_seq_bytes + cost.fixed_bytes
    usable = max(0, pool_bytes - reserved)
    pages = usable // cost.page_bytes if cost.page_bytes else 0
    tokens = pages * cost.page_tokens
    text = (
        f"({pool_bytes:,} B pool - {seqs} x {cost.per_seq_bytes:,} B per seq - "
        f"{cost.fixed_bytes:,} B fixed) // {cost.page_bytes:,} B per {cost.page_tokens}-token page"
        f" = {pages:,} pages x {cost.page_tokens} = {tokens:,} tokens"
    )
    return Capacity(tokens=tokens, pages=pages, usable_bytes=usable, derivation=text)

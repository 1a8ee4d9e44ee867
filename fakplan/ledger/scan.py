"""Feed recognised lines through one engine's rows: boots, ranks, second models.

A file can hold several boots (a restarted server appends to its log), lines
from several ranks interleaved, and a second model (a draft) in the middle of a
boot. ``EngineScan`` keeps only what it needs as it streams: the current boot,
the last boot that stated anything and the last complete one, so memory does
not grow with the file. ``finish`` picks the boot the ledger describes;
``aggregate`` (its own module) turns that boot's hits into figures: the common
value where ranks agree; where they differ, every rank's value and the binding
rank's as the figure (the engines size every rank by the smallest pool); then the
engine's derived figures.
"""

from __future__ import annotations

import re
from dataclasses import replace

from fakplan.ledger.boot import Boot, Hit
from fakplan.ledger.model import LedgerLine
from fakplan.ledger.patterns import LedgerFormat, Row, Unreadable
from fakplan.ledger.reader import clip

MAX_LINES_KEPT = (
    2_000  # recognised lines listed per boot (a TP8 boot has ~100); figures never depend
)
# on it, and 20,000 lines of a failure message repeated held 40 MB
SHOWN_UNREADABLE = 8  # unreadable figures noted one by one; the rest are counted
MAX_REPEATS = 8  # a row's needle this often on one line: no engine's line (real ones: 1-2)
# What one boot can state: more is no engine's boot (a TP8 boot states ~300 figures), and
# state kept per rank and per device would otherwise grow with the file (GBs for a 30 MB log).
MAX_RANKS = 256
MAX_FIGURES = 10_000

_ALL = "\x00all"  # a second model announced without a rank holds for every rank


class EngineScan:
    """One engine's pass over the recognised lines of a file."""

    def __init__(self, fmt: LedgerFormat) -> None:
        self.fmt = fmt
        self.current = Boot(start=1)
        self.previous: Boot | None = None  # the last finished boot that stated anything
        self.last_complete: Boot | None = None
        self.boots = 0
        self.recognised = 0  # lines that name this engine (signature rows)
        self.matched = 0  # lines any row matched
        self.overflow: str | None = None  # why the scan stopped: more than a boot states

    # ------------------------------------------------------------ feeding

    def feed(self, number: int, text: str, unterminated: bool) -> None:
        """Try every row on one line (most lines match none: the needles filter them)."""
        if self.overflow is not None:
            return
        rank: str | None = None
        ranked = False
        signature = False
        matched = False
        series_hit: set[tuple[str | None, str, str | None]] = set()
        for row in self.fmt.rows:
            if row.needle not in text:
                continue
            times = text.count(row.needle)
            if times > MAX_REPEATS:  # tried from each, "new slot.*?n_ctx_slot" is quadratic
                self._repeated(number, row.needle, times)
                continue
            match = row.regex.search(text)
            if match is None:
                continue
            if unterminated and _may_be_cut(match, text):
                continue  # a number at the very end of a cut line may be cut too
            if not ranked:
                rank, ranked = self.fmt.rank(text), True
            matched = True
            signature = signature or row.signature
            groups = {k: v for k, v in match.groupdict().items() if v is not None}
            # a draft's lines repeat the target's series (its cache lines again): they are
            # kept apart by _apply, not counted in the series
            if row.series is not None and not _drafting(self.current, rank):
                key = (rank, row.series, groups.get("device"))
                floor = self.current.series_floor.get((rank, row.series), 0)
                if max(self.current.series_count.get(key, 0), floor) != row.occurrence:
                    continue
                series_hit.add(key)
            for series, at_least in row.opens:
                floors = self.current.series_floor
                floors[(rank, series)] = max(floors.get((rank, series), 0), at_least)
            self._apply(row, groups, number, text, rank)
            if self.overflow is not None:
                return
        for key in series_hit:
            count = self.current.series_count
            floor = self.current.series_floor.get((key[0], key[1]), 0)
            count[key] = max(count.get(key, 0), floor) + 1
        self.matched += matched
        self.recognised += signature

    def _repeated(self, number: int, needle: str, times: int) -> None:
        """Note a line that repeats a needle as no engine does: the first, and how many."""
        boot = self.current
        if boot.repeated_last != number:
            boot.repeated_last = number
            boot.repeated_lines += 1
            if boot.repeated is None:
                boot.repeated = (number, needle, times)

    def _full(self, boot: Boot, number: int, rank: str | None, name: str | None) -> bool:
        """Whether ``rank`` (or figure ``name``) is one more than a boot states: then the scan
        stops, and a log read as this engine's is refused."""
        if rank not in boot.ranks_seen:
            if len(boot.ranks_seen) >= MAX_RANKS:
                self.overflow = f"line {number}: a rank past the {MAX_RANKS:,}th in one boot"
                return True
            boot.ranks_seen.add(rank)
        if name is not None and (rank, name) not in boot.hits and boot.size() >= MAX_FIGURES:
            self.overflow = f"line {number}: a figure past the {MAX_FIGURES:,}th in one boot"
            return True
        return False

    def _apply(
        self, row: Row, groups: dict[str, str], number: int, text: str, rank: str | None
    ) -> None:
        """Record what one matched line states, in the boot it belongs to."""
        if (
            not row.server
            and _drafting(self.current, rank)
            and not _target_pool_pending(self.current, row, groups, rank)
        ):
            # a second model (a draft) is loading: its lines are not this boot's figures,
            # but its cache's size is kept apart (the draft's KV beside the pool)
            _draft_kv(self.current, row, groups, number, text)
            return
        if _after_boot(self.current, row, groups, number):
            return
        if self._full(self.current, number, rank, None):
            return
        boot = self._boot_of(row, groups, number, rank)
        if boot is None:
            return
        _progress(boot, row, number, rank)
        kept = _list_line(boot, row, number, text, rank)
        if not self._read_figures(boot, row, groups, number, kept, rank):
            return
        if row.failure:
            _failed(boot, row, groups, number, kept)
        for default in row.defaults:
            boot.defaults.setdefault(default.name, (default, number, kept))
        if not row.starts_boot:
            boot.content_ranks.add(rank)

    def _boot_of(
        self, row: Row, groups: dict[str, str], number: int, rank: str | None
    ) -> Boot | None:
        """The boot the line is in: a new one where the line shows the engine restarted;
        None where it is a second model's (a draft's) inside the current one."""
        boot = self.current
        if row.starts_boot and _has_content(boot, rank):
            boot = self._new_boot(number)
        elif row.phase is not None and row.phase < boot.phases.get(rank, row.phase):
            boot = self._new_boot(number)  # the rank went back to an earlier step: a restart
        if not row.once:
            return boot
        names = tuple(f.name.format(**groups) for f in row.figures if f.group in groups)
        key = (rank, row.kind, names)
        identity = groups.get(row.identity) if row.identity else None
        if key in boot.once_seen:
            if row.identity is None or boot.once_seen[key] == identity:
                boot = self._new_boot(number)
            else:
                _second_model(boot, row, identity, number, rank)
                return None
        boot.once_seen.setdefault(key, identity)
        return boot

    def _read_figures(
        self,
        boot: Boot,
        row: Row,
        groups: dict[str, str],
        number: int,
        kept: str,
        rank: str | None,
    ) -> bool:
        """Read the line's figures into the boot; False where one is more than a boot states,
        which stops the scan."""
        for fig in row.figures:
            raw = groups.get(fig.group)
            if raw is None:
                continue
            name = fig.name.format(**groups)
            if self._full(boot, number, rank, name):
                return False
            try:
                reading = fig.conv(raw)
            except Unreadable as why:
                _unreadable(boot, number, rank, name, raw, str(why))
                continue
            hit = Hit(
                reading.value,
                number,
                kept,
                reading.printed,
                reading.unit,
                rank,
                row.source,
                row.priority,
            )
            _put(boot, name, hit)
        return True

    def _new_boot(self, number: int) -> Boot:
        """Close the current boot, keeping it as the previous (and last complete) one."""
        finished = self.current
        finished.end = number - 1
        if finished.has_content:
            self.boots += 1
            self.previous = finished
            if self.fmt.complete(finished.stated()):
                self.last_complete = finished
        self.current = Boot(start=number)
        return self.current

    # ------------------------------------------------------------ finishing

    def finish(self, total_lines: int) -> tuple[Boot | None, list[str], int]:
        """The boot the ledger describes, the notes on that choice, and how many boots."""
        last = self.current
        last.end = total_lines
        boots = self.boots
        if last.has_content:
            boots += 1
        else:
            last = self.previous or last
        if not last.has_content:
            return None, [], boots
        chosen, notes = self._chosen(last, boots)
        if chosen.dropped_lines:
            notes.append(f"{chosen.dropped_lines} more recognised lines were not listed")
        return chosen, notes + chosen.notes + _unread_notes(chosen), boots

    def _chosen(self, last: Boot, boots: int) -> tuple[Boot, list[str]]:
        """The last boot if it reached its capacity line, else the last complete one: a
        restart cut short must not hide the boot that stated the figures."""
        if self.fmt.complete(last.stated()):
            if boots > 1:
                return last, [
                    f"{boots} boots in this file; the last complete one ({last.span()}) was used"
                ]
            return last, []
        if self.last_complete is not None and self.last_complete is not last:
            chosen = self.last_complete
            return chosen, [
                f"{boots} boots in this file; the last one ({last.span()}) stops before its KV "
                f"capacity line, so the last complete one ({chosen.span()}) was used"
            ]
        where = f"the last of {boots} boots ({last.span()})" if boots > 1 else "this boot"
        return last, [
            f"{where} stops before its KV capacity line (truncated, or still "
            "booting): its figures may be incomplete"
        ]


def _unread_notes(boot: Boot) -> list[str]:
    """What the boot printed but could not be read: the first few figures one by one, the
    rest counted, and lines that repeat a needle as no engine's line does."""
    unread = list(boot.unreadable.values())[:SHOWN_UNREADABLE]
    more = boot.unreadable_count - len(unread)
    if more > 0:
        unread.append(f"and {more:,} more figure(s) that cannot be read, left null")
    if boot.repeated is not None:
        line, needle, times = boot.repeated
        others = boot.repeated_lines - 1
        unread.append(
            f"line {line} holds {needle!r} {times:,} times, as no engine's line does: it "
            "was not read as one" + (f" (nor {others:,} more such lines)" if others else "")
        )
    return unread


def _drafting(boot: Boot, rank: str | None) -> bool:
    """Whether a second model (a draft) is loading for ``rank`` (or for every rank)."""
    return _ALL in boot.second_model or rank in boot.second_model


def _after_boot(boot: Boot, row: Row, groups: dict[str, str], number: int) -> bool:
    """Whether the line is serving's, not the boot's: the server coming up, or a failure
    after it (a request's error, noted once and counted)."""
    if row.failure and boot.serving_from is not None:
        if not boot.request_errors:
            boot.notes.append(
                f"line {number}: {groups['error'].strip()[:120]} came after the server was "
                f"up (line {boot.serving_from}): a request's error, not a boot failure"
            )
        boot.request_errors += 1
        return True
    if row.serving:
        if boot.serving_from is None:
            boot.serving_from = number
        return True
    return False


# the row kinds that print a cache's whole size (not one device's buffer)
_CACHE_SUMMARIES = ("kv_summary", "kv_summary_swa")
MAX_DRAFT_LINES = 4096  # a draft's contexts per boot kept; more is no server's


# the figures that state the pool: the target prints its pool before a draft's in every
# order read (SGLang 0.5.2: target load, pool, then the draft's; 0.5.23: both loads, then
# the target's pool and the draft's, mem_cache/kv_cache_configurator.py; llama.cpp: the
# target's context before "loading draft model")
_POOL_STATED = ("kv_bytes", "k_bytes", "v_bytes", "num_blocks")


def _target_pool_pending(boot: Boot, row: Row, groups: dict[str, str], rank: str | None) -> bool:
    """Whether a line after a draft's load states the target's pool: the first pool line
    of the boot is the target's, whichever model loaded last."""
    stated = {fig.name for fig in row.figures if fig.group in groups}
    if not stated & set(_POOL_STATED):
        return False
    return not any((rank, name) in boot.hits for name in _POOL_STATED)


def _draft_kv(boot: Boot, row: Row, groups: dict[str, str], number: int, text: str) -> None:
    """Keep a draft context's printed cache size."""
    if row.kind not in _CACHE_SUMMARIES or len(boot.draft_kv) >= MAX_DRAFT_LINES:
        return
    if boot.draft_kv and boot.draft_kv[-1][0] == number:
        return  # the same line, matched by the SWA cache's row too
    for fig in row.figures:
        raw = groups.get(fig.group)
        if raw is None or not fig.name.endswith("kv_bytes"):
            continue
        try:
            reading = fig.conv(raw)
        except Unreadable:
            return
        if isinstance(reading.value, int):
            boot.draft_kv.append((number, reading.value, text.strip()[:200]))
        return


def _second_model(
    boot: Boot, row: Row, identity: str | None, number: int, rank: str | None
) -> None:
    """A once-per-boot line naming another model: a second model (a draft) loads in this
    boot, and the rank's lines from here are not counted."""
    boot.second_model[rank] = number
    who = f" ({rank})" if rank else ""
    boot.notes.append(
        f"a second model ({row.identity}={identity}) loads at line {number}{who};"
        " its figures are not counted"
    )


def _progress(boot: Boot, row: Row, number: int, rank: str | None) -> None:
    """How far the rank has got, and a draft announced: a later line from an earlier step is
    a restart, and a draft's lines are not counted."""
    if row.phase is not None:
        boot.phases[rank] = max(boot.phases.get(rank, row.phase), row.phase)
    if row.second_model and not boot.second_model:
        boot.second_model[rank if rank is not None else _ALL] = number
        boot.notes.append(
            f"a second model (a draft) loads from line {number}; its figures are not counted"
        )


def _list_line(boot: Boot, row: Row, number: int, text: str, rank: str | None) -> str:
    """List the line in its boot (past MAX_LINES_KEPT only counted); the clipped text it
    returns is what each of the line's figures cites."""
    boot.end = number
    kept = clip(text)
    if len(boot.lines) < MAX_LINES_KEPT:
        boot.lines.append(
            LedgerLine(line=number, kind=row.kind, text=kept, source=row.source, rank=rank)
        )
    else:
        boot.dropped_lines += 1
    return kept


def _failed(boot: Boot, row: Row, groups: dict[str, str], number: int, kept: str) -> None:
    """The boot's failure, whichever process printed it: the first line naming the cause
    wins; a later line of higher priority (a specific row) replaces it."""
    failed = Hit(True, number, kept, None, None, None, row.source, row.priority)
    _put(boot, "boot_failed", failed)
    _put(boot, "error", replace(failed, value=clip(groups["error"].strip())))


def _unreadable(boot: Boot, number: int, rank: str | None, name: str, raw: str, why: str) -> None:
    """Note a figure whose text no engine prints: it stays null, never a guess."""
    boot.unreadable_count += 1
    if name in boot.unreadable:
        return
    shown = raw if len(raw) <= 32 else f"{raw[:16]}…{raw[-8:]}"
    who = f" ({rank})" if rank else ""
    boot.unreadable[name] = f"line {number}{who}: {name} {shown!r} {why}, so it is left null"


def _put(boot: Boot, name: str, hit: Hit) -> None:
    """Keep the first statement of a figure per rank, unless a later one has priority."""
    key = (hit.rank, name)
    old = boot.hits.get(key)
    if old is None or hit.priority > old.priority:
        boot.hits[key] = hit


def _has_content(boot: Boot, rank: str | None) -> bool:
    """Whether a boot marker from ``rank`` means a new boot has begun."""
    if rank is None:
        return boot.has_content
    return rank in boot.content_ranks


def _may_be_cut(match: re.Match[str], text: str) -> bool:
    """Whether a group reaches the end of the line, where a cut line may have cut it."""
    end = len(text.rstrip())
    return any(match.end(g) >= end for g in match.re.groupindex if match.group(g) is not None)

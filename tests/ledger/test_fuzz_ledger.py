"""Mangled boot logs: every one is read into a Ledger or refused with a LedgerError, in bounded
time, and what consumes a ledger (its JSON, the ceiling, verify's verdicts) takes it too.

The logs are this repository's real ones (``tests/data/public/ledgers``, ``tests/data/
ledgers``), mangled the ways a disk, a terminal or a person mangles them: bytes flipped,
cuts, lines spliced in from another engine's log, numbers no engine prints, random unicode
and invalid UTF-8, CRLF, NULs, ANSI codes, rank prefixes, repeated and stretched lines,
gzip whole or cut. The default run takes a few seconds; ``pytest -m fuzz`` reads 1,000
(larger mutations too) and prints how long they took and the peak RSS.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import itertools
import json
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fakplan.ceiling import ceiling_from_ledger
from fakplan.cli.ledger import print_ledger
from fakplan.engines import bootlog_formats, parse_ledger
from fakplan.errors import LedgerError
from fakplan.ledger import Ledger
from fakplan.ledger.scan import EngineScan
from fakplan.plan import Plan, compile_plan
from fakplan.shape import load_shape
from fakplan.units import GIB
from fakplan.verify import ledger_verdicts
from tests.ledger.test_ledger_hardening import NoAnswer, answers_within
from tests.support.paths import DATA, PUBLIC, ROOT
from tests.support.peakrss import peak_mib

LOGS = {
    path.name: path.read_bytes()
    for folder in (PUBLIC / "ledgers", DATA / "ledgers")
    for path in sorted(folder.glob("*.log"))
}
NAMES = sorted(LOGS)

NUMBERS = [
    "1.2.3", "1..2", "1,2,3", "5,67,978", ",,,", ".", "1.", ".5", "٥٦٧", "１２３", "-1",
    "1e400", "nan", "inf", "0", "0000000000", "9" * 25, "9" * 400, "9" * 5000, "9" * 4301,
    str(2**63 - 1), str(2**63), str(2**64), "9,223,372,036,854,775,808", "1048576.01",
    "0." + "0" * 30 + "1", "1" + "0" * 320 + ".5",
]  # fmt: skip
INSERTS = [
    b"\x00", b"\x00" * 700, b"\r", b"\r\n", b"\n", b"\x1b[31m", b"\x1b[0m", b"\x1b]0;t\x07",
    b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", "é".encode(), "\u2028".encode(), b"(", b")", b"[",
    b"] ", b"=", b": ", b"GiB", b" MiB", b"Error: ", b"TP1", b"pid=1", b"\t",
]  # fmt: skip
PREFIXES = [
    "[2025-03-27 21:33:31 TP{n}] ", "[2025-03-27 21:33:31 DP{n} TP{m}] ",
    "(Worker_TP{n} pid={m}) ", "(VllmWorkerProcess pid={n}) ", "W card {n} ",
]  # fmt: skip

Mutation = Callable[[st.DrawFn, bytes, int], bytes]
SIZE = 64 << 10  # a mangled log is at most SIZE x scale bytes (6.4 MB in the long run)
_NUMBER = re.compile(rb"[0-9][0-9,.]*")
_FIGURE = re.compile(
    rb"[0-9][0-9,.]*(?= ?(?:[KMGT]i?B|B\b|tokens|x\b|blocks|cells|seqs|layers|rows))"
    rb"|(?<=[:=] )[0-9][0-9,.]*|(?<=[:=])[0-9][0-9,.]*"
)
# Mutations find their place by position, never by listing every line: the generator's own
# memory stays small beside the parser's, so the peak RSS measures the parser.


def _at(draw: st.DrawFn, data: bytes) -> int:
    return draw(st.integers(0, len(data)))


def _line(draw: st.DrawFn, data: bytes) -> tuple[int, int]:
    """A line of ``data`` (start, end past its newline), picked by a position in it."""
    at = _at(draw, data)
    start = data.rfind(b"\n", 0, at) + 1
    end = data.find(b"\n", at)
    return start, len(data) if end == -1 else end + 1


def flip(draw: st.DrawFn, data: bytes, scale: int) -> bytes:
    if not data:
        return data
    at = draw(st.integers(0, len(data) - 1))
    return data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1 :]


def cut(draw: st.DrawFn, data: bytes, scale: int) -> bytes:
    at = _at(draw, data)
    return data[:at] + data[at + draw(st.integers(1, 400)) :] if draw(st.booleans()) else data[:at]


def splice(draw: st.DrawFn, data: bytes, scale: int) -> bytes:
    """Lines of any log (another engine's too) inserted at a line boundary."""
    other = LOGS[draw(st.sampled_from(NAMES))]
    first, _ = _line(draw, other)
    last = first
    for _ in range(draw(st.integers(1, 12))):
        last = other.find(b"\n", last) + 1 or len(other)
    at, _ = _line(draw, data)
    return data[:at] + other[first:last] + data[at:]


def number(draw: st.DrawFn, data: bytes, scale: int) -> bytes:
    """A number of the log, most often a figure's (before a unit, after ``: ``/``=``),
    replaced by one no engine prints or a huge one."""
    form = _FIGURE if draw(st.integers(0, 4)) else _NUMBER
    found = list(itertools.islice(form.finditer(data), 300)) or list(
        itertools.islice(_NUMBER.finditer(data), 300)
    )
    if not found:
        return data
    match = draw(st.sampled_from(found))
    text = draw(
        st.one_of(
            *[st.sampled_from(NUMBERS)] * 3,  # the forms no engine prints, most often
            st.integers(0, 2**300).map(str),
            st.integers(1, 60 * scale).map(lambda n: "7" * n),
        )
    )
    return data[: match.start()] + text.encode() + data[match.end() :]


def unicode(draw: st.DrawFn, data: bytes, scale: int) -> bytes:
    """Random text, lone surrogates included (invalid UTF-8 on disk)."""
    text = draw(st.text(max_size=40))
    at = _at(draw, data)
    return data[:at] + text.encode("utf-8", "surrogatepass") + data[at:]


def insert(draw: st.DrawFn, data: bytes, scale: int) -> bytes:
    at = _at(draw, data)
    return data[:at] + draw(st.sampled_from(INSERTS)) * draw(st.integers(1, 3)) + data[at:]


def crlf(draw: st.DrawFn, data: bytes, scale: int) -> bytes:
    return data.replace(b"\n", draw(st.sampled_from([b"\r\n", b"\r\r\n", b"\n\r"])))


def nuls(draw: st.DrawFn, data: bytes, scale: int) -> bytes:
    """A run of NULs, as a crashed write leaves in a log file (past 1 MiB in the long run)."""
    at = _at(draw, data)
    return data[:at] + b"\x00" * draw(st.integers(1, SIZE // 3 * scale)) + data[at:]


def prefix(draw: st.DrawFn, data: bytes, scale: int) -> bytes:
    """A rank prefix on up to 2,000 lines from one of them: ranks that differ, or a rank
    per line."""
    form = draw(st.sampled_from(PREFIXES))
    every = draw(st.integers(1, 4))
    rng = draw(st.randoms(use_true_random=False))  # one draw, not one per line
    start, end = _line(draw, data)
    for _ in range(2000):
        end = data.find(b"\n", end) + 1 or len(data)
    lines = data[start:end].split(b"\n")
    marked = [
        form.format(n=rng.choice([0, 1, rng.randrange(10**6)]), m=i).encode() + line
        if i % every == 0
        else line
        for i, line in enumerate(lines)
    ]
    return data[:start] + b"\n".join(marked) + data[end:]


def repeat(draw: st.DrawFn, data: bytes, scale: int) -> bytes:
    """One line many times (a restart loop, a log spammed with one message)."""
    start, end = _line(draw, data)
    line = data[start:end] or b"\n"
    times = draw(st.integers(2, max(2, min(200 * scale, SIZE * scale // len(line)))))
    return data[:start] + line * times + data[start:]


def stretch(draw: st.DrawFn, data: bytes, scale: int) -> bytes:
    """One line's content repeated within the line (a needle many times, a long line)."""
    start, end = _line(draw, data)
    line = data[start:end].rstrip(b"\n") or b"x"
    times = draw(st.integers(2, max(2, SIZE // 3 * scale // len(line))))
    return data[:start] + line * times + b"\n" + data[end:]


def join(draw: st.DrawFn, data: bytes, scale: int) -> bytes:
    """Line endings dropped: the whole log on one line."""
    return data.replace(b"\n", draw(st.sampled_from([b"", b" ", b"\r"])))


MUTATIONS: list[Mutation] = [
    flip, cut, splice, number, number, unicode, insert, crlf, nuls, prefix, repeat, stretch,
    join,
]  # fmt: skip
DAMAGE: list[Mutation] = [flip, cut, insert]  # what a disk or a download does to a .gz


def _figure_spans(data: bytes) -> list[tuple[int, int]]:
    """Where the log prints each figure's number: the spans a figure mutation replaces.

    Found from the log's own ledger (the parser only aims the mutation: what is asserted
    is that any text there is read or refused)."""
    starts = [0, *(m.end() for m in re.finditer(rb"\n", data))]
    folder = Path(tempfile.mkdtemp())
    try:
        (folder / "boot.log").write_bytes(data)
        figures = parse_ledger(folder / "boot.log").figures.values()
    except LedgerError:
        return []
    finally:
        shutil.rmtree(folder)
    spans = set()
    for figure in figures:
        if figure.derived or not figure.printed or figure.line > len(starts):
            continue
        number = figure.printed.split(" ")[0].encode()
        start = starts[figure.line - 1]
        at, end = data.find(number, start), data.find(b"\n", start)
        if at != -1 and (end == -1 or at < end):  # on the figure's own line
            spans.add((at, at + len(number)))
    return sorted(spans)


FIGURES = {name: _figure_spans(data) for name, data in LOGS.items()}


def figure(draw: st.DrawFn, data: bytes, spans: list[tuple[int, int]]) -> bytes:
    """A figure's number (where the original log prints it) replaced by one no engine prints."""
    start, end = draw(st.sampled_from(spans))
    text = draw(st.one_of(st.sampled_from(NUMBERS), st.integers(0, 2**300).map(str)))
    return data[:start] + text.encode() + data[end:]


@st.composite
def mangled_logs(draw: st.DrawFn, scale: int = 1) -> bytes:
    """A real log after 1-6 mutations, ``scale`` stretching their sizes (long runs: 100);
    half the time a figure's number is replaced first. Sometimes gzipped last, then damaged
    byte-wise (a cut download, a flipped bit). Lines are never repeated inside the deflate
    stream: that builds a gzip bomb, which the hardening tests meet on their own."""
    name = draw(st.sampled_from(NAMES))
    data = LOGS[name]
    if FIGURES[name] and draw(st.booleans()):
        data = figure(draw, data, FIGURES[name])
    for mutation in draw(st.lists(st.sampled_from(MUTATIONS), max_size=6)):
        data = mutation(draw, data, scale)[: SIZE * scale]
    if draw(st.integers(0, 4)) == 0:
        data = gzip.compress(data, compresslevel=1)
        for mutation in draw(st.lists(st.sampled_from(DAMAGE), max_size=2)):
            data = mutation(draw, data, scale)
    return data


SHAPE = """\
name: s
engine: vllm
engine_version: 0.24.0
model: {model}
card: {{total: 31.5 GiB, count: 1}}
budget: {{weights: 20 GiB, kv: 5.98 GiB}}
serving: {{max_num_seqs: 1, max_model_len: 131072, kv_cache_dtype: fp8}}
"""


@cache
def the_plan() -> Plan:
    """The plan verify judges the fuzzed ledgers against (the shape test_verify uses); not a
    fixture, so a failing example's report shows the log, not the plan."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s.yaml"
        path.write_text(SHAPE.format(model=PUBLIC / "configs" / "nvidia--Qwen3.6-35B-A3B-NVFP4"))
        return compile_plan(load_shape(path))


def read(path: Path) -> Ledger | LedgerError:
    """Parse as ``fakplan ledger`` does, then use the ledger as its report, its JSON, the
    ceiling and verify do. A LedgerError is an answer (bad input: one line, exit 2);
    anything else escapes."""
    try:
        ledger = parse_ledger(path)
    except LedgerError as refused:
        assert "\n" not in str(refused), str(refused)  # one line on stderr
        return refused
    with contextlib.redirect_stdout(io.StringIO()):
        print_ledger(ledger)  # `fakplan ledger LOG`'s table
    Ledger.from_dict(json.loads(ledger.to_json()))  # the JSON is valid and reads back
    ceiling_from_ledger(ledger, engine_floor=GIB)
    try:
        ledger_verdicts(the_plan(), ledger, engine_floor=GIB)
    except LedgerError as refused:  # a ceiling above the card: bad input, as plan refuses it
        assert "\n" not in str(refused), str(refused)
    return ledger


QUICK = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@QUICK
@given(mangled_logs())
def test_a_mangled_log_is_read_or_refused(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "boot.log"
    path.write_bytes(data)
    started = time.monotonic()
    read(path)
    assert time.monotonic() - started < 5


def serve() -> None:
    """The long run's reader, a process of its own: its peak RSS is the parser's, not the
    generator's (hypothesis holds ~200 MB after 1,000 examples). One path a line in, one
    JSON result a line out; at the end of its input, its peak RSS."""
    the_plan()
    for line in sys.stdin:
        started = time.monotonic()
        result: dict[str, object]
        try:
            outcome = read(Path(line.rstrip("\n")))
            result = {"outcome": "ledger" if isinstance(outcome, Ledger) else "refused"}
        except Exception:  # what the run counts: a traceback fakplan would show
            result = {"outcome": "traceback", "traceback": traceback.format_exc()}
        result["took"] = time.monotonic() - started
        print(json.dumps(result), flush=True)
    print(json.dumps({"peak_mb": peak_mib() * 2**20 / 10**6}), flush=True)


@pytest.mark.fuzz
def test_a_thousand_mangled_logs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """1,000 mangled logs, sizes stretched up to 100x (lines of MBs, NUL runs, 20,000
    repeats): 0 tracebacks, none past 10 s, the reader's peak RSS under 200 MB."""
    code = "from tests.ledger.test_fuzz_ledger import serve; serve()"
    worker = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert worker.stdin is not None and worker.stdout is not None
    seen = {"logs": 0, "ledger": 0, "refused": 0, "traceback": 0, "bytes": 0}
    slowest = [0.0, 0.0]

    def ask(path: Path) -> dict[str, object]:
        assert worker.stdin is not None and worker.stdout is not None
        worker.stdin.write(f"{path}\n")
        worker.stdin.flush()
        ready, _, _ = select.select([worker.stdout], [], [], 60)
        assert ready, f"no answer in 60 s for {path}"
        answer: dict[str, object] = json.loads(worker.stdout.readline())
        return answer

    @settings(
        max_examples=1000,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],  # a loaded machine, not fakplan
    )
    @given(mangled_logs(scale=100))
    def run(data: bytes) -> None:
        path = tmp_path / "boot.log"
        path.write_bytes(data)
        answer = ask(path)
        took = answer["took"]
        assert isinstance(took, float)
        if took > slowest[0]:
            slowest[:] = [took, len(data)]
        seen["logs"] += 1
        seen["bytes"] += len(data)
        seen[str(answer["outcome"])] += 1
        assert answer["outcome"] != "traceback", answer["traceback"]
        assert took < 10

    begun = time.monotonic()
    try:
        run()
    finally:
        worker.stdin.close()
        last = worker.stdout.readline()
        worker.stdout.close()  # else the pipe's wrapper is left to the collector (a warning)
        worker.wait(timeout=60)
    total = time.monotonic() - begun
    peak = json.loads(last)["peak_mb"]
    with capsys.disabled():
        print(
            f"\nfuzz ledgers: {seen['logs']:,} mangled logs ({seen['bytes'] / 10**6:,.0f} MB; "
            f"{seen['ledger']:,} ledgers, {seen['refused']:,} refused, {seen['traceback']} "
            f"tracebacks) in {total:.1f} s, slowest {slowest[0]:.2f} s ({slowest[1] / 10**6:.1f}"
            f" MB), the reader's peak RSS {peak:.0f} MB"
        )
    assert seen["logs"] >= 1000 and seen["traceback"] == 0
    assert slowest[0] < 10
    assert peak < 200


FILLS = {
    "the needle repeated": None, "digits and commas": "1,", "digits and points": "1.",
    "spaces": " ", "one word": "a", "dashes": "- 1", "short words": "a ", "digits": "1",
    "tabs": "\t1",
}  # fmt: skip


@pytest.mark.fuzz
@pytest.mark.parametrize("fill", list(FILLS))
def test_every_row_reads_a_hostile_1_mib_line_in_linear_time(fill: str) -> None:
    """Each row's regex, through the scan, on a 1 MiB line holding its needle and then one
    long run: a backtracking pattern took minutes to hours on such a line (sampler's, the
    CUDA malloc error's), a linear one takes milliseconds. A new row is held to it too."""
    size = 1 << 20
    slowest = (0.0, "")
    for fmt in bootlog_formats().values():
        for row in fmt.rows:
            piece = FILLS[fill]
            if piece is None:
                text = (row.needle + " 1 ") * (size // (len(row.needle) + 3))
            else:
                text = "x " + row.needle + piece * (size // len(piece))
            which = f"{fmt.name} {row.kind} ({row.needle!r})"
            started = time.monotonic()
            try:
                with answers_within(30):  # a backtracking row fails here, named, not in hours
                    EngineScan(fmt).feed(1, text, False)
            except NoAnswer:
                pytest.fail(f"{which}: no answer in 30 s on a 1 MiB line of {fill}")
            slowest = max(slowest, (time.monotonic() - started, which))
    assert slowest[0] < 2, slowest

"""Boot logs as hostile input: every edge ends in seconds, with a ledger or one clear line.

Each case names what a user (or a broken disk) can hand ``fakplan ledger``, ``fakplan
verify --ledger`` or a shape's ``ceiling: {ledger: ...}``: a device, a FIFO, a file of
gigabytes without a line ending, numbers no engine prints, lines that make a regex
backtrack. Expected values are written out here from the log text, not from the parser.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import pytest
from click.testing import CliRunner, Result

from fakplan.cli import main
from fakplan.engines import parse_ledger
from fakplan.errors import LedgerError
from fakplan.ledger import Ledger
from fakplan.ledger.reader import Prefilter, scan_file
from tests.support.paths import DATA, PUBLIC, SHAPES

LEDGERS = PUBLIC / "ledgers"
DATA = DATA / "ledgers"
GIB, MIB = 2**30, 2**20
VLLM_018 = (LEDGERS / "vllm-018.log").read_text()
LINE_2 = "(EngineCore pid=107) INFO 07-06 22:52:09 [kv_cache_utils.py:2146] GPU KV cache size: "
LLAMA_START = "llama_model_loader: loaded meta data with 3 key-value pairs\n"
WEIGHTS = (
    "(EngineCore pid=107) INFO 07-06 22:52:01 [gpu_model_runner.py:2000] Model loading took "
    "{} GiB memory and 20.1 seconds\n"
)


WIDE = {"COLUMNS": "1000"}  # a report line is never wrapped inside the words a test looks for


class NoAnswer(Exception):
    pass


@contextmanager
def answers_within(seconds: float) -> Iterator[None]:
    """Fail, instead of hanging the suite, when the block is still running after ``seconds``
    (SIGALRM interrupts a blocked open(), a read loop and a backtracking regex alike)."""

    def expire(signum: int, frame: FrameType | None) -> None:
        raise NoAnswer(f"no answer in {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def invoke(*args: str, seconds: float = 20, env: dict[str, str] | None = None) -> Result:
    with answers_within(seconds):
        return CliRunner().invoke(main, list(args), env=env)


def one_line_exit_2(result: Result) -> str:
    """The bad-input contract: exit 2, nothing on stdout, one line on stderr, no traceback."""
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert result.stdout == ""
    assert "Traceback" not in result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def ledger_json(path: Path, seconds: float = 20) -> dict[str, object]:
    result = invoke("ledger", "--json", str(path), seconds=seconds)
    assert result.exit_code == 0, result.output
    assert result.exception is None
    data: dict[str, object] = json.loads(result.stdout)
    return data


def notes_of(data: dict[str, object]) -> list[str]:
    notes = data["notes"]
    assert isinstance(notes, list)
    return [str(n) for n in notes]


def one_note(data: dict[str, object], *parts: str) -> str:
    found = [n for n in notes_of(data) if all(p in n for p in parts)]
    assert len(found) == 1, (parts, notes_of(data))
    return found[0]


def write_shape(folder: Path, ceiling: str | None = None) -> Path:
    """A vLLM shape whose predictions vllm-018 closes (the one test_verify uses), as YAML
    with known line numbers: ``ceiling.ledger`` is line 9."""
    model = PUBLIC / "configs" / "nvidia--Qwen3.6-35B-A3B-NVFP4"
    lines = [
        "name: s",
        "engine: vllm",
        "engine_version: 0.24.0",
        f"model: {model}",
        "card: {total: 31.5 GiB, count: 1}",
        "budget: {weights: 20 GiB, kv: 5.98 GiB}",
        "serving: {max_num_seqs: 1, max_model_len: 131072, kv_cache_dtype: fp8, "
        "max_num_batched_tokens: 8192, prefix_caching: true}",
    ]
    if ceiling is not None:
        lines += ["ceiling:", f"  ledger: {ceiling}"]
    path = folder / "s.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


# ------------------------------------------------------------ what is not a regular file


def test_dev_zero_is_refused_at_once() -> None:
    """A device has no end: read whole, /dev/zero never answered. It is refused unread."""
    started = time.monotonic()
    line = one_line_exit_2(invoke("ledger", "--json", "/dev/zero"))
    assert time.monotonic() - started < 5
    assert line.startswith("/dev/zero: is a character device, not a file")
    with answers_within(5), pytest.raises(LedgerError, match="character device"):
        parse_ledger("/dev/zero")


def test_a_fifo_that_never_writes_is_refused_without_waiting(tmp_path: Path) -> None:
    """Opening a FIFO waits for a writer that may never come: it is refused before opening."""
    fifo = tmp_path / "boot.log"
    os.mkfifo(fifo)
    line = one_line_exit_2(invoke("ledger", str(fifo), seconds=10))
    assert line.startswith(f"{fifo}: is a named pipe (FIFO), not a file")


def test_a_symlink_to_a_device_is_refused_as_the_device(tmp_path: Path) -> None:
    link = tmp_path / "boot.log"
    link.symlink_to("/dev/null")
    line = one_line_exit_2(invoke("ledger", str(link)))
    assert line.startswith(f"{link}: is a character device, not a file")


def test_verify_with_dev_zero_as_its_ledger(tmp_path: Path) -> None:
    shape = write_shape(tmp_path)
    line = one_line_exit_2(
        invoke("verify", str(shape), "--ledger", "/dev/zero", "-o", str(tmp_path / "out"))
    )
    assert line.startswith("/dev/zero: is a character device, not a file")
    assert not (tmp_path / "out").exists()  # nothing recorded


def test_a_shape_whose_ceiling_ledger_is_dev_zero_is_refused_at_its_line(
    tmp_path: Path,
) -> None:
    (tmp_path / "boot.log").symlink_to("/dev/zero")
    shape = write_shape(tmp_path, ceiling="boot.log")
    line = one_line_exit_2(invoke("plan", str(shape)))
    # the shape's paths are resolved, links included: the line names the device itself
    assert line.startswith(f"{shape}:9: ceiling.ledger: /dev/zero: is a character device, not")


def test_a_log_still_being_written_is_read_as_it_was_when_opened(tmp_path: Path) -> None:
    """A writer faster than the reader would keep it reading forever: the size at opening
    is where reading ends. The log is longer than one read block, so the reader comes back
    to the file after the server has written more."""
    log = tmp_path / "boot.log"
    filler = "x\n" * (3 * MIB)  # 6 MiB: more than one 4 MiB block
    log.write_text(VLLM_018 + filler)
    seen: list[int] = []

    def grow(number: int, text: str, unterminated: bool) -> None:
        seen.append(number)
        if len(seen) <= 2:  # a server appending while the log is read (twice, not forever)
            with log.open("a") as handle:
                handle.write(VLLM_018 * 10)

    with answers_within(20):
        stats = scan_file(log, Prefilter(["KV cache"]), grow)
    assert stats.lines == 3 + 3 * MIB  # vllm-018's 3 lines and the filler, nothing appended
    assert seen == [1, 2]  # "Available KV cache memory", "GPU KV cache size"


def test_a_path_holding_a_nul_byte_is_refused_not_raised() -> None:
    """os.stat raises ValueError for it; the API (a caller's path) gets a LedgerError."""
    with pytest.raises(LedgerError) as refused:
        parse_ledger("boot\x00.log")
    assert str(refused.value) == "'boot\\x00.log': cannot read (embedded null byte)"


# ------------------------------------------------------- gigabytes without a line ending


def test_10_gib_without_a_line_ending_ends_in_seconds(tmp_path: Path) -> None:
    """A sparse 10 GiB file of NULs, one "line": read to its end it took 14 s of zeroed
    pages; a run past 64 MiB without a newline is no log line, and reading stops there."""
    path = tmp_path / "huge.log"
    with path.open("wb") as handle:
        handle.truncate(10 * GIB)
    started = time.monotonic()
    line = one_line_exit_2(invoke("ledger", str(path)))
    assert time.monotonic() - started < 5
    assert line == (
        f"{path}: not a text log (binary data); expected an engine's boot log (vLLM, SGLang, "
        "llama.cpp or a VRAM budget table); line 1 runs past 64 MiB with no line ending, "
        "where reading stopped"
    )


def test_a_log_followed_by_10_gib_without_a_line_ending_is_read_up_to_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "boot.log"
    path.write_text(VLLM_018)
    with path.open("r+b") as handle:
        handle.truncate(10 * GIB)  # the rest of the file: NULs, no newline (a crashed write)
    started = time.monotonic()
    data = ledger_json(path)
    assert time.monotonic() - started < 5
    assert data["kv_tokens"] == 567_978  # line 2: "GPU KV cache size: 567,978 tokens"
    assert data["max_concurrency"] == 4.33
    one_note(data, "line 4 runs past 64 MiB with no line ending", "reading stopped")


def test_a_gzip_bomb_of_zeros_stops_at_the_run_limit(tmp_path: Path) -> None:
    """80 MiB of NULs in 80 KiB (80 gzip members of 1 MiB each, one stream to a reader):
    the run limit holds on the decompressed log."""
    packed = gzip.compress(bytes(MIB)) * 80
    assert len(packed) < MIB
    path = tmp_path / "boot.log.gz"
    path.write_bytes(packed)
    line = one_line_exit_2(invoke("ledger", str(path), seconds=10))
    assert line.endswith("line 1 runs past 64 MiB with no line ending, where reading stopped")


def test_a_line_dense_with_one_needle_is_found_in_linear_time(tmp_path: Path) -> None:
    """A 3.9 MB line holding "KV cache size: " 140,000 times took 12 s: the pre-filter looked
    back to the line's start from every hit. Now each line is looked at once."""
    dense = "GPU KV cache size: 1 tokens " * 140_000
    path = tmp_path / "boot.log"
    path.write_text("x\n" + dense + "\n" + VLLM_018)
    started = time.monotonic()
    data = ledger_json(path, seconds=30)
    assert time.monotonic() - started < 3
    assert data["kv_tokens"] == 567_978  # vllm-018's line 2, here line 4
    figures = data["figures"]
    assert isinstance(figures, dict) and figures["kv_tokens"]["line"] == 4
    one_note(data, "1 line(s) longer than 1 MiB were skipped (first: line 2)")


# ------------------------------------------------------ lines that make a regex backtrack


@pytest.mark.parametrize(
    ("head", "fill"),
    [
        ("card total          31.86 GiB\nsampler: ", "1,"),  # ".*?\b[\d,]+ rows"
        (f"{LLAMA_START}cudaMalloc failed: out of memory ", "1"),  # "\w+: allocating"
        (LLAMA_START, "new slot "),  # "new slot\b.*?n_ctx_slot = "
        ("[2025-03-27 21:33:31 TP0] Load weight end. ", "Capture cuda graph begin. "),
    ],
    ids=["sampler-digits", "cudamalloc-word", "new-slot-repeated", "graph-begin-repeated"],
)
def test_a_near_1_mib_line_that_backtracks_is_read_in_seconds(
    tmp_path: Path, head: str, fill: str
) -> None:
    """Each of these took minutes (one hours) on a single line under the 1 MiB line limit."""
    path = tmp_path / "boot.log"
    path.write_text(head + fill * ((MIB - 100) // len(fill)) + "\n")
    started = time.monotonic()
    with answers_within(30):
        try:  # a ledger (the sampler case states the card) or a refusal: both answer
            outcome: Ledger | LedgerError = parse_ledger(path)
        except LedgerError as exc:
            outcome = exc
    assert time.monotonic() - started < 5
    if isinstance(outcome, Ledger):
        assert outcome.card_total_bytes == round(31.86 * GIB)
        assert outcome.sampler_rows is None  # no "N rows" on that line


# ------------------------------------------------------------ numbers no engine prints


def test_a_5000_digit_token_count_is_a_note_not_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "boot.log"
    path.write_text(VLLM_018.replace("567,978", "9" * 5000))
    data = ledger_json(path)
    assert data["kv_tokens"] is None
    assert data["kv_bytes"] == round(5.98 * GIB)  # line 1 is untouched
    assert data["max_concurrency"] == 4.33  # line 3 too
    note = one_note(data, "line 2", "kv_tokens")
    assert "5,000 digits" in note
    assert data["unreadable"] == {"kv_tokens": note}


def test_a_log_whose_only_figure_cannot_be_read_is_refused_with_why(tmp_path: Path) -> None:
    path = tmp_path / "boot.log"
    path.write_text(LINE_2 + "9" * 5000 + " tokens\n")
    line = one_line_exit_2(invoke("ledger", "--json", str(path)))
    assert line == (
        f"{path}: 1 vLLM line(s) recognised, but none states a figure that can be read (line 1:"
        f" kv_tokens '{'9' * 16}…{'9' * 8}' has 5,000 digits, more than any boot log prints, so"
        " it is left null); expected the engine's boot log"
    )


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("٥٦٧,٩٧٨", "not a number"),  # Arabic-Indic digits: \d takes them, no engine prints them
        ("5,67,978", "not a number"),  # grouped as no engine groups
        (",,,", "not a number"),
        ("9,223,372,036,854,775,808", "beyond 2**63 - 1"),  # 2**63
    ],
)
def test_a_token_count_no_engine_prints_is_null_with_a_note(
    tmp_path: Path, text: str, why: str
) -> None:
    path = tmp_path / "boot.log"
    path.write_text(VLLM_018.replace("567,978", text))
    data = ledger_json(path)
    assert data["kv_tokens"] is None
    assert why in one_note(data, "line 2", "kv_tokens", repr(text))
    # the boot reached its capacity line: it is not called cut short
    assert not [n for n in notes_of(data) if "stops before its KV capacity line" in n]


def test_the_largest_count_a_signed_64_bit_reader_holds_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "boot.log"
    path.write_text(VLLM_018.replace("567,978", "9,223,372,036,854,775,807"))
    assert ledger_json(path)["kv_tokens"] == 2**63 - 1


def test_sizes_up_to_1_pib_are_read_and_past_it_are_null(tmp_path: Path) -> None:
    """1 PiB = 1,048,576 GiB, the largest size a shape may state (units.MAX_BYTE_SIZE)."""
    path = tmp_path / "boot.log"
    path.write_text(WEIGHTS.format("1048576.00") + VLLM_018)
    assert ledger_json(path)["weights_bytes"] == 2**50
    path.write_text(WEIGHTS.format("1048576.01") + VLLM_018)
    data = ledger_json(path)
    assert data["weights_bytes"] is None
    assert "more than 1 PiB" in one_note(data, "line 1", "weights_bytes", "'1048576.01'")


def test_1_2_3_gib_weights_are_null_with_a_note(tmp_path: Path) -> None:
    path = tmp_path / "boot.log"
    path.write_text(WEIGHTS.format("1.2.3") + VLLM_018)
    data = ledger_json(path)
    assert data["weights_bytes"] is None
    assert data["kv_tokens"] == 567_978
    assert "not a number" in one_note(data, "line 1", "weights_bytes", "'1.2.3'")


def test_1_2_3x_concurrency_is_null_and_the_same_lines_window_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "boot.log"
    path.write_text(VLLM_018.replace("4.33x", "1.2.3x"))
    data = ledger_json(path)
    assert data["max_concurrency"] is None
    assert data["context_len"] == 131_072  # "Maximum concurrency for 131,072 tokens per request"
    assert "not a number" in one_note(data, "line 3", "max_concurrency", "'1.2.3'")


@pytest.mark.parametrize(
    ("printed", "why"),
    [("9" * 400, "400 digits"), ("12345678901234567890", "more than 1 PiB")],
    ids=["400-digits", "20-digit-gib"],
)
def test_weights_absurd_for_any_card_are_unverifiable_in_verify(
    tmp_path: Path, printed: str, why: str
) -> None:
    """A 400-digit GiB weights size overflowed verify's float division; a 20-digit one is
    1.3e28 bytes. Neither is a figure: weights is unverifiable, the rest is still judged."""
    log = tmp_path / "boot.log"
    log.write_text(WEIGHTS.format(printed) + VLLM_018)
    shape = write_shape(tmp_path)
    result = invoke("verify", str(shape), "--ledger", str(log), "-o", str(tmp_path / "o"), "--json")
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code == 0, result.output
    verdicts = json.loads(result.stdout)["verdicts"]
    assert verdicts["kv-tokens"]["status"] == "held"  # 567,978 tokens, as test_verify has it
    weights = verdicts["weights"]
    assert weights["status"] == "unverifiable"
    assert weights["observed"] is None
    assert weights["note"].startswith("line 1: weights_bytes")
    assert why in weights["note"]
    # the human report shows it too, without a traceback
    report = invoke("verify", str(shape), "--ledger", str(log), "-o", str(tmp_path / "o"), env=WIDE)
    assert report.exit_code == 0, report.output
    assert why in report.stdout


def test_a_ceiling_whose_settled_free_memory_cannot_be_read_is_unknown_and_says_why(
    tmp_path: Path,
) -> None:
    table = (DATA / "table-seed002.log").read_text()
    assert "settled at 2.01 GiB free" in table
    (tmp_path / "boot.log").write_text(table.replace("2.01 GiB free", f"{'2' * 5000} GiB free"))
    shape = SHAPES / "frank-archon.yaml"
    text = shape.read_text().replace("ceiling: 29120 MiB", "ceiling: {ledger: boot.log}")
    (tmp_path / "s.yaml").write_text(text)
    result = invoke("plan", str(tmp_path / "s.yaml"), "--json")
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    data = json.loads(result.stdout)
    assert data["ceiling_bytes"] is None
    derivation = data["derivations"]["ceiling_bytes"]
    assert derivation.startswith("unknown: ")
    assert "line 8 (card 0): settled_free_bytes" in derivation
    assert "has 5,000 digits" in derivation


def test_a_card_number_of_5000_digits_orders_without_a_traceback(tmp_path: Path) -> None:
    """Rank labels were ordered by int() of their digits, which refuses 4,300+ digits."""
    path = tmp_path / "boot.log"
    path.write_text(
        (DATA / "table-seed002.log").read_text()
        + f"W card {'9' * 5000} settled at 3.01 GiB free against 209.19 MiB (x)\n"
    )
    data = ledger_json(path)
    ranks = data["ranks"]
    assert isinstance(ranks, dict)
    assert list(ranks) == ["card 0", f"card {'9' * 5000}"]  # numeric order: 0 before 99...9
    assert data["settled_free_bytes"] == round(2.01 * GIB)  # card 0: the least free binds


def test_an_error_message_of_a_megabyte_is_cut_to_the_kept_line(tmp_path: Path) -> None:
    path = tmp_path / "boot.log"
    path.write_text(VLLM_018 + "ValueError: " + "x" * 500_000 + "\n")
    data = ledger_json(path)
    assert data["boot_failed"] is True
    error = data["error"]
    assert isinstance(error, str)
    assert len(error) == 1000 and error.startswith("ValueError: xxx") and error.endswith("…")


def test_gzip_of_a_mangled_log_gives_the_same_notes(tmp_path: Path) -> None:
    text = VLLM_018.replace("567,978", "1.2.3")
    plain, packed = tmp_path / "boot.log", tmp_path / "boot.log.gz"
    plain.write_text(text)
    packed.write_bytes(gzip.compress(text.encode()))
    a, b = ledger_json(plain), ledger_json(packed)
    assert a["kv_tokens"] is None and b["kv_tokens"] is None
    assert a["unreadable"] == b["unreadable"]


# ------------------------------------------------------------- what one boot can state


def test_a_line_holding_a_needle_more_than_any_engine_line_is_not_read_as_one(
    tmp_path: Path,
) -> None:
    """Read, this line would be a second capacity line (a new boot of 1 token)."""
    path = tmp_path / "boot.log"
    path.write_text(VLLM_018 + LINE_2 + "1 tokens, KV cache size: " * 20 + "\n")
    data = ledger_json(path)
    assert data["kv_tokens"] == 567_978 and data["boots"] == 1
    one_note(data, "line 4 holds 'KV cache size: ' 21 times", "not read as one")


def test_ten_thousand_unreadable_lines_give_a_short_list_of_notes(tmp_path: Path) -> None:
    bad = "INFO Maximum concurrency for 2,048 tokens per request: 1.2.3x\n"
    path = tmp_path / "boot.log"
    path.write_text(VLLM_018.replace("4.33x", "1.2.3x") + bad * 10_000)
    data = ledger_json(path)
    assert data["max_concurrency"] is None
    assert data["context_len"] == 131_072  # line 3 states it first (2,048 comes later)
    unreadable = data["unreadable"]
    assert isinstance(unreadable, dict) and list(unreadable) == ["max_concurrency"]
    # line 3's max_concurrency is noted; the 10,000 after it are counted
    one_note(data, "line 3: max_concurrency '1.2.3' is not a number")
    one_note(data, "and 10,000 more figure(s) that cannot be read")
    assert len(notes_of(data)) < 5


def test_more_ranks_than_any_boot_runs_are_refused(tmp_path: Path) -> None:
    line = "[2025-03-27 21:33:31 TP{}] Load weight end. type=X, dtype=bf16, avail mem=131.08 GB, "
    path = tmp_path / "boot.log"
    path.write_text("".join(line.format(i) + "mem usage=8.13 GB.\n" for i in range(300)))
    assert one_line_exit_2(invoke("ledger", str(path))) == (
        f"{path}: line 257: a rank past the 256th in one boot, more than any SGLang boot "
        "states: not read as a boot log"
    )


def test_more_figures_than_any_boot_states_are_refused(
    tmp_path: Path,
) -> None:
    """300,000 device buffers of distinct names took 1.8 GB to hold; a boot states ~300."""
    path = tmp_path / "boot.log"
    with path.open("w") as handle:
        handle.write(LLAMA_START)
        for i in range(12_000):
            handle.write(f"load_tensors: DEV{i} model buffer size =   1.00 MiB\n")
    with answers_within(20), pytest.raises(LedgerError) as refused:
        parse_ledger(path)
    assert str(refused.value) == (
        f"{path}: line 10002: a figure past the 10,000th in one boot, more than any llama.cpp "
        "boot states: not read as a boot log"
    )

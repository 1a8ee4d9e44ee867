"""Boot logs as hostile input: every edge ends in seconds, with a ledger or one clear line.

Each case names what a user (or a broken disk) can hand ``fakplan ledger``, ``fakplan
verify --ledger`` or a shape's ``ceiling: {ledger: ...}``: a device, a FIFO, a file of
gigabytes without a line ending, numbers no engine prints, lines that make a regex
backtrack. Expected values are written out here from the log text, not from the parser.
"""

from __future__ import annotations

import json
import os
import signal
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import pytest
from click.testing import CliRunner, Result

from fakplan.cli import main
from fakplan.errors import LedgerError
from fakplan.ledger import parse_ledger
from fakplan.ledger.reader import Prefilter, scan_file

from .conftest import PUBLIC

LEDGERS = PUBLIC / "ledgers"
DATA = Path(__file__).resolve().parent / "data" / "ledgers"
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
        "max_num_batched_tokens: 8192}",
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
    """256 MiB of NULs compress to 256 KiB: the limit holds on the decompressed log."""
    squeeze = zlib.compressobj(9, zlib.DEFLATED, 31)  # 31: a gzip container
    chunk = bytes(MIB)
    packed = b"".join(squeeze.compress(chunk) for _ in range(256)) + squeeze.flush()
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

"""Fuzzing what a shape points at (issue 27): configs, safetensors headers, GGUF headers,
the device-budget variable and probe URLs.

Each generated input goes through the reader fakplan uses and must end in fakplan's own
error (one line, no control character) or a result: any other exception is a defect. A
short run is in the default suite; ``pytest -m fuzz`` runs thousands.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fakplan.budget import probe_budget
from fakplan.errors import FakplanError
from fakplan.geometry import load_geometry
from tests.support.paths import PUBLIC, ROOT
from tests.support.peakrss import peak_mib

LLAMA = json.loads(
    (PUBLIC / "configs" / "meta-llama--Llama-3.1-8B-Instruct" / "config.json").read_text()
)
KEYS = sorted(k for k, v in LLAMA.items() if isinstance(v, int | float) and not isinstance(v, bool))

# the values a hostile config puts in a field: huge, negative, zero, fractional,
# non-finite (written as JSON's non-standard tokens), wrong types, nesting
HOSTILE = st.one_of(
    st.integers(min_value=-(10**40), max_value=10**40),
    st.sampled_from([0, -1, 1, 2**31, 2**63, 2**64, 10**18, 10**9]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.none(),
    st.booleans(),
    st.lists(st.integers(min_value=-5, max_value=5), max_size=3),
    st.recursive(st.integers(0, 3), lambda c: st.lists(c, max_size=2), max_leaves=6),
)


def _dumps(value: Any) -> str:
    """JSON as a hostile writer would: NaN and Infinity as the tokens Python writes."""
    return json.dumps(value, allow_nan=True)


def _judged(call: Any) -> None:
    """The call ends in a result or in fakplan's one-line error, nothing else."""
    try:
        call()
    except FakplanError as exc:
        message = str(exc)
        assert "\n" not in message and "\x1b" not in message, message
        assert len(message) < 4000


def _config_case(tmp_path: Path, edits: dict[str, Any], raw_tail: str | None) -> None:
    config = {**LLAMA, **edits}
    text = _dumps(config)
    if raw_tail is not None:
        text = text[:-1] + f", {raw_tail}}}"
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(text)
    _judged(lambda: load_geometry(str(folder)))


CONFIG = given(
    edits=st.dictionaries(st.sampled_from(KEYS), HOSTILE, max_size=4),
    raw_tail=st.one_of(
        st.none(),
        st.sampled_from(
            ['"x": ' + "[" * 80 + "]" * 80, '"vocab_size": 1e400', '"head_dim": 0',
             '"rope_scaling": {"rope_type": "linear", "factor": 1e308}',
             '"num_key_value_heads": ' + "7" * 50]
        ),
    ),
)  # fmt: skip


@settings(
    max_examples=60, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@CONFIG
def test_configs_short(tmp_path: Path, edits: dict[str, Any], raw_tail: str | None) -> None:
    _config_case(tmp_path, edits, raw_tail)


def _safetensors_case(tmp_path: Path, tensors: dict[str, Any], length: int | None) -> None:
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(LLAMA))
    header = _dumps(tensors).encode()
    declared = len(header) if length is None else length
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", declared % 2**64) + header)
    _judged(lambda: load_geometry(str(folder)))


SAFETENSORS = given(
    tensors=st.dictionaries(
        st.text(max_size=6),
        st.one_of(
            HOSTILE,
            st.fixed_dictionaries(
                {"dtype": st.sampled_from(["BF16", "F32", "I8", "??"]),
                 "shape": st.lists(HOSTILE, max_size=3),
                 "data_offsets": st.lists(HOSTILE, max_size=3)}
            ),
        ),
        max_size=4,
    ),
    length=st.one_of(st.none(), st.integers(min_value=0, max_value=2**64)),
)  # fmt: skip


@settings(
    max_examples=60, deadline=2000, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@SAFETENSORS
def test_safetensors_headers_short(
    tmp_path: Path, tensors: dict[str, Any], length: int | None
) -> None:
    _safetensors_case(tmp_path, tensors, length)


GGUF_KEYS = ["block_count", "context_length", "embedding_length", "feed_forward_length",
             "attention.head_count", "attention.head_count_kv", "attention.key_length",
             "rope.dimension_count"]  # fmt: skip


def _gguf_case(tmp_path: Path, key: str, value: int | float) -> None:
    import gguf

    from tests.support.tinymodels import TinyLlama, write_tiny_llama

    path = tmp_path / "m.gguf"
    write_tiny_llama(path, TinyLlama())
    data = path.read_bytes()
    # the key's value in place: a UINT32 field becomes the fuzzed number's own type
    needle = f"llama.{key}".encode()
    at = data.find(needle)
    if at < 0:
        return
    kind_at = at + len(needle)
    kind = struct.unpack_from("<I", data, kind_at)[0]
    if kind != gguf.GGUFValueType.UINT32:
        return
    if isinstance(value, float):
        encoded = struct.pack("<If", gguf.GGUFValueType.FLOAT32, value)
    else:
        encoded = struct.pack("<II", gguf.GGUFValueType.UINT32, value % 2**32)
    path.write_bytes(data[:kind_at] + encoded + data[kind_at + 8 :])
    _judged(lambda: load_geometry(str(path)))


GGUF = given(
    key=st.sampled_from(GGUF_KEYS),
    value=st.one_of(
        st.integers(min_value=0, max_value=2**32 - 1),
        st.sampled_from([0, 1, 2**31, 2**32 - 1, 10**9]),
        st.floats(width=32, allow_nan=True, allow_infinity=True),
    ),
)


@settings(
    max_examples=40, deadline=3000, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@GGUF
def test_gguf_headers_short(tmp_path: Path, key: str, value: int | float) -> None:
    _gguf_case(tmp_path, key, value)


ENV = given(
    value=st.one_of(
        st.text(max_size=40),
        st.text(alphabet="0123456789", min_size=1, max_size=5000),
        st.floats(allow_nan=True, allow_infinity=True).map(lambda f: f"{f} GiB"),
    )
)


def _env_case(value: str) -> None:
    """FAKPLAN_DEVICE_BUDGET_BYTES of any text: a budget, or one line saying why not."""

    def read() -> None:
        budget = probe_budget(env={"FAKPLAN_DEVICE_BUDGET_BYTES": value}, gpu=False)
        if budget.budget_bytes is not None:
            assert 0 < budget.budget_bytes <= 2**50

    if "\x00" in value:
        return  # no environment can hold a NUL
    _judged(read)


@settings(max_examples=200, deadline=2000)
@ENV
def test_the_budget_variable(value: str) -> None:
    _env_case(value)


URLS = given(
    url=st.one_of(
        st.text(max_size=40),
        st.builds(
            lambda user, pw, host, port, tail: f"http://{user}:{pw}@{host}:{port}{tail}",
            st.text(max_size=6), st.text(max_size=8), st.sampled_from(["127.0.0.1", "h", ""]),
            st.one_of(st.integers(-5, 70000).map(str), st.text(max_size=4)),
            st.sampled_from(["", "/v1", "/v1?token=t", "#frag"]),
        ),
    )
)  # fmt: skip


def _refusal(url: str) -> str:
    from fakplan.probes.urls import check_url

    try:
        check_url(url)
    except FakplanError as exc:
        return str(exc)
    return ""


# fakplan's own wording of a refused URL, from URLs that hold no password: a "password"
# that is a piece of it (" or ", "HOST", "pars" of "<unparseable URL>") is in every message,
# echoed or not
WORDING = (
    " ".join(
        _refusal(url)
        for url in ("", "x", "http://", "ftp://h:1", "http://h:99999", "://: @", "http://[::")
    )
    + " http://127.0.0.1/v1"
)


def _url_case(url: str) -> None:
    message = _refusal(url)
    assert "\n" not in message
    if message and "@" in url and "://" in url:
        secret = url.split("://", 1)[1].rsplit("@", 1)[0].partition(":")[2]
        if len(secret) >= 4 and secret not in WORDING:
            assert secret not in message, (url, message)


@settings(max_examples=300, deadline=2000)
@URLS
@example("://:pars@::")  # a "password" that is a piece of "<unparseable URL>" (found by a run)
def test_probe_urls_never_echo_a_password(url: str) -> None:
    _url_case(url)


def fuzz_run(count: int, folder: Path) -> dict[str, float]:
    """``count`` generated inputs (configs, safetensors headers, GGUF headers, budget
    variables and probe URLs in the ratio 2:2:1:1:1) read in this process: the figures the fuzz run reports. Any exception
    other than fakplan's one-line error ends the run with its traceback."""
    slowest = [0.0]
    made = [0]

    def timed(case: Any, *args: Any) -> None:
        started = time.monotonic()
        case(folder, *args)
        slowest[0] = max(slowest[0], time.monotonic() - started)
        made[0] += 1

    def cleared() -> None:
        shutil.rmtree(folder / "model", ignore_errors=True)

    runs = (
        (CONFIG, lambda edits, raw_tail: timed(_config_case, edits, raw_tail), 2),
        (SAFETENSORS, lambda tensors, length: timed(_safetensors_case, tensors, length), 2),
        (GGUF, lambda key, value: timed(_gguf_case, key, value), 1),
        (ENV, lambda value: timed(lambda _folder, v: _env_case(v), value), 1),
        (URLS, lambda url: timed(lambda _folder, u: _url_case(u), url), 1),
    )
    begun = time.monotonic()
    for strategy, body, share in runs:
        # batches of 500: hypothesis keeps a tree of every choice a run made
        total = count * share // 7
        for _ in range(max(1, total // 500)):
            settings(
                max_examples=min(500, total),
                deadline=None,
                database=None,
                # a loaded machine slows generation, which says nothing of fakplan
                suppress_health_check=[HealthCheck.too_slow],
            )(strategy(body))()
            cleared()
    return {
        "count": made[0],
        "seconds": time.monotonic() - begun,
        "slowest": slowest[0],
        "peak_mib": peak_mib(),
    }


@pytest.mark.fuzz
def test_seven_thousand_generated_model_files_variables_and_urls(tmp_path: Path) -> None:
    """7,000 inputs: 0 exceptions other than FakplanError (any other fails the run),
    none past 10 s, and a peak RSS under 200 MB in a process of its own."""
    code = (
        "import json, pathlib, sys\n"
        "from tests.geometry.test_fuzz_model_files import fuzz_run\n"
        f"print(json.dumps(fuzz_run(7_000, pathlib.Path({str(tmp_path)!r}))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    print(
        f"\nfuzz model files, env and URLs: {figures['count']:,} in {figures['seconds']:.1f} s, slowest "
        f"{figures['slowest']:.2f} s, peak RSS {figures['peak_mib']:.0f} MiB, 0 tracebacks"
    )
    assert figures["count"] >= 5_000  # hypothesis may stop a batch early when it has seen all
    assert figures["slowest"] < 10
    assert figures["peak_mib"] * 2**20 < 200 * 10**6

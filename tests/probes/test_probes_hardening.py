"""Probes against servers that misbehave on purpose: trickled bytes, huge answers, an echoed key.

Each server is a raw HTTP/1.1 socket server on loopback (``Loopback``), so a
test can hold a connection, trickle one byte at a time, or send 100 MB
without building it in memory. The CLI runs in a child process where time and
peak memory count: its peak RSS is the child's own (``os.wait4``), never this
test process's. Bounds on time are generous against the probe's stated
``--timeout`` (a busy 2-core machine must not break them); the failures they
catch run for minutes or use gigabytes.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import math
import os
import re
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from fakplan.cli import main
from fakplan.probes import AsyncEndpoint, Deadline, Endpoint, ProbeFault, ProbeOptions, run_probes
from fakplan.probes.api import Server, excerpt
from fakplan.probes.calibrate import count_tokens
from fakplan.probes.flavours import flavour
from fakplan.probes.http import Answer
from fakplan.shape import load_shape
from tests.support.paths import DATA, ROOT
from tests.support.peakrss import RUN_FAKPLAN
from tests.support.tinymodels import write_tiny_llama

DATA = DATA / "probes"
MB = 1_000_000
MIB = 1024 * 1024
TRICKLE_FOR_S = 20.0  # a trickling server gives up after this: a test that fails still ends
# the acceptance bound on the probe process's peak memory, whatever the server sends
PEAK_RSS_LIMIT_MIB = 200
# a "short excerpt": the longest error line a report may show, by this test's reckoning
ERROR_CHARS = 600
# any run this long of the key (or of what a server decoded from it) in an output is a leak
LEAK_RUN = 10


# ------------------------------------------------------------------ the server


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body or b"{}")


Handler = Callable[[Request, socket.socket], None]


def _read_request(conn: socket.socket) -> Request:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            raise ConnectionError("the client closed before a request")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    line, *rest = head.decode("latin-1").split("\r\n")
    method, target, _ = line.split(" ", 2)
    headers = {}
    for item in rest:
        name, _, value = item.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return Request(method, urllib.parse.urlsplit(target).path, headers, body)


def head(
    conn: socket.socket,
    status: int = 200,
    content_type: str = "application/json",
    length: int | None = None,
) -> None:
    lines = [f"HTTP/1.1 {status} Status", f"Content-Type: {content_type}", "Connection: close"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    conn.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))


def send_json(conn: socket.socket, value: Any, status: int = 200) -> None:
    body = json.dumps(value).encode()
    head(conn, status, length=len(body))
    conn.sendall(body)


def send_text(
    conn: socket.socket, text: str, status: int, content_type: str = "text/plain"
) -> None:
    body = text.encode()
    head(conn, status, content_type, length=len(body))
    conn.sendall(body)


def trickle(conn: socket.socket, data: bytes, every_s: float = 0.1) -> None:
    """``data`` one byte at a time, over and over, until the client hangs up or time is up."""
    end = time.monotonic() + TRICKLE_FOR_S
    while time.monotonic() < end:
        for byte in data:
            conn.sendall(bytes([byte]))
            time.sleep(every_s)


def flood(conn: socket.socket, piece: bytes, total: int) -> None:
    """``piece`` repeated until ``total`` bytes are sent (never held whole)."""
    block = piece * max(1, MIB // len(piece))
    sent = 0
    while sent < total:
        part = block[: total - sent]
        conn.sendall(part)
        sent += len(part)


def count(text: str) -> int:
    """The fake's tokenizer: 4 characters a token, plus BOS."""
    return math.ceil(len(text) / 4) + 1


def chat_answer(content: str, prompt_tokens: int, tokens: int) -> dict[str, Any]:
    return {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "length",
            }
        ],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": tokens},
    }


def events(tokens: int, content: str = "x") -> Iterator[bytes]:
    yield b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n'
    chunk = {"choices": [{"delta": {"content": content}, "finish_reason": None}]}
    for _ in range(tokens):
        yield b"data: " + json.dumps(chunk).encode() + b"\n\n"
    yield b'data: {"choices":[{"delta":{},"finish_reason":"length"}]}\n\n'
    usage = {"choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": tokens}}
    yield b"data: " + json.dumps(usage).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


@dataclass
class Loopback:
    """A raw HTTP/1.1 server on 127.0.0.1, one thread a connection, a handler a path.

    By default it is a vLLM in a few routes: models, tokenize, and chat (4
    characters a token; streamed when asked). A test replaces a route's handler.
    """

    model: dict[str, Any] = field(default_factory=lambda: {"id": "fake", "owned_by": "vllm"})
    routes: dict[str, Handler] = field(default_factory=dict)
    seen: list[Request] = field(default_factory=list)
    ended: list[float] = field(default_factory=list)  # when each handler returned (monotonic)

    def __post_init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.stopped = threading.Event()
        self.routes.setdefault("/v1/models", lambda r, c: send_json(c, {"data": [self.model]}))
        self.routes.setdefault("/tokenize", self.tokenize)
        self.routes.setdefault("/v1/chat/completions", self.chat)
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                request = _read_request(conn)
                self.seen.append(request)
                handler = self.routes.get(request.path)
                if handler is None:
                    send_text(conn, "not found", 404)
                else:
                    handler(request, conn)
            except OSError:
                pass  # the client hung up: what a bounded probe does to a flood or a trickle
            finally:
                self.ended.append(time.monotonic())

    def close(self) -> None:
        self.stopped.set()
        self.sock.close()

    @staticmethod
    def tokenize(request: Request, conn: socket.socket) -> None:
        send_json(conn, {"count": count(request.json()["prompt"])})

    @staticmethod
    def chat(request: Request, conn: socket.socket) -> None:
        body = request.json()
        tokens = body["max_tokens"]
        prompt = count(body["messages"][0]["content"]) + 10
        if body.get("stream"):
            head(conn, 200, "text/event-stream")
            for event in events(tokens):
                conn.sendall(event)
            return
        send_json(conn, chat_answer("x" * tokens, prompt, tokens))


@pytest.fixture
def loopback() -> Iterator[Loopback]:
    server = Loopback()
    yield server
    server.close()


@pytest.fixture
def shape(tmp_path: Path) -> Path:
    write_tiny_llama(tmp_path / "tiny.gguf")
    path = tmp_path / "tiny.yaml"
    path.write_text((DATA / "tiny-probe.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    return path


def streamed_only(handler: Handler) -> Handler:
    """Streamed chats go to ``handler``; the others are answered as usual."""

    def chat(request: Request, conn: socket.socket) -> None:
        if request.json().get("stream"):
            handler(request, conn)
        else:
            Loopback.chat(request, conn)

    return chat


def _timed(call: Callable[[], object]) -> tuple[BaseException | object, float]:
    start = time.monotonic()
    try:
        outcome: BaseException | object = call()
    except Exception as exc:  # the fault is the outcome under test
        outcome = exc
    return outcome, time.monotonic() - start


# --------------------------------------------------------- a total deadline


def _trickled_event_line(request: Request, conn: socket.socket) -> None:
    head(conn, 200, "text/event-stream")
    trickle(conn, b'data: {"choices":[{"delta":{"content":"x"}}]}')  # never a newline


def _trickled_events(request: Request, conn: socket.socket) -> None:
    head(conn, 200, "text/event-stream")
    chunk = b'data: {"choices":[{"delta":{"content":"x"},"finish_reason":null}]}\n\n'
    end = time.monotonic() + TRICKLE_FOR_S
    while time.monotonic() < end:  # whole events, forever, never [DONE]
        conn.sendall(chunk)
        time.sleep(0.05)


def _trickled_headers(request: Request, conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Slow: ")
    trickle(conn, b"a")


def _trickled_body(request: Request, conn: socket.socket) -> None:
    head(conn, 200, length=1_000_000)
    trickle(conn, b" ")


@pytest.mark.parametrize(
    ("handler", "streamed"),
    [
        (_trickled_event_line, True),
        (_trickled_events, True),
        (_trickled_headers, True),
        (_trickled_headers, False),
        (_trickled_body, False),
    ],
    ids=["one-event-line", "endless-events", "headers-streamed", "headers", "body"],
)
def test_a_trickling_server_meets_the_total_deadline(
    loopback: Loopback, handler: Handler, streamed: bool
) -> None:
    """A byte every 0.1 s restarts any per-read timeout; the deadline of 2 s still holds."""
    loopback.routes["/v1/chat/completions"] = handler
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": streamed}
    with httpx.Client() as client:
        endpoint = Endpoint(client, loopback.url)
        deadline = Deadline(2.0)
        if streamed:
            outcome, took = _timed(lambda: endpoint.stream("/v1/chat/completions", body, deadline))
        else:
            outcome, took = _timed(lambda: endpoint.post("/v1/chat/completions", body, deadline))
    assert took < 2.0 + 4.0, f"took {took:.1f} s against a 2 s deadline"
    assert isinstance(outcome, ProbeFault), outcome
    assert "2 s timeout" in str(outcome)
    # and the connection is let go: the server's next byte finds no one reading
    gave_up = time.monotonic()
    while not loopback.ended and time.monotonic() < gave_up + 5:
        time.sleep(0.05)
    assert loopback.ended, "the trickling connection was still held 5 s after the fault"


def test_a_trickling_concurrent_answer_meets_the_total_deadline(loopback: Loopback) -> None:
    loopback.routes["/v1/chat/completions"] = _trickled_headers
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}

    async def post() -> object:
        async with httpx.AsyncClient() as client:
            endpoint = AsyncEndpoint(client, loopback.url)
            return await endpoint.post("/v1/chat/completions", body, Deadline(2.0))

    outcome, took = _timed(lambda: asyncio.run(post()))
    assert took < 2.0 + 4.0, f"took {took:.1f} s against a 2 s deadline"
    assert isinstance(outcome, ProbeFault) and "2 s timeout" in str(outcome), outcome


# ------------------------------------------------- the CLI in a child process


@dataclass(frozen=True)
class Ran:
    code: int  # negative: killed by that signal (it did not end by itself)
    wall_s: float
    peak_rss_mib: float
    stdout: Path
    stderr: Path

    def document(self) -> dict[str, Any]:
        size = self.stdout.stat().st_size
        assert size < 64 * 1024, f"--json printed {size:,} bytes"
        return dict(json.loads(self.stdout.read_text(encoding="utf-8")))


def probe_in_child(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None, kill_after_s: float = 90
) -> Ran:
    """``fakplan probe ARGS`` in a child process; its wall time and its own peak RSS."""
    stdout, stderr, peak = tmp_path / "stdout", tmp_path / "stderr", tmp_path / "peak"
    start = time.monotonic()
    with stdout.open("wb") as out, stderr.open("wb") as err:
        child = subprocess.Popen(
            # the fault server answers as vLLM serving "fake": it stands in for the
            # shape's endpoint, so the served-model check is waived
            [sys.executable, "-c", RUN_FAKPLAN, str(peak), "probe", "--any-endpoint", *args],
            stdout=out,
            stderr=err,
            env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
            cwd=tmp_path,
        )
        killer = threading.Timer(kill_after_s, child.kill)
        killer.start()
        try:
            _, status, usage = os.wait4(child.pid, 0)
        finally:
            killer.cancel()
        child.returncode = os.waitstatus_to_exitcode(status)
    # the child's own peak (ru_maxrss would carry this test process's, kept across exec)
    own = float(peak.read_text()) if peak.exists() else usage.ru_maxrss / 1024
    return Ran(child.returncode, time.monotonic() - start, own, stdout, stderr)


def test_the_cli_ends_a_trickling_stream_within_its_timeout(
    loopback: Loopback, shape: Path, tmp_path: Path
) -> None:
    """The issue's first server: the decode probe's stream gets a byte now and then, forever."""
    loopback.routes["/v1/chat/completions"] = streamed_only(_trickled_event_line)
    ran = probe_in_child(
        tmp_path,
        str(shape),
        "--url",
        loopback.url,
        "--only",
        "decode",
        "--repeat",
        "1",
        "--max-tokens",
        "128",
        "--timeout",
        "5",
        "--json",
        "--out",
        str(tmp_path / "out"),
        kill_after_s=60,
    )
    assert ran.code == 1, f"exit {ran.code} after {ran.wall_s:.0f} s"
    # detection answers at once; the decode probe has 5 s; the rest is the child's start
    assert ran.wall_s < 5 + 20, ran.wall_s
    decode = ran.document()["probes"]["decode"]
    assert decode["status"] == "failed" and "5 s timeout" in decode["error"]
    assert decode["seconds"] <= 5 + 3
    assert ran.peak_rss_mib < PEAK_RSS_LIMIT_MIB


def _error_body(request: Request, conn: socket.socket) -> None:
    head(conn, 500, "text/plain", length=100 * MB)
    flood(conn, b"CUDA error: out of memory ", 100 * MB)


def _generated_answer(request: Request, conn: socket.socket) -> None:
    start = b'{"choices":[{"index":0,"message":{"role":"assistant","content":"'
    end = b'"},"finish_reason":"length"}],"usage":{"prompt_tokens":50,"completion_tokens":1}}'
    head(conn, 200, length=len(start) + 100 * MB + len(end))
    conn.sendall(start)
    flood(conn, b"x", 100 * MB)
    conn.sendall(end)


def _generated_answer_unsized(request: Request, conn: socket.socket) -> None:
    """The same answer with no Content-Length: its end is the connection's close."""
    head(conn, 200)
    conn.sendall(b'{"choices":[{"index":0,"message":{"role":"assistant","content":"')
    flood(conn, b"x", 100 * MB)
    conn.sendall(b'"},"finish_reason":"length"}]}')


def _one_event_line(request: Request, conn: socket.socket) -> None:
    head(conn, 200, "text/event-stream")
    conn.sendall(b'data: {"choices":[{"delta":{"content":"')
    flood(conn, b"x", 100 * MB)
    conn.sendall(b'"}}]}\n\ndata: [DONE]\n\n')


def _event_flood(request: Request, conn: socket.socket) -> None:
    """A 100 MB answer streamed as ordinary one-token events (far past max_tokens)."""
    head(conn, 200, "text/event-stream")
    flood(conn, b'data: {"choices":[{"delta":{"content":"x"},"finish_reason":null}]}\n\n', 100 * MB)
    conn.sendall(b"data: [DONE]\n\n")


@pytest.mark.parametrize(
    ("handler", "streamed"),
    [
        (_error_body, False),
        (_generated_answer, False),
        (_generated_answer_unsized, False),
        (_one_event_line, True),
        (_event_flood, True),
    ],
    ids=["error-body", "generated-answer", "unsized-answer", "one-event-line", "event-flood"],
)
def test_the_cli_bounds_a_100_mb_answer(
    loopback: Loopback, shape: Path, tmp_path: Path, handler: Handler, streamed: bool
) -> None:
    """100 MB from the server: the probe fails with a short line, prints and records little,
    and stays under 200 MB of memory."""
    route = streamed_only(handler) if streamed else handler
    loopback.routes["/v1/chat/completions"] = route
    out = tmp_path / "out"
    ran = probe_in_child(
        tmp_path,
        str(shape),
        "--url",
        loopback.url,
        "--only",
        "decode",
        "--repeat",
        "1",
        "--max-tokens",
        "128",
        "--timeout",
        "60",
        "--json",
        "--out",
        str(out),
    )
    assert ran.code == 1, f"exit {ran.code} after {ran.wall_s:.0f} s"
    assert ran.peak_rss_mib < PEAK_RSS_LIMIT_MIB
    decode = ran.document()["probes"]["decode"]
    assert decode["status"] == "failed"
    assert len(decode["error"]) <= ERROR_CHARS, decode["error"][:ERROR_CHARS]
    assert decode["error"].startswith("decode 1/1, ")  # it says which request
    assert ran.stderr.stat().st_size < 16 * 1024
    (raw,) = out.glob("tiny-probe/probes/*.json")
    assert raw.stat().st_size < 64 * 1024


# ------------------------------------------------------------------ the API key

KEY = 'sk-live/7Qx+9Zr="AbC\\dEf&<gh>Kq2W8mNp4Ls=='  # quote, backslash, slash, &, <, >, +, =


def _json_all_escaped(text: str) -> str:
    """A JSON string literal with every character as \\uXXXX (legal, and some servers do)."""
    return '"' + "".join(f"\\u{ord(c):04x}" for c in text) + '"'


def _raw_json(message_literal: str) -> bytes:
    return ('{"error": {"message": ' + message_literal + ', "code": 401}}').encode()


def _echo(form: str) -> Callable[[str], bytes]:
    """How a careless server echoes the Authorization header it got, as an error body."""

    def body(auth: str) -> bytes:
        key = auth.removeprefix("Bearer ")
        if form == "json":
            return json.dumps({"error": {"message": f"bad token {auth}"}}).encode()
        if form == "json-unicode":
            return _raw_json(_json_all_escaped(f"bad token {auth}"))
        if form == "json-slashes":
            return _raw_json(json.dumps(f"bad token {auth}").replace("/", "\\/"))
        if form == "url":
            return f"denied: /login?next=x&token={urllib.parse.quote(auth, safe='')}".encode()
        if form == "url-lower":
            quoted = urllib.parse.quote(key, safe="")
            return re.sub("%[0-9A-F]{2}", lambda m: m.group(0).lower(), f"denied {quoted}").encode()
        if form == "base64":
            return f"auth=Basic {base64.b64encode(auth.encode()).decode()}".encode()
        if form == "base64-offset":
            return f"ctx {base64.urlsafe_b64encode(b'u:' + key.encode()).decode()}".encode()
        if form == "excerpt-boundary":  # the key straddles the 200-character excerpt's cut
            return _raw_json(_json_all_escaped("y" * 180 + f" {key} is not valid"))
        if form == "prefix":
            return json.dumps({"detail": f"Incorrect API key provided: {key[:24]}"}).encode()
        raise AssertionError(form)

    return body


ECHOES = [
    "json",
    "json-unicode",
    "json-slashes",
    "url",
    "url-lower",
    "base64",
    "base64-offset",
    "excerpt-boundary",
    "prefix",
]


def _views(text: str) -> list[str]:
    """``text`` and what a reader could decode from it: JSON escapes, URL escapes, base64."""
    views = [text, urllib.parse.unquote(text)]
    views.append(
        re.sub(r"\\u([0-9a-fA-F]{4})", lambda m: chr(int(m.group(1), 16)), text)
        .replace("\\/", "/")
        .replace('\\"', '"')
        .replace("\\\\", "\\")
    )
    for run in re.findall(r"[A-Za-z0-9+/_-]{12,}", text):
        for skip in range(4):
            piece = run[skip:]
            piece = piece[: len(piece) // 4 * 4]
            for decode in (base64.b64decode, base64.urlsafe_b64decode):
                with contextlib.suppress(ValueError):
                    views.append(decode(piece).decode("latin-1"))
    return views


def leaks(text: str, key: str = KEY) -> list[str]:
    """Every run of LEAK_RUN characters of ``key`` that some view of ``text`` shows."""
    runs = {key[i : i + LEAK_RUN] for i in range(len(key) - LEAK_RUN + 1)}
    return sorted({run for view in _views(text) for run in runs if run in view})


def test_the_leak_check_sees_each_form() -> None:
    """The check above is only as good as what it catches: each echo leaks, to it."""
    for form in ECHOES:
        assert leaks(_echo(form)(f"Bearer {KEY}").decode()), form
    assert leaks("nothing to see here; sk-live/ alone is 8 characters") == []


def _outputs(result: Any, out: Path) -> dict[str, str]:
    texts = {"stdout": result.stdout, "stderr": result.stderr}
    for path in out.rglob("*"):
        if path.is_file():
            texts[str(path.relative_to(out))] = path.read_text(encoding="utf-8")
    return texts


def _probe_with_key(url: str, shape: Path, out: Path, only: str, *extra: str) -> Any:
    return CliRunner().invoke(
        main,
        [
            "probe",
            "--any-endpoint",  # the fault server stands in for the shape's endpoint
            str(shape),
            "--url",
            url,
            "--api-key-env",
            "FAKPLAN_TEST_KEY",
            "--out",
            str(out),
            "--only",
            only,
            "--repeat",
            "1",
            "--max-tokens",
            "128",
            "--timeout",
            "10",
            *extra,
        ],
        env={"FAKPLAN_TEST_KEY": KEY},
    )


@pytest.mark.parametrize("form", ECHOES)
@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_an_echoed_key_reaches_no_output(
    loopback: Loopback, shape: Path, tmp_path: Path, form: str, as_json: bool
) -> None:
    echo = _echo(form)

    def refuse(request: Request, conn: socket.socket) -> None:
        body = echo(request.headers["authorization"])
        head(conn, 401, "application/json", length=len(body))
        conn.sendall(body)

    loopback.routes["/v1/chat/completions"] = refuse
    out = tmp_path / "out"
    result = _probe_with_key(loopback.url, shape, out, "decode", *(["--json"] if as_json else []))
    assert result.exit_code == 1, result.output
    assert loopback.seen and all(
        r.headers["authorization"] == f"Bearer {KEY}" for r in loopback.seen
    )
    texts = _outputs(result, out)
    assert any("HTTP 401" in text for text in texts.values())  # the refusal is still reported
    assert {name: leaks(text) for name, text in texts.items() if leaks(text)} == {}


def test_a_key_echoed_where_results_quote_the_server(
    loopback: Loopback, shape: Path, tmp_path: Path
) -> None:
    """Not only errors: the model id detection records, the boundary answers it quotes,
    and the /metrics labels the kv statement quotes, each echoing the key in a disguise."""
    id_literal = _json_all_escaped(KEY)

    def models(request: Request, conn: socket.socket) -> None:
        body = ('{"data": [{"id": ' + id_literal + ', "owned_by": "vllm"}]}').encode()
        head(conn, 200, length=len(body))
        conn.sendall(body)

    def chat(request: Request, conn: socket.socket) -> None:
        body = request.json()
        if len(body["messages"][0]["content"]) < 2000:  # the template-size request
            Loopback.chat(request, conn)
            return
        prompt = count(body["messages"][0]["content"]) + 10
        answer = json.dumps(chat_answer("@@", prompt, 4)).replace(
            '"@@"', _json_all_escaped(f"your key: {KEY}")
        )
        send_text(conn, answer, 200, "application/json")

    def metrics(request: Request, conn: socket.socket) -> None:
        quoted = urllib.parse.quote(request.headers["authorization"], safe="")
        text = (
            "# TYPE vllm:cache_config_info gauge\n"
            f'vllm:cache_config_info{{block_size="{quoted}",kv_cache_size_tokens="1024",'
            f'num_gpu_blocks="{quoted}"}} 1.0\n'
        )
        send_text(conn, text, 200)

    loopback.routes.update(
        {"/v1/models": models, "/v1/chat/completions": chat, "/metrics": metrics}
    )
    out = tmp_path / "out"
    result = _probe_with_key(loopback.url, shape, out, "kv,boundary", "--json")
    texts = _outputs(result, out)
    document = json.loads(result.stdout)
    assert document["probes"]["boundary"]["status"] == "ok", document["probes"]
    assert document["probes"]["kv"]["status"] == "ok", document["probes"]
    assert document["server"]["model"]  # recorded, masked
    assert {name: leaks(text) for name, text in texts.items() if leaks(text)} == {}


def test_a_key_no_http_header_can_carry_is_refused(shape: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "probe",
            str(shape),
            "--url",
            "http://127.0.0.1:9/v1",
            "--api-key-env",
            "K",
            "--out",
            str(tmp_path),
        ],
        env={"K": "sk-\u00e9t\u00e9-0123456789\n"},
    )
    assert result.exit_code == 2
    assert "--api-key-env K" in result.stderr
    assert "0123456789" not in result.output + result.stderr


# --------------------------------------------------- what is legitimate still fits


def test_a_window_sized_tokenize_answer_fits(loopback: Loopback) -> None:
    """llama-server lists every token id; calibration counts up to 262,144 characters, and a
    boundary prompt fills the window: at one token a character with 7-digit ids and spaces
    that is 2.4 MB, read whole."""
    route = flavour("llama-server").tokenize[0]

    def tokenize(request: Request, conn: socket.socket) -> None:
        n = len(request.json()["content"])
        text = '{"tokens": [' + ", ".join(str(1_000_000 + i) for i in range(n)) + "]}"
        send_text(conn, text, 200, "application/json")

    loopback.routes[route.path] = tokenize
    text = "a" * 262_144
    with httpx.Client() as client:
        endpoint = Endpoint(client, loopback.url)
        server = Server(flavour=flavour("llama-server"))
        assert count_tokens(endpoint, server, route, text, Deadline(30)) == len(text)


def test_a_long_verbose_decode_fits(loopback: Loopback, shape: Path) -> None:
    """2,048 tokens, each streamed in vLLM's full chunk (id, model, fingerprint: ~400 bytes)
    and non-streamed as 16 escaped non-ASCII characters: both read whole."""
    model = "/models/" + "m" * 200

    def chat(request: Request, conn: socket.socket) -> None:
        body = request.json()
        tokens = body["max_tokens"]
        if body.get("stream"):
            head(conn, 200, "text/event-stream")
            for i in range(tokens):
                chunk = {
                    "id": f"chatcmpl-{'0' * 32}",
                    "object": "chat.completion.chunk",
                    "created": 1_700_000_000,
                    "model": model,
                    "system_fingerprint": "fp_" + "f" * 16,
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"content": f"t{i}"},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ],
                }
                conn.sendall(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            conn.sendall(b'data: {"choices":[{"delta":{},"finish_reason":"length"}]}\n\n')
            final = {"choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": tokens}}
            conn.sendall(b"data: " + json.dumps(final).encode() + b"\n\ndata: [DONE]\n\n")
            return
        content = "\u00e9\u4e2d" * 8 * tokens
        send_json(conn, chat_answer(content, 50, tokens))  # json.dumps escapes every one

    loopback.routes["/v1/chat/completions"] = chat
    wide = shape.read_text(encoding="utf-8").replace("max_model_len: 1024", "max_model_len: 8192")
    shape.write_text(wide.replace("kv: 0.25 MiB", "kv: 2 MiB"), encoding="utf-8")
    with httpx.Client() as client:
        run = run_probes(
            load_shape(shape),
            Endpoint(client, loopback.url),
            httpx.AsyncClient,
            ProbeOptions(
                only=("decode",), repeat=1, max_tokens=2048, timeout_s=60, any_endpoint=True
            ),
        )
    assert run.probes["decode"].status == "ok", run.probes["decode"].error
    assert run.result("decode").reps[0]["streamed_tokens"] == 2048


def test_an_excerpt_of_a_huge_text_costs_little() -> None:
    """The excerpt reads only the start of a text, not all of it into words."""
    text = "x " * 5_000_000  # 10 MB of one-letter words
    tracemalloc.start()
    try:
        shown = excerpt(text)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(shown) <= 200 and shown.startswith("x x x")
    assert peak < 1 * MIB, peak


# ------------------------------------------------- the transport's limits, one by one


def test_an_error_body_is_read_only_to_its_start(loopback: Loopback) -> None:
    """An error is only quoted: 100 MB of it is not read, and what is read is its start."""
    loopback.routes["/v1/chat/completions"] = lambda r, c: (
        head(c, 503, "text/plain"),
        flood(c, b"overloaded ", 100 * MB),
    )
    with httpx.Client() as client:
        answer, took = _timed(
            lambda: Endpoint(client, loopback.url).post("/v1/chat/completions", {}, Deadline(30))
        )
    assert isinstance(answer, Answer), answer
    assert answer.status == 503 and answer.truncated
    assert 0 < len(answer.text) < MB and answer.text.startswith("overloaded overloaded")
    assert took < 10


@pytest.mark.parametrize("concurrent", [False, True], ids=["sync", "async"])
def test_an_unsized_answer_past_its_limit_fails_early(loopback: Loopback, concurrent: bool) -> None:
    """No Content-Length to refuse it by: the count stops it, long before 100 MB arrive."""
    loopback.routes["/v1/chat/completions"] = _generated_answer_unsized

    def sync() -> object:
        with httpx.Client() as client:
            return Endpoint(client, loopback.url).post("/v1/chat/completions", {}, Deadline(30))

    async def concurrently() -> object:
        async with httpx.AsyncClient() as client:
            endpoint = AsyncEndpoint(client, loopback.url)
            return await endpoint.post("/v1/chat/completions", {}, Deadline(30))

    tracemalloc.start()
    try:
        outcome, _ = _timed((lambda: asyncio.run(concurrently())) if concurrent else sync)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(outcome, ProbeFault), outcome
    assert "ran past" in str(outcome) and len(str(outcome)) <= ERROR_CHARS
    assert peak < 64 * MIB, peak  # the limit and a few copies of it, not 100 MB


def test_a_compressed_answer_is_refused(loopback: Loopback) -> None:
    """The probe asks for identity; a gzip answer could inflate past any count, so it is refused."""
    import gzip

    bomb = gzip.compress(b"x" * (20 * MB))  # ~20 KB on the wire

    def gzipped(request: Request, conn: socket.socket) -> None:
        head_lines = [
            "HTTP/1.1 200 OK",
            "Content-Type: application/json",
            "Content-Encoding: gzip",
            f"Content-Length: {len(bomb)}",
            "Connection: close",
        ]
        conn.sendall(("\r\n".join(head_lines) + "\r\n\r\n").encode() + bomb)

    loopback.routes["/v1/chat/completions"] = gzipped
    with httpx.Client() as client:
        endpoint = Endpoint(client, loopback.url)
        outcome, _ = _timed(lambda: endpoint.post("/v1/chat/completions", {}, Deadline(10)))
    assert isinstance(outcome, ProbeFault) and "gzip" in str(outcome), outcome
    assert loopback.seen[0].headers.get("accept-encoding") == "identity"


def test_a_stream_a_byte_at_a_time_with_crlf_reads_whole(loopback: Loopback) -> None:
    """Slow but within the deadline, and CR LF split across reads: every event still counts."""

    def slow(request: Request, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        head(conn, 200, "text/event-stream")
        for byte in b"".join(events(6)).replace(b"\n", b"\r\n"):
            conn.sendall(bytes([byte]))
            time.sleep(0.0002)

    loopback.routes["/v1/chat/completions"] = slow
    with httpx.Client() as client:
        answer = Endpoint(client, loopback.url).stream("/v1/chat/completions", {}, Deadline(60))
    assert answer.done and answer.broken is None and answer.malformed == 0
    assert len(answer.events) == 1 + 6 + 2  # role, 6 tokens, finish, usage


# ------------------------------------------------------------------ the redactor


def test_the_redactor_masks_whole_forms_and_runs_of_them() -> None:
    from fakplan.probes.redact import MASK, Redactor

    redactor = Redactor(KEY)
    text = f"a {KEY} b {KEY[:12]} c {KEY[5:20]}{KEY[25:34]} d {urllib.parse.quote(KEY, safe='')}"
    assert redactor.text(text) == f"a {MASK} b {MASK} c {MASK} d {MASK}"
    assert redactor.value({"k": [f"x{KEY}"], KEY: 1}) == {"k": [f"x{MASK}"], MASK: 1}


def test_the_redactor_leaves_other_text_alone() -> None:
    """No false positives on what reports are made of: prose, figures, paths, URLs."""
    from fakplan.probes.corpus import corpus
    from fakplan.probes.redact import Redactor

    redactor = Redactor(KEY)
    texts = [
        corpus(20_000),
        "decode 1/3, streamed: 512 tokens: HTTP 500: CUDA out of memory",
        "http://127.0.0.1:8000/ out/tiny-probe/probes/20260101T000000Z.json",
        "1,234.56 t/s (streamed inter-token rate, noise ±3.0 %) sk-live alone",
    ]
    assert [redactor.text(t) for t in texts] == texts
    assert Redactor(None).text(KEY) == KEY and not Redactor(None)
    assert Redactor("").value({"a": "b"}) == {"a": "b"}


def test_a_short_key_is_masked_only_whole() -> None:
    from fakplan.probes.redact import MASK, Redactor

    redactor = Redactor("k3y")
    assert redactor.text("a k3y, a k3 and a y") == f"a {MASK}, a k3 and a y"

"""Probes against fake servers (pytest-httpserver): only what the real llama-cpp-python will not do.

500s, stalls past the timeout, truncated and broken streams, null timings,
malformed JSON, other engines' refusal wordings and routes, a key echoed back.
The fake counts 4 characters a token plus one (BOS), so expected counts are
hand arithmetic: ``ceil(chars / 4) + 1``.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from fakplan.cli import main
from fakplan.errors import ProbeError
from fakplan.plan import compile_plan
from fakplan.probes import (
    Deadline,
    Endpoint,
    ProbeOptions,
    calibrate,
    detect,
    run_probes,
    verdicts_for,
)
from fakplan.probes.decode_rate import decode_basis
from fakplan.probes.flavours import flavour as flavour_named
from fakplan.probes.stats import Summary
from fakplan.record import stale_headers
from fakplan.shape import load_shape
from tests.support.paths import DATA
from tests.support.tinymodels import write_tiny_llama

DATA = DATA / "probes"
LEDGERS = DATA.parent / "ledgers"
TEMPLATE = 10  # the fake chat template's tokens

REFUSAL_TEXT: dict[str, Callable[[int, int, int], dict[str, Any]]] = {
    # docs/engines.md §1.11 v0.11.0, wrapped body
    "vllm": lambda n, ctx, _: {
        "error": {
            "message": f"This model's maximum context length is {ctx} tokens. However, your "
            f"request has {n} input tokens. Please reduce the length of the input messages.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        }
    },
    # docs/engines.md §2.7, flat body
    "sglang": lambda n, ctx, _: {
        "object": "error",
        "message": f"The input ({n} tokens) is longer than the model's context length "
        f"({ctx} tokens).",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    },
    # docs/engines.md §3.8, current build
    "llama-server": lambda n, ctx, _: {
        "error": {
            "code": 400,
            "message": f"request ({n} tokens) exceeds the available context size ({ctx} "
            "tokens), try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": n,
            "n_ctx": ctx,
        }
    },
    # docs/engines.md §1.11 v0.33.0: a lower bound only
    "vllm-at-least": lambda n, ctx, _: {
        "error": {
            "message": f"This model's maximum context length is {ctx} tokens. However, your "
            f"prompt contains at least {ctx + 1} input tokens, which exceeds this limit even "
            "without any output tokens.",
            "type": "BadRequestError",
            "param": "input_tokens",
            "code": 400,
        }
    },
}

OWNER = {"vllm": "vllm", "sglang": "sglang", "llama-server": "llamacpp", "openai": "someone"}


def count(text: str) -> int:
    return math.ceil(len(text) / 4) + 1


class FakeEngine:
    """An OpenAI-compatible server in one engine's manners (4 chars a token, a fixed window)."""

    def __init__(
        self,
        server: HTTPServer,
        flavour: str = "vllm",
        *,
        window: int = 1024,
        wording: str | None = None,
        tokenize: bool = True,
        echo_marker: bool = True,
        chunk_delay_s: float = 0.0005,
        token_delay_s: float | None = None,
        burst: bool = False,
        model: str = "fake",
    ) -> None:
        self.server = server
        self.flavour = flavour
        self.window = window
        self.wording = wording or flavour
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.echo_marker = echo_marker
        self.chunk_delay_s = chunk_delay_s
        # None: a non-streamed answer sleeps 0.5 ms a token at once; else one sleep a token,
        # as the stream does, so both pay the same per-token overhead
        self.token_delay_s = token_delay_s
        self.burst = burst  # the stream held back and sent in one write, as a buffer would
        self.chat: Callable[[Request], Response] | None = None  # a test's override
        server.expect_request("/v1/models").respond_with_json(
            {"object": "list", "data": [{"id": model, "owned_by": OWNER.get(flavour, "me")}]}
        )
        server.expect_request("/openapi.json").respond_with_json({"paths": {}})
        server.expect_request("/props").respond_with_data("", status=404)
        if tokenize and flavour_named(flavour).tokenize:
            route = flavour_named(flavour).tokenize[0]
            server.expect_request(route.path, method="POST").respond_with_handler(self._tokenize)
        server.expect_request("/v1/completions", method="POST").respond_with_handler(self._complete)
        server.expect_request("/v1/chat/completions", method="POST").respond_with_handler(
            self._chat
        )

    @property
    def url(self) -> str:
        return self.server.url_for("/v1")

    def _body(self, request: Request) -> dict[str, Any]:
        body = json.loads(request.get_data(as_text=True))
        self.bodies.append(body)
        self.headers.append(dict(request.headers))
        return dict(body)

    def _tokenize(self, request: Request) -> Response:
        body = self._body(request)
        route = flavour_named(self.flavour).tokenize[0]
        n = count(body[route.key])
        answer = {"tokens": list(range(n))} if route.count_key is None else {"count": n}
        return Response(json.dumps(answer), content_type="application/json")

    def _refuse(self, n: int, max_tokens: int) -> Response | None:
        if n < self.window:
            return None
        body = REFUSAL_TEXT[self.wording](n, self.window, max_tokens)
        return Response(json.dumps(body), status=400, content_type="application/json")

    def _complete(self, request: Request) -> Response:
        body = self._body(request)
        n = count(body["prompt"])
        return self._refuse(n, body["max_tokens"]) or self._answer(body, n, "text")

    def _chat(self, request: Request) -> Response:
        if self.chat is not None:
            return self.chat(request)
        return self.default_chat(request)

    def default_chat(self, request: Request) -> Response:
        body = self._body(request)
        n = count(body["messages"][0]["content"]) + TEMPLATE
        refused = self._refuse(n, body["max_tokens"])
        if refused:
            return refused
        if body.get("stream"):
            if self.burst:
                time.sleep(0.0005 * body["max_tokens"])
                held = "".join(self._events(body, n))
                return Response(iter([held]), content_type="text/event-stream")
            return Response(self._events(body, n), content_type="text/event-stream")
        return self._answer(body, n, "chat")

    def _answer(self, body: dict[str, Any], n: int, kind: str) -> Response:
        tokens = body["max_tokens"]
        text = "x" * tokens
        if self.echo_marker and kind == "chat":
            text = body["messages"][0]["content"].split("\n", 1)[0]  # the marker line
        choice: dict[str, Any] = {"index": 0, "finish_reason": "length"}
        if kind == "chat":
            choice["message"] = {"role": "assistant", "content": text}
        else:
            choice["text"] = text
        answer = {
            "choices": [choice],
            "usage": {"prompt_tokens": n, "completion_tokens": tokens},
            "timings": None,  # llama-server's field, null (seed 002 §4)
        }
        if self.token_delay_s is None:
            time.sleep(0.0005 * tokens)
        else:
            for _ in range(tokens):
                time.sleep(self.token_delay_s)
        return Response(json.dumps(answer), content_type="application/json")

    def _events(self, body: dict[str, Any], n: int) -> Iterator[str]:
        yield "data: " + json.dumps({"choices": [{"delta": {"role": "assistant"}}]}) + "\n\n"
        for _ in range(body["max_tokens"]):
            time.sleep(self.chunk_delay_s)
            chunk = {"choices": [{"delta": {"content": "x"}, "finish_reason": None}]}
            yield "data: " + json.dumps(chunk) + "\n\n"
        yield (
            "data: " + json.dumps({"choices": [{"delta": {}, "finish_reason": "length"}]}) + "\n\n"
        )
        final = {
            "choices": [],
            "timings": {"predicted_per_second": None, "prompt_per_second": None},
        }
        if (body.get("stream_options") or {}).get("include_usage"):
            final["usage"] = {"prompt_tokens": n, "completion_tokens": body["max_tokens"]}
        yield "data: " + json.dumps(final) + "\n\n"
        yield "data: [DONE]\n\n"


@pytest.fixture(scope="module")
def threaded_server() -> Iterator[HTTPServer]:
    server = HTTPServer(host="127.0.0.1", port=0, threaded=True)
    server.start()
    yield server
    server.clear()
    server.stop()


@pytest.fixture
def fake_server(threaded_server: HTTPServer) -> Iterator[HTTPServer]:
    threaded_server.clear()
    yield threaded_server
    threaded_server.clear()


@pytest.fixture
def shape(tmp_path: Path) -> Path:
    write_tiny_llama(tmp_path / "tiny.gguf")
    path = tmp_path / "tiny.yaml"
    path.write_text((DATA / "tiny-probe.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    return path


def _run(url: str, shape: Path, **options: Any) -> Any:
    # the fakes stand in for every flavour with one llama.cpp shape: the check that the
    # endpoint is the shape's own is waived here (its tests pass any_endpoint=False)
    options.setdefault("any_endpoint", True)
    with httpx.Client() as client:
        endpoint = Endpoint(client, url, api_key=options.pop("api_key", None))
        return run_probes(load_shape(shape), endpoint, httpx.AsyncClient, ProbeOptions(**options))


# ------------------------------------------------------------------ detection


@pytest.mark.parametrize("flavour", ["vllm", "sglang", "llama-server", "openai"])
def test_detects_the_flavour(fake_server: HTTPServer, flavour: str) -> None:
    fake = FakeEngine(fake_server, flavour)
    with httpx.Client() as client:
        server = detect(Endpoint(client, fake.url), Deadline(5))
    assert server.flavour.name == flavour
    assert server.model == "fake"


def test_the_shape_names_the_engine_when_routes_do_not(fake_server: HTTPServer) -> None:
    fake = FakeEngine(fake_server, "openai")
    with httpx.Client() as client:
        server = detect(Endpoint(client, fake.url), Deadline(5), hint="vllm")
    assert server.flavour.name == "vllm"
    assert "shape" in server.evidence


def test_mock_transport_can_stand_in_for_the_network() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "m", "owned_by": "vllm"}]})
        assert request.url.path == "/tokenize"
        text = json.loads(request.content)["prompt"]
        return httpx.Response(200, json={"count": count(text), "max_model_len": 4096})

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        endpoint = Endpoint(client, "http://engine.invalid:8000/v1")
        server = detect(endpoint, Deadline(5))
        result = calibrate(endpoint, server, 4096, Deadline(5))
    assert result.method == "tokenize"
    assert result.tokens == count("x" * result.chars)  # ceil(chars / 4) + 1


# ------------------------------------------------------- other engines' refusals


@pytest.mark.parametrize("wording", ["vllm", "sglang", "llama-server"])
def test_refusal_in_another_engines_wording_gives_the_count(
    fake_server: HTTPServer, wording: str
) -> None:
    fake = FakeEngine(fake_server, wording, window=256)
    with httpx.Client() as client:
        endpoint = Endpoint(client, fake.url)
        server = detect(endpoint, Deadline(5))
        result = calibrate(endpoint, server, 256, Deadline(5), method="refusal")
    assert result.method == "refusal"
    assert result.refusal is not None and result.refusal["engine"] == wording
    # the opening 2,048-char prompt is already above 256 tokens: refused, nothing paid
    assert result.chars == 2048
    assert result.tokens == math.ceil(2048 / 4) + 1 == 513
    assert result.prefill_paid_tokens == 0
    assert result.chars_per_token == round(2048 / 513, 4)


def test_refusal_path_above_a_larger_window(fake_server: HTTPServer) -> None:
    """A short prompt is accepted first (its prefill paid), then one above the window is refused."""
    fake = FakeEngine(fake_server, "sglang", window=4096)
    with httpx.Client() as client:
        endpoint = Endpoint(client, fake.url)
        result = calibrate(endpoint, detect(endpoint, Deadline(5)), 4096, Deadline(5), "refusal")
    assert result.method == "refusal"
    assert result.prefill_paid_tokens == 513  # the 2,048-char opening prompt
    assert result.tokens == math.ceil(result.chars / 4) + 1 > 4096


def test_a_lower_bound_is_not_a_count(fake_server: HTTPServer) -> None:
    """The opening prompt is refused with only a bound (vLLM 0.32 on a small window):
    a shorter prompt is sent and its accepted count is the answer, prefill paid."""
    fake = FakeEngine(fake_server, "vllm", window=256, wording="vllm-at-least")
    with httpx.Client() as client:
        endpoint = Endpoint(client, fake.url)
        server = detect(endpoint, Deadline(5))
        result = calibrate(endpoint, server, 256, Deadline(5), method="refusal")
    assert result.method == "accepted"
    assert result.chars == 128  # min(2,048 // 2, window 256 // 2)
    assert result.tokens == math.ceil(128 / 4) + 1 == 33  # the fake's 4 chars/token + BOS
    assert result.prefill_paid_tokens == 33
    assert any("only a lower bound" in note for note in result.notes)


def test_a_lower_bound_falls_back_to_the_accepted_prompt(fake_server: HTTPServer) -> None:
    fake = FakeEngine(fake_server, "vllm", window=4096, wording="vllm-at-least")
    with httpx.Client() as client:
        endpoint = Endpoint(client, fake.url)
        result = calibrate(endpoint, detect(endpoint, Deadline(5)), 4096, Deadline(5), "refusal")
    assert result.method == "accepted"
    assert (result.chars, result.tokens) == (2048, 513)  # the opening prompt, prefill paid
    assert result.prefill_paid_tokens == 513
    assert any("only a lower bound" in note for note in result.notes)


# ---------------------------------------------------------- whole runs on fakes


def test_vllm_fake_end_to_end_and_the_traps_in_every_body(
    fake_server: HTTPServer, shape: Path
) -> None:
    fake = FakeEngine(fake_server, "vllm")
    fake_server.expect_request("/metrics").respond_with_data("", status=404)  # a proxy's
    run = _run(fake.url, shape, repeat=2, max_tokens=128, timeout_s=30)
    assert {n: o.status for n, o in run.probes.items()} == dict.fromkeys(
        ("kv", "calibrate", "boundary", "decode", "prefill"), "ok"
    )
    # the fake serves no /metrics: no live KV figure, and no verdict made up from it
    kv = run.result("kv")
    assert kv.kv_tokens is None and "404" in kv.notes[0]
    boundary = run.result("boundary")
    assert boundary.retrieved == 1 and boundary.sized_ok  # the fake echoes the marker
    assert boundary.results[0].prompt_tokens == 1024 - 32
    decode = run.result("decode")
    assert decode.figures["engine_reported"] is None  # timings were null throughout
    chats = [b for b in fake.bodies if "messages" in b]
    assert all(b["chat_template_kwargs"] == {"enable_thinking": False} for b in chats)
    long_runs = [b for b in chats if b["max_tokens"] >= 128]
    assert len(long_runs) == 4  # 2 repetitions x (streamed + not)
    assert all(b["ignore_eos"] is True and b["temperature"] == 0 for b in long_runs)
    heads = [b["messages"][0]["content"][:20] for b in chats]
    assert len(set(heads)) == len(heads)  # every prompt starts with its own nonce or marker


def test_a_500_fails_one_probe_and_the_run_goes_on(fake_server: HTTPServer, shape: Path) -> None:
    fake = FakeEngine(fake_server, "vllm")
    fake.chat = lambda request: Response(
        '{"error": {"message": "CUDA out of memory"}}', status=500, content_type="application/json"
    )
    run = _run(fake.url, shape, only=("calibrate", "decode"), max_tokens=128, timeout_s=10)
    assert run.probes["calibrate"].status == "ok"  # the tokenize route still answers
    assert run.probes["decode"].status == "failed"
    assert "HTTP 500: CUDA out of memory" in run.probes["decode"].error


def test_malformed_json_is_a_clear_failure(fake_server: HTTPServer, shape: Path) -> None:
    fake = FakeEngine(fake_server, "vllm")
    fake.chat = lambda request: Response("{not json", content_type="application/json")
    run = _run(fake.url, shape, only=("decode",), max_tokens=128, timeout_s=10)
    assert "not a JSON object: '{not json'" in run.probes["decode"].error


def _streams(fake: FakeEngine, events: Callable[[], Iterator[str]]) -> None:
    """Streamed chats answer with ``events``; the others as usual."""

    def chat(request: Request) -> Response:
        if json.loads(request.get_data())["stream"]:
            return Response(events(), content_type="text/event-stream")
        return fake.default_chat(request)

    fake.chat = chat


def test_malformed_stream_events_are_a_clear_failure(fake_server: HTTPServer, shape: Path) -> None:
    fake = FakeEngine(fake_server, "vllm")
    _streams(fake, lambda: iter(["data: {oops\n\n", "data: [DONE]\n\n"]))
    run = _run(fake.url, shape, only=("decode",), max_tokens=128, timeout_s=10)
    assert "1 event(s) in the stream were not JSON" in run.probes["decode"].error


def test_a_stream_cut_short(fake_server: HTTPServer, shape: Path) -> None:
    fake = FakeEngine(fake_server, "vllm")
    chunk = {"choices": [{"delta": {"content": "x"}, "finish_reason": None}]}
    _streams(fake, lambda: iter([f"data: {json.dumps(chunk)}\n\n"] * 5))
    run = _run(fake.url, shape, only=("decode",), max_tokens=128, timeout_s=10)
    assert "stopped after 5 chunk(s) with no finish_reason and no [DONE] (cut short)" in (
        run.probes["decode"].error
    )


def test_a_stream_broken_off(fake_server: HTTPServer, shape: Path) -> None:
    fake = FakeEngine(fake_server, "vllm")
    chunk = {"choices": [{"delta": {"content": "x"}, "finish_reason": None}]}

    def events() -> Iterator[str]:
        yield f"data: {json.dumps(chunk)}\n\n"
        raise ConnectionAbortedError("the engine died mid-stream")

    _streams(fake, events)
    run = _run(fake.url, shape, only=("decode",), max_tokens=128, timeout_s=10)
    error = run.probes["decode"].error
    assert "broke off the answer" in error or "cut short" in error


def test_a_stall_past_the_timeout_fails_in_time(fake_server: HTTPServer, shape: Path) -> None:
    fake = FakeEngine(fake_server, "vllm")
    release = threading.Event()

    def stall(request: Request) -> Response:
        release.wait(20)
        return Response("{}", content_type="application/json")

    fake.chat = stall
    start = time.monotonic()
    try:
        run = _run(fake.url, shape, only=("decode",), max_tokens=128, timeout_s=1.0)
    finally:
        release.set()
    took = time.monotonic() - start
    assert run.probes["decode"].status == "failed"
    assert "timeout" in run.probes["decode"].error
    assert took < 1.0 + 5.0  # the timeout and a loose margin; the handler would wait 20 s


def test_a_stream_that_stalls_midway_fails_in_time(fake_server: HTTPServer, shape: Path) -> None:
    fake = FakeEngine(fake_server, "vllm")
    release = threading.Event()

    def events() -> Iterator[str]:
        yield "data: " + json.dumps({"choices": [{"delta": {"content": "x"}}]}) + "\n\n"
        release.wait(20)
        yield "data: [DONE]\n\n"

    fake.chat = lambda request: Response(events(), content_type="text/event-stream")
    start = time.monotonic()
    try:
        run = _run(fake.url, shape, only=("prefill",), timeout_s=1.0)
    finally:
        release.set()
    assert run.probes["prefill"].status == "failed"
    assert "timeout" in run.probes["prefill"].error
    assert time.monotonic() - start < 1.0 * 2 + 5.0  # calibrate and prefill, each bounded


def test_an_unreachable_endpoint_fails_every_probe(shape: Path) -> None:
    from tests.support.realserver import free_port

    url = f"http://127.0.0.1:{free_port()}/v1"
    run = _run(url, shape, timeout_s=5)
    assert set(run.probes) == {"kv", "calibrate", "boundary", "decode", "prefill"}
    assert all(o.status == "failed" for o in run.probes.values())
    assert all(
        o.error.startswith("engine detection: cannot connect to http://127.0.0.1:")
        for o in run.probes.values()
    )


# ---------------------------------------------------------------- the API key


def test_the_key_is_sent_and_never_shown(
    fake_server: HTTPServer, shape: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = "sk-fake-0123456789abcdef"
    fake = FakeEngine(fake_server, "vllm")

    def echo(request: Request) -> Response:  # a careless server that echoes the header
        message = f"bad request from {request.headers.get('Authorization')}"
        return Response(json.dumps({"error": {"message": message}}), status=500)

    fake.chat = echo
    monkeypatch.setenv("FAKPLAN_TEST_KEY", key)
    out = tmp_path / "out"
    runner = CliRunner()
    result = runner.invoke(
        main,
        [
            "probe",
            "--any-endpoint",  # a vLLM fake stands in for the llama.cpp shape's endpoint
            str(shape),
            "--url",
            fake.url,
            "--api-key-env",
            "FAKPLAN_TEST_KEY",
            "--out",
            str(out),
            "--only",
            "calibrate,decode",
            "--max-tokens",
            "128",
            "--timeout",
            "10",
        ],
    )
    assert result.exit_code == 1, result.output  # decode failed
    assert fake.headers and all(h.get("Authorization") == f"Bearer {key}" for h in fake.headers)
    (raw,) = out.glob("tiny-probe/probes/*.json")
    error = json.loads(raw.read_text(encoding="utf-8"))["probes"]["decode"]["error"]
    assert "bad request from Bearer ***" in error
    written = [p for p in out.rglob("*") if p.is_file()]
    assert written
    for path in written:
        assert key not in path.read_text(encoding="utf-8"), path
    assert key not in result.output


def test_a_boundary_that_holds_exits_0(
    fake_server: HTTPServer, shape: Path, tmp_path: Path
) -> None:
    fake = FakeEngine(fake_server, "vllm")
    runner = CliRunner()
    result = runner.invoke(
        main,
        [
            "probe",
            "--any-endpoint",  # a vLLM fake stands in for the llama.cpp shape's endpoint
            str(shape),
            "--url",
            fake.url,
            "--out",
            str(tmp_path / "out"),
            "--json",
            "--only",
            "boundary",
            "--timeout",
            "10",
        ],
    )
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)  # progress lines go to stderr
    assert doc["schema"] == "fakplan.probe/1"
    assert doc["verdicts"]["boundary"]["status"] == "held"
    assert doc["probes"]["calibrate"]["requested"] is False
    assert doc["exit"] == 0


def _summary(median: float, spread_pct: float = 0.0) -> Summary:
    half = median * spread_pct / 100
    return Summary(n=2, median=median, low=median - half, high=median + half)


@pytest.mark.parametrize(
    ("streamed", "reference", "bound"),
    [
        (200.0, 200.0, None),  # the same rate both ways: the engine's
        (194.1, 200.0, None),  # 2.95 % slower: inside the ±3 % noise floor
        (193.9, 200.0, "streaming"),  # 3.05 % slower: outside it
        (400.0, 200.0, None),  # faster, but under 3x: not a burst
        (600.1, 200.0, "buffering"),  # over 3x: the chunks arrived together
    ],
)
def test_which_rate_decode_is_judged_on(
    streamed: float, reference: float, bound: str | None
) -> None:
    """The decision on the figures themselves, with none of a loaded machine's timing: the
    streamed rate unless it misses the non-streamed differential by more than the noise
    band (±3 % at least) or beats it by more than 3x."""
    basis = decode_basis(_summary(streamed), _summary(reference), None)
    if bound is None:
        assert (basis.name, basis.bound) == ("streamed inter-token rate", None)
        assert basis.chosen is not None and basis.chosen.median == streamed
    else:
        assert basis.bound is not None and basis.bound.startswith(f"{bound}: ")
        assert basis.name == "non-streamed differential rate"
        assert basis.chosen is not None and basis.chosen.median == reference


@pytest.mark.parametrize(
    ("chunk_delay_s", "token_delay_s", "burst", "bound"),
    [
        (0.02, None, False, "streaming"),
        (0.0, 0.005, True, "buffering"),
    ],
)
def test_what_bounds_a_streamed_rate_is_named(
    fake_server: HTTPServer,
    shape: Path,
    chunk_delay_s: float,
    token_delay_s: float | None,
    burst: bool,
    bound: str | None,
) -> None:
    """Non-streamed: 0.5 ms a token (~2,000 t/s). Streamed: 20 ms a chunk (~50 t/s: a margin
    wide enough for a loaded 2-core machine) is bound by streaming. A stream held back and
    sent in one write arrives as one burst, like a buffering proxy's (vLLM 0.32 on a loaded
    machine: 15,283 t/s streamed against ~330), here against 5 ms a token non-streamed
    (~200 t/s, so a pause while the client parses the burst cannot hide it). Both margins
    are wide enough that the machine's load cannot pick the answer; rates near the
    decision's edges are judged on given figures in test_which_rate_decode_is_judged_on."""
    fake = FakeEngine(
        fake_server,
        "vllm",
        chunk_delay_s=chunk_delay_s,
        token_delay_s=token_delay_s,
        burst=burst,
    )
    run = _run(fake.url, shape, only=("decode",), repeat=2, max_tokens=128, timeout_s=30)
    result = run.result("decode")
    assert result.bound_by is not None and result.bound_by.startswith(f"{bound}: ")
    assert result.basis == "non-streamed differential rate"
    # the figure is the median to 2 places, the summary's median the same to 3: they
    # differ by at most half a unit in the 2nd place plus half in the 3rd
    assert abs(result.figure - result.figures["non_streamed_differential"]["median"]) <= 0.0055


# --------------------------------------------------- fallbacks, concurrency, progress


def test_no_tokenize_route_falls_back_to_the_refusal(fake_server: HTTPServer) -> None:
    """SGLang v0.5.2 has no tokenize route (docs/engines.md §2.8): the refusal counts instead."""
    fake_server.no_handler_status_code = 404
    fake = FakeEngine(fake_server, "sglang", window=256, tokenize=False)
    with httpx.Client() as client:
        endpoint = Endpoint(client, fake.url)
        result = calibrate(endpoint, detect(endpoint, Deadline(5)), 256, Deadline(5))
    assert result.method == "refusal"
    assert result.tokens == 513  # ceil(2048 / 4) + 1
    assert result.tokenize_route is None
    assert result.notes[0].startswith("/v1/tokenize did not count (POST /v1/tokenize: HTTP 404")


def _three_slots(shape: Path) -> Path:
    """The tiny shape with 3 slots on llama-server: 0.75 MiB backs 3 windows of 1,024."""
    text = shape.read_text(encoding="utf-8")
    text = text.replace("kv: 0.25 MiB", "kv: 0.75 MiB").replace(
        "max_num_seqs: 1", "max_num_seqs: 3"
    )
    text = text.replace("binary: llama-cpp-python", "binary: llama-server")
    shape.write_text(text, encoding="utf-8")
    return shape


def test_boundary_prompts_are_in_flight_together(fake_server: HTTPServer, shape: Path) -> None:
    fake = FakeEngine(fake_server, "vllm")
    spans: list[tuple[float, float]] = []
    lock = threading.Lock()

    def chat(request: Request) -> Response:
        start = time.monotonic()
        if len(request.get_data()) > 2000:  # a boundary prompt, not the template-size one
            time.sleep(0.3)
        answer = fake.default_chat(request)
        with lock:
            spans.append((start, time.monotonic()))
        return answer

    fake.chat = chat
    run = _run(fake.url, _three_slots(shape), only=("boundary",), timeout_s=20)
    result = run.result("boundary")
    assert result.slots == 3 and result.answered == 3 and result.retrieved == 3
    assert len({r.marker for r in result.results}) == 3
    long = [s for s in spans if s[1] - s[0] >= 0.3]
    assert len(long) == 3
    assert max(s[0] for s in long) < min(s[1] for s in long)  # all three overlapped


def test_a_stalled_boundary_slot_fails_in_time(fake_server: HTTPServer, shape: Path) -> None:
    fake = FakeEngine(fake_server, "vllm")
    release = threading.Event()

    def chat(request: Request) -> Response:
        if len(request.get_data()) > 2000:
            release.wait(20)
        return fake.default_chat(request)

    fake.chat = chat
    start = time.monotonic()
    try:
        run = _run(fake.url, shape, only=("boundary",), timeout_s=1.5)
    finally:
        release.set()
    assert time.monotonic() - start < 1.5 * 2 + 5.0  # calibrate and boundary, each bounded
    result = run.result("boundary")
    (slot,) = result.results
    assert slot.status == "failed" and "timeout" in (slot.error or "")


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def begin(self, probe: str, steps: int) -> None:
        self.calls.append(("begin", probe, str(steps)))

    def step(self, probe: str, text: str) -> None:
        self.calls.append(("step", probe, text))

    def end(self, probe: str, status: str) -> None:
        self.calls.append(("end", probe, status))


def test_progress_is_told_every_step(fake_server: HTTPServer, shape: Path) -> None:
    fake = FakeEngine(fake_server, "vllm")
    recorder = Recorder()
    with httpx.Client() as client:
        run_probes(
            load_shape(shape),
            Endpoint(client, fake.url),
            httpx.AsyncClient,
            ProbeOptions(
                only=("decode",), repeat=2, max_tokens=128, timeout_s=20, any_endpoint=True
            ),
            recorder,
        )
    assert recorder.calls == [
        ("begin", "decode", "4"),
        ("step", "decode", "decode 1/2, non-streamed"),
        ("step", "decode", "decode 2/2, non-streamed"),
        ("step", "decode", "decode 1/2, streamed"),
        ("step", "decode", "decode 2/2, streamed"),
        ("end", "decode", "ok"),
    ]


def test_progress_bars_on_a_terminal() -> None:
    import io

    from rich.console import Console
    from rich.progress import Progress

    from fakplan.cli.probe import _Bars

    sink = io.StringIO()
    with Progress(console=Console(file=sink, force_terminal=True, width=80)) as bars:
        shown = _Bars(bars)
        shown.begin("decode", 2)
        shown.step("decode", "decode 1/2")
        shown.end("decode", "ok")
        (task,) = bars.tasks
        assert task.completed == 2 and task.description == "decode: ok"


# ------------------------------------------------- the kv probe's faults (vLLM /metrics)


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (500, "Internal Server Error", "GET /metrics: HTTP 500"),
        (200, 'vllm:cache_config_info{block_size="128" 1.0\n', "not Prometheus text"),
    ],
)
def test_a_broken_metrics_route_fails_the_kv_probe(
    fake_server: HTTPServer, shape: Path, status: int, body: str, expected: str
) -> None:
    fake = FakeEngine(fake_server, "vllm")
    fake_server.expect_request("/metrics").respond_with_data(body, status=status)
    run = _run(fake.url, shape, only=("kv",), timeout_s=10)
    outcome = run.probes["kv"]
    assert outcome.status == "failed" and expected in (outcome.error or "")


def test_a_release_without_the_token_count_gives_no_verdict(
    fake_server: HTTPServer, shape: Path
) -> None:
    """Older vLLMs export the info metric with kv_cache_size_tokens "None": blocks x block
    size is not the boot's count for hybrid models, so nothing is judged from it."""
    fake = FakeEngine(fake_server, "vllm")
    fake_server.expect_request("/metrics").respond_with_data(
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        "# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="16",kv_cache_size_tokens="None",'
        'num_gpu_blocks="2560"} 1.0\n'
    )
    run = _run(fake.url, shape, only=("kv",), timeout_s=10)
    kv = run.result("kv")
    assert (kv.kv_tokens, kv.num_blocks, kv.block_size) == (None, 2560, 16)
    assert "no verdict" in kv.notes[0]
    plan = compile_plan(load_shape(shape))
    assert verdicts_for(run, plan) == {}


def _metrics(*engines: tuple[int, int]) -> str:
    lines = [
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
        "# TYPE vllm:cache_config_info gauge",
    ]
    for index, (tokens, blocks) in enumerate(engines):
        lines.append(
            f'vllm:cache_config_info{{engine="{index}",block_size="16",'
            f'kv_cache_size_tokens="{tokens}",num_gpu_blocks="{blocks}"}} 1.0'
        )
    return "\n".join(lines) + "\n"


def test_a_stated_pool_off_the_prediction_kills_it(fake_server: HTTPServer, shape: Path) -> None:
    """The tiny shape predicts 1,024 tokens; an engine stating 900 kills kv-tokens."""
    fake = FakeEngine(fake_server, "vllm")
    fake_server.expect_request("/metrics").respond_with_data(_metrics((900, 56)))
    run = _run(fake.url, shape, only=("kv",), timeout_s=10)
    plan = compile_plan(load_shape(shape))
    verdicts = verdicts_for(run, plan)
    assert (verdicts["kv-tokens"].status, verdicts["kv-tokens"].observed) == ("killed", 900)
    assert 'kv_cache_size_tokens="900"' in verdicts["kv-tokens"].source
    # 900 // 1,024 = 0 whole windows against the 1 predicted
    assert verdicts["sessions-at-window"].status == "killed"


def test_data_parallel_engines_that_disagree(fake_server: HTTPServer, shape: Path) -> None:
    fake = FakeEngine(fake_server, "vllm")
    fake_server.expect_request("/metrics").respond_with_data(
        _metrics((1024, 64), (2048, 128), (1024, 64))
    )
    run = _run(fake.url, shape, only=("kv",), timeout_s=10)
    kv = run.result("kv")
    assert (kv.kv_tokens, kv.num_blocks) == (1024, 64)  # the smallest: it bounds admission
    assert kv.notes[0] == "2 different caches stated by 3 engines; the smallest is used"
    assert 'kv_cache_size_tokens="1024"' in kv.statement and "2048" not in kv.statement
    assert verdicts_for(run, compile_plan(load_shape(shape)))["kv-tokens"].status == "held"


# ------------------------------------------------- the endpoint is the shape's (issue 26)


def test_another_engine_serving_another_model_is_refused_before_any_probe(
    fake_server: HTTPServer, shape: Path, tmp_path: Path
) -> None:
    """Issue 26: a vLLM shape probed against a llama-cpp-python server serving tiny.gguf
    exited 0 with a note. Here the other way round: a vLLM server serving 'fake' for the
    llama.cpp shape of tiny.gguf is refused, exit 2, nothing written."""
    fake = FakeEngine(fake_server, "vllm")
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["probe", str(shape), "--url", fake.url, "-o", str(out)])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert f" is not the endpoint {shape.as_posix()} plans: " in line
    assert "it is vllm (/v1/models owned_by 'vllm'), the shape's engine is llamacpp" in line
    assert "it serves 'fake', the shape 'tiny.gguf'" in line
    assert line.endswith("check --url, or pass --any-endpoint to probe it anyway")
    assert not out.exists()
    assert not [r for r in fake.bodies if "messages" in r or "prompt" in r]  # no probe ran


def test_the_shapes_own_endpoint_is_probed(fake_server: HTTPServer, shape: Path) -> None:
    """llama-server listing the GGUF by the path it was started with: the same file."""
    fake = FakeEngine(fake_server, "llama-server", model="/models/tiny.gguf")
    run = _run(fake.url, shape, only=("calibrate",), any_endpoint=False)
    assert run.probes["calibrate"].status == "ok"
    assert not [n for n in run.notes if "mismatch" in n]


def test_a_renaming_proxy_is_probed_with_the_override_and_noted(
    fake_server: HTTPServer, shape: Path
) -> None:
    fake = FakeEngine(fake_server, "llama-server", model="team-alias")
    with pytest.raises(
        ProbeError, match=re.escape("it serves 'team-alias', the shape 'tiny.gguf'")
    ):
        _run(fake.url, shape, only=("calibrate",), any_endpoint=False)
    run = _run(fake.url, shape, only=("calibrate",), any_endpoint=True)
    assert run.probes["calibrate"].status == "ok"
    assert any(n.startswith("probed despite a mismatch (--any-endpoint): ") for n in run.notes)


def test_what_an_endpoint_names_reaches_the_terminal_inert(
    fake_server: HTTPServer, shape: Path, tmp_path: Path
) -> None:
    """Issue 27: the endpoint's model id reached the terminal raw (stdout held
    `model m\x1b]0;PWNED\x1b[2J`: escape sequences and newlines kept)."""
    fake = FakeEngine(fake_server, "llama-server", model="m\x1b]0;PWNED\x1b[2J\nnext")
    result = CliRunner().invoke(
        main,
        ["probe", "--any-endpoint", str(shape), "--url", fake.url, "--only", "calibrate",
         "-o", str(tmp_path / "out")],
    )  # fmt: skip
    assert "\x1b" not in result.stdout and "PWNED\x1b" not in result.stdout
    assert "model m\\x1b]0;PWNED\\x1b[2J\\nnext" in result.stdout


# ------------------------------------------ probe records lose nothing (issue 27)


def test_probes_back_to_back_and_at_once_keep_every_verdict(
    fake_server: HTTPServer, shape: Path, tmp_path: Path
) -> None:
    """Issue 27: the run id had one-second resolution and a verdict's source embeds it, so
    runs in one second merged (six back-to-back kv runs reported 12 verdicts, plan.json kept
    8; two at once for 25 rounds: 100 reported, 34 recorded), and two runs finishing
    together could pick one raw file name. Here every verdict reported is in plan.json, and
    every run's raw record is its own file."""
    import concurrent.futures

    fake = FakeEngine(fake_server, "vllm")
    fake_server.expect_request("/metrics").respond_with_data(_metrics((1024, 64)))
    out = tmp_path / "out"
    assert CliRunner().invoke(main, ["compile", str(shape), "-o", str(out)]).exit_code == 0

    def probe() -> int:
        proc = subprocess.run(
            [sys.executable, "-m", "fakplan", "probe", "--any-endpoint", str(shape),
             "--url", fake.url, "--only", "kv", "-o", str(out), "--json"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return len(json.loads(proc.stdout)["verdicts"])

    def verify(n: int) -> int:
        ledger = tmp_path / f"boot-{n}.log"  # a log of its own: a log read twice is one verdict
        ledger.write_bytes((LEDGERS / "llama-cpp-python-0.3.36.log").read_bytes())
        proc = subprocess.run(
            [sys.executable, "-m", "fakplan", "verify", str(shape), "--ledger", str(ledger),
             "-o", str(out), "--json"],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return sum(v["new"] for v in json.loads(proc.stdout)["verdicts"].values())

    reported = sum(probe() for _ in range(4))  # back to back, well inside a second each
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        reported += sum(pool.map(lambda _: probe(), range(6)))  # three at once
    assert reported == 20  # kv-tokens and sessions, 10 runs
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:  # verify alongside
        runs = [pool.submit(probe) for _ in range(4)] + [pool.submit(verify, n) for n in range(4)]
        reported += sum(r.result() for r in runs)
    record = json.loads((out / "tiny-probe" / "plan.json").read_text())
    recorded = sum(len(p["verdicts"]) for p in record["predictions"])
    assert reported == 20 + 8 + 4 * 4 and recorded == reported  # a verify: 4 figures
    assert stale_headers(out / "tiny-probe") == ()
    raws = list((out / "tiny-probe" / "probes").glob("*.json"))
    assert len(raws) == 14 and all(r.stat().st_size > 0 for r in raws)
    leftovers = [p.name for p in (out / "tiny-probe").rglob(".*")]
    assert leftovers == []  # no temporary left behind


def test_what_a_killed_writer_left_is_evident_and_cleared(
    fake_server: HTTPServer, shape: Path, tmp_path: Path
) -> None:
    """Issue 27: a probe killed at a rename, write or openat left the headers disagreeing
    with plan.json (10 of 38 runs) and up to 6 temporaries behind. Here the folder is left
    as such a kill leaves it: the headers of an older plan.json, a reserved raw file never
    written, temporaries of the raw file and of plan.json. The digest line names the stale
    headers, and the next probe clears the rest and renders them again."""
    fake = FakeEngine(fake_server, "vllm")
    fake_server.expect_request("/metrics").respond_with_data(_metrics((1024, 64)))
    out = tmp_path / "out"
    folder = out / "tiny-probe"
    assert CliRunner().invoke(main, ["compile", str(shape), "-o", str(out)]).exit_code == 0
    assert stale_headers(folder) == ()
    headers = {name: (folder / name).read_text() for name in ("serve.sh", "tiny-probe.env")}
    probe = ["probe", "--any-endpoint", str(shape), "--url", fake.url, "--only", "kv",
             "-o", str(out)]  # fmt: skip
    assert CliRunner().invoke(main, probe).exit_code == 0
    for name, text in headers.items():  # killed after plan.json, before its headers
        (folder / name).write_text(text)
    assert stale_headers(folder) == ("serve.sh", "tiny-probe.env")
    raws = folder / "probes"
    (raws / "20261201T000000000000Z-abcdef.json").write_bytes(b"")  # reserved, never written
    (raws / ".20261201T000000000000Z-abcdef.json.k2j4h1x0").write_text("{")
    (folder / ".plan.json.q8w7e6r5").write_text("{")
    kept = raws / "notes.txt"  # the operator's own file is never touched
    kept.write_text("mine")
    assert CliRunner().invoke(main, probe).exit_code == 0
    assert stale_headers(folder) == ()
    assert [p.name for p in folder.rglob(".*")] == []
    assert sorted(p.name for p in raws.iterdir() if p.stat().st_size == 0) == []
    assert kept.read_text() == "mine" and len(list(raws.glob("*.json"))) == 2


def test_a_secret_in_the_url_never_leaves_in_any_output(
    fake_server: HTTPServer, shape: Path, tmp_path: Path
) -> None:
    """Issue 27: a password or a query token in --url is sent (httpx sends userinfo as basic
    auth) but never shown: every output of every command run after (stdout, stderr, every
    file written: raw figures, plan.json, headers, report, metrics, rules) is grepped for
    the two sentinels."""
    fake = FakeEngine(fake_server, "vllm")
    fake_server.expect_request("/metrics").respond_with_data(_metrics((1024, 64)))
    password, token = "PwSentinel7781", "TokSentinel4412"
    url = fake.url.replace("http://", f"http://user:{password}@") + f"?token={token}"
    out = tmp_path / "out"
    runner = CliRunner()
    outputs: list[str] = []
    codes: list[int] = []
    for args in (
        ["probe", "--any-endpoint", str(shape), "--url", url, "--only", "calibrate,kv",
         "-o", str(out)],
        ["probe", "--any-endpoint", str(shape), "--url", url, "--only", "kv", "-o", str(out),
         "--json"],
        ["probe", str(shape), "--url", url, "--only", "kv", "-o", str(out)],  # refused: mismatch
        ["probe", str(shape), "--url", url.replace("127.0.0.1:", "127.0.0.1:x"), "-o", str(out)],
        ["report", str(shape), "--records", str(out), "-o", str(tmp_path / "report.html")],
        ["metrics", str(shape), "--records", str(out)],
        ["rules", str(shape)],
    ):  # fmt: skip
        result = runner.invoke(main, args)
        assert "Traceback" not in result.output, result.output
        codes.append(result.exit_code)
        outputs += [result.stdout, result.stderr]
    assert codes == [0, 0, 2, 2, 0, 0, 0], codes
    files = [p for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".gguf"]
    assert any(p.parent.name == "probes" for p in files)
    outputs += [p.read_text(encoding="utf-8", errors="replace") for p in files]
    for text in outputs:
        assert password not in text and token not in text

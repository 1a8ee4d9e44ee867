"""Probes against the real llama-cpp-python server on the tiny GGUF (n_ctx 1024, EOS 259).

Every count is checked against the server's own answer (``/extras/tokenize/count``,
``usage``), never against fakplan's arithmetic. The tiny random model cannot
retrieve a marker, so boundary tests assert the mechanics; timing is asserted
only as far as docs/engines-on-cpu.md §4 measured it with wide margins.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from fakplan.cli import main
from fakplan.probes import (
    Deadline,
    Endpoint,
    boundary,
    calibrate,
    corpus,
    decode,
    detect,
    parse_refusal,
)
from fakplan.probes.api import Server
from fakplan.probes.calibrate import Sizer
from tests.support.paths import ROOT
from tests.support.realserver import EOS_ID, N_CTX, RunningServer, log_mark, ran_out_of_cells

KEY = "sk-probe-test-5f3a9c0e1d7b"


def tiny_shape(folder: Path, server: RunningServer) -> Path:
    """The shape the server was started from, as an operator would write it."""
    path = folder / "tiny-probe.yaml"
    path.write_text(
        f"""\
name: tiny-probe
engine: llamacpp
model: {json.dumps(str(server.model))}
card: {{total: 1 GiB}}
budget: {{weights: 64 MiB, kv: 0.25 MiB}}   # 256 B a cell x 1,024 cells
serving: {{max_num_seqs: 1, max_model_len: {N_CTX}, kv_cache_dtype: f16}}
ceiling: 512 MiB
control:
  cpu-decode: {{value: 1000, note: "tiny model, 2 cores, non-streamed (docs/engines-on-cpu.md §4)"}}
expect:
  - {{id: decode-vs-control, metric: decode_tps, control: cpu-decode, change_pct: [-90, 900]}}
launch: {{binary: llama-cpp-python}}
""",
        encoding="utf-8",
    )
    return path


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client() as c:
        yield c


@pytest.fixture
def endpoint(llama_server: RunningServer, client: httpx.Client) -> Endpoint:
    return Endpoint(client, llama_server.url + "/v1")


@pytest.fixture
def server(endpoint: Endpoint) -> Server:
    return detect(endpoint, Deadline(10), eos_ids=(EOS_ID,))


def server_count(llama_server: RunningServer, text: str) -> int:
    """The server's own count (independent of fakplan's code paths)."""
    answer = httpx.post(
        f"{llama_server.url}/extras/tokenize/count", json={"input": text}, timeout=10
    )
    return int(answer.json()["count"])


def test_detects_llama_cpp_python(llama_server: RunningServer, server: Server) -> None:
    assert server.flavour.name == "llama-cpp-python"
    assert server.evidence == "/openapi.json lists /extras/tokenize/count"
    assert server.model == str(llama_server.model)  # the server names the model by its path


def test_calibrate_by_tokenize(
    llama_server: RunningServer, endpoint: Endpoint, server: Server
) -> None:
    result = calibrate(endpoint, server, N_CTX, Deadline(30), method="tokenize")
    assert result.route == "/extras/tokenize/count"
    assert result.tokens == server_count(llama_server, corpus(result.chars))
    assert result.chars_per_token == pytest.approx(result.chars / result.tokens, abs=1e-4)


def test_calibrate_by_refusal_names_the_servers_count(
    llama_server: RunningServer, endpoint: Endpoint, server: Server
) -> None:
    result = calibrate(endpoint, server, N_CTX, Deadline(30), method="refusal")
    assert result.method == "refusal"
    assert result.refusal is not None
    assert result.refusal["pattern"] == "llama-cpp-python-completion"
    assert result.refusal["context"] == N_CTX
    assert result.prefill_paid_tokens == 0  # refused before any prefill
    assert result.tokens > N_CTX
    assert result.tokens == server_count(llama_server, corpus(result.chars))
    assert result.tokenize_route == "/extras/tokenize/count"  # found for sizing


def test_chat_refusal_wording(llama_server: RunningServer, client: httpx.Client) -> None:
    text = corpus(1500)
    chat = client.post(
        f"{llama_server.url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": text}], "max_tokens": 16},
    )
    assert chat.status_code == 400
    refusal = parse_refusal(chat.text, "llama-cpp-python")
    assert refusal is not None and refusal.pattern == "llama-cpp-python-chat"
    short = client.post(
        f"{llama_server.url}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
    ).json()["usage"]["prompt_tokens"]
    template = short - server_count(llama_server, "hi")
    assert refusal.prompt_tokens == server_count(llama_server, text) + template
    assert refusal.completion_tokens == 16


# llama-cpp-python 0.3.36 lets generation run past max_tokens while a UTF-8 lead byte is
# pending (docs/engines-on-cpu.md §5.2); greedy decoding of the random byte model overshoots
# 24 asked tokens by up to ~56 (measured), into the window's end and an HTTP 500 in ~25 %
# of boundary requests. The reference's remedy for tests: bias the lead bytes 0xC0-0xFF
# away (token id = byte in this vocabulary), so max_tokens holds exactly.
NO_LEAD_BYTES = {"logit_bias": {str(b): -100 for b in range(0xC0, 0x100)}}


def test_boundary_mechanics(endpoint: Endpoint) -> None:
    server = detect(endpoint, Deadline(10), extra_body=NO_LEAD_BYTES)
    calibration = calibrate(endpoint, server, N_CTX, Deadline(30))
    deadline = Deadline(60)
    result = boundary(
        endpoint,
        httpx.AsyncClient,
        server,
        Sizer(endpoint, server, calibration, deadline),
        slots=1,
        window=N_CTX,
        deadline=deadline,
    )
    (slot,) = result.results
    assert slot.status == "answered", slot.error
    assert slot.http_status == 200
    assert slot.prompt_tokens == N_CTX - 32  # the server's own count (usage)
    assert slot.completion_tokens == result.max_tokens == 24
    assert result.sized_ok and result.mechanics_ok
    assert slot.latency_s is not None and slot.latency_s > 0
    assert result.chat_overhead_tokens == 18  # <|bos|>user\n ... <|eos|>\n<|bos|>assistant\n
    # a random model does not copy the code back; the report says what it did
    assert result.retrieved == int(slot.retrieved)


def test_decode_generates_past_128_with_eos_suppressed(endpoint: Endpoint, server: Server) -> None:
    result = decode(endpoint, server, max_tokens=128, repeat=2, deadline=Deadline(60), window=N_CTX)
    assert result.eos_suppression == f"logit_bias {EOS_ID}: -100"
    assert not result.short
    for rep in result.reps:
        assert rep["nonstream_tokens"] >= 128  # the server's usage: EOS did not stop it
        assert rep["streamed_tokens"] >= 128
        assert rep["finish_reasons"] == ("length", "length")
    assert result.figure is not None and result.figure > 0
    # docs/engines-on-cpu.md §4: ~1,600-2,000 t/s non-streamed against ~120-185 streamed (the
    # wrapper's per-chunk overhead), on an idle machine. Rates are the machine's as much as the
    # engine's, so none is compared here; which basis is judged, and why, is pinned on a fake
    # server in test_probes_fake.py. Here: both measurements were taken, and the basis named.
    assert result.figures["streamed"] is not None
    assert result.figures["non_streamed_differential"] is not None
    if result.bound_by is not None:
        assert "per-chunk overhead" in result.bound_by
        assert result.basis == "non-streamed differential rate"
    else:
        assert result.basis == "streamed inter-token rate"


def test_decode_refuses_fewer_than_128_tokens(endpoint: Endpoint, server: Server) -> None:
    from fakplan.probes import ProbeFault

    with pytest.raises(ProbeFault, match="first-token noise"):
        decode(endpoint, server, max_tokens=64, deadline=Deadline(5))


# ----------------------------------------------------------------- the CLI


def _probe(*args: str) -> Any:
    return CliRunner().invoke(main, ["probe", *args], env={"FAKPLAN_PROBE_KEY": KEY})


def _all_text(folder: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in folder.rglob("*") if p.is_file())


def test_cli_end_to_end(llama_server: RunningServer, tmp_path: Path) -> None:
    shape = tiny_shape(tmp_path, llama_server)
    out = tmp_path / "out"
    compiled = CliRunner().invoke(main, ["compile", str(shape), "-o", str(out)])
    assert compiled.exit_code == 0, compiled.output
    common = [
        "--url",
        llama_server.url + "/v1",
        "--out",
        str(out),
        "--api-key-env",
        "FAKPLAN_PROBE_KEY",
    ]

    first = _probe(
        str(shape),
        *common,
        "--only",
        "calibrate,decode",
        "--max-tokens",
        "128",
        "--repeat",
        "2",
        "--json",
    )
    # exit 1 is a killed verdict (asserted below), never a crash
    assert first.exit_code in (0, 1), first.output
    doc = json.loads(first.stdout)  # progress lines go to stderr
    assert doc["schema"] == "fakplan.probe/1"
    assert doc["server"]["flavour"] == "llama-cpp-python"
    # a rate on a shared 2-core machine is the machine's, not the engine's: assert that the
    # verdict was judged on the figure the decode probe measured, not that it held
    decode = doc["verdicts"]["decode-vs-control"]
    assert_decode_verdict(decode, doc["probes"]["decode"]["result"], 1000, (-90, 900))
    assert doc["exit"] == first.exit_code == (1 if decode["status"] == "killed" else 0)
    raw = Path(doc["raw"])
    assert raw.parent == out / "tiny-probe" / "probes" and json.loads(raw.read_text()) == doc

    second = _probe(str(shape), *common, "--only", "boundary")
    record = json.loads((out / "tiny-probe" / "plan.json").read_text(encoding="utf-8"))
    by_id = {p["id"]: p for p in record["predictions"]}
    (verdict,) = by_id["boundary"]["verdicts"]
    # issue 26: capacity and model quality are two things. A full-window prompt accepted
    # and served holds (exit 0) though the random model repeats no marker, which was once
    # a kill. llama-cpp-python sometimes answers HTTP 500 "llama_decode returned 1" at the
    # window's last cell (boundary.ANSWER_SLACK): that slot was not served, so it kills,
    # and the note says "1 failed". Either way the verdict is the slot's fate.
    served = verdict["note"].startswith("1/1 served in full at ")
    if served:
        assert (verdict["status"], second.exit_code) == ("held", 0), second.output
    else:
        assert (
            verdict["note"].startswith("0/1 served in full at ") and "1 failed" in verdict["note"]
        )
        assert (verdict["status"], second.exit_code) == ("killed", 1), second.output
    assert "model quality, not capacity: 0/" in verdict["note"]
    # no progress noise in the record; a line per probe on stderr
    assert "fakplan probe: boundary ok (" in second.stderr
    # the decode verdict of the first run is still there, and in the env header
    assert [v["status"] for v in by_id["decode-vs-control"]["verdicts"]] == [decode["status"]]
    env = (out / "tiny-probe" / "tiny-probe.env").read_text(encoding="utf-8")
    assert f"verdict: {decode['status']}, observed" in env
    assert KEY not in first.output + second.output + _all_text(out)


def test_cli_bad_input_exits_2(llama_server: RunningServer, tmp_path: Path) -> None:
    shape = tiny_shape(tmp_path, llama_server)
    cases = [
        (["--url", "localhost:8000"], "--url 'localhost:8000': expected http://HOST:PORT"),
        (
            ["--url", llama_server.url, "--max-tokens", "64"],
            "--max-tokens 64: a decode figure needs",
        ),
        (["--url", llama_server.url, "--api-key-env", "FAKPLAN_UNSET_VAR"], "FAKPLAN_UNSET_VAR"),
        (["--url", llama_server.url, "--only", "decode,warp"], "warp"),
    ]
    for args, message in cases:
        result = CliRunner().invoke(
            main, ["probe", str(shape), *args, "--out", str(tmp_path / "o")]
        )
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output
    missing = CliRunner().invoke(
        main, ["probe", str(tmp_path / "nope.yaml"), "--url", llama_server.url]
    )
    assert missing.exit_code == 2 and "no such file" in missing.output
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------ the pytest probe suite


def suite_outcomes(stdout: str) -> dict[str, str]:
    """Each probes/ test that ran, with its outcome, from the ``-rA`` summary (skips are
    listed there by reason, not by name): ``{"name[param]": "PASSED"}``."""
    found = re.findall(
        r"^(PASSED|FAILED|ERROR) probes/test_endpoint\.py::(\w+(?:\[[^\]]*\])?)", stdout, flags=re.M
    )
    return {name: status for status, name in found}


def assert_decode_verdict(
    verdict: dict[str, Any], decode: dict[str, Any], control: float, change_pct: tuple[int, int]
) -> None:
    """The decode expectation was judged on the figure the probe reported, and judged right:
    held inside control x (1 + change_pct / 100), killed when even the figure's noise band
    (±noise_pct of it) misses that range, inside noise between. Which one a busy machine
    gives is its business; that the judgement matches the figure is the engine's."""
    figure, noise = decode["figure"], decode["noise_pct"]
    assert figure > 0 and verdict["observed"] == figure, (verdict, decode)
    low, high = control * (1 + change_pct[0] / 100), control * (1 + change_pct[1] / 100)
    band = figure * noise / 100
    if low <= figure <= high:
        expected = "held"
    elif figure + band < low or figure - band > high:
        expected = "killed"
    else:
        expected = "inside noise"
    assert verdict["status"] == expected, (verdict, decode, low, high)


def _suite(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "probes/", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_probe_suite_skips_without_a_url() -> None:
    done = _suite()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "10 skipped" in done.stdout


def test_probe_suite_options_do_not_clash() -> None:
    done = _suite("--help")
    assert done.returncode == 0, done.stderr
    for option in (
        "--probe-url=URL",
        "--probe-shape=SHAPE",
        "--probe-api-key-env=VAR",
        "--fakplan-shapes=PATH",
    ):
        assert done.stdout.count(option) == 1, option


def test_probe_suite_against_the_real_server(llama_server: RunningServer, tmp_path: Path) -> None:
    shape = tiny_shape(tmp_path, llama_server)
    mark = log_mark(llama_server)
    done = _suite(
        "--probe-url",
        llama_server.url,
        "--probe-shape",
        str(shape),
        "--probe-repeat",
        "1",
        "--probe-max-tokens",
        "128",
        "-rA",
    )
    # the full-window prompt is served: the boundary prediction (capacity) holds, though the
    # random model repeats no marker; every probe runs; the decode rate's verdict is the
    # loaded machine's, so either outcome is the engine's
    outcomes = suite_outcomes(done.stdout)
    # the slot's fate decides (see test_cli_end_to_end: the wrapper's occasional HTTP 500)
    # (a killed verdict's note is in the output; a held one prints nothing)
    unserved = "boundary: killed: 0/1 served in full" in done.stdout
    expected = "FAILED" if unserved else "PASSED"
    assert outcomes.pop("test_predictions_held[probe boundary]") == expected, done.stdout
    assert outcomes.pop("test_predictions_held[probe decode]") in {"PASSED", "FAILED"}
    if "FAILED" in outcomes.values() and ran_out_of_cells(llama_server, mark):
        pytest.xfail("llama-cpp-python ran out of KV cells during the suite: " + done.stdout[-300:])
    assert sorted(outcomes.items()) == [
        (f"test_probe_ran[{probe}]", "PASSED")
        for probe in ("boundary", "calibrate", "decode", "kv", "prefill")
    ], done.stdout
    # no prefill prediction; llama-cpp-python states no KV pool live
    assert re.search(r" 3 skipped in ", done.stdout), done.stdout


def test_a_vllm_shape_is_not_probed_against_this_llama_cpp_server(
    llama_server: RunningServer, tmp_path: Path
) -> None:
    """Issue 26: a vLLM Llama-8B shape probed against a llama-cpp-python server serving
    models/tiny.gguf printed a note and exited 0. The real server's /v1/models now
    refuses it before any probe runs; --any-endpoint probes it anyway, noted."""
    shape = tmp_path / "llama.yaml"
    shape.write_text(
        "name: llama8b\nengine: vllm\nmodel: meta-llama/Llama-3.1-8B-Instruct\n"
        "card: {total: 24 GiB}\nbudget: {weights: 16 GiB, kv: 5 GiB}\n"
        "serving: {max_num_seqs: 2, max_model_len: 1024}\nceiling: 22 GiB\n"
    )
    out = tmp_path / "out"
    refused = _probe(str(shape), "--url", llama_server.url, "--only", "calibrate", "-o", str(out))
    assert refused.exit_code == 2, refused.output
    line = refused.stderr.strip().splitlines()[-1]
    assert (
        "it is llama-cpp-python (/openapi.json lists /extras/tokenize/count), the shape's engine is vllm"
        in line
    )
    assert (
        f"it serves '{llama_server.model}'" in line and "'meta-llama/Llama-3.1-8B-Instruct'" in line
    )
    assert not out.exists()
    forced = _probe(
        str(shape), "--url", llama_server.url, "--only", "calibrate", "-o", str(out),
        "--any-endpoint", "--json",
    )  # fmt: skip
    assert forced.exit_code == 0, forced.output
    notes = json.loads(forced.stdout)["notes"]
    assert any(
        n.startswith("probed despite a mismatch (--any-endpoint): it is llama-cpp-python")
        for n in notes
    )

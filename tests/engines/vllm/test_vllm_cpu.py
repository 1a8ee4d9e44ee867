"""The real vLLM (CPU build 0.32.0) against fakplan: its boot ledger, verify, probes.

One server for the tier (``vllm_server`` in conftest.py), booted from the serve.sh
``fakplan compile`` rendered for the shape in conftest.TINY_VLLM_SHAPE. Every
expected figure is the engine's own (its log, /metrics, /tokenize) or a hand
derivation written here, never fakplan's arithmetic fed back to itself.

The tiny model (tests/vllm_tiny_model.py): 2 layers, 2 KV heads of 64, float32.
One token costs 2 layers x 2 (K and V) x 2 heads x 64 x 4 B = 2,048 B, so the
1 GiB pool holds 1,073,741,824 / 2,048 = 524,288 tokens; in 128-token CPU
blocks that is 4,096 blocks, and 524,288 / 1,024 = 512 full windows.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from fakplan.budget import probe_budget
from fakplan.cli import main
from fakplan.engines import parse_ledger
from fakplan.probes import Deadline, Endpoint, calibrate, corpus, detect, parse_refusal
from tests.probes.test_probes import assert_decode_verdict
from tests.support.realserver import free_port, stop_server
from tests.support.realvllm import (
    BootFailed,
    RunningVllm,
    compile_serve_sh,
    run_serve_sh,
    wait_ready,
    write_vllm_shape,
)

pytestmark = pytest.mark.vllm_cpu

GIB = 1 << 30
TOKENS = GIB // (2 * 2 * 2 * 64 * 4)  # 524,288: the hand derivation above
WINDOW = 1024


def server_count(server: RunningVllm, text: str) -> int:
    """vLLM's own count of ``text`` (its /tokenize, no special tokens)."""
    answer = httpx.post(
        f"{server.url}/tokenize",
        json={"model": str(server.model), "prompt": text, "add_special_tokens": False},
        timeout=30,
    )
    answer.raise_for_status()
    return int(answer.json()["count"])


def test_the_rendered_launch_is_what_ran(vllm_server: RunningVllm) -> None:
    serve = (vllm_server.out / "tiny-vllm-cpu" / "serve.sh").read_text()
    assert "export VLLM_CPU_KVCACHE_SPACE=1\n" in serve  # the pool, in the CPU build's unit
    assert "exec python -m vllm.entrypoints.openai.api_server --model " in serve
    log = vllm_server.log.read_text()
    # vLLM echoes the flags it was given: the shape's window, slots and dtype reached it
    assert "'max_model_len': 1024" in log and "'max_num_seqs': 4" in log
    assert "'dtype': 'float32'" in log


def test_ledger_reads_the_real_boot(vllm_server: RunningVllm) -> None:
    ledger = parse_ledger(vllm_server.log)
    assert ledger.engine == "vllm" and ledger.engine_version == "0.32.0"
    assert ledger.boot_failed is None
    assert ledger.kv_tokens == TOKENS  # "CPU KV cache size: 524,288 tokens"
    assert ledger.kv_bytes == GIB  # "Explicitly set (1.0/…) GiB for KV cache on node 0."
    assert ledger.max_concurrency == TOKENS / WINDOW
    assert ledger.context_len == WINDOW
    kv_line = ledger.figure("kv_tokens")
    assert kv_line is not None and "CPU KV cache size" in kv_line.text


def test_the_plan_matches_the_engines_own_metrics(vllm_server: RunningVllm) -> None:
    """/metrics states the block size and block count the engine chose; so does the plan."""
    metrics = httpx.get(f"{vllm_server.url}/metrics", timeout=10).text
    info = next(line for line in metrics.splitlines() if line.startswith("vllm:cache_config_info"))
    labels = dict(re.findall(r'(\w+)="([^"]*)"', info))
    assert labels["block_size"] == "128"  # the CPU build's default
    assert int(labels["num_gpu_blocks"]) == TOKENS // 128
    assert int(labels["kv_cache_memory_bytes"]) == GIB
    plan = json.loads((vllm_server.out / "tiny-vllm-cpu" / "plan.json").read_text())
    assert plan["tokens_backed"] == TOKENS
    assert plan["page_tokens"] == int(labels["block_size"])
    assert f"= {int(labels['num_gpu_blocks']):,};" in plan["derivations"]["tokens_backed"]
    assert plan["derivations"]["card_total_bytes"].startswith("auto: ")


def test_verify_holds_against_the_real_log(vllm_server: RunningVllm, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main,
        [
            "verify",
            str(vllm_server.shape),
            "--ledger",
            str(vllm_server.log),
            "-o",
            str(out),
            "--json",
        ],
    )
    verdicts = json.loads(result.output)["verdicts"]
    assert verdicts["kv-tokens"]["status"] == "held"
    assert verdicts["kv-tokens"]["observed"] == TOKENS
    assert verdicts["sessions-at-window"]["status"] == "held"
    assert verdicts["sessions-at-window"]["observed"] == TOKENS // WINDOW
    # the CPU build prints no weights size: that prediction stays open, not guessed
    assert verdicts["weights"]["status"] == "unverifiable"
    assert result.exit_code == 0
    record = json.loads((out / "tiny-vllm-cpu" / "plan.json").read_text())
    kv = next(p for p in record["predictions"] if p["id"] == "kv-tokens")
    assert kv["verdicts"][-1]["status"] == "held"


def test_calibrate_by_tokenize(vllm_server: RunningVllm) -> None:
    with httpx.Client() as client:
        endpoint = Endpoint(client, vllm_server.url + "/v1")
        server = detect(endpoint, Deadline(30))
        assert server.flavour.name == "vllm"
        result = calibrate(endpoint, server, WINDOW, Deadline(60), method="tokenize")
    assert result.route == "/tokenize"
    assert result.tokens == server_count(vllm_server, corpus(result.chars))


def test_the_refusal_names_only_a_lower_bound(vllm_server: RunningVllm) -> None:
    """Above the window vLLM 0.32 refuses before prefill, but its tokenizer stops at
    max_model_len + 1: the text says "at least 1025", a bound, not the prompt's count."""
    text = corpus(3000)
    answer = httpx.post(
        f"{vllm_server.url}/v1/completions",
        json={"model": str(vllm_server.model), "prompt": text, "max_tokens": 8},
        timeout=60,
    )
    assert answer.status_code == 400
    assert "at least 1025 input tokens" in answer.text  # the engine's words, checked as-is
    refusal = parse_refusal(answer.text, "vllm")
    assert refusal is not None and refusal.pattern == "vllm-prompt-contains"
    assert refusal.context == WINDOW
    assert refusal.lower_bound and refusal.prompt_tokens == WINDOW + 1
    assert refusal.exact_count is None
    assert server_count(vllm_server, text) > WINDOW + 1  # the real count is larger


def test_calibrate_by_refusal_falls_back_to_an_accepted_count(vllm_server: RunningVllm) -> None:
    """With only a bound in the refusal, the count comes from the accepted opening prompt."""
    with httpx.Client() as client:
        endpoint = Endpoint(client, vllm_server.url + "/v1")
        server = detect(endpoint, Deadline(30))
        result = calibrate(endpoint, server, WINDOW, Deadline(60), method="refusal")
    assert result.method == "accepted"
    assert any("names only a lower bound" in note for note in result.notes)
    assert result.prefill_paid_tokens == result.tokens  # the accepted prompt's prefill
    assert result.tokens == server_count(vllm_server, corpus(result.chars))


def test_probe_cli_writes_verdicts(vllm_server: RunningVllm, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        main,
        [
            "probe",
            str(vllm_server.shape),
            "--url",
            vllm_server.url,
            "--only",
            "kv,calibrate,boundary,decode",
            "--repeat",
            "1",
            "--max-tokens",
            "128",
            "-o",
            str(out),
            "--json",
        ],
    )
    run = json.loads(result.stdout)  # progress lines go to stderr
    assert run["server"]["flavour"] == "vllm" and run["server"]["context"] == WINDOW
    assert {name: probe["status"] for name, probe in run["probes"].items()} == {
        "kv": "ok",
        "calibrate": "ok",
        "boundary": "ok",
        "decode": "ok",
    }
    assert run["probes"]["calibrate"]["result"]["tokens"] == server_count(
        vllm_server, corpus(run["probes"]["calibrate"]["result"]["chars"])
    )
    # 4 slots of max_model_len - 32 tokens, all served in full, none refused: the window
    # holds, and the boundary prediction (capacity) with it; the random model repeats no
    # marker, which the note reports as its quality (issue 26: once a kill)
    boundary = run["verdicts"]["boundary"]
    assert boundary["status"] == "held"
    assert boundary["note"].startswith(f"4/4 served in full at {WINDOW - 32} tokens (predicted 4)")
    assert "model quality, not capacity: 0/4 repeated the marker" in boundary["note"]
    # the decode rate is the loaded machine's: the verdict is judged on the probe's figure
    decode = run["verdicts"]["decode-vs-control"]
    # the tier's shape (tests/conftest.py): control 300 tokens/s, change_pct [-90, 900]
    assert_decode_verdict(decode, run["probes"]["decode"]["result"], 300, (-90, 900))
    # the live /metrics states the pool the boot log printed: the ledger's predictions hold
    kv = run["verdicts"]["kv-tokens"]
    assert (kv["status"], kv["observed"]) == ("held", TOKENS)
    assert 'kv_cache_size_tokens="524288"' in kv["source"]
    sessions = run["verdicts"]["sessions-at-window"]
    assert (sessions["status"], sessions["observed"]) == ("held", TOKENS // WINDOW)
    killed = {boundary["status"], decode["status"]} & {"killed"}
    assert result.exit_code == (1 if killed else 0)
    record = json.loads((out / "tiny-vllm-cpu" / "plan.json").read_text())
    by_id = {p["id"]: p for p in record["predictions"]}
    assert by_id["boundary"]["verdicts"][-1]["status"] == boundary["status"]
    assert by_id["decode-vs-control"]["verdicts"][-1]["status"] == decode["status"]
    assert Path(run["raw"]).parent == out / "tiny-vllm-cpu" / "probes"


def test_a_pool_larger_than_the_host_fails_fast_with_its_reason(
    vllm_environment: tuple[Path, Path], tmp_path: Path
) -> None:
    """vLLM refuses a pool the machine cannot hold; fakplan names why, and does not hang."""
    python, model = vllm_environment
    host = probe_budget(env={}, gpu=False)
    assert host.budget_bytes is not None
    too_big = f"{host.budget_bytes // GIB + 8} GiB"  # more than the host's RAM, let alone free
    port = free_port()
    shape = write_vllm_shape(tmp_path, model, port, kv=too_big)
    serve = compile_serve_sh(shape, tmp_path / "out")
    # fakplan refuses it first: the pair is over the card, and serve.sh will not start it
    refused = run_serve_sh(serve, python, tmp_path / "refused.log")
    assert refused.wait(timeout=60) == 1
    assert "not ok pair-ceiling" in (tmp_path / "refused.log").read_text()
    # started anyway, vLLM refuses it with its own reason
    log = tmp_path / "boot.log"
    process = run_serve_sh(serve, python, log, ignore_gates=True)
    start = time.monotonic()
    try:
        with pytest.raises(BootFailed, match="less than requested memory for kv"):
            wait_ready(f"http://127.0.0.1:{port}", process, log)
    finally:
        stop_server(process)
    assert time.monotonic() - start < 400  # it returned when vLLM exited, not at a deadline
    result = CliRunner().invoke(
        main, ["verify", str(shape), "--ledger", str(log), "-o", str(tmp_path / "out"), "--json"]
    )
    assert result.exit_code == 1
    kv = json.loads(result.output)["verdicts"]["kv-tokens"]
    assert kv["status"] == "killed"
    assert "less than requested memory for kv" in kv["observed"]
    ledger = parse_ledger(log)
    assert ledger.boot_failed is True
    assert ledger.kv_needed_bytes == (host.budget_bytes // GIB + 8) * GIB


def test_a_refused_flag_is_a_parsed_failure(
    vllm_environment: tuple[Path, Path], tmp_path: Path
) -> None:
    python, model = vllm_environment
    port = free_port()
    shape = write_vllm_shape(tmp_path, model, port)
    text = shape.read_text().replace("[--enforce-eager]", "[--enforce-eager, --kv-cache-sise, '1']")
    shape.write_text(text)
    serve = compile_serve_sh(shape, tmp_path / "out")
    log = tmp_path / "boot.log"
    process = run_serve_sh(serve, python, log)
    try:
        with pytest.raises(BootFailed, match="unrecognized arguments: --kv-cache-sise"):
            wait_ready(f"http://127.0.0.1:{port}", process, log)
    finally:
        stop_server(process)
    result = CliRunner().invoke(
        main, ["verify", str(shape), "--ledger", str(log), "-o", str(tmp_path / "out"), "--json"]
    )
    assert result.exit_code == 1
    assert "--kv-cache-sise" in json.loads(result.output)["verdicts"]["kv-tokens"]["observed"]


def test_the_operators_probe_suite_against_vllm(vllm_server: RunningVllm) -> None:
    """`pytest probes/` as an operator runs it after a deploy: the live KV pool holds."""
    from tests.probes.test_probes import _suite, suite_outcomes

    done = _suite(
        "--probe-url",
        vllm_server.url,
        "--probe-shape",
        str(vllm_server.shape),
        "--probe-repeat",
        "1",
        "--probe-max-tokens",
        "128",
        "-rA",
    )
    outcomes = suite_outcomes(done.stdout)
    # every full-window prompt is served: the boundary prediction (capacity) holds, though
    # the random model repeats no marker; the decode rate's verdict is the loaded
    # machine's, so either outcome is the engine's
    assert outcomes.pop("test_predictions_held[probe boundary]") == "PASSED"
    assert outcomes.pop("test_predictions_held[probe decode]") in {"PASSED", "FAILED"}
    assert sorted(outcomes.items()) == [
        *[
            (f"test_probe_ran[{probe}]", "PASSED")
            for probe in ("boundary", "calibrate", "decode", "kv", "prefill")
        ],
        ("test_the_stated_kv_pool_held[kv-tokens]", "PASSED"),
        ("test_the_stated_kv_pool_held[sessions-at-window]", "PASSED"),
    ], done.stdout
    assert " 1 skipped in " in done.stdout, done.stdout  # no prefill prediction


def test_the_parameter_count_matches_the_real_checkpoint(
    vllm_environment: tuple[Path, Path],
) -> None:
    """transformers wrote the tiny model's safetensors: the tensors' bytes in its header
    equal what fakplan counts from the config alone."""
    from fakplan.geometry import load_geometry
    from fakplan.geometry.params import counted_weight_bytes
    from tests.test_cpu_device import TINY_PARAMS

    _, model = vllm_environment
    config = json.loads((model / "config.json").read_text())
    counted = counted_weight_bytes(config, "llama")
    assert counted is not None and counted[0] == TINY_PARAMS * 4
    real = load_geometry(str(model))
    assert real.weight_source == "headers of 1 safetensors file(s)"
    assert real.weight_bytes == TINY_PARAMS * 4


def test_the_pool_the_cpu_build_sizes_for_itself(
    vllm_environment: tuple[Path, Path], tmp_path: Path
) -> None:
    """serving.gpu_memory_utilization and no budget: the real CPU build sizes its own pool
    ("Auto set (X/Y) GiB for KV cache ... consumed by non-kv usages"), and the plan's
    kv-pool, non-kv and kv-tokens predictions hold against that boot's own lines. The
    requested memory is checked by hand: ceil(NUMA node 0's MemTotal x 0.1)."""
    python, model = vllm_environment
    port = free_port()
    shape = write_vllm_shape(tmp_path, model, port)
    text = shape.read_text()
    assert "budget: {weights: 1 GiB, kv: 1 GiB}\n" in text
    text = text.replace("budget: {weights: 1 GiB, kv: 1 GiB}\n", "").replace(
        "dtype: float32}", "dtype: float32, gpu_memory_utilization: 0.1}"
    )
    shape.write_text(text)
    serve = compile_serve_sh(shape, tmp_path / "out")
    assert "--gpu-memory-utilization 0.1" in serve.read_text()
    assert "--kv-cache-memory-bytes" not in serve.read_text()
    meminfo = Path("/sys/devices/system/node/node0/meminfo")

    def mem_total() -> int | None:
        if not meminfo.exists():
            return None
        kib = re.search(r"MemTotal:\s+(\d+) kB", meminfo.read_text())
        assert kib is not None
        return int(kib.group(1)) * 1024

    before = mem_total()
    log = tmp_path / "boot.log"
    process = run_serve_sh(serve, python, log)
    try:
        wait_ready(f"http://127.0.0.1:{port}", process, log)
    finally:
        stop_server(process)
    line = next(x for x in log.read_text().splitlines() if "Auto set (" in x)
    requested = re.search(r"with ([0-9.]+) GiB requested memory", line)
    assert requested is not None
    after = mem_total()
    if (
        before is not None
        and after is not None
        and not os.environ.get("FAKPLAN_DEVICE_BUDGET_BYTES")
    ):
        # ceil(MemTotal x 0.1), MemTotal as vLLM read it during the boot: a VM that
        # hot-plugs memory moves it, so it lies between the readings before and after
        low, high = (-(-min(before, after) // 10), -(-max(before, after) // 10))
        printed = float(requested.group(1)) * GIB
        assert low - 0.005 * GIB <= printed <= high + 0.005 * GIB, (before, after, line)
    result = CliRunner().invoke(
        main, ["verify", str(shape), "--ledger", str(log), "-o", str(tmp_path / "out"), "--json"]
    )
    assert result.exit_code == 0, result.output
    verdicts = json.loads(result.output)["verdicts"]
    for name in ("kv-pool", "non-kv", "kv-tokens"):
        assert verdicts[name]["status"] == "held", (name, verdicts[name], line)


def test_a_real_prometheus_scrapes_the_engine_and_runs_the_rules(
    vllm_server: RunningVllm, tmp_path: Path
) -> None:
    """Debian's Prometheus scrapes the real vLLM's /metrics with fakplan's rules loaded:
    the engine's own KV token count (cache_config_info: blocks x block size) is the plan's
    kv-tokens, and every rule evaluates without error."""
    import shutil
    import subprocess

    binary = shutil.which("prometheus")
    if binary is None:
        if os.environ.get("CI"):
            pytest.fail("CI scrapes with the real Prometheus: apt-get install prometheus")
        pytest.skip("prometheus is not installed (apt-get install prometheus)")
    rules = CliRunner().invoke(main, ["rules", str(vllm_server.shape)])
    assert rules.exit_code == 0, rules.output
    (tmp_path / "rules.yaml").write_text(rules.stdout)
    target = vllm_server.url.removeprefix("http://")
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "rule_files: [rules.yaml]\n"
        # the scrape job named after the shape: what fakplan rules selects by default
        "scrape_configs: [{job_name: tiny-vllm-cpu, static_configs: "
        f"[{{targets: ['{target}']}}]}}]\n"
    )
    port = free_port()
    log = (tmp_path / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [binary, "--config.file=prometheus.yml", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    api = f"http://127.0.0.1:{port}/api/v1"
    try:
        found: list[dict[str, object]] = []
        health: list[str] = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and process.poll() is None:
            try:
                answer = httpx.get(
                    f"{api}/query",
                    params={"query": 'vllm:cache_config_info{job="tiny-vllm-cpu"}'},
                    timeout=5,
                )
                found = answer.json()["data"]["result"]
                groups = httpx.get(f"{api}/rules", timeout=5).json()["data"]["groups"]
                health = [r.get("health", "") for g in groups for r in g["rules"]]
            except (httpx.HTTPError, KeyError, ValueError):
                found = []
            if found and health and all(h == "ok" for h in health):
                break
            time.sleep(1)
    finally:
        os.killpg(process.pid, 15)
        process.wait(timeout=15)
        log.close()
    assert found, (tmp_path / "prometheus.log").read_text()[-2000:]
    labels = found[0]["metric"]
    assert isinstance(labels, dict)
    plan = json.loads((vllm_server.out / "tiny-vllm-cpu" / "plan.json").read_text())
    tokens = next(p for p in plan["predictions"] if p["id"] == "kv-tokens")
    scraped = int(labels["num_gpu_blocks"]) * int(labels["block_size"])
    assert scraped == plan["tokens_backed"] == TOKENS
    assert tokens["low"] <= scraped <= tokens["high"]
    assert health and all(h == "ok" for h in health), health

"""Benchmark: decode predicted before boot against decode measured, on this CPU host.

Not a test (rates are the machine's; they live here, not in timed unit tests). Run:
    .venv/bin/python tests/bench/rates.py [--threads 1,2] [--write docs/rates.md]

It writes random-weight llama GGUFs of 1.06 GiB (f16, and f32 with half the layers:
large enough that a decode step is bound by reading them), and for the ``vllm-f32``
kind the same float32 geometry as a Hugging Face folder (written by the vLLM CPU
tier's environment, tests/support/realvllm.py), then for each (model, threads) run:
  1. measures the host's streaming-read bandwidth with that many threads (a bitwise-or
     reduction over 512 MiB split between threads, best of 5: the cheapest read numpy does);
  2. boots the real server on the model with those threads: llama.cpp (llama-cpp-python),
     or vLLM's CPU build from the serve.sh fakplan renders (OpenMP bound to those cores);
  3. compiles a shape naming that bandwidth (card: {device: cpu, bandwidth: ...}) and runs
     ``fakplan probe --only decode``: the plan's ``decode-tps-one`` is held or killed.
Each row also reports the share of the measured bandwidth the engine reached: the CPU
bands (fakplan/engines/rate_bands.py) are fitted on rows of a run of this script. A
wrong bandwidth killing the prediction is tests/probes/test_rate_probe.py.
With ``--write`` the table replaces the measured block of docs/rates.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import gguf
import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from click.testing import CliRunner  # noqa: E402

from fakplan.cli import main  # noqa: E402
from tests.support import realvllm  # noqa: E402
from tests.support.realserver import free_port, stop_server, wait_ready  # noqa: E402
from tests.support.tinymodels import TinyLlama, write_tiny_llama  # noqa: E402

# 1.06 GiB either way: 12 layers of f16 matrices, or 6 of f32
SPECS = {
    "f16": TinyLlama(layers=12, embd=2048, heads=16, kv_heads=8, ff=5632, ctx=4096),
    "f32": TinyLlama(layers=6, embd=2048, heads=16, kv_heads=8, ff=5632, ctx=4096),
}
# the f32 geometry as a Hugging Face llama for vLLM (tests/support/vllm_tiny_model.py)
VLLM_GEOMETRY = ("--layers", "6", "--hidden", "2048", "--ff", "5632")
BEGIN, END = "<!-- bench:rates:begin -->", "<!-- bench:rates:end -->"
VLLM_BEGIN, VLLM_END = "<!-- bench:rates:vllm:begin -->", "<!-- bench:rates:vllm:end -->"


def write_model(path: Path, kind: str) -> Path:
    """The tiny llama layout at 1.06 GiB, its matrices in ``kind`` (norms stay f32)."""
    if kind == "f32":
        return write_tiny_llama(path, SPECS[kind])
    add = gguf.GGUFWriter.add_tensor

    def f16_matrices(self: gguf.GGUFWriter, name: str, tensor: np.ndarray, *a, **k):  # type: ignore[no-untyped-def]
        return add(self, name, tensor.astype(np.float16) if tensor.ndim == 2 else tensor, *a, **k)

    gguf.GGUFWriter.add_tensor = f16_matrices  # type: ignore[method-assign]
    try:
        return write_tiny_llama(path, SPECS[kind])
    finally:
        gguf.GGUFWriter.add_tensor = add  # type: ignore[method-assign]


# numpy's cheapest full reads: a reduction doing one integer op per element
READS = (np.bitwise_or.reduce, np.maximum.reduce, lambda part: part.view(np.uint8).max())


def read_bandwidth(threads: int, size: int = 512 << 20, repeat: int = 5) -> float:
    """Bytes/s a streaming read over ``size`` bytes reaches with ``threads`` threads: the
    best of ``repeat`` runs of each of numpy's cheapest reductions, one thread per part
    (numpy releases the GIL in them)."""
    data = np.ones(size // 8, dtype=np.int64)
    parts = np.array_split(data, threads)
    best = 0.0
    for _ in range(repeat):
        for read in READS:
            workers = [threading.Thread(target=read, args=(part,)) for part in parts]
            start = time.perf_counter()
            for w in workers:
                w.start()
            for w in workers:
                w.join()
            best = max(best, data.nbytes / (time.perf_counter() - start))
    return best


def boot(model: Path, threads: int, folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = folder / f"server-{threads}.log"
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(model), "--n_ctx", "2048",
        "--n_threads", str(threads), "--host", "127.0.0.1", "--port", str(port),
    ]  # fmt: skip
    with log.open("wb") as handle:
        process = subprocess.Popen(
            command, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
        )
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, process, log, deadline_s=120)
    return process, url


def shape(folder: Path, model: Path, bandwidth: float, name: str) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(
        f"""\
name: {name}
engine: llamacpp
model: {json.dumps(str(model))}
card: {{total: 8 GiB, device: cpu, bandwidth: {int(bandwidth)} B/s}}
budget: {{weights: 1200 MiB, kv: 96 MiB}}
serving: {{max_num_seqs: 1, max_model_len: 2048, kv_cache_dtype: f16}}
launch: {{binary: llama-cpp-python}}
""",
        encoding="utf-8",
    )
    return path


def write_vllm_model(folder: Path) -> Path:
    """The f32 geometry as a Hugging Face folder, written by the vLLM environment."""
    python = realvllm.ensure_environment()
    subprocess.run(
        [str(python), str(realvllm.TINY_MODEL_SCRIPT), str(folder), *VLLM_GEOMETRY], check=True
    )
    return folder


def vllm_shape(folder: Path, model: Path, bandwidth: float, name: str, port: int) -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(
        f"""\
name: {name}
engine: vllm
engine_version: {realvllm.VLLM_SPEC.split("==")[1]}
model: {json.dumps(str(model))}
card: {{device: cpu, total: auto, bandwidth: {int(bandwidth)} B/s}}
budget: {{weights: 1200 MiB, kv: 1 GiB}}
serving: {{max_num_seqs: 1, max_model_len: 2048, dtype: float32}}
launch: {{binary: vllm-api-server, host: 127.0.0.1, port: {port}, extra_args: [--enforce-eager]}}
""",
        encoding="utf-8",
    )
    return path


def boot_vllm(path: Path, threads: int, folder: Path) -> subprocess.Popen[bytes]:
    """vLLM's CPU build from the serve.sh fakplan renders, OpenMP bound to ``threads`` cores."""
    serve = realvllm.compile_serve_sh(path, folder / "serve" / path.stem)
    os.environ["VLLM_CPU_OMP_THREADS_BIND"] = f"0-{threads - 1}"
    try:
        python = realvllm.ensure_environment()
        return realvllm.run_serve_sh(serve, python, folder / f"{path.stem}.log")
    finally:
        del os.environ["VLLM_CPU_OMP_THREADS_BIND"]


def probe(path: Path, url: str, out: Path) -> dict[str, object]:
    runner = CliRunner()
    compiled = runner.invoke(main, ["compile", str(path), "-o", str(out)])
    assert compiled.exit_code == 0, compiled.output
    result = runner.invoke(
        main,
        ["probe", str(path), "--url", url + "/v1", "--out", str(out), "--only", "decode",
         "--max-tokens", "128", "--repeat", "3", "--json"],
    )  # fmt: skip
    doc = json.loads(result.stdout)
    plan = json.loads((out / path.stem / "plan.json").read_text(encoding="utf-8"))
    predicted = next((p for p in plan["predictions"] if p["id"] == "decode-tps-one"), None)
    measured = doc["probes"]["decode"]["result"]["figure"]
    if predicted is None:  # an engine with no band for the host: measured, not judged
        why = plan["rates"]["not_predicted"] if plan.get("rates") else ["no rates"]
        return {"low": None, "high": None, "measured": measured, "status": f"no band: {why}"}
    verdict = doc["verdicts"]["decode-tps-one"]
    assert verdict["observed"] == measured
    return {
        "low": predicted["low"],
        "high": predicted["high"],
        "measured": measured,
        "status": verdict["status"],
    }


def run(runs: list[tuple[str, int]]) -> list[dict[str, object]]:
    """Each (model kind, threads): bandwidth, boot, probe at the right and a 4x bandwidth."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        models = {
            kind: write_vllm_model(folder / kind)
            if kind == "vllm-f32"
            else write_model(folder / f"{kind}.gguf", kind)
            for kind in {k for k, _ in runs}
        }
        for kind, count in runs:
            model = models[kind]
            size = (
                sum(p.stat().st_size for p in model.glob("*.safetensors")) or model.stat().st_size
            )
            bandwidth = read_bandwidth(count)
            name = f"{kind}-t{count}-{len(rows)}"
            if kind == "vllm-f32":
                port = free_port()
                path = vllm_shape(folder, model, bandwidth, name, port)
                process = boot_vllm(path, count, folder)
                url = f"http://127.0.0.1:{port}"
                realvllm.wait_ready(url, process, folder / f"{name}.log")
            else:
                path = shape(folder, model, bandwidth, name)
                process, url = boot(model, count, folder)
            try:
                right = probe(path, url, folder / "out")
            finally:
                stop_server(process)
            measured = right["measured"]
            efficiency = float(measured) * size / bandwidth if measured else None  # type: ignore[arg-type]
            rows.append(
                {"model": kind, "threads": count, "model_bytes": size, "bandwidth": bandwidth,
                 "efficiency": efficiency, "right": right}
            )  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
    return rows


def table(rows: list[dict[str, object]]) -> str:
    lines = [
        "| model | threads | read bandwidth | predicted | measured | share of bandwidth "
        "| verdict |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for row in rows:
        right = row["right"]
        assert isinstance(right, dict)
        lines.append(
            f"| {row['model']} | {row['threads']} | {float(row['bandwidth']) / 1e9:.1f} GB/s "  # type: ignore[arg-type]
            + (f"| {right['low']:.1f}..{right['high']:.1f} t/s " if right["low"] else "| — ")
            + f"| {right['measured']:.1f} t/s "
            f"| {row['efficiency']:.3f} "
            f"| {right['status']} |"
        )
    return "\n".join(lines)


def write(doc: Path, rows: list[dict[str, object]]) -> None:
    """Each engine's rows into its own measured block (llama.cpp's ``bench:rates``, vLLM's
    ``bench:rates:vllm``), so a run of one engine leaves the other's table as it was."""
    text = doc.read_text(encoding="utf-8")
    for begin, end, engine_rows in (
        (BEGIN, END, [r for r in rows if not str(r["model"]).startswith("vllm")]),
        (VLLM_BEGIN, VLLM_END, [r for r in rows if str(r["model"]).startswith("vllm")]),
    ):
        if not engine_rows:
            continue
        head, rest = text.split(begin, 1)
        _, tail = rest.split(end, 1)
        stamp = f"Measured {time.strftime('%Y-%m-%d')} on {os.cpu_count()} cores, model of "
        stamp += f"{int(engine_rows[0]['model_bytes']):,} B, `--max-tokens 128 --repeat 3`:"  # type: ignore[call-overload]
        text = f"{head}{begin}\n{stamp}\n\n{table(engine_rows)}\n{end}{tail}"
    doc.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--runs",
        default=f"f16:1,f16:1,f16:1,f32:1,f32:1,f16:{os.cpu_count()}",
        help="model kind:threads, comma-separated (default: the CPU band's fit set, f16 on "
        "one thread three times, then f32 on one thread and f16 on every core)",
    )
    parser.add_argument("--write", type=Path)
    args = parser.parse_args()
    wanted = [(k, int(t)) for k, t in (r.split(":") for r in args.runs.split(","))]
    measured = run(wanted)
    print(table(measured))
    if args.write:
        write(args.write, measured)

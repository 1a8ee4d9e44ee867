"""Benchmark: GGUF header reads, fakplan's reader against gguf.GGUFReader on the same files.

Not a test (performance targets live here, not in timed unit tests). Run:
    .venv/bin/python tests/bench/bench_gguf.py
It writes two GGUFs into a temporary folder with the gguf package's own writer:
  - "many tensors": 6,000 tensor entries and a 150,000-token vocabulary;
  - "100 GB": a 70B-class tensor table (80 layers, Q4_K) whose data section is a
    sparse hole of the declared size, so the file is ~100 GB long but takes no disk.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

import gguf
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fakplan.geometry.gguf_header import read_gguf


def _writer(path: Path, vocab: int) -> gguf.GGUFWriter:
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(131072)
    w.add_embedding_length(8192)
    w.add_block_count(80)
    w.add_head_count(64)
    w.add_head_count_kv(8)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"tok{i}" for i in range(vocab)])
    w.add_token_merges([f"a{i} b{i}" for i in range(vocab // 2)])
    return w


def many_tensors(path: Path, tensors: int = 6000) -> Path:
    w = _writer(path, 150_000)
    for i in range(tensors):
        w.add_tensor_info(f"blk.{i}.weight", (32,), np.dtype(np.float32), 128)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    with path.open("ab") as handle:  # the data section, zeros
        handle.truncate(path.stat().st_size + 128 * tensors + 64)
    return path


def hundred_gb(path: Path) -> Path:
    w = _writer(path, 128_256)
    q4k = gguf.GGMLQuantizationType.Q4_K
    block, size = gguf.GGML_QUANT_SIZES[q4k]
    total = 0
    for layer in range(80):
        for name, rows, cols in (
            ("attn_q", 8192, 8192),
            ("ffn_up", 28672, 8192),
            ("ffn_down", 8192, 28672),
            ("ffn_gate", 28672, 8192),
        ):
            for copy in range(3):
                nbytes = rows * cols // block * size
                byte_shape = (rows, cols // block * size)
                w.add_tensor_info(
                    f"blk.{layer}.{name}.{copy}.weight",
                    byte_shape,
                    np.dtype(np.uint8),
                    nbytes,
                    raw_dtype=q4k,
                )
                total += nbytes
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    with path.open("ab") as handle:
        handle.truncate(path.stat().st_size + total + 4096)  # sparse: no blocks allocated
    return path


def timed(fn, repeat: int = 5) -> float:  # type: ignore[no-untyped-def]
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        for label, make in (("many tensors", many_tensors), ("100 GB", hundred_gb)):
            path = make(Path(folder) / f"{label.replace(' ', '-')}.gguf")
            ours = timed(lambda p=path: read_gguf(p))
            theirs = timed(lambda p=path: gguf.GGUFReader(p), repeat=3)
            geometry = read_gguf(path)
            print(
                f"{label:13s} file {path.stat().st_size / 2**30:8.2f} GiB, "
                f"weights {geometry.weight_bytes / 2**30:8.2f} GiB: fakplan {ours * 1000:7.1f} ms, "
                f"GGUFReader {theirs * 1000:8.1f} ms, ratio {theirs / ours:5.1f}x"
            )


if __name__ == "__main__":
    main()

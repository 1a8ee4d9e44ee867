"""GPU check: the card table's bandwidth and the decode roofline against a real card.

Run on a machine with an NVIDIA GPU and torch (a lent device machine):
    python tests/bench/gpu_rates.py [--gib 8] [--out FILE.json]

It names the card as NVML/torch reports it and finds its row (fakplan.cards), then
measures:
  1. a streaming read over the card's memory (torch.sum over --gib GiB of bf16, best of
     5), against the row's bandwidth;
  2. a decode-shaped loop: one bf16 matrix-vector product per layer over --gib GiB of
     weights (8192 x 8192 layers), each step reading every weight once, the way a decode
     step at batch 1 does; its steps/s against fakplan's roofline for those bytes at the
     row's bandwidth and the vLLM band (fakplan.rates.decode_point).
The JSON it prints records both comparisons, for docs/rates.md. Not part of the suite:
no GPU here.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from fakplan.cards import sku_for_device
from fakplan.engines import ENGINES
from fakplan.rates import DecodeInputs, decode_point

HIDDEN = 8192


def main() -> int:
    try:
        import torch
    except ImportError:
        print("torch is not installed: this check runs on a GPU machine", file=sys.stderr)
        return 2

    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=8.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: this check runs on a GPU machine", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name(0)
    row = sku_for_device(name)
    size = int(args.gib * 2**30)

    data = torch.ones(size // 2, dtype=torch.bfloat16, device="cuda")
    best = 0.0
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        data.sum()
        torch.cuda.synchronize()
        best = max(best, size / (time.perf_counter() - start))
    del data

    layers = max(1, size // (HIDDEN * HIDDEN * 2))
    weights = [
        torch.randn(HIDDEN, HIDDEN, dtype=torch.bfloat16, device="cuda") for _ in range(layers)
    ]
    x = torch.randn(HIDDEN, 1, dtype=torch.bfloat16, device="cuda")
    steps = 20
    for w in weights:  # warm the kernels
        x = (w @ x).clamp(-1, 1)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        for w in weights:
            x = (w @ x).clamp(-1, 1)
    torch.cuda.synchronize()
    measured = steps / (time.perf_counter() - start)
    read = layers * HIDDEN * HIDDEN * 2

    result: dict[str, object] = {
        "device": name,
        "sku": row.sku if row else None,
        "table_bandwidth": row.bandwidth if row else None,
        "measured_read_bandwidth": round(best),
        "read_share_of_table": round(best / row.bandwidth, 3) if row else None,
        "decode_loop": {"bytes_per_step": read, "steps_per_s": round(measured, 2)},
    }
    if row is not None:
        band = ENGINES["vllm"].decode_bands["gpu"]
        inputs = DecodeInputs(
            weights_bytes=read,
            experts=None,
            kv_bytes_per_token=0,
            kv_bytes_per_seq=0,
            bandwidth=row.bandwidth,
            band=band,
        )
        low, high = decode_point(inputs, 1, 0).per_session
        result["decode_loop"] = {
            **result["decode_loop"],  # type: ignore[dict-item]
            "predicted_with_vllm_band": [round(low, 2), round(high, 2)],
            "share_of_table_bandwidth": round(measured * read / row.bandwidth, 3),
            "held": low <= measured <= high,
        }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

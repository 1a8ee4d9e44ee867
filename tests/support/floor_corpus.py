"""vLLM's boot-time floor, predicted for every boot that prints its profiler lines.

The profiler corpus (tests/data/public/profiler) and the dev corpus's vLLM boots that print
the profiler summary (its "non-torch forward increase memory") from logs of their own (the
ones also in the profiler corpus read their log from there: the same boot, listed once).

For each boot: the config, TP/PP and served dtype it ran, the card's CUDA total and the
utilization its log prints; fakplan's weights, activation peak, non-torch memory and pool
beside the printed ones. Used by tests/bench/accuracy.py (docs/accuracy.md's second table) and
tests/test_engine_sized_pool.py.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from fakplan.engines import parse_ledger
from fakplan.engines.vllm.floor import Unknown, VllmFloor, vllm_floor
from fakplan.geometry import load_geometry
from fakplan.geometry.params import MOE_FAMILIES
from fakplan.units import GIB
from tests.support.paths import DATA

PUBLIC = DATA / "public"
PROFILER = PUBLIC / "profiler"
CORPUS = PUBLIC / "corpus"
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


@dataclass(frozen=True)
class FloorRow:
    case: dict[str, Any]
    log: Path
    printed: dict[str, int | None]  # weights, activation, non_torch, pool (bytes)
    found: VllmFloor | Unknown


def _int(value: Any, default: int) -> int:
    try:
        return int(str(value).split()[0])
    except (ValueError, IndexError):
        return default


def _cases() -> list[tuple[dict[str, Any], Path]]:
    """Every boot once: the profiler corpus, then the dev corpus's own profiler logs."""
    listed = yaml.safe_load((PROFILER / "cases.yaml").read_text(encoding="utf-8"))["cases"]
    out = [(case, PROFILER / case["log"]) for case in listed]
    seen = {case["source"] for case in listed}
    corpus = yaml.safe_load((CORPUS / "cases.yaml").read_text(encoding="utf-8"))["cases"]
    for case in corpus:
        log = CORPUS / str(case.get("log") or "")
        if case["engine"] != "vllm" or case["source"] in seen or not log.is_file():
            continue
        if "non-torch forward increase memory" in log.read_text(encoding="utf-8"):
            out.append(({**case, "launch": case["query"]}, log))
    return out


def rows() -> list[FloorRow]:
    out = []
    for case, log in _cases():
        ledger = parse_ledger(log, "vllm")
        text = log.read_text(encoding="utf-8")
        printed = {
            "weights": ledger.weights_bytes,
            "activation": ledger.activation_bytes,
            "non_torch": ledger.non_torch_bytes,
            "pool": ledger.kv_bytes,
            "non_kv": ledger.non_kv_bytes,
        }
        out.append(FloorRow(case, log, printed, _predict(case, ledger, text)))
    return out


def _predict(case: dict[str, Any], ledger: Any, text: str) -> VllmFloor | Unknown:
    if not case.get("config"):
        return Unknown("no published config")
    if ledger.total_gpu_bytes is None or ledger.gpu_memory_utilization is None:
        return Unknown("the log prints no CUDA total or requested memory")
    method = re.search(r"quantization=(\w[\w-]*)", text)
    quantization = None if method is None or method[1] == "None" else method[1]
    config = json.loads((PUBLIC / "configs" / case["config"] / "config.json").read_text())
    scheme = case.get("quantization_config") or config.get("quantization_config")
    if quantization not in (None, "fp8") and scheme is None:
        return Unknown(f"a {quantization} checkpoint: its quantization_config is not at hand")
    dtype = re.search(r"dtype=torch\.(\w+)", text)
    served = DTYPES.get(dtype[1], dtype[1]) if dtype else "bf16"
    geometry = load_geometry(str(PUBLIC / "configs" / case["config"] / "config.json"))
    launch = case.get("launch") or {}
    assert geometry.text_config is not None
    text = dict(geometry.text_config)
    if "quantization_config" in case:  # the checkpoint's scheme over its base config
        text["quantization_config"] = case["quantization_config"]
    return vllm_floor(
        text,
        geometry.architecture,
        version=str(case["engine_version"]).split()[0],
        tp=_int(launch.get("tp"), 1),
        pp=_int(launch.get("pp"), 1),
        card_total=ledger.total_gpu_bytes,
        utilization=ledger.gpu_memory_utilization,
        batched_tokens=_int(launch.get("max_num_batched_tokens"), 8192),
        max_num_seqs=_int(launch.get("max_num_seqs"), 1024),
        sms=132,  # H100 (every boot with a CUDA total here ran on one)
        served=served,
        quantization=quantization,
        capability="9.0",  # H100
    )


def _feature(case: dict[str, Any], log: Path) -> str:
    """The boot's class for the coverage table, from its config and its log (never the
    model's name): quantized, MLA, hybrid, vision tower, MoE or dense."""
    from fakplan.engines.weights import GDN_FAMILIES, MAMBA_FAMILIES, MLA_FAMILIES

    if not case.get("config"):
        return "no published config"
    geometry = load_geometry(str(PUBLIC / "configs" / case["config"] / "config.json"))
    text = geometry.text_config or {}
    method = re.search(r"quantization=(\w[\w-]*)", log.read_text(encoding="utf-8"))
    if (
        "quantization_config" in text
        or case.get("quantization_config")
        or (method is not None and method[1] != "None")
    ):
        return "quantized"
    if geometry.architecture in MLA_FAMILIES:
        return "MLA"
    if geometry.architecture in (*GDN_FAMILIES, *MAMBA_FAMILIES):
        return "hybrid"
    if "vision_config" in text:
        return "vision tower"
    return "MoE" if geometry.architecture in MOE_FAMILIES else "dense"


def _model_class(config: str) -> str:
    """dense or MoE, as the config's architecture says (never the model's name)."""
    geometry = load_geometry(str(PUBLIC / "configs" / config / "config.json"))
    return "MoE" if geometry.architecture in MOE_FAMILIES else "dense"


def _gib(n: int | None) -> str:
    return "—" if n is None else f"{n / GIB:.2f}"


def _err(predicted: int, printed: int | None) -> float | None:
    return None if not printed else 100.0 * (predicted - printed) / printed


def floor_table() -> str:
    lines = [
        "| case | model | release | TP | weights GiB (printed / fakplan) | activation | "
        "non-torch | pool | pool error |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    errors: dict[str, list[float]] = {
        "weights": [],
        "activation": [],
        "non-KV total": [],
        "pool": [],
    }
    groups: dict[tuple[str, int], list[float]] = {}
    coverage: dict[str, list[int]] = {}  # release: boots, weights counted, pool answered
    for row in rows():
        c, p, f = row.case, row.printed, row.found
        tp = (c.get("launch") or {}).get("tp", 1)
        release = str(c["engine_version"]).split()[0]
        seen = coverage.setdefault(_release(release), [0, 0, 0])
        seen[0] += 1
        # a checkpoint's quantization_config rebuilt from its model card or its preset (the
        # case's quantization_basis), not copied: marked, so the row is read as such
        rebuilt = " (quantization_config rebuilt)" if "quantization_config" in c else ""
        head = f"| {c['id']} | {c['model']}{rebuilt} | {release} | {tp} "
        if isinstance(f, Unknown):
            if f.weights is not None:
                seen[1] += 1
                e = _err(f.weights, p["weights"])
                if e is not None:
                    errors["weights"].append(abs(e))
            counted = "unknown" if f.weights is None else _gib(f.weights)
            lines.append(
                head + f"| {_gib(p['weights'])} / {counted} | pool unknown: {f.reason} | | | |"
            )
            continue
        seen[1] += 1
        seen[2] += 1
        pool = (f.pool[0] + f.pool[1]) // 2
        for name, value in (("weights", f.weights.bytes), ("activation", f.activation.bytes)):
            e = _err(value, p[name])
            if e is not None:
                errors[name].append(abs(e))
        pool_error = _err(pool, p["pool"])
        if pool_error is not None:
            errors["pool"].append(abs(pool_error))
            kind = _model_class(c["config"])
            groups.setdefault((kind, int(tp)), []).append(abs(pool_error))
        non_kv = f.weights.bytes + f.activation.bytes + (f.non_torch[0] + f.non_torch[1]) // 2
        total_error = _err(non_kv, p["non_kv"])
        if total_error is not None:
            errors["non-KV total"].append(abs(total_error))
        lines.append(
            head + f"| {_gib(p['weights'])} / {_gib(f.weights.bytes)} "
            f"| {_gib(p['activation'])} / {_gib(f.activation.bytes)} "
            f"| {_gib(p['non_torch'])} / {_gib(f.non_torch[0])}–{_gib(f.non_torch[1])} "
            f"| {_gib(p['pool'])} / {_gib(pool)} | {pool_error:+.2f} % |"
        )
    lines += ["", "| term | boots | mean abs. error | max abs. error |", "|---|---|---|---|"]
    for name, found in errors.items():
        if found:
            lines.append(
                f"| {name} | {len(found)} | {sum(found) / len(found):.2f} % | {max(found):.2f} % |"
            )
    lines += [
        "",
        "| pool, by class and TP | boots | mean abs. error | max abs. error |",
        "|---|---|---|---|",
    ]
    for (kind, tp), found in sorted(groups.items()):
        lines.append(
            f"| {kind}, TP {tp} | {len(found)} | {sum(found) / len(found):.2f} % | {max(found):.2f} % |"
        )
    return "\n".join([*lines, "", coverage_table(coverage)])


def _release(version: str) -> str:
    """The release a boot ran, as major.minor (0.6.5.dev: 0.6)."""
    return ".".join(version.split(".")[:2])


def coverage_table(coverage: dict[str, list[int]] | None = None) -> str:
    """Per release: the boots seen, those whose weights fakplan counts, those whose pool it
    predicts (a row without a prediction counts against coverage), and the predicted
    pools' mean absolute error against the printed ones."""
    tally: dict[str, list[int]] = {}
    errors: dict[str, list[float]] = {}
    for row in rows():
        release = _release(str(row.case["engine_version"]).split()[0])
        seen = tally.setdefault(release, [0, 0, 0])
        f = row.found
        seen[0] += 1
        seen[1] += int(not isinstance(f, Unknown) or f.weights is not None)
        if isinstance(f, Unknown):
            continue
        seen[2] += 1
        e = _err((f.pool[0] + f.pool[1]) // 2, row.printed["pool"])
        if e is not None:
            errors.setdefault(release, []).append(abs(e))
    if coverage is not None:
        assert {r: v[:3] for r, v in coverage.items()} == tally  # one count, two tables
        return _coverage_lines(tally, errors) + "\n\n" + _feature_lines()
    return _coverage_lines(tally, errors)


def _coverage_lines(tally: dict[str, list[int]], errors: dict[str, list[float]]) -> str:
    lines = [
        "| release | boots seen | weights counted | pool predicted | pool mean abs. error |",
        "|---|---|---|---|---|",
    ]
    order = sorted(tally, key=lambda r: tuple(int(x) for x in r.split(".") if x.isdigit()))
    every: list[float] = []
    totals = [0, 0, 0]
    for release in order:
        n, w, pool = tally[release]
        found = errors.get(release, [])
        every += found
        totals = [totals[0] + n, totals[1] + w, totals[2] + pool]
        mean = f"{sum(found) / len(found):.2f} %" if found else "—"
        lines.append(f"| {release} | {n} | {w} | {pool} | {mean} |")
    mean = f"{sum(every) / len(every):.2f} %" if every else "—"
    lines.append(f"| all | {totals[0]} | {totals[1]} | {totals[2]} | {mean} |")
    return "\n".join(lines)


def _feature_lines() -> str:
    """Coverage by the boot's class (quantized, MLA, hybrid, vision tower, MoE, dense)."""
    tally: dict[str, list[int]] = {}
    for row in rows():
        seen = tally.setdefault(_feature(row.case, row.log), [0, 0, 0])
        f = row.found
        seen[0] += 1
        seen[1] += int(not isinstance(f, Unknown) or f.weights is not None)
        seen[2] += int(not isinstance(f, Unknown))
    lines = ["| class | boots seen | weights counted | pool predicted |", "|---|---|---|---|"]
    for name, (n, w, pool) in sorted(tally.items()):
        lines.append(f"| {name} | {n} | {w} | {pool} |")
    return "\n".join(lines)

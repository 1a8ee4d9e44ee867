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
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from fakplan.cards import card_sku
from fakplan.cuda_totals import cuda_total
from fakplan.engines import parse_ledger
from fakplan.engines.vllm.floor import (
    HALF_CENTI_GIB,
    LoadKind,
    Unknown,
    VllmFloor,
    vllm_floor,
)
from fakplan.geometry import load_geometry
from fakplan.geometry.params import MOE_FAMILIES
from fakplan.ledger.patterns import IN_GIB
from fakplan.units import GIB
from tests.support.paths import DATA

PUBLIC = DATA / "public"
PROFILER = PUBLIC / "profiler"
GRAPHS = PUBLIC / "graphs"
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
    """Every boot once: the profiler corpus, the dev corpus's own profiler logs, then the
    CUDA-graph check set's."""
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
    # the CUDA-graph check set's 0.20-0.22 boots print their pool; most print no CUDA total
    # and serve checkpoints whose configs are not here: seen, and counted against coverage
    graphs = yaml.safe_load((GRAPHS / "cases.yaml").read_text(encoding="utf-8"))["cases"]
    for case in graphs:
        out.append(
            (
                {
                    **case,
                    "config": case.get("config"),
                    "launch": {"tp": case.get("tp", 1), **(case.get("launch") or {})},
                },
                GRAPHS / case["log"],
            )
        )
    return out


def rows() -> list[FloorRow]:
    """Every boot's row. Predicted once a process: the fit sets, held-out scores and tables
    each walk the whole corpus, and nothing they read changes within a run."""
    return list(_all_rows())


@cache
def _all_rows() -> tuple[FloorRow, ...]:
    return tuple(_row(case, log) for case, log in _cases())


def row(case_id: str) -> FloorRow:
    """One boot's row, without predicting the others."""
    return next(_row(case, log) for case, log in _cases() if case["id"] == case_id)


def _row(case: dict[str, Any], log: Path) -> FloorRow:
    ledger = parse_ledger(log, "vllm")
    printed = {
        "weights": ledger.weights_bytes,
        "activation": ledger.activation_bytes,
        "non_torch": ledger.non_torch_bytes,
        "pool": ledger.kv_bytes,
        "non_kv": ledger.non_kv_bytes,
        "consumed": ledger.consumed_bytes,
        "total": ledger.total_gpu_bytes,
    }
    text = log.read_text(encoding="utf-8")
    for term, line in (case.get("transcribed") or {}).items():
        printed[term] = _transcribed(case, term, line, text, printed[term])
    return FloorRow(case, log, printed, _predict(case, ledger, text))


def _transcribed(case: dict[str, Any], term: str, line: str, text: str, read: int | None) -> int:
    """A figure the ledger cannot read because the case's author retyped its line (cases.yaml
    ``transcribed``: the line as the log holds it): its GiB as the ledger would take them."""
    quoted = re.search(r"(?P<gib>[0-9]+\.[0-9]+) GiB", line)
    if term != "weights" or line not in text or quoted is None or read is not None:
        raise ValueError(f"{case['id']}: transcribed {term} is not an unread line of its log")
    return IN_GIB(quoted["gib"]).value


def as_checkpoint(config: dict[str, Any], case: dict[str, Any]) -> dict[str, Any]:
    """The case's checkpoint from the config that stands in for it: its quantization scheme
    over the base config, and the fields its config_basis names as different (null: the
    field absent; a multimodal config's are its text model's). Edits ``config`` in place
    and returns it."""
    if "quantization_config" in case:
        config["quantization_config"] = case["quantization_config"]
    nested = config.get("text_config")
    target = nested if isinstance(nested, dict) else config
    for field, value in (case.get("config_changes") or {}).items():
        if value is None:
            target.pop(field, None)
        else:
            target[field] = value
    return config


def case_config(case: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The architecture and text model's config a case names (its checkpoint's changes on)."""
    geometry = load_geometry(str(PUBLIC / "configs" / str(case["config"]) / "config.json"))
    assert geometry.text_config is not None
    return geometry.architecture, as_checkpoint(dict(geometry.text_config), case)


def _predict(case: dict[str, Any], ledger: Any, text: str) -> VllmFloor | Unknown:
    if not case.get("config"):
        return Unknown("no published config")
    launch = case.get("launch") or {}
    utilization = ledger.gpu_memory_utilization or launch.get("gpu_memory_utilization")
    totals = _totals(case, ledger.total_gpu_bytes)
    if totals is None or utilization is None:
        return Unknown("the log prints no CUDA total or requested memory")
    method = re.search(r"quantization=(\w[\w-]*)", text)
    quantization = None if method is None or method[1] == "None" else method[1]
    config = json.loads((PUBLIC / "configs" / case["config"] / "config.json").read_text())
    scheme = case.get("quantization_config") or config.get("quantization_config")
    if quantization not in (None, "fp8") and scheme is None:
        return Unknown(f"a {quantization} checkpoint: its quantization_config is not at hand")
    dtype = re.search(r"dtype=torch\.(\w+)", text)
    served = DTYPES.get(dtype[1], dtype[1]) if dtype else "bf16"
    architecture, text = case_config(case)
    card = _card(case)
    found = [
        _floor(case, text, architecture, launch, card, total, float(utilization),
               served=served, quantization=quantization)
        for total in totals
    ]  # fmt: skip
    low, high = found[0], found[-1]
    if isinstance(low, Unknown) or isinstance(high, Unknown) or low is high:
        return low
    # the card's total as an interval: the pool from the least total's low to the most's high
    return replace(high, pool=(low.pool[0], high.pool[1]))


def _totals(case: dict[str, Any], printed: int | None) -> tuple[int, ...] | None:
    """The CUDA totals to predict at: the one the log prints, else both ends of what public
    logs print for the card the case names (``sku``; fakplan's cuda_totals) on the platform
    it names (``platform``, as fakplan kv --card-platform), else None."""
    if printed is not None:
        return (printed,)
    found = cuda_total(str(case["sku"])) if case.get("sku") else None
    if found is not None and case.get("platform"):
        found = found.on(str(case["platform"]))
    return None if found is None else found.interval


def _floor(
    case: dict[str, Any],
    text: dict[str, Any],
    architecture: str,
    launch: dict[str, Any],
    card: dict[str, Any],
    total: int,
    utilization: float,
    *,
    served: str,
    quantization: str | None,
) -> VllmFloor | Unknown:
    return vllm_floor(
        text,
        architecture,
        version=str(case["engine_version"]).split()[0],
        tp=_int(launch.get("tp"), 1),
        pp=_int(launch.get("pp"), 1),
        card_total=total,
        utilization=utilization,
        batched_tokens=_int(launch.get("max_num_batched_tokens"), 8192),
        max_num_seqs=_int(launch.get("max_num_seqs"), 1024),
        sms=int(card.get("sms", 132)),  # an H100's unless the case names its card
        served=served,
        quantization=quantization,
        capability=str(card.get("capability", "9.0")),
        max_model_len=_int(launch.get("max_model_len"), 0) or None,
    )


def _card(case: dict[str, Any]) -> dict[str, Any]:
    """The case's card: its own figures (a profiler case's ``card``), else the card table's
    row for its ``sku`` (a check-set case names its card in words), else none (an H100's)."""
    if isinstance(case.get("card"), dict):
        return dict(case["card"])
    sku = card_sku(str(case["sku"])) if case.get("sku") else None
    if sku is None:
        return {}
    return {k: v for k, v in (("sms", sku.sms), ("capability", sku.capability)) if v is not None}


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
    """dense or MoE, as the config says (its routed experts; never the model's name)."""
    geometry = load_geometry(str(PUBLIC / "configs" / config / "config.json"))
    return "MoE" if geometry.num_experts else "dense"


def _gib(n: int | None) -> str:
    return "—" if n is None else f"{n / GIB:.2f}"


def _span(low: int, high: int | None) -> str:
    """A count in GiB, or its interval where the allocator's reuse leaves one (scored at
    its midpoint)."""
    return _gib(low) if high is None else f"{_gib(low)}–{_gib(high)}"


def _err(predicted: int, printed: int | None) -> float | None:
    return None if not printed else 100.0 * (predicted - printed) / printed


def floor_table() -> str:
    lines = [
        "| case | model | release | TP | weights GiB (printed / fakplan) | activation | "
        "non-torch | pool (printed / interval, its width) | midpoint error |",
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
        pp = pp_of(row)
        release = str(c["engine_version"]).split()[0]
        seen = coverage.setdefault(_release(release), [0, 0, 0])
        seen[0] += 1
        # a checkpoint's quantization_config rebuilt from its model card or its preset (the
        # case's quantization_basis), not copied: marked, so the row is read as such
        rebuilt = " (quantization_config rebuilt)" if "quantization_config" in c else ""
        parallel = f"{tp} × PP {pp}" if pp > 1 else f"{tp}"
        head = f"| {c['id']} | {c['model']}{rebuilt} | {release} | {parallel} "
        if isinstance(f, Unknown):
            if f.weights is not None:
                seen[1] += 1
                e = _err((f.weights + (f.weights_high or f.weights)) // 2, p["weights"])
                if e is not None:
                    errors["weights"].append(abs(e))
            counted = "unknown" if f.weights is None else _span(f.weights, f.weights_high)
            lines.append(
                head + f"| {_gib(p['weights'])} / {counted} | pool unknown: {f.reason} | | | |"
            )
            continue
        seen[1] += 1
        seen[2] += 1
        pool = (f.pool[0] + f.pool[1]) // 2
        a_low, a_high = f.activation_span
        points = [("weights", (f.weights.bytes + f.weights.top) // 2)]
        # the V1 runner's derived peak is scored by its midpoint (its range is the allocator's
        # spare); a V2 or 0.27+ range is scored by the pool it leaves
        if f.runner == "v1" and f.era == "profile":
            points.append(("activation", (a_low + a_high) // 2))
        for name, value in points:
            e = _err(value, p[name])
            if e is not None:
                errors[name].append(abs(e))
        pool_error = _err(pool, p["pool"])
        if pool_error is not None:
            errors["pool"].append(abs(pool_error))
            kind = _model_class(c["config"])
            groups.setdefault((kind, int(tp)), []).append(abs(pool_error))
        non_kv = f.weights.bytes + (a_low + a_high) // 2 + (f.non_torch[0] + f.non_torch[1]) // 2
        total_error = _err(non_kv, p["non_kv"])
        if total_error is not None:
            errors["non-KV total"].append(abs(total_error))
        # from 0.27 the measured term is the memory consumed beyond the weights (C - W, marked
        # "C−W"), and the activation is printed with the graph estimate: both as ranges, in
        # sample (the fit set is these boots)
        measured = p["non_torch"]
        mark = ""
        if f.era == "consumed":
            measured = None if p["consumed"] is None else p["consumed"] - (p["weights"] or 0)
            mark = " C−W"
        activation = _gib(a_low) if a_low == a_high else f"{_gib(a_low)}–{_gib(a_high)}"
        lines.append(
            head + f"| {_gib(p['weights'])} / {_span(f.weights.bytes, f.weights.high)} "
            f"| {_gib(p['activation'])} / {activation} "
            f"| {_gib(measured)} / {_gib(f.non_torch[0])}–{_gib(f.non_torch[1])}{mark} "
            f"| {_gib(p['pool'])} / {_gib(f.pool[0])}–{_gib(f.pool[1])} "
            f"({100.0 * (f.pool[1] - f.pool[0]) / (p['pool'] or 1):.2f} %) "
            f"| {pool_error:+.2f} % |"
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


def _tally(
    key: Callable[[FloorRow], str],
) -> tuple[dict[str, list[int]], dict[str, list[float]]]:
    """Per ``key`` of a boot: [boots seen, weights counted, pool predicted] (a row without a
    prediction counts against coverage), and the predicted pools' absolute errors (%)."""
    tally: dict[str, list[int]] = {}
    errors: dict[str, list[float]] = {}
    for row in rows():
        name = key(row)
        seen = tally.setdefault(name, [0, 0, 0])
        f = row.found
        seen[0] += 1
        seen[1] += int(not isinstance(f, Unknown) or f.weights is not None)
        if isinstance(f, Unknown):
            continue
        seen[2] += 1
        e = _err((f.pool[0] + f.pool[1]) // 2, row.printed["pool"])
        if e is not None:
            errors.setdefault(name, []).append(abs(e))
    return tally, errors


def _mean(found: list[float]) -> str:
    return f"{sum(found) / len(found):.2f} %" if found else "—"


def coverage_table(coverage: dict[str, list[int]] | None = None) -> str:
    """Per release: the boots seen, those whose weights fakplan counts, those whose pool it
    predicts (a row without a prediction counts against coverage), and the predicted
    pools' mean absolute error against the printed ones."""
    tally, errors = _tally(lambda row: _release(str(row.case["engine_version"]).split()[0]))
    if coverage is not None:
        assert {r: v[:3] for r, v in coverage.items()} == tally  # one count, two tables
        return _coverage_lines(tally, errors) + "\n\n" + _feature_lines() + "\n\n" + _card_lines()
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
        lines.append(f"| {release} | {n} | {w} | {pool} | {_mean(found)} |")
    lines.append(f"| all | {totals[0]} | {totals[1]} | {totals[2]} | {_mean(every)} |")
    return "\n".join(lines)


def _feature_lines() -> str:
    """Coverage by the boot's class (quantized, MLA, hybrid, vision tower, MoE, dense)."""
    tally, _ = _tally(lambda row: _feature(row.case, row.log))
    lines = ["| class | boots seen | weights counted | pool predicted |", "|---|---|---|---|"]
    for name, (n, w, pool) in sorted(tally.items()):
        lines.append(f"| {name} | {n} | {w} | {pool} |")
    return "\n".join(lines)


def card_class(row: FloorRow) -> str:
    """The boot's card class: the CUDA total its log prints, to the GiB (every H100 80GB
    boot here prints 79.19-79.25 GiB), else the card its case names (``gpu`` or ``card``),
    else not stated."""
    total = row.printed["total"]
    if total is not None:
        return f"CUDA total {round(total / GIB)} GiB"
    named = next(
        (v for v in (row.case.get("gpu"), row.case.get("card")) if isinstance(v, str)), None
    )
    return named.split(" (")[0] if named else "not stated"


def _card_lines() -> str:
    """Coverage and error by card class (issue 31 item 9): which cards the corpus measures."""
    tally, errors = _tally(card_class)
    lines = [
        "| card class | boots seen | weights counted | pool predicted | pool mean abs. error |",
        "|---|---|---|---|---|",
    ]
    for name, (n, w, pool) in sorted(tally.items(), key=lambda item: (-item[1][0], item[0])):
        lines.append(f"| {name} | {n} | {w} | {pool} | {_mean(errors.get(name, []))} |")
    return "\n".join(lines)


# ---- fit and check kept apart (issue 31 item 8) ----------------------------------------
#
# vLLM's non-torch memory is the one term of the pool no config determines. Its range per
# TP (floor.NON_TORCH_MEASURED) is fitted on a named set: every boot above that ran a release
# whose profiler fakplan reads (floor.READ) at PP 1 and prints the term, but the families
# whose non-torch memory is declared unread (floor.NON_TORCH_UNREAD). All of them come from
# one source, on one card and one release, so a score by source is not possible; the score
# below leaves out each boot's model (every boot of the same config.json, at any TP) and
# predicts its pool from a range fitted on the other models only.


def fit_set() -> list[FloorRow]:
    """The boots NON_TORCH_MEASURED is fitted on (the rule above, never a list of ids): the
    V1 runner's."""
    from fakplan.engines.vllm.floor import NON_TORCH_UNREAD

    return [
        row
        for row in _profile_era_non_torch()
        if model_type(row) not in NON_TORCH_UNREAD and runner_of(row) == "v1"
    ]


def v2_non_torch_fit_set() -> list[FloorRow]:
    """The boots NON_TORCH_V2_MEASURED is fitted on: the V2 runner's of the same rule."""
    return [row for row in _profile_era_non_torch() if runner_of(row) == "v2"]


def load_kind(row: FloorRow) -> LoadKind | None:
    """Which of floor.LOAD_RESIDUE_MEASURED's ranges the row's load takes: the V2 runner's
    before 0.27, every other load from 0.20; None before 0.20 (0.19.0 printed the count)."""
    from fakplan.engines.vllm.floor import CONSUMED_ERA, GRAPHS_SUBTRACTED

    if _release_of(row) < GRAPHS_SUBTRACTED:
        return None
    if runner_of(row) == "v2" and _release_of(row) < CONSUMED_ERA:
        return "v2-profile-era"
    return "from-0.20"


def load_fit_set(kind: LoadKind) -> list[FloorRow]:
    """The boots LOAD_RESIDUE_MEASURED[kind] is fitted on: every boot of a release read that
    takes that range, at PP 1, prints its weights and whose weights fakplan counts."""
    from fakplan.engines.vllm.floor import READ

    return [
        row
        for row in rows()
        if _release_of(row) <= READ[1]
        and pp_of(row) == 1
        and load_kind(row) == kind
        and row.printed["weights"] is not None
        and not isinstance(row.found, Unknown)
    ]


def load_residue_fit(fitted: list[FloorRow], kind: LoadKind) -> tuple[int, int]:
    """What the printed weights (each end of their rounding) went beyond fakplan's count of
    the checkpoint, lowest (no lower than 0) to highest over ``fitted``."""
    spans = [load_beyond_count(row, kind) for row in fitted]
    return max(0, min(s[0] for s in spans)), max(s[1] for s in spans)


def load_beyond_count(row: FloorRow, kind: LoadKind) -> tuple[int, int]:
    """What the row's printed weights, each end of their rounding, hold beyond the count."""
    from fakplan.engines.vllm.floor import LOAD_RESIDUE_MEASURED

    found, printed = row.found, row.printed["weights"]
    assert not isinstance(found, Unknown) and printed is not None
    counted = found.weights.bytes - LOAD_RESIDUE_MEASURED[kind][0]  # the count alone
    return printed - HALF_CENTI_GIB - counted, printed + HALF_CENTI_GIB - counted


def _profile_era_non_torch() -> list[FloorRow]:
    """Every boot of a release read before 0.27 at PP 1 that prints its non-torch memory."""
    from fakplan.engines.vllm.floor import CONSUMED_ERA, READ

    return [
        row
        for row in rows()
        if READ[0] <= _release_of(row) < CONSUMED_ERA
        and pp_of(row) == 1
        and row.printed["non_torch"] is not None
    ]


def runner_of(row: FloorRow) -> str | None:
    """The model runner the boot ran, as fakplan's rule gives it (a predicted row's), V1 for
    every model before 0.22; None where neither says."""
    if not isinstance(row.found, Unknown):
        return row.found.runner
    return "v1" if _release_of(row) < (0, 22) else None


def pp_of(row: FloorRow) -> int:
    """The row's pipeline stages, as its launch states them (1 where unstated)."""
    return _int((row.case.get("launch") or {}).get("pp"), 1)


def model_type(row: FloorRow) -> str:
    """The architecture of the row's config, as fakplan resolves it."""
    config = PUBLIC / "configs" / str(row.case["config"]) / "config.json"
    return load_geometry(str(config)).architecture


def _release_of(row: FloorRow) -> tuple[int, ...]:
    from fakplan.engines.releases import parse_version

    return parse_version(str(row.case["engine_version"]).split()[0])[:2]


# From 0.27 the term no config gives is what the worker consumed beyond its weights
# (floor.CONSUMED_BEYOND_WEIGHTS_MEASURED), and the V2 runner's printed peak goes beyond
# fakplan's estimate by a measured margin (floor.V2_PEAK_EXCESS_MEASURED). Both are fitted on
# every boot that ran 0.27-0.33 at TP 1 and PP 1 and prints its consumed memory and weights. The
# fit set is two boots of one model, one source and one card: no boot is left to hold out, and
# the tables say the 0.27 rows are in sample. A boot at TP > 1 checks the borrowed range
# (floor.consumed_beyond_weights) and fits nothing.


def consumed_fit_set() -> list[FloorRow]:
    """The boots the 0.27+ measured terms are fitted on (the rule above)."""
    from fakplan.engines.vllm.floor import CONSUMED_ERA, READ

    return [
        row
        for row in rows()
        if CONSUMED_ERA <= _release_of(row) <= READ[1]
        and pp_of(row) == 1
        and tp_key(row) == "tp1"
        and row.printed["consumed"] is not None
        and row.printed["weights"] is not None
    ]


# At PP > 1 (issue 31 item 3): every stage's non-torch memory (floor.NON_TORCH_PP_MEASURED)
# and what a first stage's forward printed beyond fakplan's estimate
# (floor.FORWARD_EXCESS_MEASURED) are fitted on the PP 2 boots of the releases whose
# profiler is read before the consumed era; boots at more stages check them.


def pp_fit_set() -> list[FloorRow]:
    """The boots the PP terms are fitted on (the rule above)."""
    from fakplan.engines.vllm.floor import CONSUMED_ERA, READ

    return [
        row
        for row in rows()
        if READ[0] <= _release_of(row) < CONSUMED_ERA
        and pp_of(row) == 2
        and tp_key(row) == "tp1"  # NON_TORCH_PP_MEASURED is keyed by TP
    ]


def stage_prints(row: FloorRow, pattern: str) -> dict[int, float]:
    """Per PP stage, the GiB figure ``pattern`` reads on that stage's own line."""
    found: dict[int, float] = {}
    for line in row.log.read_text(encoding="utf-8").splitlines():
        stage = re.search(r"Worker_PP(\d+)", line)
        value = re.search(pattern, line)
        if stage and value:
            found[int(stage[1])] = float(value[1])
    return found


def pp_fit(fitted: list[FloorRow]) -> tuple[tuple[int, int], int]:
    """Over ``fitted``: every stage's printed non-torch memory, min-max with the print's
    rounding; and the most a first stage's printed peak (to the top of its rounding)
    exceeded fakplan's forward estimate + cuBLAS, each boot's excess scaled to
    FORWARD_EXCESS_STATE (8,192 tokens x 4,096 wide) as ``forward_excess`` scales it back."""
    from fakplan.engines.vllm.floor import (
        FORWARD_EXCESS_STATE,
        _forward_estimate,
        _moe_workspace,
        cublas_workspace,
    )

    non_torch: list[float] = []
    excess = 0
    for row in fitted:
        non_torch += stage_prints(row, r"non-torch forward increase memory: ([\d.]+)GiB").values()
        first = stage_prints(row, r"torch peak memory increase: ([\d.]+)GiB")[0]
        architecture, text = case_config(row.case)
        launch = row.case.get("launch") or {}
        tokens, tp = _int(launch.get("max_num_batched_tokens"), 8192), _int(launch.get("tp"), 1)
        moe = _moe_workspace(text, architecture, tp, tokens)
        forward, _ = _forward_estimate(text, tp, tokens, moe, architecture)
        cublas = cublas_workspace(_card(row.case).get("capability"))[1]
        over = round((first + 0.005) * GIB) - forward - cublas
        state = tokens * int(text["hidden_size"])
        excess = max(excess, over * FORWARD_EXCESS_STATE // state)
    span = (round((min(non_torch) - 0.005) * GIB), round((max(non_torch) + 0.005) * GIB))
    return span, excess


def consumed_fit(fitted: list[FloorRow]) -> dict[str, tuple[int, int]]:
    """Per TP, the range of printed consumed memory less printed weights over ``fitted``,
    each widened by the two prints' rounding."""
    spans: dict[str, tuple[int, int]] = {}
    for row in fitted:
        consumed, weights = row.printed["consumed"], row.printed["weights"]
        assert consumed is not None and weights is not None
        low = consumed - weights - 2 * HALF_CENTI_GIB
        high = consumed - weights + 2 * HALF_CENTI_GIB
        was = spans.get(tp_key(row), (low, high))
        spans[tp_key(row)] = (min(was[0], low), max(was[1], high))
    return spans


def v2_peak_excess_fit(fitted: list[FloorRow]) -> int:
    """The most a V2 boot's printed peak activation (to the top of its rounding) exceeded
    the top of fakplan's estimate before the margin, over ``fitted``, scaled to
    V2_PEAK_EXCESS_STATE batched tokens x hidden size (rounded up)."""
    from fakplan.engines.vllm.floor import V2_PEAK_EXCESS_STATE, v2_peak_excess

    most = 0
    for row in fitted:
        found, printed = row.found, row.printed["activation"]
        if isinstance(found, Unknown) or found.runner != "v2" or printed is None:
            continue
        tokens = _int((row.case.get("launch") or {}).get("max_num_batched_tokens"), 8192)
        text = case_config(row.case)[1]
        margin = v2_peak_excess(text, tokens).bytes
        beyond = printed + HALF_CENTI_GIB - (found.activation_span[1] - margin)
        state = tokens * int(text["hidden_size"])
        most = max(most, -(-beyond * V2_PEAK_EXCESS_STATE // state))
    return most


def v2_peak_fit_set() -> list[FloorRow]:
    """The boots V2_PEAK_EXCESS_MEASURED is fitted on: every V2 boot at TP 1 and PP 1 of a
    release read that prints its peak (both eras)."""
    from fakplan.engines.vllm.floor import READ

    return [
        row
        for row in rows()
        if READ[0] <= _release_of(row) <= READ[1]
        and pp_of(row) == 1
        and tp_key(row) == "tp1"
        and row.printed["activation"] is not None
        and runner_of(row) == "v2"
    ]


def tp_key(row: FloorRow) -> str:
    return f"tp{_int((row.case.get('launch') or {}).get('tp'), 1)}"


def non_torch_fit(
    fitted: list[FloorRow], leave_out: str | None = None
) -> dict[str, tuple[int, int]]:
    """Per TP, the min-max of the printed non-torch memory over ``fitted``, leaving out
    every boot of the config ``leave_out``."""
    spans: dict[str, tuple[int, int]] = {}
    for row in fitted:
        if leave_out is not None and row.case.get("config") == leave_out:
            continue
        value = row.printed["non_torch"]
        assert value is not None
        low, high = spans.get(tp_key(row), (value, value))
        spans[tp_key(row)] = (min(low, value), max(high, value))
    return spans


@dataclass(frozen=True)
class HeldOut:
    """One boot's pool predicted with a non-torch range fitted without its model."""

    row: FloorRow
    non_torch: tuple[int, int] | None  # None: no other model measured at this TP
    pool: tuple[int, int] | None
    printed_pool: tuple[int, int]  # the pools the print's digits allow

    @property
    def inside(self) -> bool:
        return self.pool is not None and (
            self.pool[0] <= self.printed_pool[1] and self.printed_pool[0] <= self.pool[1]
        )

    @property
    def error(self) -> float | None:
        """The predicted interval's nearest bound against the printed pool, in % (0 inside)."""
        if self.pool is None:
            return None
        if self.inside:
            return 0.0
        printed = (self.printed_pool[0] + self.printed_pool[1]) / 2
        near = self.pool[1] if self.pool[1] < self.printed_pool[0] else self.pool[0]
        return 100.0 * (near - printed) / printed


def held_out() -> list[HeldOut]:
    """Every predicted boot of the fit set, its pool from the other models' range."""
    from fakplan.units import printed_interval

    fitted = fit_set()
    out = []
    for row in fitted:
        found = row.found
        if isinstance(found, Unknown):
            continue
        figure = parse_ledger(row.log, "vllm").figure("kv_bytes")
        assert figure is not None and figure.printed is not None
        low, _, high = printed_interval(figure.printed)
        span = non_torch_fit(fitted, leave_out=row.case.get("config")).get(tp_key(row))
        pool = None
        if span is not None:
            # the pool is linear in the term: shift the shipped range's bounds to the held-out
            # one (pool = requested - weights - activation - non-torch - graphs)
            shipped_low, shipped_high = found.non_torch
            pool = (
                found.pool[0] + shipped_high - span[1],
                found.pool[1] + shipped_low - span[0],
            )
        out.append(HeldOut(row, span, pool, (low, high)))
    return out


def _overlaps(pool: tuple[int, int], printed: tuple[int, int]) -> bool:
    return pool[0] <= printed[1] and printed[0] <= pool[1]


def _summary(name: str, pairs: list[tuple[tuple[int, int], tuple[int, int]]]) -> str:
    """One row: how many predicted intervals hold the printed pool, the midpoints' error
    and the intervals' width, each in % of the printed pool."""
    errors, widths = [], []
    for pool, printed in pairs:
        middle = (printed[0] + printed[1]) / 2
        errors.append(abs(100.0 * ((pool[0] + pool[1]) / 2 - middle) / middle))
        widths.append(100.0 * (pool[1] - pool[0]) / middle)
    inside = sum(1 for pool, printed in pairs if _overlaps(pool, printed))
    return (
        f"| {name} | {len(pairs)} | {inside} | {sum(errors) / len(errors):.2f} % "
        f"| {max(errors):.2f} % | {sum(widths) / len(widths):.2f} % |"
    )


def held_out_table() -> str:
    """Each predicted boot's pool from the non-torch range the other models printed, and
    the score beside the shipped (in-sample) range's."""
    lines = [
        "| case | model | TP | non-torch printed / fitted without this model | "
        "pool printed / held-out prediction | inside | nearest bound |",
        "|---|---|---|---|---|---|---|",
    ]
    found = held_out()
    for h in found:
        c = h.row.case
        tp = tp_key(h.row)[2:]
        printed = h.row.printed
        if h.non_torch is None or h.pool is None or h.error is None:
            lines.append(
                f"| {c['id']} | {c['model']} | {tp} | {_gib(printed['non_torch'])} / no other "
                f"model measured at TP {tp} | {_gib(printed['pool'])} / — | — | — |"
            )
            continue
        lines.append(
            f"| {c['id']} | {c['model']} | {tp} | {_gib(printed['non_torch'])} / "
            f"{_gib(h.non_torch[0])}–{_gib(h.non_torch[1])} | {_gib(printed['pool'])} / "
            f"{_gib(h.pool[0])}–{_gib(h.pool[1])} | {'yes' if h.inside else 'no'} "
            f"| {h.error:+.2f} % |"
        )
    shipped = [
        (h.row.found.pool, h.printed_pool) for h in found if not isinstance(h.row.found, Unknown)
    ]
    held = [(h.pool, h.printed_pool) for h in found if h.pool is not None]
    models = {(h.row.case.get("config"), tp_key(h.row)) for h in found}
    lines += [
        "",
        f"| non-torch range | boots ({len(models)} distinct model and TP) | interval holds the "
        "print | midpoint mean abs. error | max abs. error | mean interval width |",
        "|---|---|---|---|---|---|",
        _summary("shipped (fitted on every boot: in sample)", shipped),
        _summary("fitted without the boot's model (held out)", held),
    ]
    return "\n".join(lines)


def load_residue_held_out(kind: LoadKind) -> list[tuple[FloorRow, bool]]:
    """Each boot of LOAD_RESIDUE_MEASURED[kind]'s fit set against the range the other
    checkpoints (config, model id: a quantization is a checkpoint of its own) give: whether
    that range reaches what the boot's print allows beyond its count. A boot whose checkpoint
    is the whole set is left out (nothing else measures it)."""
    fitted = load_fit_set(kind)
    out = []
    for row in fitted:
        checkpoint = (row.case["config"], row.case["model"])
        others = [o for o in fitted if (o.case["config"], o.case["model"]) != checkpoint]
        if not others:
            continue
        low, high = load_residue_fit(others, kind)
        beyond_low, beyond_high = load_beyond_count(row, kind)
        out.append((row, low <= beyond_high and beyond_low <= high))
    return out


def _ids(fitted: list[FloorRow]) -> str:
    ids = sorted((row.case["id"] for row in fitted), key=lambda i: (len(i.split("-")[0]), i))
    return ", ".join(ids)


def _mb_span(span: tuple[int, int]) -> str:
    return f"{span[0] / 1e6:.1f}–{span[1] / 1e6:.1f} MB"


def _pool_inside(row: FloorRow) -> bool:
    found, pool = row.found, row.printed["pool"]
    if isinstance(found, Unknown) or pool is None:
        return False
    return _overlaps(found.pool, (pool - HALF_CENTI_GIB, pool + HALF_CENTI_GIB))


@dataclass(frozen=True)
class MeasuredConstant:
    """One measured constant of the engine-sized vLLM pool, its fit and its check."""

    name: str  # as floor.py spells it, with what it covers
    value: str
    fitted: str  # the boots its rule fits it on
    held: int  # of the boots that check it, how many it held
    scored: int  # the boots that check it (0: in sample)
    how: str  # how those boots check it
    note: str = ""

    @property
    def check(self) -> str:
        text = f"{self.held} of {self.scored} held, {self.how}" if self.scored else self.how
        return f"{text}; {self.note}" if self.note else text


def measured_constants() -> list[MeasuredConstant]:
    """Every measured constant of the engine-sized vLLM pool: its value, the boots it is
    fitted on (by its rule, never a list of ids) and the boots that check it."""
    from fakplan.engines.vllm.floor import (
        CONSUMED_BEYOND_WEIGHTS_MEASURED,
        CONSUMED_ERA,
        FORWARD_EXCESS_MEASURED,
        HYBRID_CONSUMED_BEYOND_WEIGHTS_MEASURED,
        LOAD_RESIDUE_MEASURED,
        NON_TORCH_MEASURED,
        NON_TORCH_PP_MEASURED,
        NON_TORCH_V2_MEASURED,
        READ,
        V2_PEAK_EXCESS_MEASURED,
    )
    from tests.support.graph_corpus import check_rows

    def gib(span: tuple[int, int]) -> str:
        return f"{span[0] / GIB:.3f}–{span[1] / GIB:.3f} GiB"

    out = []
    v1 = fit_set()
    held = [h.inside for h in held_out() if h.pool is not None]
    out.append(
        MeasuredConstant(
            "`NON_TORCH_MEASURED` (V1 runner, 0.17–0.26)",
            "; ".join(f"TP {k[2:]}: {gib(v)}" for k, v in NON_TORCH_MEASURED.items()),
            f"{len(v1)} boots of 0.17–0.26 at PP 1 that print it "
            f"({len({r.case['config'] for r in v1})} configs)",
            sum(held),
            len(held),
            "each model left out (the held-out table below)",
        )
    )
    out.append(
        MeasuredConstant(
            "`NON_TORCH_V2_MEASURED` (V2 runner before 0.27)",
            f"TP 1: {gib(NON_TORCH_V2_MEASURED['tp1'])}",
            _ids(v2_non_torch_fit_set()),
            0,
            0,
            "in sample",
        )
    )
    kinds: tuple[tuple[LoadKind, str], ...] = (
        ("v2-profile-era", "V2 runner before 0.27"),
        ("from-0.20", "every other load from 0.20"),
    )
    for kind, what in kinds:
        scored = [inside for _, inside in load_residue_held_out(kind)]
        out.append(
            MeasuredConstant(
                f'`LOAD_RESIDUE_MEASURED["{kind}"]` ({what})',
                _mb_span(LOAD_RESIDUE_MEASURED[kind]),
                _ids(load_fit_set(kind)),
                sum(scored),
                len(scored),
                "each checkpoint left out",
            )
        )
    deeper = [
        row for row in rows() if pp_of(row) > 2 and READ[0] <= _release_of(row) < CONSUMED_ERA
    ]
    out.append(
        MeasuredConstant(
            "`NON_TORCH_PP_MEASURED`, `FORWARD_EXCESS_MEASURED` (PP > 1)",
            f"TP 1: {gib(NON_TORCH_PP_MEASURED['tp1'])}; {FORWARD_EXCESS_MEASURED / GIB:.3f} "
            "GiB at 8,192 × 4,096",
            _ids(pp_fit_set()),
            sum(_pool_inside(r) for r in deeper),
            len(deeper),
            f"boots at more stages ({_ids(deeper)})" if deeper else "in sample",
        )
    )
    graphs = check_rows()
    unseen = [r.held for r in graphs if not r.in_sample]
    widened = [r.case["id"] for r in graphs if r.in_sample]
    out.append(
        MeasuredConstant(
            "`GRAPH_ESTIMATE_MEASURED` (the V1 runner's CUDA-graph estimate)",
            "by TP, in docs/vllm-memory.md",
            "the 0.19.0 H100 boots' DEBUG lines",
            sum(unseen),
            len(unseen),
            "the CUDA-graph check set's boots it did not see (0.20–0.24)",
            f"{', '.join(widened)} widened it (in sample)" if widened else "",
        )
    )
    wider = [
        row
        for row in rows()
        if _release_of(row) >= CONSUMED_ERA
        and tp_key(row) != "tp1"
        and row.printed["pool"] is not None
    ]
    out.append(
        MeasuredConstant(
            "`CONSUMED_BEYOND_WEIGHTS_MEASURED` (0.27+)",
            f"TP 1: {gib(CONSUMED_BEYOND_WEIGHTS_MEASURED['tp1'])}",
            f"{_ids(consumed_fit_set())} (and one source build's boot outside the suite)",
            sum(_pool_inside(r) for r in wider),
            len(wider),
            f"at TP > 1 through the borrowed growth ({_ids(wider)}); in sample at TP 1"
            if wider
            else "in sample",
        )
    )
    out.append(
        MeasuredConstant(
            "`HYBRID_CONSUMED_BEYOND_WEIGHTS_MEASURED` (0.27+, Gated DeltaNet or Mamba-2)",
            f"TP 1: {gib(HYBRID_CONSUMED_BEYOND_WEIGHTS_MEASURED['tp1'])}",
            "two public boots of 27B hybrids outside this corpus (floor.py names them)",
            0,
            0,
            "in sample",
        )
    )
    out.append(
        MeasuredConstant(
            "`V2_PEAK_EXCESS_MEASURED` (V2 runner)",
            f"{V2_PEAK_EXCESS_MEASURED / GIB:.3f} GiB at 2,048 × 4,096",
            _ids(v2_peak_fit_set()),
            0,
            0,
            "in sample",
        )
    )
    return out


def measured_constants_table() -> str:
    lines = [
        "| constant | value | fitted on | checked by |",
        "|---|---|---|---|",
    ]
    for c in measured_constants():
        lines.append(f"| {c.name} | {c.value} | {c.fitted} | {c.check} |")
    return "\n".join(lines)


def measured_constants_summary() -> str:
    """One sentence for README: how many measured constants a boot they did not see checks."""
    found = measured_constants()
    checked = [c for c in found if c.scored]
    in_sample = [c.name.split(" (")[0] for c in found if not c.scored]
    held = sum(c.held for c in checked)
    scored = sum(c.scored for c in checked)
    return (
        f"Of the pool's {len(found)} measured constants, {len(checked)} are checked on boots "
        f"they did not see ({held} of {scored} such checks held) and {len(in_sample)} are in "
        f"sample ({', '.join(in_sample)}): "
        "[fit and check kept apart](docs/arithmetic.md#fit-and-check-kept-apart)."
    )

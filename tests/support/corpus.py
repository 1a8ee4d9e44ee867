"""The dev corpus: real boot logs, the shape of each boot, and what fakplan predicts.

``tests/data/public/corpus/cases.yaml`` lists each boot: its log (verbatim lines from the
public source it names), the model config it served (``configs/``), the launch as stated
(the fields of a ``KvQuery``) and what the engine printed. Two checks, by engine:

- ``pool``: vLLM and SGLang print the pool they divide (vLLM "Available KV cache memory",
  SGLang the K + V sizes) and the count it gave: fakplan takes the printed pool as the
  interval its digits allow and must give the printed count for a pool in it;
- ``cache``: llama.cpp sizes its cache by ``-c`` and ``-np``: fakplan must give the cells
  and the size (to the printed 0.01 MiB) of every cache line.

Used by tests/test_corpus.py (each case must hold) and tests/bench/accuracy.py (the
the accuracy page's table, docs/accuracy.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from fakplan.engines import pool_tokens, printed_pool_tokens
from fakplan.engines.llamacpp.cache import cache_for, layout_cells, state_bytes
from fakplan.geometry import load_geometry
from fakplan.kv import KvQuery
from fakplan.units import MIB, printed_interval
from tests.support.paths import DATA

PUBLIC = DATA / "public"
CORPUS = PUBLIC / "corpus"


@dataclass(frozen=True)
class Outcome:
    """One printed figure beside fakplan's: exact where ``low <= printed <= high``."""

    case: str
    figure: str
    printed: int
    low: int
    high: int

    @property
    def predicted(self) -> int:
        """The prediction nearest the printed figure (a range's end, or its one value)."""
        return min(max(self.printed, self.low), self.high)

    @property
    def error(self) -> float:
        """Relative miss in percent (0 inside the range)."""
        return 100.0 * (self.predicted - self.printed) / self.printed if self.printed else 0.0


def cases() -> list[dict[str, Any]]:
    data = yaml.safe_load((CORPUS / "cases.yaml").read_text(encoding="utf-8"))
    return list(data["cases"])


def query_of(case: dict[str, Any]) -> KvQuery:
    fields = {k: v for k, v in (case.get("query") or {}).items() if k not in {"n_ctx"}}
    # config_path: a scratch path while a case is being vetted, never in the corpus
    path = case.get("config_path") or PUBLIC / "configs" / case["config"] / "config.json"
    geometry = load_geometry(str(path))
    return KvQuery(
        geometry=geometry,
        engine=case["engine"],
        engine_version=str(case["engine_version"]),
        **fields,
    )


def outcomes(case: dict[str, Any]) -> list[Outcome]:
    """fakplan's figures beside every figure the case says the engine printed."""
    query = query_of(case)
    printed = case["printed"]
    if case["engine"] == "llamacpp":
        return _cache_outcomes(case, query, printed)
    low, high = _pool_interval(printed)
    result = printed_pool_tokens(query, low, high)
    first = int(result.extra.get("tokens_low", result.tokens))
    last = int(result.extra.get("tokens_high", result.tokens))
    out = [Outcome(case["id"], "tokens", int(printed["tokens"]), first, last)]
    if "swa_tokens" in printed:
        swa_low = int(pool_tokens(query, low).extra["swa_tokens"])
        swa_high = int(pool_tokens(query, high).extra["swa_tokens"])
        out.append(Outcome(case["id"], "swa_tokens", int(printed["swa_tokens"]), swa_low, swa_high))
    return out


def _pool_interval(printed: dict[str, Any]) -> tuple[int, int]:
    """The printed pool as bytes: one figure, or SGLang's K and V each rounded (their
    intervals add)."""
    if "pool" in printed:
        low, _, high = printed_interval(str(printed["pool"]))
        return low, high
    k_low, _, k_high = printed_interval(str(printed["k"]))
    v_low, _, v_high = printed_interval(str(printed["v"]))
    return k_low + v_low, k_high + v_high


def _cache_outcomes(case: dict[str, Any], query: KvQuery, printed: dict[str, Any]) -> list[Outcome]:
    cache = cache_for(query)
    out = []
    if "recurrent_size" in printed:
        state = state_bytes(query, cache)
        out.append(_size(case["id"], "recurrent_size", printed["recurrent_size"], state))
    if "n_ctx" not in case["query"]:  # a boot whose -c the source does not give
        return out
    per_stream, streams, swa = layout_cells(query, cache, int(case["query"]["n_ctx"]))
    if "cells" in printed:
        out.append(Outcome(case["id"], "cells", int(printed["cells"]), per_stream, per_stream))
    if "size" in printed:
        size = cache.cell_bytes() * per_stream * streams
        out.append(_size(case["id"], "size", printed["size"], size))
    if "swa_cells" in printed:
        out.append(Outcome(case["id"], "swa_cells", int(printed["swa_cells"]), swa, swa))
    if "swa_size" in printed:
        out.append(
            _size(
                case["id"], "swa_size", printed["swa_size"], cache.swa_cell_bytes() * swa * streams
            )
        )
    return out


def _size(case: str, figure: str, text: str, predicted: int) -> Outcome:
    """A printed size (MiB, two decimals) beside fakplan's bytes: in 1/100 MiB, so a
    prediction inside the printed rounding is exact."""
    low, _, high = printed_interval(text)
    printed = round(float(str(text).split()[0]) * 100)
    hundredths = printed if low <= predicted <= high else round(predicted * 100 / MIB)
    return Outcome(case, figure, printed, hundredths, hundredths)


def features(case: dict[str, Any]) -> list[str]:
    """The boot's features for the accuracy table, read from its config and launch (never
    the model's name): the layer kinds its cache holds, its experts, its quantized weights
    or KV, a speculative draft; "plain" where none applies."""
    query = query_of(case)
    g = query.geometry
    found = []
    if g.sliding is not None:
        found.append("sliding window")
    if g.linear is not None or g.mamba is not None:
        found.append("recurrent hybrid")
    if g.mla is not None:
        found.append("MLA")
    if g.num_experts:
        found.append("MoE")
    if g.quant_method or case.get("quantization_config"):
        found.append("quantized weights")
    if str((case.get("query") or {}).get("kv_dtype", "auto")) not in (
        "auto",
        "bf16",
        "f16",
        "fp16",
    ):
        found.append("quantized KV")
    if query.spec_tokens:
        found.append("speculative")
    return found or ["plain"]


def era(case: dict[str, Any]) -> str:
    """The release a boot ran, grouped: major.minor for vLLM and SGLang, thousands of
    builds for llama.cpp (b4670: b4xxx)."""
    version = str(case["engine_version"]).split()[0]
    if case["engine"] == "llamacpp":
        digits = version.lstrip("b")
        return f"b{digits[0]}xxx" if digits[:1].isdigit() and len(digits) == 4 else version
    return ".".join(version.split(".")[:2])

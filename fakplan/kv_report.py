"""What ``fakplan kv`` reports: the ``fakplan.kv/1`` JSON (docs/json.md) and the contract a
stated number of slots asks of a pool."""

from __future__ import annotations

from typing import Any

from fakplan.contract import contract_requirement, exact_number
from fakplan.geometry import Geometry
from fakplan.kv import KvBreakdown, KvQuery, PoolResult
from fakplan.plan import ComponentRecord

KV_SCHEMA = "fakplan.kv/1"


def kv_contract(query: KvQuery, b: KvBreakdown) -> dict[str, Any]:
    """The pool that backs every slot at its full window (what a shape's budget.kv must
    hold), and where to ask what fits beside the weights."""
    need = contract_requirement(b, query.max_num_seqs, query.window)
    return {
        "contract_bytes": need.bytes,
        "contract_derivation": need.derivation,
        "contract_lines": [
            f"contract: {need.derivation}: the pool that backs every slot at its full window",
            f"  what fits beside the weights on a card: fakplan fit MODEL --engine {b.engine} "
            "--card SIZE",
        ],
    }


def _geometry_json(g: Geometry) -> dict[str, Any]:
    return {
        "source": g.source,
        "architecture": g.architecture,
        "num_layers": g.num_layers,
        "layer_kinds": {
            kind.value: g.layer_kinds.count(kind) for kind in dict.fromkeys(g.layer_kinds)
        },
        "context_length": g.context_length,
        "dtype": g.dtype,
        "weight_bytes": g.weight_bytes,
    }


def kv_json(
    query: KvQuery, b: KvBreakdown, pool_bytes: int | None, result: PoolResult | None
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "schema": KV_SCHEMA,
        "engine": b.engine,
        "engine_version": b.engine_version,
        "kv_dtype": b.dtype,
        "tp": query.tp,
        "pp": query.pp,
        "max_model_len": query.window,
        "page_tokens": b.page_tokens,
        "bytes_per_token": exact_number(b.rate),
        "bytes_per_seq": b.per_seq_bytes,
        "layers": b.layers,
        "components": [
            ComponentRecord.of(c, b.page_tokens).model_dump(mode="json", exclude={"bytes_per_page"})
            for c in b.components
        ],
        "rules": list(b.rules),
        "notes": list(b.notes) + list(query.geometry.notes),
        "geometry": _geometry_json(query.geometry),
    }
    if result is not None:
        out.update(
            pool_bytes=pool_bytes,
            tokens=result.tokens,
            num_blocks=result.num_blocks,
            max_concurrency=result.max_concurrency,
            pool_derivation=result.derivation,
            **{k: v for k, v in result.extra.items()},
        )
    return out

"""``fakplan kv --gpu-memory-utilization`` / ``--mem-fraction-static``: the pool vLLM or
SGLang will size for itself, before a boot.

The edge around ``fakplan.engines.vllm.floor`` and ``fakplan.engines.sglang_sizing``:
reads the card's figure, asks the engine's terms, and shapes the answer for
``fakplan.kv/1`` (``sizing``, ``floor``) and the text report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import click

from fakplan.engines.sglang import DOWNCAST as SGLANG_DOWNCAST
from fakplan.engines.sglang_sizing import sglang_sizing
from fakplan.engines.vllm.floor import Unknown, VllmFloor, floor_for
from fakplan.errors import UnitsError
from fakplan.kv import KvQuery
from fakplan.sizing import EngineSizing
from fakplan.units import printed_interval


@dataclass(frozen=True)
class Sizing:
    found: VllmFloor | Unknown
    low: int | None = None  # the pool's range, over the card figure's digits and
    high: int | None = None  # the measured non-torch spread

    @property
    def pool_interval(self) -> tuple[int, int, int] | None:
        if self.low is None or self.high is None:
            return None
        return self.low, self.low, self.high

    def json(self) -> dict[str, Any]:
        f = self.found
        if isinstance(f, Unknown):
            return {"sizing": {"unknown": f.reason}, "floor": None}
        return {
            "sizing": {
                "pool_range": [self.low, self.high],
                "requested_bytes": f.requested.bytes,
                "requested_derivation": f.requested.derivation,
            },
            "floor": {
                "weights_bytes": f.weights.bytes,
                "weights_derivation": f.weights.derivation,
                "activation_bytes": f.activation.bytes,
                "activation_derivation": f.activation.derivation,
                "non_torch_bytes": list(f.non_torch),
                "non_torch_derivation": "measured in public vLLM 0.19.0 boots on H100 "
                "(NCCL and CUDA modules; no config gives it)",
                "cuda_graph_bytes": None,
            },
        }

    def lines(self) -> list[str]:
        f = self.found
        if isinstance(f, Unknown):
            return [f"engine-sized pool: unknown ({f.reason})"]
        return [
            f"requested {f.requested.derivation}",
            f"weights {f.weights.derivation}",
            f"activation peak {f.activation.derivation}",
            f"non-torch {f.non_torch[0]:,}..{f.non_torch[1]:,} B (measured, vLLM 0.19.0, H100)",
            f"pool {self.low:,}..{self.high:,} B (CUDA graphs not subtracted before 0.20)",
        ]


def _card_interval(card_total: str) -> tuple[int, int]:
    """The card's total as the interval its printed digits allow ("79.19 GiB")."""
    try:
        low, _, high = printed_interval(card_total)
    except UnitsError as exc:
        raise click.BadParameter(str(exc), param_hint="'--card-total'") from None
    return low, high


def engine_sizing(
    query: KvQuery,
    utilization: float | None,
    card_total: str | None,
    sms: int,
    max_num_seqs: int | None,
) -> Sizing:
    """The pool for both ends of the card figure's digits ("79.19 GiB" is an interval)."""
    if utilization is None or card_total is None:
        raise click.UsageError("give both --gpu-memory-utilization and --card-total")
    if query.engine != "vllm":
        raise click.UsageError("--gpu-memory-utilization sizes vLLM's pool (--engine vllm)")
    low_card, high_card = _card_interval(card_total)
    low = floor_for(
        query, card_total=low_card, utilization=utilization, sms=sms, max_num_seqs=max_num_seqs
    )
    if isinstance(low, Unknown):
        return Sizing(low)
    high = floor_for(
        query, card_total=high_card, utilization=utilization, sms=sms, max_num_seqs=max_num_seqs
    )
    assert isinstance(high, VllmFloor)
    return Sizing(low, max(low.pool[0], 0), max(high.pool[1], 0))


@dataclass(frozen=True)
class StaticSizing:
    """SGLang's pool at both ends of the card figure's digits, or why it is unknown."""

    low_card: EngineSizing | str
    high_card: EngineSizing | None = None

    @property
    def pool_interval(self) -> tuple[int, int, int] | None:
        if isinstance(self.low_card, str) or self.high_card is None:
            return None
        low = max(self.low_card.pool_low, 0)
        return low, low, max(self.high_card.pool_high, 0)

    def json(self) -> dict[str, Any]:
        s = self.low_card
        if isinstance(s, str) or self.high_card is None:
            return {"sizing": {"unknown": s}, "floor": None}
        interval = self.pool_interval
        assert interval is not None
        terms = {t.id: t for t in s.terms}
        weights, in_use = terms["weights"], terms["memory-in-use"]
        return {
            "sizing": {
                "pool_range": [interval[0], interval[2]],
                "requested_bytes": s.requested_bytes,
                "requested_derivation": s.requested_derivation,
            },
            "floor": {
                "weights_bytes": [weights.low, weights.high],
                "weights_derivation": weights.derivation,
                "memory_in_use_bytes": [in_use.low, in_use.high],
                "memory_in_use_derivation": f"x {s.fraction:g}: {in_use.derivation}",
                "activation_bytes": None,
                "non_torch_bytes": None,
                "cuda_graph_bytes": None,
            },
        }

    def lines(self) -> list[str]:
        s = self.low_card
        if isinstance(s, str) or self.pool_interval is None:
            return [f"engine-sized pool: unknown ({s})"]
        low, _, high = self.pool_interval
        return [
            f"requested {s.requested_derivation}",
            *(f"{t.id} {t.derivation}" for t in s.terms),
            f"pool {low:,}..{high:,} B ({s.pool_derivation})",
        ]


def static_sizing(query: KvQuery, fraction: float, card_total: str | None) -> StaticSizing:
    """SGLang's pool for both ends of the card figure's digits."""
    if card_total is None:
        raise click.UsageError("give both --mem-fraction-static and --card-total")
    if query.engine != "sglang":
        raise click.UsageError("--mem-fraction-static sizes SGLang's pool (--engine sglang)")
    low_card, high_card = _card_interval(card_total)
    text = f"--card-total {card_total}"
    low = sglang_sizing(query, fraction, low_card, text, SGLANG_DOWNCAST)
    if isinstance(low, str):
        return StaticSizing(low)
    high = sglang_sizing(query, fraction, high_card, text, SGLANG_DOWNCAST)
    assert isinstance(high, EngineSizing)
    return StaticSizing(low, high)

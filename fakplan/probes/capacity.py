"""The KV capacity a running engine states about itself, read live (the ``kv`` probe).

When the boot log is out of reach, an engine's own metrics may still say how many KV
tokens it holds. An engine whose server states it says where (its ``server`` module's
``CapacityReading``): a Prometheus info metric on a route, whose labels carry the
figures; vLLM's is

    vllm:cache_config_info{block_size="128",kv_cache_size_tokens="524288",
        num_gpu_blocks="4096",kv_cache_memory_bytes="1073741824",...} 1.0

Engines whose servers state no capacity on a route fakplan reads give no figure and no
verdict, with a note.
"""

from __future__ import annotations

from typing import Literal

from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict

from fakplan.engines import ENGINES, CapacityReading
from fakplan.probes.api import Server
from fakplan.probes.http import Deadline, Endpoint, ProbeFault, excerpt

LABEL_CHARS = 40  # a label quoted in the statement: the figures are integers of 20 digits at most


class CapacityResult(BaseModel):
    """What the endpoint states about its KV pool; None where it states nothing."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    probe: Literal["kv"] = "kv"
    route: str | None
    kv_tokens: int | None
    num_blocks: int | None = None
    block_size: int | None = None
    kv_bytes: int | None = None
    statement: str | None = None  # the metric and labels the figures came from
    notes: tuple[str, ...] = ()


def _int_label(labels: dict[str, str], name: str) -> int | None:
    value = labels.get(name)
    if value is None or not value.strip().lstrip("-").isdigit():
        return None  # "None" (not reported by this release), "" or a non-integer
    return int(value)


def _read(endpoint: Endpoint, deadline: Deadline, reading: CapacityReading) -> CapacityResult:
    route, metric = reading.route, reading.metric
    answer = endpoint.get(route, deadline, f"GET {route}")
    if answer.status == 404:
        # a proxy in front of the engine may serve only the OpenAI routes
        return CapacityResult(
            route=None,
            kv_tokens=None,
            notes=(f"GET {route} answered 404 (a proxy may hide it): no live figure",),
        )
    if not answer.ok:
        raise ProbeFault(f"GET {route}: HTTP {answer.status}")
    try:
        samples = [
            sample
            for family in text_string_to_metric_families(answer.text)
            for sample in family.samples
            if sample.name.startswith(metric)
        ]
    except ValueError as exc:
        raise ProbeFault(f"GET {route}: not Prometheus text ({excerpt(str(exc))})") from None
    if not samples:
        return CapacityResult(
            route=route,
            kv_tokens=None,
            notes=(f"{route} has no {metric}: this release states no KV capacity there",),
        )
    keys = (
        reading.tokens_label,
        reading.blocks_label,
        reading.block_size_label,
        reading.bytes_label,
    )
    readings = {
        tuple(_int_label(dict(s.labels), key) if key else None for key in keys): dict(s.labels)
        for s in samples
    }
    notes: list[str] = []
    if len(readings) > 1:
        # data-parallel engines each export their own; they should agree
        notes.append(
            f"{len(readings)} different caches stated by {len(samples)} engines; "
            "the smallest is used"
        )
    chosen = min(readings, key=lambda r: (r[0] is None, r[0] or 0))
    tokens, blocks, block, pool = chosen
    if tokens is None:
        notes.append(
            f"{reading.tokens_label} is not stated by this release (only blocks x block size, "
            "which is the boot's token count only for single-group models): no verdict"
        )
    labels = readings[chosen]
    # the figures are integers; a label that is anything else is quoted short
    shown = ", ".join(
        f'{k}="{excerpt(labels[k], LABEL_CHARS)}"' for k in keys if k is not None and k in labels
    )
    return CapacityResult(
        route=route,
        kv_tokens=tokens,
        num_blocks=blocks,
        block_size=block,
        kv_bytes=pool,
        statement=f"{metric}{{{shown}}}",
        notes=tuple(notes),
    )


def capacity(endpoint: Endpoint, server: Server, deadline: Deadline) -> CapacityResult:
    """The engine's own statement of its KV capacity, where its server makes one."""
    engine = ENGINES.get(server.flavour.engine or "")
    reading = engine.server.capacity if engine is not None else None
    if reading is not None:
        return _read(endpoint, deadline, reading)
    return CapacityResult(
        route=None,
        kv_tokens=None,
        notes=(
            f"{server.flavour.name} states no KV capacity on a route fakplan reads; "
            "close kv-tokens with fakplan verify and the boot log",
        ),
    )

"""The ``Ledger``: what one boot of an engine states it allocated, line by line.

Every number is an integer count of bytes or tokens exactly as the log states
it, ``None`` when the log does not state it (never a guess), and traceable:
``Ledger.figure(name)`` gives the 1-based line and the text it came from, or,
for a figure derived from printed ones, the derivation. The JSON form
(``Ledger.to_json``) is a versioned interface (``schema: fakplan.ledger/1``)
documented in docs/ledger.md.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fakplan.units import UNITS

LEDGER_SCHEMA = "fakplan.ledger/1"


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class LedgerFigure(_Record):
    """One figure and where it came from."""

    value: bool | int | float | str
    line: int = Field(
        description="1-based line of the log that states it (or, derived: its main input)"
    )
    text: str = Field(description="that line, ANSI colour codes and line ending removed")
    printed: str | None = Field(None, description='the figure as printed, e.g. "5.98 GiB"')
    unit: str | None = Field(
        None, description='the unit the engine means ("GiB" for a printed "GB")'
    )
    rank: str | None = Field(None, description="the rank that stated it (TP1, DP0, card 0), if one")
    derived: bool = False
    derivation: str | None = None
    source: str = Field("", description="the engine version whose line format matched")


class LedgerLine(_Record):
    """A line the parser recognised."""

    line: int
    kind: str
    text: str
    source: str
    rank: str | None = None


class Ledger(_Record):
    """One boot's ledger. Field order is the JSON order."""

    schema_: str = LEDGER_SCHEMA
    file: str
    engine: str = Field(description="vllm, sglang, llamacpp or table")
    engine_detected: bool = Field(description="true when --engine auto chose the engine")
    engine_version: str | None = None
    boots: int = Field(description="boots found in the file; the ledger is one of them")
    boot_lines: tuple[int, int] = Field(description="first and last line of the boot used")
    boot_failed: bool | None = Field(None, description="true when the log says the boot failed")
    error: str | None = None

    # KV capacity
    kv_tokens: int | None = Field(
        None, description="tokens the KV cache holds, as the engine prints"
    )
    kv_bytes: int | None = Field(None, description="bytes of the KV cache (pool, or vLLM's budget)")
    num_blocks: int | None = None
    block_size: int | None = None
    cpu_blocks: int | None = None
    max_concurrency: float | None = None
    context_len: int | None = Field(None, description="the window per request (max_model_len)")
    estimated_max_model_len: int | None = None
    kv_needed_bytes: int | None = None
    max_total_num_tokens: int | None = None
    max_running_requests: int | None = None
    full_kv_tokens: int | None = None
    swa_kv_tokens: int | None = None
    swa_kv_bytes: int | None = None
    k_bytes: int | None = None
    v_bytes: int | None = None
    k_type: str | None = None
    v_type: str | None = None
    kv_cells: int | None = None
    kv_layers: int | None = None
    n_seq_max: int | None = None
    n_stream: int | None = None
    kv_unified: bool | None = None
    n_ctx: int | None = None
    n_ctx_seq: int | None = None
    n_ctx_train: int | None = None
    n_batch: int | None = None
    n_ubatch: int | None = None
    flash_attn: str | None = None
    n_slots: int | None = None
    pipeline_copies: int | None = None
    offloaded_layers: int | None = None

    # per-sequence state
    recurrent_bytes: int | None = None
    recurrent_cells: int | None = None
    recurrent_layers: int | None = None
    r_bytes: int | None = None
    s_bytes: int | None = None
    conv_state_bytes: int | None = None
    ssm_state_bytes: int | None = None
    mamba_slots: int | None = None

    # memory
    weights_bytes: int | None = None
    card_total_bytes: int | None = None
    total_gpu_bytes: int | None = None
    gpu_memory_utilization: float | None = None
    usable_bytes: int | None = None
    activation_bytes: int | None = None
    non_torch_bytes: int | None = None
    non_kv_bytes: int | None = None
    consumed_bytes: int | None = None
    peak_torch_bytes: int | None = None
    compute_bytes: int | None = None
    output_bytes: int | None = None
    graph_bytes: int | None = None
    graph_estimate_bytes: int | None = Field(
        None, description="vLLM's CUDA-graph memory estimate before capture"
    )
    # a speculative draft's KV, beside the pool: the size its cache lines print, summed over
    # its contexts (llama.cpp prints one per context, a temporary one included)
    draft_kv_bytes: int | None = None
    draft_kv_contexts: int | None = None
    free_before_load_bytes: int | None = None
    free_after_weights_bytes: int | None = None
    free_after_pool_bytes: int | None = None
    free_before_graphs_bytes: int | None = None
    free_after_graphs_bytes: int | None = None
    free_at_ready_bytes: int | None = None

    # the VRAM budget table (a radiance boot)
    settled_free_bytes: int | None = None
    engine_floor_bytes: int | None = None
    pair_bytes: int | None = None
    unclaimed_bytes: int | None = None
    unbudgeted_bytes: int | None = None
    ceiling_bytes: int | None = None
    sequences_backed: int | None = None
    sequence_tokens: int | None = None
    sampler_rows: int | None = None
    lendable_slots: int | None = None
    lendable_bytes: int | None = None
    budget_rows: dict[str, int] = Field(default_factory=dict)

    devices: dict[str, dict[str, int]] = Field(
        default_factory=dict, description="per device buffer: {CUDA0: {kv_bytes: ...}}"
    )
    binding_rank: str | None = Field(
        None,
        description="where ranks differ: the rank whose figures are given (the smallest pool)",
    )
    ranks: dict[str, dict[str, LedgerFigure]] = Field(
        default_factory=dict, description="figures on which ranks differ, per rank"
    )
    figures: dict[str, LedgerFigure] = Field(default_factory=dict)
    unreadable: dict[str, str] = Field(
        default_factory=dict,
        description="figures the log states in a form no engine prints (null): {name: why}",
    )
    lines: tuple[LedgerLine, ...] = ()
    notes: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _figures_match_fields(self) -> Ledger:
        for name, figure in self.figures.items():
            head, _, rest = name.partition(".")
            if head in _NESTED:
                key, _, leaf = rest.rpartition(".") if head == "devices" else ("", "", rest)
                if head == "devices" and leaf not in DEVICE_KEYS:
                    raise ValueError(f"figure {name!r}: no device buffer {leaf!r}")
                nested: Any = getattr(self, head)
                stated = nested.get(key, {}).get(leaf) if head == "devices" else nested.get(leaf)
            elif name in FIGURE_FIELDS:
                stated = getattr(self, name)
            else:
                raise ValueError(f"figure {name!r} is not a ledger field")
            if stated != figure.value:
                raise ValueError(f"figure {name!r} is {figure.value!r}, the field {stated!r}")
        return self

    def figure(self, name: str, rank: str | None = None) -> LedgerFigure | None:
        """The figure ``name`` with its line and text; ``rank`` for one that ranks differ on."""
        if rank is not None:
            return self.ranks.get(rank, {}).get(name)
        return self.figures.get(name)

    def to_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        return {"schema": data.pop("schema_"), **data}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Ledger:
        """The inverse of ``to_dict`` (a ledger read back from its JSON)."""
        fields = dict(data)
        fields["schema_"] = fields.pop("schema", LEDGER_SCHEMA)
        return cls.model_validate(fields)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"


_META = {"schema_", "file", "engine", "engine_detected", "boots", "boot_lines", "binding_rank"}
_NESTED = {"budget_rows", "devices"}
_CONTAINERS = _NESTED | {"ranks", "figures", "unreadable", "lines", "notes"}

FIGURE_FIELDS: tuple[str, ...] = tuple(
    name for name in Ledger.model_fields if name not in _META | _CONTAINERS
)
"""The scalar fields a figure can fill, in JSON order."""

DEVICE_KEYS = (
    "free_bytes",
    "model_bytes",
    "kv_bytes",
    "swa_kv_bytes",
    "recurrent_bytes",
    "output_bytes",
    "compute_bytes",
)
"""The buffers ``devices.<name>`` may list (llama.cpp prints them per device)."""


def rank_order(label: str) -> tuple[tuple[int, int, str], ...]:
    """``TP2`` before ``TP10``: rank labels in numeric order.

    A run of digits orders by its length, then its digits (no ``int()``: a label comes
    from the log, and Python refuses to convert 4,300 digits or more)."""
    key: list[tuple[int, int, str]] = []
    for part in re.split(r"(\d+)", label):
        digits = part.lstrip("0") or "0"
        key.append((0, len(digits), digits) if part.isdecimal() else (1, 0, part))
    return tuple(key)


def shown(figure: LedgerFigure) -> str:
    """A figure as the log printed it, else its value."""
    if figure.printed:
        return figure.printed
    return f"{figure.value:,}" if isinstance(figure.value, int) else str(figure.value)


def _difference(figure: LedgerFigure, by: int | float) -> str:
    """``by`` in the figure's printed form: "0.02 GB" beside a printed "54.12 GB"."""
    if figure.unit in UNITS and figure.printed and " " in figure.printed:
        number, _, suffix = figure.printed.rpartition(" ")
        decimals = len(number.partition(".")[2])
        return f"{by / UNITS[figure.unit]:,.{decimals}f} {suffix}"
    return f"{by:,}" if isinstance(by, int) else f"{by:g}"


def _labels(labels: list[str]) -> str:
    return ", ".join(labels) if len(labels) <= 3 else f"{', '.join(labels[:3])} +{len(labels) - 3}"


def spread(name: str, per_rank: Mapping[str, LedgerFigure]) -> str:
    """How the ranks' values of ``name`` differ, in the log's own units.

    ``"k_bytes 54.10 GB (TP1) to 54.12 GB (TP0), spread 0.02 GB (0.04 %) over 2 ranks"``;
    only the extremes are named, so a TP8 log reads as one line.
    """
    order = sorted(per_rank, key=rank_order)
    values = {label: per_rank[label].value for label in order}
    if any(isinstance(v, bool) or not isinstance(v, int | float) for v in values.values()):
        return f"{name} " + ", ".join(f"{label} {shown(per_rank[label])}" for label in order)
    numbers = {label: float(v) for label, v in values.items() if not isinstance(v, str)}
    low, high = min(numbers.values()), max(numbers.values())
    lows = [label for label in order if numbers[label] == low]
    highs = [label for label in order if numbers[label] == high]
    low_figure, high_figure = per_rank[lows[0]], per_rank[highs[0]]
    by = high_figure.value
    assert isinstance(by, int | float) and isinstance(low_figure.value, int | float)
    by -= low_figure.value
    pct = f" ({by / low * 100:.2f} %)" if low > 0 else ""
    return (
        f"{name} {shown(low_figure)} ({_labels(lows)}) to {shown(high_figure)} "
        f"({_labels(highs)}), spread {_difference(low_figure, by)}{pct} over {len(order)} ranks"
    )

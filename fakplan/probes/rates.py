"""decode and prefill: tokens per second, repeated, with what bounds each figure.

Every prompt is cold (a random nonce at its head: prefix caches survive
restarts) and has thinking disabled where the engine takes it.

decode times generation streamed and not (``decode_rate``); prefill times
the first token of a window-sized prompt against a short one (``prefill_rate``).

The figure is the plain one (streamed decode; prompt tokens over TTFT)
unless the probe shows the client or the server wrapper bounds it: streamed
decode below the non-streamed differential by more than the noise band
(per-chunk overhead, e.g. llama-cpp-python's ~6-8 ms per SSE chunk,
docs/engines-on-cpu.md §4), or a short prompt's TTFT over a quarter of a long
one's (fixed request overhead). Then the differential figure is used and
``bound_by`` says why.

The report both build is ``rate_report``'s; callers import every name from here.
"""

from fakplan.probes.decode_rate import (
    BURST_FACTOR,
    DEFAULT_DECODE_TOKENS,
    MIN_DECODE_TOKENS,
    DecodeRep,
    decode,
)
from fakplan.probes.prefill_rate import FIXED_OVERHEAD_SHARE, PREFILL_GEN, PrefillRep, prefill
from fakplan.probes.rate_report import Progress, RateResult

__all__ = [
    "BURST_FACTOR",
    "DEFAULT_DECODE_TOKENS",
    "FIXED_OVERHEAD_SHARE",
    "MIN_DECODE_TOKENS",
    "PREFILL_GEN",
    "DecodeRep",
    "PrefillRep",
    "Progress",
    "RateResult",
    "decode",
    "prefill",
]

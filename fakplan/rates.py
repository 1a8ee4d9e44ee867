"""Decode and prefill rates before boot: a roofline with measured efficiency bands.

Decode at the batch sizes operators serve is bound by memory bandwidth: every step
reads the weights a rank holds (for a mixture of experts, the shared weights and the
experts the batch's tokens route to) and the KV of every running sequence. One step
of ``sessions`` sequences at ``context`` tokens takes

    t = (W_step + KV(sessions, context)) / (bandwidth x efficiency) + all-reduce

per rank, where ``W_step`` is the weights read in that step, ``KV`` the cache those
sequences hold (the contract's bytes for them: an upper bound on what attention reads)
and the efficiency a band measured from public boots (per engine and device class,
``EfficiencyBand``). Each session gains one token per step: tokens/s per session is
``1 / t``, the aggregate ``sessions / t``. Pipeline stages run one after another, so
their bytes add; tensor ranks read their shares at once.

Prefill is bound by compute: a prompt of ``L`` tokens costs ``2 x P_active x L``
FLOPs in the linear layers plus ``2 x L^2 x heads x head_dim`` per layer in causal
attention (QK^T and AV, each ``L^2 / 2 x heads x head_dim`` multiply-adds), at the
card's dense peak for the compute dtype times a measured efficiency band.

Everything here is pure arithmetic on figures the plan already has; the plan states
which terms are exact (bytes, FLOPs) and which are measured ranges (efficiency).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# the all-reduce a tensor-parallel step makes per layer: after attention and after the MLP
ALL_REDUCES_PER_LAYER = 2


@dataclass(frozen=True)
class EfficiencyBand:
    """The fraction of a card's peak an engine reaches, measured: [low, high] with the
    public results it was fitted on (``fit``) and what they are."""

    low: float
    high: float
    fit: tuple[str, ...]
    source: str

    def text(self) -> str:
        return f"{self.low:.2f}..{self.high:.2f} of peak ({self.source})"


@dataclass(frozen=True)
class AllReduce:
    """One all-reduce of a decode-sized message between tensor ranks, measured: a fixed
    latency and an effective bandwidth (message / time past the latency), each a range."""

    latency_s: tuple[float, float]
    bytes_per_s: tuple[float, float]
    source: str


@dataclass(frozen=True)
class Experts:
    """The routed experts of a mixture-of-experts model, per rank."""

    count: int
    per_token: int
    bytes: int  # every routed expert's bytes on one rank (all sparse layers)

    def distinct(self, tokens: int) -> tuple[float, float]:
        """Experts a step of ``tokens`` tokens reads per layer: (fewest expected, most).

        The fewest is the expectation under uniform independent routing, E x (1 - (1 -
        k/E)^n); the most, every token on experts of its own, min(E, n x k). Skewed
        routing reads fewer than uniform, so the slow end is the safe one."""
        k, e = self.per_token, self.count
        expected = e * (1 - (1 - k / e) ** tokens)
        return expected, float(min(e, tokens * k))


@dataclass(frozen=True)
class DecodeInputs:
    """What a decode step reads on one rank, and how fast it can read it."""

    weights_bytes: int  # weights read per step, summed over pipeline stages, per tensor rank
    experts: Experts | None
    kv_bytes_per_token: float  # KV bytes one sequence holds per token, per tensor rank
    kv_bytes_per_seq: int  # state per sequence that does not grow with context
    bandwidth: int  # bytes/s of one card
    band: EfficiencyBand
    tensor: int = 1
    hidden: int = 0
    layers: int = 0
    activation_bytes: int = 2
    all_reduce: AllReduce | None = None


@dataclass(frozen=True)
class RatePoint:
    """Tokens/s at one (sessions, context): per session and aggregate, as [low, high]."""

    sessions: int
    context: int
    bytes_per_step: tuple[int, int]
    per_session: tuple[float, float]
    aggregate: tuple[float, float]

    def json(self) -> dict[str, Any]:
        return {
            "sessions": self.sessions,
            "context": self.context,
            "bytes_per_step": list(self.bytes_per_step),
            "per_session_tps": [round(v, 2) for v in self.per_session],
            "aggregate_tps": [round(v, 2) for v in self.aggregate],
        }


def step_bytes(inputs: DecodeInputs, sessions: int, context: int) -> tuple[int, int]:
    """(fewest, most) bytes one decode step reads on a rank: weights, experts, KV."""
    kv = round(sessions * (context * inputs.kv_bytes_per_token + inputs.kv_bytes_per_seq))
    experts = inputs.experts
    if experts is None:
        return inputs.weights_bytes + kv, inputs.weights_bytes + kv
    shared = inputs.weights_bytes - experts.bytes
    few, many = experts.distinct(sessions)
    per_expert = experts.bytes / experts.count
    return (round(shared + few * per_expert) + kv, round(shared + many * per_expert) + kv)


def all_reduce_s(inputs: DecodeInputs, sessions: int) -> tuple[float, float]:
    """(fewest, most) seconds per step the tensor ranks spend joining partial sums: two
    all-reduces per layer of ``sessions x hidden`` activations, each its latency plus the
    message over the effective bandwidth."""
    measured, tp = inputs.all_reduce, inputs.tensor
    if tp <= 1 or measured is None:
        return 0.0, 0.0
    message = sessions * inputs.hidden * inputs.activation_bytes
    count = ALL_REDUCES_PER_LAYER * inputs.layers
    fast = count * (measured.latency_s[0] + message / measured.bytes_per_s[1])
    slow = count * (measured.latency_s[1] + message / measured.bytes_per_s[0])
    return fast, slow


def decode_point(inputs: DecodeInputs, sessions: int, context: int) -> RatePoint:
    """The decode rate of ``sessions`` sequences each at ``context`` tokens."""
    few, many = step_bytes(inputs, sessions, context)
    comm_low, comm_high = all_reduce_s(inputs, sessions)
    band = inputs.band
    fastest = few / (inputs.bandwidth * band.high) + comm_low
    slowest = many / (inputs.bandwidth * band.low) + comm_high
    per_session = (1 / slowest, 1 / fastest)
    return RatePoint(
        sessions=sessions,
        context=context,
        bytes_per_step=(few, many),
        per_session=per_session,
        aggregate=(sessions * per_session[0], sessions * per_session[1]),
    )


def grid(limit: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to ``limit``, and ``limit`` itself."""
    out, n = [], 1
    while n < limit:
        out.append(n)
        n *= 2
    return (*out, limit)


def context_grid(window: int) -> tuple[int, ...]:
    """The contexts a curve is drawn at: 1,024 tokens (or the window), quarters, the window."""
    points = {min(1024, window), window // 4, window // 2, window}
    return tuple(sorted(p for p in points if p > 0))


def decode_curve(inputs: DecodeInputs, slots: int, window: int) -> tuple[RatePoint, ...]:
    """The rate over sessions (powers of two up to the slots) and context (up to the window)."""
    return tuple(
        decode_point(inputs, sessions, context)
        for sessions in grid(slots)
        for context in context_grid(window)
    )


@dataclass(frozen=True)
class PrefillInputs:
    """What a prompt costs in FLOPs on one rank, and how fast the rank computes."""

    active_params: int  # parameters a token passes through (a MoE's top-k experts only)
    layers: int
    heads: int
    head_dim: int
    peak_flops: float  # dense FLOP/s of one card at the compute dtype
    peak_dtype: str
    band: EfficiencyBand
    tensor: int = 1


def prefill_flops(inputs: PrefillInputs, tokens: int) -> int:
    """FLOPs of one prompt of ``tokens`` tokens: linear layers and causal attention."""
    linear = 2 * inputs.active_params * tokens
    attention = 2 * tokens * tokens * inputs.heads * inputs.head_dim * inputs.layers
    return linear + attention


def prefill_rate(inputs: PrefillInputs, tokens: int) -> tuple[float, float, int]:
    """(slowest, fastest) prompt tokens/s for one prompt of ``tokens`` tokens, and its FLOPs
    (tensor ranks share the FLOPs; pipeline stages run one after another)."""
    flops = prefill_flops(inputs, tokens)
    per_rank = flops / inputs.tensor
    slowest = per_rank / (inputs.peak_flops * inputs.band.low)
    fastest = per_rank / (inputs.peak_flops * inputs.band.high)
    return tokens / slowest, tokens / fastest, flops

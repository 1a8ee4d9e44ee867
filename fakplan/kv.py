"""The KV cost model: what a token and a sequence cost on one rank, per engine.

``kv_breakdown(query)`` asks the engine named in the query for its own
arithmetic (``fakplan.engines.<name>``), and ``pool_tokens`` turns a pool in
bytes into the token count that engine prints at boot. Each rule is tagged in
the engine module with the release it was read in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from fakplan.contract import KvCost
from fakplan.geometry import Geometry

# speculative methods (vLLM --speculative-config's spelling) whose draft is a model of its
# own, with attention layers: the query carries its geometry
DRAFT_MODEL_METHODS = ("eagle", "eagle3", "draft_model")


@dataclass(frozen=True)
class KvQuery:
    """One question: this model, on this engine and release, at this dtype and parallelism."""

    geometry: Geometry
    engine: str
    engine_version: str | None = None
    kv_dtype: str = "auto"
    model_dtype: str = "auto"  # the weights' served dtype (vLLM --dtype), which KV auto follows
    quantization: str | None = None  # vLLM --quantization (fp8: linear weights at load)
    device: str = "gpu"  # "cpu": an engine's CPU build (vLLM's pages and pool differ)
    # the card's CUDA compute capability ("9.0"): which kernel a weight-only integer
    # checkpoint loads into, and so the tensors its weights keep (None: not known)
    capability: str | None = None
    # the card's name as NVML reports it ("NVIDIA A100-SXM4-80GB"): vLLM's batch defaults
    # leave an A100's small whatever its memory (engine/arg_utils.py); None: not known
    device_name: str | None = None
    tp: int = 1
    pp: int = 1
    block_size: int | None = None
    max_model_len: int | None = None
    max_num_seqs: int = 1
    max_num_batched_tokens: int | None = None
    prefix_caching: bool | None = None  # None: the engine's default
    spec_tokens: int = 0
    spec_method: str | None = None  # vLLM --speculative-config method; None: mtp
    draft: Geometry | None = None  # a separate draft model's (eagle, eagle3, draft_model)
    async_scheduling: bool | None = None  # vLLM; None: the release's default (on from 0.26)
    kv_unified: bool | None = None  # llama.cpp
    # vLLM --language-model-only: a multimodal model's towers left out of the load
    language_model_only: bool = False
    enforce_eager: bool = False  # vLLM --enforce-eager: no CUDA graphs, none estimated
    # vLLM's model runner as VLLM_USE_V2_MODEL_RUNNER sets it; None: the release's rule
    model_runner: Literal["v1", "v2"] | None = None
    flash_attn: bool = True  # llama.cpp
    ubatch: int | None = None  # llama.cpp -ub (physical batch; the SWA cache holds one)
    gpu_layers: int | None = None  # llama.cpp -ngl: the cache of the layers it offloads

    @property
    def window(self) -> int:
        return self.max_model_len or self.geometry.context_length


@dataclass(frozen=True, kw_only=True)
class KvBreakdown(KvCost):
    """An engine's cost of one rank's KV, component by component, and the rules it followed."""

    engine: str
    engine_version: str
    layers: int
    rules: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class PoolResult:
    """What a pool of bytes becomes, as the engine counts it."""

    tokens: int
    num_blocks: int | None
    max_concurrency: float | None
    derivation: str
    extra: dict[str, int | float] = field(default_factory=dict)

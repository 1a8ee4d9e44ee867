"""The shape's schema: strict, frozen pydantic models, one per YAML block.

Typos are errors (``extra="forbid"``), values are immutable, byte sizes carry a
unit, and ``fakplan schema`` prints these models as JSON Schema.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    Strict,
    StringConstraints,
    TypeAdapter,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from fakplan.cards import CAPABILITY_PATTERN, CARDS, card_sku, unknown_sku
from fakplan.cuda_totals import CUDA_TOTALS, cuda_total
from fakplan.engines import ENGINES
from fakplan.errors import SelectorError, UnitsError
from fakplan.matchers import MAX_TEXT as MAX_SELECTOR
from fakplan.matchers import parse_matchers, render
from fakplan.units import ByteSize, parse_bytes

PositiveInt = Annotated[int, Strict(), Field(gt=0)]

# What hardware can be, with headroom: a count past these is a typo or an attack, and a
# figure built from it would cost minutes and gigabytes before any gate could refuse it.
MAX_CARDS_PER_NODE = 64  # the largest nodes hold 8-16 accelerators
MAX_PARALLEL = 4096  # TP x PP of the largest published deployments is in the hundreds
MAX_NODES = 512  # multi-node deployments span tens of nodes; each renders a script of its own
MAX_SEQS = 1 << 20  # engines schedule thousands of sequences, not millions
MAX_TOKENS = 1 << 27  # 134 million tokens: past the longest served context windows
MAX_SPEC_TOKENS = 128  # speculative proposals per step are a handful
Cards = Annotated[int, Strict(), Field(gt=0, le=MAX_CARDS_PER_NODE)]
ParallelSize = Annotated[int, Strict(), Field(gt=0, le=MAX_PARALLEL)]
Seqs = Annotated[int, Strict(), Field(gt=0, le=MAX_SEQS)]
Tokens = Annotated[int, Strict(), Field(gt=0, le=MAX_TOKENS)]
# true or false as YAML writes them: a quoted "yes" or a 1 is refused, not read as true
Switch = Annotated[bool, Strict()]
# a measured figure: finite (NaN and infinity are not JSON, and compare false with anything)
Finite = Annotated[float, Field(allow_inf_nan=False)]
Slug = Annotated[
    str,
    Field(
        pattern=r"^[a-z0-9][a-z0-9._-]{0,62}$",
        description="lower-case letters, digits, '.', '_' and '-' (it names files)",
    ),
]


class Strict_(BaseModel):
    """One base for every shape model: typos are errors, values are immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)


AUTO = "auto"
_NO_BYTES: dict[str, Any] = {"default": "0 B"}  # a byte size's default as a shape spells it
_BYTE_SIZE_SCHEMA = TypeAdapter(ByteSize).json_schema()
CardTotal = Annotated[
    ByteSize,
    Field(gt=0),  # a card of 0 B holds nothing, and every fraction of it divides by 0
    WithJsonSchema({"anyOf": [_BYTE_SIZE_SCHEMA, {"const": AUTO}]}),
]


def _engine_names(schema: dict[str, Any]) -> None:
    """The schema's engine values are the registry's keys, never a list typed twice."""
    schema["enum"] = sorted(ENGINES)


def _binary_names(schema: dict[str, Any]) -> None:
    """launch.binary: every server a registered engine starts (or null)."""
    names = sorted({b for engine in ENGINES.values() for b in engine.binaries})
    schema["anyOf"] = [{"enum": names, "type": "string"}, {"type": "null"}]


def _ceiling_forms(schema: dict[str, Any]) -> None:
    """``ceiling: 22 GiB`` is the short form of ``{bytes: 22 GiB}`` (see ``_ceiling_text``)."""
    schema["anyOf"].insert(0, _BYTE_SIZE_SCHEMA)


def _byte_rate(value: Any) -> int:
    """``"21 GB/s"``, ``"20.4 GiB/s"``: a byte size per second, in bytes/s."""
    text = value.strip() if isinstance(value, str) else None
    if text is None or not text.endswith("/s"):
        raise PydanticCustomError(
            "byte_rate", 'expected a byte size per second, e.g. "21 GB/s" or "20.4 GiB/s"'
        )
    try:
        rate = parse_bytes(text[:-2])
    except UnitsError as exc:
        raise PydanticCustomError("byte_rate", "{reason} (then /s)", {"reason": str(exc)}) from None
    if rate <= 0:
        raise PydanticCustomError("byte_rate", "a bandwidth is more than 0 B/s")
    return rate


ByteRate = Annotated[
    int,
    BeforeValidator(_byte_rate),
    WithJsonSchema({"type": "string", "pattern": r"^.*/s\s*$", "examples": ["21 GB/s"]}),
]


def _card_schema(schema: dict[str, Any]) -> None:
    """card.total is required unless card.sku names a card with a plain CUDA total."""
    named = [t.sku for t in CUDA_TOTALS if t.plain is not None]
    schema.pop("required", None)
    schema["anyOf"] = [
        {"required": ["total"]},
        {"required": ["sku"], "properties": {"sku": {"enum": named}}},
    ]


class Card(Strict_):
    model_config = ConfigDict(extra="forbid", frozen=True, json_schema_extra=_card_schema)

    total: CardTotal = Field(
        description="memory of one card, as the vendor or boot ledger states it, or "
        "'auto': the device budget `fakplan budget` reports (NVML, host RAM, or "
        "FAKPLAN_DEVICE_BUDGET_BYTES), read when the shape is loaded; left out where "
        "card.sku names a card whose CUDA total public logs print (fakplan cards): that "
        "figure, which an engine sizing its own pool multiplies"
    )
    # where card.total came from when the shape left it out (the card table's sentence)
    _total_from: str | None = PrivateAttr(default=None)
    count: Cards = Field(1, description="cards per node")
    device: Literal["gpu", "cpu"] = Field(
        "gpu",
        description="what holds the pair: a GPU, or host RAM for a CPU engine "
        "(vLLM's CPU build sizes its pool from VLLM_CPU_KVCACHE_SPACE)",
    )
    sms: Annotated[int, Strict(), Field(gt=0, le=1 << 12)] | None = Field(
        None,
        description="streaming multiprocessors of one GPU (132 on an H100 or H200 SXM): "
        "vLLM's sampler sizes a buffer by them, so a pool vLLM sizes for itself needs them; "
        "taken from the card table when card.sku names a card whose vendor states them",
    )
    capability: str | None = Field(
        None,
        description='CUDA compute capability of one GPU, major.minor ("9.0" on an H100 or '
        'H200, "8.0" on an A100): the kernel vLLM loads a GPTQ, AWQ or other weight-only integer '
        "checkpoint into depends on it, and so do its weights' bytes; taken from the card "
        "table when card.sku names a card",
    )
    sku: str | None = Field(
        None,
        description="the card by name (fakplan budget names the one NVML reports), for the "
        "rates predicted before boot: " + ", ".join(card.sku for card in CARDS),
    )
    bandwidth: ByteRate | None = Field(
        None,
        description='memory bandwidth of one card, e.g. "21 GB/s": a CPU host\'s as measured '
        "(a streaming read), or a card's where it differs from the table's",
    )

    @field_validator("capability", mode="before")
    @classmethod
    def _capability(cls, value: object) -> object:
        """major.minor as text; YAML reads an unquoted 9.0 as a number, taken as written."""
        if value is None:
            return None
        text = str(float(value)) if isinstance(value, float) else value
        if not isinstance(text, str) or re.fullmatch(CAPABILITY_PATTERN, text) is None:
            raise PydanticCustomError(
                "card_capability",
                'expected a CUDA compute capability, major.minor ("9.0" on an H100 or '
                "H200, \"8.0\" on an A100), got '{value}'",
                {"value": value},
            )
        return text

    @field_validator("sku")
    @classmethod
    def _known_sku(cls, value: str | None) -> str | None:
        if value is None:
            return None
        row = card_sku(value)
        if row is None:
            raise PydanticCustomError(
                "card_sku",
                "{reason}, or leave sku out and state card.bandwidth",
                {"reason": unknown_sku(value)},
            )
        return row.sku

    @model_validator(mode="wrap")
    @classmethod
    def _total_from_table(cls, data: Any, handler: ModelWrapValidatorHandler[Card]) -> Card:
        """card.total left out: the CUDA total public logs print for card.sku, where every
        print made without a setting of its own (WSL2, MIG) reads one figure."""
        found = None
        if isinstance(data, dict) and "total" not in data and isinstance(data.get("sku"), str):
            row = card_sku(data["sku"])
            found = None if row is None else cuda_total(row.sku)
            if found is not None and found.plain is not None:
                data = {**data, "total": found.plain}
            elif row is not None:
                why = (
                    f"no public log fakplan holds prints an {row.sku}'s CUDA total"
                    if found is None
                    else f"the public logs fakplan holds print no one figure for an {row.sku} "
                    f"outside a setting of their own ({found.sentence()})"
                )
                raise PydanticCustomError(
                    "card_total",
                    "card.total is required: {why}; state CUDA's total of the card, e.g. "
                    '"79.19 GiB" on an H100 80GB (torch.cuda.mem_get_info, or the '
                    "total vLLM prints at startup)",
                    {"why": why},
                )
        card = handler(data)
        if found is not None and found.plain is not None:
            card._total_from = f"{found.plain}, card.sku {found.sku}: {found.sentence()}"
        return card

    @property
    def total_from(self) -> str | None:
        """Where card.total came from when the shape left it out, else None."""
        return self._total_from

    @model_validator(mode="after")
    def _sms_from_table(self) -> Card:
        row = card_sku(self.sku) if self.sku else None
        if self.sms is None and row is not None and row.sms is not None:
            object.__setattr__(self, "sms", row.sms)
        if self.capability is None and row is not None:
            object.__setattr__(self, "capability", row.capability)
        return self


class Parallel(Strict_):
    tensor: ParallelSize = 1
    pipeline: ParallelSize = 1
    nodes: Annotated[int, Strict(), Field(gt=0, le=MAX_NODES)] = Field(
        1, description="nodes the parallel group spans"
    )


class Budget(Strict_):
    """The pair: what one card gives to weights and to the KV pool."""

    weights: ByteSize = Field(description="weights budget per card")
    kv: ByteSize = Field(description="KV pool per card")


Fraction = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]


class Serving(Strict_):
    max_num_seqs: Seqs = Field(description="sequence slots served at once")
    max_model_len: Tokens = Field(description="the context window, in tokens")
    kv_cache_dtype: str = Field("auto", description="KV element type, in the engine's spelling")
    dtype: str = Field(
        "auto",
        description="vLLM, SGLang: the weights' dtype (--dtype); KV 'auto' follows it, and "
        "their 'auto' serves a float32 checkpoint in 16 bits",
    )
    quantization: Literal["fp8"] | None = Field(
        None,
        description="vLLM --quantization: fp8 quantizes a 16-bit checkpoint's linear layers "
        "as it loads (a checkpoint quantized on disk states its own, in its config)",
    )
    spec_tokens: Annotated[int, Strict(), Field(ge=0, le=MAX_SPEC_TOKENS)] = Field(
        0, description="speculative tokens per step"
    )
    block_size: Tokens | None = Field(
        None, description="KV page size in tokens, where the engine takes one"
    )
    max_num_batched_tokens: Tokens | None = Field(
        None, description="vLLM: tokens per scheduler step (sizes sliding-window blocks)"
    )
    prefix_caching: Switch | None = Field(
        None,
        description=(
            "vLLM: prefix caching (hybrid models then keep 2 state pages per sequence); "
            "unset: the release's default (on, but off for hybrid models before 0.28)"
        ),
    )
    kv_unified: Switch | None = Field(
        None, description="llama.cpp: one KV cache shared by all slots (-kvu)"
    )
    language_model_only: Switch = Field(
        False,
        description="vLLM: serve a multimodal model as text only (--language-model-only): "
        "its vision and audio towers are not built, so neither their weights nor an image's "
        "profiling run take memory",
    )
    enforce_eager: Switch = Field(
        False,
        description="vLLM: no CUDA graphs and no torch.compile (--enforce-eager): from 0.20 "
        "the pool is then sized without a CUDA-graph estimate",
    )
    gpu_memory_utilization: Fraction | None = Field(
        None,
        description="vLLM: let the engine size its KV pool, from this fraction of the card "
        "(--gpu-memory-utilization; on the CPU build, of the host's memory) instead of "
        "budget.kv; the plan predicts the pool, the weights and the floor, and `fakplan "
        "verify` closes them",
    )
    mem_fraction_static: Fraction | None = Field(
        None,
        description="SGLang: let the engine size its KV pool (--mem-fraction-static): it "
        "keeps 1 - this fraction of the memory free before the weights load and gives the "
        "rest, less the weights, to the pool; instead of budget.kv, the plan predicts the "
        "pool, the weights and the memory in use before them, and `fakplan verify` closes them",
    )


# the serving fields that let an engine size its own pool, one per engine that does
SIZING_FIELDS = ("gpu_memory_utilization", "mem_fraction_static")


class LedgerCeiling(Strict_):
    """A ceiling read from a boot ledger rather than typed in."""

    model_config = ConfigDict(
        json_schema_extra={"oneOf": [{"required": ["ledger"]}, {"required": ["bytes"]}]}
    )

    ledger: str | None = Field(None, description="boot log path, relative to the shape file")
    bytes: ByteSize | None = None
    engine_floor: ByteSize | None = Field(
        None, description="what the engine keeps free at worst case, when the log does not say"
    )
    note: str = ""

    @model_validator(mode="after")
    def _one_source(self) -> LedgerCeiling:
        if (self.ledger is None) == (self.bytes is None):
            raise PydanticCustomError(
                "ceiling_source",
                'give the ceiling as a byte size ("29120 MiB") or as {ledger: PATH}',
            )
        return self


class ControlFigure(Strict_):
    """A measured baseline a prediction compares against."""

    value: Annotated[Finite, Field(gt=0)]
    unit: str = "tokens/s"
    note: str = ""


class Component(Strict_):
    """One per-token cost of a custom engine, stated once.

    With ``dtype`` the cost scales with the KV element size (stated at that
    dtype); without it the cost is the same at every dtype (an index key).
    """

    model_config = ConfigDict(
        json_schema_extra={"oneOf": [{"required": ["per_token"]}, {"required": ["per_page"]}]}
    )

    name: Slug
    per_token: ByteSize | None = None
    per_page: ByteSize | None = None
    dtype: str | None = Field(None, description="the KV dtype this size is stated at")
    note: str = ""

    @model_validator(mode="after")
    def _one_size(self) -> Component:
        if (self.per_token is None) == (self.per_page is None):
            raise PydanticCustomError(
                "component_size", "give exactly one of per_token or per_page (a byte size)"
            )
        return self


class Contract(Strict_):
    """What a token, a sequence and the pool cost on an engine fakplan does not model."""

    page_tokens: Tokens = Field(1, description="tokens per KV page")
    per_token: list[Component] = Field(min_length=1)
    per_seq: ByteSize = Field(
        0, description="state per sequence slot, dtype-independent", json_schema_extra=_NO_BYTES
    )
    fixed: ByteSize = Field(
        0,
        description="pool-resident constants (prefix checkpoints, ...)",
        json_schema_extra=_NO_BYTES,
    )
    dtypes: list[str] | None = Field(None, description="the KV dtypes this engine accepts")


UNCLAIMED_WARN_ABOVE = "1 GiB"  # what the unclaimed gate tolerates unless limits state it


class Limits(Strict_):
    """Declared bounds the gates hold a shape to."""

    max_spec_rows: PositiveInt | None = Field(
        None, description="bound on seqs x (1 + spec_tokens), e.g. a sampler's exactness bound"
    )
    unclaimed_warn_above: ByteSize = Field(
        UNCLAIMED_WARN_ABOVE,
        validate_default=True,
        description="warn when more than this is left between the pair and the ceiling "
        "(default 1 GiB: VRAM the engine could use for sessions it is not given)",
    )
    kv_tokens_tolerance_pct: Annotated[Finite, Field(gt=0, le=50)] = Field(
        0.5, description="tolerance of the KV-tokens prediction against the boot ledger"
    )
    rope_scaling: Switch = Field(
        False, description="declare that max_model_len past the trained context is intended"
    )
    sizing_tolerance_pct: Annotated[Finite, Field(gt=0, le=50)] = Field(
        1.0,
        description="where the engine sizes its pool (serving.gpu_memory_utilization): the "
        "tolerance of the predicted pool, tokens, weights and activation peak against the "
        "boot ledger",
    )


class Expectation(Strict_):
    """A live-rate prediction against a named control figure."""

    id: Slug
    metric: Literal["decode_tps", "prefill_tps"]
    control: str
    change_pct: tuple[Finite, Finite] = Field(description="[low, high] percent change vs control")
    note: str = ""

    @model_validator(mode="after")
    def _ordered(self) -> Expectation:
        low, high = self.change_pct
        if low > high:
            raise PydanticCustomError("change_order", "change_pct must be [low, high]")
        return self


class Speculative(Strict_):
    """Speculative decoding as the engine takes it (serving.spec_tokens sets the count)."""

    method: str = Field(description="e.g. mtp, eagle, eagle3, ngram, draft_model")
    model: str | None = Field(None, description="the draft model, where the method needs one")


# Kubernetes' own grammars (apimachinery validation): a DNS-1123 label, a label key's name
# part and value, a qualified key with an optional DNS-subdomain prefix
_K8S_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_K8S_NAME_PART = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
K8sLabelKey = Annotated[
    str,
    Field(
        pattern=rf"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?{_K8S_NAME_PART}$",
        max_length=253,
        description="a Kubernetes label key: [prefix/]name",
    ),
]
K8sLabelValue = Annotated[
    str,
    Field(pattern=rf"^({_K8S_NAME_PART})?$", max_length=63, description="a label value"),
]
K8sLabelName = Annotated[str, Field(pattern=_K8S_LABEL, max_length=63)]
ImageRef = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,511}$",
        description="a container image reference, e.g. vllm/vllm-openai:v0.19.0",
    ),
]


class Toleration(Strict_):
    key: K8sLabelKey | None = None
    operator: Literal["Exists", "Equal"] = "Equal"
    value: K8sLabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None


# an environment variable's name as POSIX shells take it
EnvName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")]
# what the launch exports itself: a shape's launch.env must not shadow them
RESERVED_ENV = frozenset({"PATH", "FAKPLAN_IGNORE_GATES", "FAKPLAN_SHAPE_DIR"})


class SecretKey(Strict_):
    """A key of a Secret, referenced (never read by fakplan)."""

    name: K8sLabelName
    key: Annotated[str, Field(pattern=r"^[-._a-zA-Z0-9]{1,253}$")]


class ShapeVolume(Strict_):
    """A PersistentVolumeClaim that holds the shape's folder: what its relative paths name."""

    @field_validator("sub_path")
    @classmethod
    def _inside(cls, value: str | None) -> str | None:
        # Kubernetes refuses a subPath that climbs out of its volume (validation.go
        # validateSubPath: no ".." element)
        if value is not None and ".." in value.split("/"):
            raise PydanticCustomError(
                "sub_path",
                "a path inside the volume, without '..' elements, got {got}",
                {"got": repr(value)},
            )
        return value

    claim: K8sLabelName = Field(description="the PersistentVolumeClaim's name")
    sub_path: Annotated[str, Field(pattern=r"^[A-Za-z0-9._-][A-Za-z0-9._/-]{0,254}$")] | None = (
        Field(None, description="the shape's folder within the volume")
    )


# the model cache's mount in the pod: a folder of its own, not a user's home (the engines'
# images differ in their user; HF_HOME points wherever it is mounted)
MODEL_CACHE_PATH = "/models/huggingface"


class ModelCache(Strict_):
    """Where a pod keeps the checkpoints the engine downloads (HF_HOME): a claim that
    outlives the pod, else an emptyDir that lives as long as it."""

    claim: K8sLabelName | None = Field(
        None, description="a PersistentVolumeClaim to keep downloads across restarts"
    )
    path: Annotated[str, Field(pattern=r"^/[A-Za-z0-9._/-]{0,254}$")] = Field(
        MODEL_CACHE_PATH, description="where it is mounted; HF_HOME points there"
    )
    size: ByteSize | None = Field(None, description="an emptyDir's sizeLimit (no claim)")


class KubernetesLaunch(Strict_):
    """How `fakplan compile --target kubernetes` deploys the shape (see docs/launch.md, "On
    Kubernetes"): one node is a Deployment, several a LeaderWorkerSet."""

    image: ImageRef | None = Field(
        None, description="the engine's image (vllm: default vllm/vllm-openai:v<engine_version>)"
    )
    namespace: K8sLabelName | None = None
    labels: dict[K8sLabelKey, K8sLabelValue] = Field(default_factory=dict)
    node_selector: dict[K8sLabelKey, K8sLabelValue] = Field(default_factory=dict)
    tolerations: list[Toleration] = Field(default_factory=list, max_length=64)
    service_type: Literal["ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    replicas: Annotated[int, Strict(), Field(gt=0, le=1024)] = 1
    shm_size: ByteSize | None = Field(
        None, description="/dev/shm (memory-backed) per pod; default per engine"
    )
    load_rate: ByteSize = Field(
        200 << 20,
        description="bytes a second a pod reads its weights at (an assumption, stated): "
        "the startup budget must cover the weights at this rate",
        json_schema_extra={"default": "200 MiB"},
    )
    startup_budget_s: Annotated[int, Strict(), Field(gt=0, le=86_400)] | None = Field(
        None,
        description="seconds the startup probe allows; default: twice the load estimate, at least 600",
    )
    probe_image: ImageRef | None = Field(
        None, description="an image with fakplan installed: renders the in-cluster probe Job"
    )
    api_key_secret: SecretKey | None = Field(
        None, description="the endpoint's API key, for the probe Job (by reference)"
    )
    shape_volume: ShapeVolume | None = Field(
        None,
        description="a volume holding the shape's folder (a GGUF or model folder the argv "
        "names relative to it): mounted read-only as the engine's working directory",
    )
    hf_token_secret: SecretKey | None = Field(
        SecretKey(name="hf-token", key="token"),
        description="the Hugging Face token gated checkpoints need, as HF_TOKEN by reference "
        "(optional: a pod starts without the Secret); null leaves it out",
        json_schema_extra={"default": {"name": "hf-token", "key": "token"}},
    )
    model_cache: ModelCache | None = Field(
        ModelCache(),
        description="the volume downloads go to (HF_HOME); null leaves it out",
        json_schema_extra={"default": {"path": MODEL_CACHE_PATH}},
    )


class Launch(Strict_):
    """How the rendered launch script starts the engine."""

    host: str = "0.0.0.0"
    port: Annotated[int, Strict(), Field(gt=0, lt=65536)] = 8000
    binary: str | None = Field(
        None,
        description="the server to start, one the engine names (checked against it). "
        "llamacpp: llama-server (default) or llama-cpp-python; vllm: vllm (`vllm serve`, "
        "default) or vllm-api-server (`python -m vllm.entrypoints.openai.api_server`, for "
        "builds such as vllm-cpu whose `vllm` command cannot find its own package)",
        json_schema_extra=lambda schema: _binary_names(schema),
    )
    gpu_layers: Annotated[int, Strict(), Field(ge=-1, le=1 << 16)] | None = Field(
        None, description="llamacpp: layers offloaded to the GPU (default: all)"
    )
    head_address: str | None = Field(
        None, description="multi-node: the head node's address every other node joins"
    )
    head_port: Annotated[int, Strict(), Field(gt=0, lt=65536)] | None = Field(
        None,
        description="multi-node: Ray's port (vllm, default 6379) or SGLang's dist-init port (default 20000)",
    )
    weights: str | None = Field(
        None,
        description="what the engine loads (path or repo), when it differs from model: "
        "e.g. a GGUF file for a catalog geometry",
    )
    served_model_name: str | None = None
    speculative: Speculative | None = None
    extra_args: list[str] = Field(
        default_factory=list, description="appended to the engine's argv, each as one word"
    )
    kubernetes: KubernetesLaunch | None = Field(
        None, description="Kubernetes manifests (fakplan compile --target kubernetes)"
    )
    env: dict[EnvName, Annotated[str, Field(max_length=4096)] | SecretKey] = Field(
        default_factory=dict,
        max_length=256,
        description="variables the engine runs with, e.g. VLLM_ALLOW_LONG_MAX_MODEL_LEN: '1': "
        "a plain value is exported by serve.sh and set in the manifests; {name, key} is a "
        "Secret's key (HF_TOKEN): the manifests reference it, serve.sh requires it from its "
        "own environment, and no file holds its value",
    )

    @field_validator("env")
    @classmethod
    def _not_fakplans(cls, value: dict[str, str | SecretKey]) -> dict[str, str | SecretKey]:
        taken = sorted(set(value) & RESERVED_ENV)
        if taken:
            raise PydanticCustomError(
                "env_reserved",
                "{names}: set by fakplan's launch itself; name the engine's own variables",
                {"names": ", ".join(taken)},
            )
        return value


def _pool_sources(schema: dict[str, Any]) -> None:
    """budget is an object when stated (never null), and required unless the engine sizes
    the pool: the loader's rule (``checks._check_pool_source``) as a schema states it."""
    budget = schema["properties"]["budget"]
    ref = next(option for option in budget.pop("anyOf") if "$ref" in option)
    budget.pop("default", None)
    budget.update(ref)
    schema["anyOf"] = [
        {"required": ["budget"]},
        {"properties": {"serving": {"required": ["gpu_memory_utilization"]}}},
        {"properties": {"serving": {"required": ["mem_fraction_static"]}}},
    ]


def _quoted(value: str) -> str:
    return json.dumps(value)


class Monitoring(Strict_):
    """How the fleet's Prometheus tells this endpoint's series from every other's."""

    selector: str | None = Field(
        None,
        max_length=MAX_SELECTOR,
        description="PromQL label matchers that pick this endpoint's series, e.g. "
        'job="vllm-a",instance="10.0.0.5:8000" (default: job="<name>", the shape\'s name as '
        "the scrape job); fakplan rules adds model_name to them",
    )

    @field_validator("selector")
    @classmethod
    def _matchers(cls, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            return render(parse_matchers(value))
        except SelectorError as exc:
            raise PydanticCustomError("selector", str(exc)) from None


class Shape(Strict_):
    """One endpoint, as an operator reviews it in git."""

    model_config = ConfigDict(json_schema_extra=_pool_sources)

    name: Slug
    engine: str = Field(
        description="the engine whose arithmetic applies; custom: one fakplan does not model, "
        "with its contract typed in",
        json_schema_extra=_engine_names,
    )
    engine_version: str | None = Field(
        None,
        description="the release whose arithmetic applies (default: the newest modelled); "
        "a newer one takes the newest rules, and every output says so",
    )
    model: str = Field(
        description="a path (GGUF file, HF folder or config.json, against the shape's "
        "folder), a Hugging Face id (org/name: the cache, then the Hub unless offline), "
        "or a catalog id (offline fallback)"
    )
    revision: str | None = Field(
        None,
        description="the Hub revision of model (a branch, tag or commit; default main): "
        "the launch pins the commit it resolves to",
        min_length=1,
        max_length=255,
        pattern=r"^[\w./-]+$",
    )
    card: Card
    parallel: Parallel = Parallel()
    budget: Budget | None = Field(
        None,
        description="the pair; absent where the engine sizes its pool "
        "(serving.gpu_memory_utilization, serving.mem_fraction_static)",
    )
    serving: Serving
    ceiling: LedgerCeiling | None = Field(None, json_schema_extra=_ceiling_forms)
    control: dict[str, ControlFigure] = Field(default_factory=dict)
    contract: Contract | None = None
    limits: Limits = Limits()
    expect: list[Expectation] = Field(default_factory=list)
    launch: Launch = Launch()
    monitoring: Monitoring = Monitoring()

    @property
    def metrics_selector(self) -> str:
        """The matchers that pick this endpoint's series (default: the scrape job named
        after the shape)."""
        return self.monitoring.selector or render(parse_matchers(f"job={_quoted(self.name)}"))

    @property
    def stated_budget(self) -> Budget:
        """The pair the shape states (every shape but one whose engine sizes its pool)."""
        assert self.budget is not None, "an engine-sized pool has no stated budget"
        return self.budget

    @property
    def engine_sized(self) -> bool:
        """The engine sizes the pool from a fraction of the card; the plan predicts it."""
        return self.sizing_fraction is not None

    @property
    def sizing_fraction(self) -> tuple[str, float] | None:
        """The serving field that lets the engine size its pool, and its fraction."""
        s = self.serving
        for name in SIZING_FIELDS:
            value = getattr(s, name)
            if value is not None:
                return name, value
        return None

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        if value not in ENGINES:
            raise PydanticCustomError(
                "engine",
                "expected one of {names}, got {got}",
                {"names": ", ".join(sorted(ENGINES)), "got": repr(value)},
            )
        return value

    @field_validator("budget", mode="before")
    @classmethod
    def _budget_stated(cls, value: Any) -> Any:
        if value is None:
            raise PydanticCustomError(
                "budget", "expected {weights: BYTES, kv: BYTES}, or no budget key at all"
            )
        return value

    @field_validator("ceiling", mode="before")
    @classmethod
    def _ceiling_text(cls, value: Any) -> Any:
        if isinstance(value, dict) or value is None:
            return value
        if isinstance(value, str):
            try:
                parse_bytes(value)
            except UnitsError as exc:
                raise PydanticCustomError("byte_size", str(exc)) from None
            return {"bytes": value}
        raise PydanticCustomError(
            "byte_size",
            'expected a byte size such as "29120 MiB" or {{ledger: PATH}}, got {got}',
            {"got": value},
        )

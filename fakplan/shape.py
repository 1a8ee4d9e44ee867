"""The shape: an endpoint's declared VRAM pair, slots, window and dtype, as YAML.

``load_shape`` reads a file and returns a frozen ``Shape``, or raises one
``ShapeError`` that names the file, the line and the field:

    shapes/x.yaml:12: budget.kv: expected a byte size such as "5120 MiB", got 5120
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    Strict,
    TypeAdapter,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails, PydanticCustomError

from fakplan.budget import DeviceBudget, probe_budget
from fakplan.dtypes import MODEL_DTYPES
from fakplan.errors import ReleaseError, ShapeError, UnitsError
from fakplan.units import ByteSize, human_pair, parse_bytes

PositiveInt = Annotated[int, Strict(), Field(gt=0)]
NonNegativeInt = Annotated[int, Strict(), Field(ge=0)]
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
    WithJsonSchema({"anyOf": [_BYTE_SIZE_SCHEMA, {"const": AUTO}]}),
]


def _engine_names(schema: dict[str, Any]) -> None:
    """The schema's engine values are the registry's keys, never a list typed twice."""
    from fakplan.engines import ENGINES

    schema["enum"] = sorted(ENGINES)


def _ceiling_forms(schema: dict[str, Any]) -> None:
    """``ceiling: 22 GiB`` is the short form of ``{bytes: 22 GiB}`` (see ``_ceiling_text``)."""
    schema["anyOf"].insert(0, _BYTE_SIZE_SCHEMA)


class Card(Strict_):
    total: CardTotal = Field(
        description="memory of one card, as the vendor or boot ledger states it, or "
        "'auto': the device budget `fakplan budget` reports (NVML, host RAM, or "
        "FAKPLAN_DEVICE_BUDGET_BYTES), read when the shape is loaded"
    )
    count: PositiveInt = Field(1, description="cards per node")
    device: Literal["gpu", "cpu"] = Field(
        "gpu",
        description="what holds the pair: a GPU, or host RAM for a CPU engine "
        "(vLLM's CPU build sizes its pool from VLLM_CPU_KVCACHE_SPACE)",
    )


class Parallel(Strict_):
    tensor: PositiveInt = 1
    pipeline: PositiveInt = 1
    nodes: PositiveInt = Field(1, description="nodes the parallel group spans")


class Budget(Strict_):
    """The pair: what one card gives to weights and to the KV pool."""

    weights: ByteSize = Field(description="weights budget per card")
    kv: ByteSize = Field(description="KV pool per card")


class Serving(Strict_):
    max_num_seqs: PositiveInt = Field(description="sequence slots served at once")
    max_model_len: PositiveInt = Field(description="the context window, in tokens")
    kv_cache_dtype: str = Field("auto", description="KV element type, in the engine's spelling")
    dtype: str = Field(
        "auto",
        description="vLLM, SGLang: the weights' dtype (--dtype); KV 'auto' follows it, and "
        "their 'auto' serves a float32 checkpoint in 16 bits",
    )
    spec_tokens: NonNegativeInt = Field(0, description="speculative tokens per step")
    block_size: PositiveInt | None = Field(
        None, description="KV page size in tokens, where the engine takes one"
    )
    max_num_batched_tokens: PositiveInt | None = Field(
        None, description="vLLM: tokens per scheduler step (sizes sliding-window blocks)"
    )
    prefix_caching: bool = Field(
        True, description="vLLM: prefix caching (hybrid models keep 2 state pages per sequence)"
    )
    kv_unified: bool | None = Field(
        None, description="llama.cpp: one KV cache shared by all slots (-kvu)"
    )


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

    value: Annotated[float, Field(gt=0)]
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

    page_tokens: PositiveInt = Field(1, description="tokens per KV page")
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


class Limits(Strict_):
    """Declared bounds the gates hold a shape to."""

    max_spec_rows: PositiveInt | None = Field(
        None, description="bound on seqs x (1 + spec_tokens), e.g. a sampler's exactness bound"
    )
    unclaimed_warn_above: ByteSize | None = Field(
        None, description="warn when more than this is left between the pair and the ceiling"
    )
    kv_tokens_tolerance_pct: Annotated[float, Field(gt=0, le=50)] = Field(
        0.5, description="tolerance of the KV-tokens prediction against the boot ledger"
    )
    rope_scaling: bool = Field(
        False, description="declare that max_model_len past the trained context is intended"
    )


class Expectation(Strict_):
    """A live-rate prediction against a named control figure."""

    id: Slug
    metric: Literal["decode_tps", "prefill_tps"]
    control: str
    change_pct: tuple[float, float] = Field(description="[low, high] percent change vs control")
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


class Launch(Strict_):
    """How the rendered launch script starts the engine."""

    host: str = "0.0.0.0"
    port: Annotated[int, Strict(), Field(gt=0, lt=65536)] = 8000
    binary: Literal["llama-server", "llama-cpp-python", "vllm", "vllm-api-server"] | None = Field(
        None,
        description="the server to start. llamacpp: llama-server (default) or "
        "llama-cpp-python; vllm: vllm (`vllm serve`, default) or vllm-api-server "
        "(`python -m vllm.entrypoints.openai.api_server`, for builds such as vllm-cpu "
        "whose `vllm` command cannot find its own package)",
    )
    gpu_layers: Annotated[int, Strict(), Field(ge=-1)] | None = Field(
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


class Shape(Strict_):
    """One endpoint, as an operator reviews it in git."""

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
    model: str = Field(description="catalog id, GGUF path, or HF folder/config.json")
    card: Card
    parallel: Parallel = Parallel()
    budget: Budget
    serving: Serving
    ceiling: LedgerCeiling | None = Field(None, json_schema_extra=_ceiling_forms)
    control: dict[str, ControlFigure] = Field(default_factory=dict)
    contract: Contract | None = None
    limits: Limits = Limits()
    expect: list[Expectation] = Field(default_factory=list)
    launch: Launch = Launch()

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        from fakplan.engines import ENGINES

        if value not in ENGINES:
            raise PydanticCustomError(
                "engine",
                "expected one of {names}, got {got}",
                {"names": ", ".join(sorted(ENGINES)), "got": repr(value)},
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


# ---------------------------------------------------------------- loading


class _LineMap:
    """Field path -> line, from the YAML node tree (so errors can point at lines)."""

    def __init__(self, root: yaml.Node) -> None:
        self.root = root

    def line(self, path: tuple[str | int, ...]) -> int:
        node = self.root
        best = node.start_mark.line + 1
        for part in path:
            nxt: yaml.Node | None = None
            if isinstance(node, yaml.MappingNode):
                for key, value in node.value:
                    if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                        best = key.start_mark.line + 1
                        nxt = value
                        break
            elif (
                isinstance(node, yaml.SequenceNode)
                and isinstance(part, int)
                and 0 <= part < len(node.value)
            ):
                nxt = node.value[part]
                best = nxt.start_mark.line + 1
            if nxt is None:
                return best
            node = nxt
        return best


def _duplicate_key(node: yaml.Node) -> tuple[str, int] | None:
    """PyYAML keeps the last of two equal keys silently; a shape must not."""
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                if key.value in seen:
                    return key.value, key.start_mark.line + 1
                seen.add(key.value)
            found = _duplicate_key(value)
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            found = _duplicate_key(item)
            if found:
                return found
    return None


def field_path(loc: tuple[str | int, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _message(error: ErrorDetails, model: type[BaseModel]) -> str:
    kind = error["type"]
    got = error.get("input")
    if kind == "extra_forbidden":
        allowed = _allowed_keys(model, error["loc"][:-1])
        hint = f"; expected one of: {', '.join(allowed)}" if allowed else ""
        return f"unknown key{hint}"
    if kind == "missing":
        return "required field is missing"
    if kind in {"greater_than", "greater_than_equal", "less_than_equal"}:
        return f"{error['msg'].replace('Input should be', 'expected a value')}, got {got!r}"
    if kind in {"int_type", "int_parsing", "int_from_float"}:
        return f"expected a whole number, got {got!r}"
    if kind in {"string_type"}:
        return f"expected text, got {got!r}"
    if kind in {"model_type", "model_attributes_type", "dict_type"}:
        return f"expected a mapping of keys, got {got!r}"
    if kind in {"list_type", "tuple_type"}:
        return f"expected a list, got {got!r}"
    if kind == "string_pattern_mismatch":
        return f"expected lower-case letters, digits, '.', '_' or '-', got {got!r}"
    msg = error["msg"]
    for prefix in ("Value error, ",):
        msg = msg.removeprefix(prefix)
    return msg


def _allowed_keys(model: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    current: Any = model
    for part in loc:
        if isinstance(part, int) or not (
            isinstance(current, type) and issubclass(current, BaseModel)
        ):
            current = _inner_model(current)
            if isinstance(part, int):
                continue
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return []
        info = current.model_fields.get(str(part))
        if info is None:
            return []
        current = _inner_model(info.annotation)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return []


def _inner_model(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _inner_model(arg)
        if isinstance(found, type) and issubclass(found, BaseModel):
            return found
    return annotation


def _read_yaml(path: Path, text: str) -> tuple[Any, _LineMap]:
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = exc.problem or exc.context or "malformed YAML"
        raise ShapeError(f"malformed YAML: {problem}", file=path, line=line) from None
    except yaml.YAMLError as exc:
        raise ShapeError(f"malformed YAML: {exc}", file=path) from None
    if node is None:
        raise ShapeError("the file is empty; a shape is a YAML mapping", file=path, line=1)
    duplicate = _duplicate_key(node)
    if duplicate:
        key, line = duplicate
        raise ShapeError(f"key {key!r} appears twice", file=path, line=line)
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ShapeError(
            f"a shape is a YAML mapping of keys, got {type(data).__name__}",
            file=path,
            line=node.start_mark.line + 1,
        )
    return data, _LineMap(node)


def load_shape(path: str | Path, budget: BudgetProbe | None = None) -> LoadedShape:
    """Read and validate one shape file (``budget`` answers ``card.total: auto``)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ShapeError("no such file", file=path) from None
    except IsADirectoryError:
        raise ShapeError("is a folder, expected a shape file (.yaml)", file=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ShapeError(f"cannot read: {exc}", file=path) from None
    return load_shape_text(text, path, budget)


BudgetProbe = Callable[[bool], DeviceBudget]


def _probe(gpu: bool) -> DeviceBudget:
    return probe_budget(gpu=gpu)


def _resolve_card_total(
    data: dict[str, Any], path: Path, lines: _LineMap, budget: BudgetProbe
) -> str | None:
    """``card.total: auto`` becomes the device budget's bytes; returns the sentence saying why."""
    card = data.get("card")
    if not isinstance(card, dict) or card.get("total") != AUTO:
        return None
    gpu = card.get("device", "gpu") != "cpu"
    answer = budget(gpu)
    if gpu and answer.source == "host":
        # host RAM is no GPU's memory: a made-up card size, and one that changes with
        # whichever machine compiles the shape
        raise ShapeError(
            f"'auto' on a GPU card needs the GPU's own answer, and NVML gave none "
            f"({answer.sentence.partition('because ')[2] or answer.sentence}); compile on "
            "the serving machine, set FAKPLAN_DEVICE_BUDGET_BYTES, or state the card's "
            'memory, e.g. "80 GiB"',
            file=path,
            line=lines.line(("card", "total")),
            field="card.total",
        )
    if answer.budget_bytes is None:
        raise ShapeError(
            f"'auto' needs the device budget, and it is unknown ({answer.sentence}); "
            'state the card\'s memory, e.g. "80 GiB", or set FAKPLAN_DEVICE_BUDGET_BYTES',
            file=path,
            line=lines.line(("card", "total")),
            field="card.total",
        )
    card["total"] = f"{answer.budget_bytes} B"
    return f"auto: {answer.sentence}"


def load_shape_text(text: str, path: Path, budget: BudgetProbe | None = None) -> LoadedShape:
    """Validate shape text that ``path`` names (for errors and relative references),
    e.g. a file as it was at an earlier git revision."""
    data, lines = _read_yaml(path, text)
    card_note = _resolve_card_total(data, path, lines, budget or _probe)
    try:
        shape = Shape.model_validate(data)
    except ValidationError as exc:
        errors = sorted(exc.errors(), key=lambda e: lines.line(e["loc"]))
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ShapeError(
            _message(first, Shape) + more,
            file=path,
            line=lines.line(first["loc"]),
            field=field_path(first["loc"]) or None,
        ) from None
    loaded = LoadedShape(shape=shape, path=path, lines=lines, card_note=card_note)
    _check_semantics(loaded)
    return loaded


class LoadedShape:
    """A validated shape and where it came from (for later line-numbered errors)."""

    def __init__(
        self, shape: Shape, path: Path, lines: _LineMap, card_note: str | None = None
    ) -> None:
        self.shape = shape
        self.path = path
        self._lines = lines
        # where card.total came from when the shape said 'auto' (the budget's sentence)
        self.card_note = card_note

    def error(self, message: str, *loc: str | int) -> ShapeError:
        """A ShapeError located at ``loc`` in this file."""
        return ShapeError(
            message, file=self.path, line=self._lines.line(loc), field=field_path(loc)
        )

    def resolve(self, reference: str) -> Path:
        """A path named in the shape: absolute as given, else against the shape's folder —
        never the working directory, so every command reads the same file."""
        candidate = Path(reference).expanduser()
        if candidate.is_absolute():
            return candidate
        return (self.path.parent / candidate).resolve()


_DTYPE_NAME = re.compile(r"^[A-Za-z0-9_]+$")
BINARIES = {
    "llamacpp": ("llama-server", "llama-cpp-python"),
    "vllm": ("vllm", "vllm-api-server"),
}


def _check_semantics(loaded: LoadedShape) -> None:
    """Rules that span fields; each names the field to change."""
    shape = loaded.shape
    if shape.engine == "custom" and shape.contract is None:
        raise loaded.error(
            "engine custom needs a contract block (per_token components, per_seq, fixed, "
            "page_tokens): fakplan cannot derive what an engine it does not model costs",
            "engine",
        )
    if shape.engine != "custom" and shape.contract is not None:
        raise loaded.error(
            f"engine {shape.engine} derives its contract from the model; "
            "remove contract (it is for engine: custom)",
            "contract",
        )
    _check_release(loaded)
    _check_ceiling(loaded)
    if not _DTYPE_NAME.match(shape.serving.kv_cache_dtype):
        raise loaded.error(
            f"expected a dtype name such as fp8 or bf16, got {shape.serving.kv_cache_dtype!r}",
            "serving",
            "kv_cache_dtype",
        )
    if shape.serving.dtype.lower() not in MODEL_DTYPES:
        raise loaded.error(
            f"expected one of {', '.join(MODEL_DTYPES)} (the engines' --dtype), "
            f"got {shape.serving.dtype!r}",
            "serving",
            "dtype",
        )
    if shape.serving.dtype != "auto" and shape.engine not in ("vllm", "sglang"):
        raise loaded.error(
            f"engine {shape.engine}: serving.dtype is a vLLM and SGLang flag (--dtype); remove it",
            "serving",
            "dtype",
        )
    if shape.card.device == "cpu":
        if shape.engine == "sglang":
            raise loaded.error(
                "fakplan models SGLang on GPUs only (its CPU backend's pool is not read "
                "yet); use gpu, or engine vllm or llamacpp for a CPU card",
                "card",
                "device",
            )
        if shape.launch.gpu_layers not in (None, 0):
            raise loaded.error(
                f"offloads {shape.launch.gpu_layers} layers to a GPU, but card.device is cpu; "
                "remove it (a CPU card runs every layer in RAM)",
                "launch",
                "gpu_layers",
            )
    binary = shape.launch.binary
    if binary is not None and binary not in BINARIES.get(shape.engine, ()):
        known = ", ".join(BINARIES.get(shape.engine, ())) or "none (leave launch.binary out)"
        raise loaded.error(
            f"{binary!r} does not start engine {shape.engine}; expected {known}",
            "launch",
            "binary",
        )
    par = shape.parallel
    cards = shape.card.count * par.nodes
    if par.tensor * par.pipeline > cards:
        raise loaded.error(
            f"tensor {par.tensor} x pipeline {par.pipeline} needs {par.tensor * par.pipeline} "
            f"cards, the shape has {shape.card.count} per node x {par.nodes} node(s) = {cards}",
            "parallel",
        )
    if shape.budget.kv <= 0:
        raise loaded.error("the KV pool must be larger than 0 B", "budget", "kv")
    if par.nodes > 1 and shape.launch.head_address is None:
        raise loaded.error(
            f"parallel.nodes is {par.nodes}: give launch.head_address, the address the other "
            "nodes join",
            "parallel",
            "nodes",
        )
    if (
        shape.serving.spec_tokens
        and shape.engine in {"vllm", "sglang"}
        and shape.launch.speculative is None
    ):
        raise loaded.error(
            f"spec_tokens {shape.serving.spec_tokens} needs launch.speculative.method "
            "(mtp, eagle, ngram, ...) for the engine's flags",
            "serving",
            "spec_tokens",
        )
    for index, expectation in enumerate(shape.expect):
        if expectation.control not in shape.control:
            known = ", ".join(sorted(shape.control)) or "none declared"
            raise loaded.error(
                f"names control {expectation.control!r}; controls: {known}",
                "expect",
                index,
                "control",
            )


def _check_release(loaded: LoadedShape) -> None:
    """An engine_version older than every modelled rule set is refused at its line."""
    from fakplan.engines import ENGINES

    try:
        ENGINES[loaded.shape.engine].version_used(loaded)
    except ReleaseError as exc:
        raise loaded.error(str(exc), "engine_version") from None


def _check_ceiling(loaded: LoadedShape) -> None:
    """A stated ceiling is what one card holds for the pair: never more than the card."""
    shape = loaded.shape
    stated = shape.ceiling.bytes if shape.ceiling is not None else None
    if stated is None or stated <= shape.card.total:
        return
    ceiling, card = human_pair(stated, shape.card.total)
    lines = loaded._lines
    # ceiling: {bytes: ...} on lines of its own points at bytes; ceiling: 30 GiB at ceiling
    loc = (
        ("ceiling", "bytes")
        if lines.line(("ceiling", "bytes")) != lines.line(("ceiling",))
        else ("ceiling",)
    )
    raise loaded.error(
        f"{ceiling} is above the card's {card} (card.total"
        f"{', auto' if loaded.card_note else ''}): a ceiling is what one card holds for "
        "weights + KV under the engine, at most the card; state the ceiling a boot ledger "
        "of this card measured, or correct card.total",
        *loc,
    )


def shape_paths(argument: str | Path) -> list[Path]:
    """The shape files one command-line argument names: a file, or a folder's sorted *.yaml."""
    path = Path(argument)
    if not path.is_dir():
        return [path]
    found = sorted([*path.glob("*.yaml"), *path.glob("*.yml")])
    if not found:
        raise ShapeError("no *.yaml shapes in this folder", file=path)
    return found

"""What a shape compiles to for its engine: the endpoint's setup, shape-free.

An engine never reads the YAML shape. The planner builds one ``Setup`` per loaded shape
(``setup_of``): the model named, the card, the parallel layout, the serving values and
the launch's, each resolved once and under one name, the stated pool pair, and the KV
query (``query``) built once from them. What an engine still needs of the file it came
from is its ``origin``: the line an error points at, the folder a relative path is read
against, and what an ``auto`` card total was read from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from fakplan.engines.query import setup_geometry, setup_query

if TYPE_CHECKING:
    from fakplan.errors import ShapeError
    from fakplan.geometry import Geometry
    from fakplan.kv import KvQuery
    from fakplan.shape import LoadedShape

    # the KV contract a shape types in for an engine fakplan does not model: the one part
    # of the shape a setup carries as written (custom's rules read its components)
    from fakplan.shape.model import Component as Component
    from fakplan.shape.model import Contract as Contract


class Origin(Protocol):
    """Where the values were written: the shape file's located errors, its folder, and
    the total an engine multiplies (``LoadedShape`` is one)."""

    @property
    def path(self) -> Path: ...

    def error(self, message: str, *loc: str | int) -> ShapeError: ...

    def resolve(self, reference: str) -> Path: ...

    def engine_total(self) -> tuple[int, str]: ...


@dataclass(frozen=True)
class CardFacts:
    """One card of the setup (``card``): its kind, the bytes an engine sizes against,
    and what the card table or the shape says of its compute."""

    device: str  # "gpu" or "cpu" (an engine's CPU build)
    total: int
    count: int  # cards per node
    sms: int | None
    capability: str | None  # CUDA compute capability, "9.0"
    sku: str | None = None  # the card table's row, where card.sku names one


@dataclass(frozen=True)
class Layout:
    """How the model is split: tensor ranks, pipeline stages, nodes."""

    tensor: int
    pipeline: int
    nodes: int


@dataclass(frozen=True)
class Speculation:
    """The speculative method and its draft model, where the launch names one."""

    method: str
    model: str | None


@dataclass(frozen=True)
class ServingValues:
    """What the engine serves, as stated: the slots, the window, the dtypes, and the
    fraction of the card an engine that sizes its own pool is given."""

    max_num_seqs: int
    max_model_len: int
    kv_dtype: str  # the KV dtype as stated (``auto`` included); the query's is the same
    model_dtype: str  # the weights' served dtype as stated (vLLM and SGLang --dtype)
    quantization: str | None
    spec_tokens: int
    block_size: int | None
    max_num_batched_tokens: int | None
    prefix_caching: bool | None
    kv_unified: bool | None
    language_model_only: bool
    enforce_eager: bool
    gpu_memory_utilization: float | None
    mem_fraction_static: float | None

    @property
    def dtype_flag(self) -> str | None:
        """--dtype as vLLM and SGLang take it: the stated dtype, nothing for ``auto``."""
        return None if self.model_dtype == "auto" else self.model_dtype


@dataclass(frozen=True)
class LaunchValues:
    """What the launch states beside the serving values: where it listens, the binary,
    the file it loads, the draft, and what it passes through untouched."""

    host: str
    port: int
    binary: str | None
    gpu_layers: int | None
    head_address: str | None
    head_port: int | None
    weights: str | None  # the file the engine loads, where not the model's checkpoint
    served_model_name: str | None
    speculative: Speculation | None
    extra_args: tuple[str, ...]
    # the variables the launch sets for the engine: plain values, None for a secret's
    env: Mapping[str, str | None]


@dataclass(frozen=True)
class PoolPair:
    """The weights/KV pair a shape states, per card."""

    weights: int
    kv: int


@dataclass(frozen=True)
class Setup:
    """An endpoint's setup as its engine sees it (see the module's docstring)."""

    engine: str
    engine_version: str | None  # as stated (None: the engine's newest rules apply)
    model: str  # the model named: a path beside the shape, a Hub id or a catalog id
    revision: str | None
    card: CardFacts
    parallel: Layout
    serving: ServingValues
    launch: LaunchValues
    budget: PoolPair | None  # None: the engine sizes its pool from a fraction
    engine_sized: bool  # the engine sizes the pool from a fraction; the plan predicts it
    contract: Contract | None  # the KV contract typed in (an engine fakplan does not model)
    origin: Origin = field(repr=False, compare=False)
    # what is derived from these values once and asked for many times per plan (the
    # model's geometry, a Hub GGUF's header), shared with the loaded shape's
    derived: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def stated_budget(self) -> PoolPair:
        """The pair the shape states (every setup but one whose engine sizes its pool)."""
        assert self.budget is not None, "an engine-sized pool has no stated budget"
        return self.budget

    def error(self, message: str, *loc: str | int) -> ShapeError:
        """An error located at ``loc`` (the shape's field path) in the file it came from."""
        return self.origin.error(message, *loc)

    def resolve(self, reference: str) -> Path:
        """A path the setup names: absolute as given, else against the shape's folder."""
        return self.origin.resolve(reference)

    def engine_total(self) -> tuple[int, str]:
        """What an engine sizing its own pool multiplies by its fraction, and why."""
        return self.origin.engine_total()

    @cached_property
    def query(self) -> KvQuery:
        """The KV question the setup asks of its engine (built once)."""
        return setup_query(self)

    @property
    def geometry(self) -> Geometry:
        """The named model's geometry (resolved once)."""
        return setup_geometry(self)


def setup_of(loaded: LoadedShape) -> Setup:
    """The setup a loaded shape compiles to, built once per loaded shape."""
    found = loaded.derived.get("setup")
    if found is None:
        found = loaded.derived["setup"] = _compile(loaded)
    assert isinstance(found, Setup)
    return found


def _compile(loaded: LoadedShape) -> Setup:
    shape = loaded.shape
    s, ln, card, par = shape.serving, shape.launch, shape.card, shape.parallel
    spec = ln.speculative
    return Setup(
        engine=shape.engine,
        engine_version=shape.engine_version,
        model=shape.model,
        revision=shape.revision,
        card=CardFacts(
            device=card.device,
            total=card.total,
            count=card.count,
            sms=card.sms,
            capability=card.capability,
            sku=card.sku,
        ),
        parallel=Layout(tensor=par.tensor, pipeline=par.pipeline, nodes=par.nodes),
        serving=ServingValues(
            max_num_seqs=s.max_num_seqs,
            max_model_len=s.max_model_len,
            kv_dtype=s.kv_cache_dtype,
            model_dtype=s.dtype,
            quantization=s.quantization,
            spec_tokens=s.spec_tokens,
            block_size=s.block_size,
            max_num_batched_tokens=s.max_num_batched_tokens,
            prefix_caching=s.prefix_caching,
            kv_unified=s.kv_unified,
            language_model_only=s.language_model_only,
            enforce_eager=s.enforce_eager,
            gpu_memory_utilization=s.gpu_memory_utilization,
            mem_fraction_static=s.mem_fraction_static,
        ),
        launch=LaunchValues(
            host=ln.host,
            port=ln.port,
            binary=ln.binary,
            gpu_layers=ln.gpu_layers,
            head_address=ln.head_address,
            head_port=ln.head_port,
            weights=ln.weights,
            served_model_name=ln.served_model_name,
            speculative=None if spec is None else Speculation(spec.method, spec.model),
            extra_args=tuple(ln.extra_args),
            env={k: v if isinstance(v, str) else None for k, v in ln.env.items()},
        ),
        budget=None
        if shape.budget is None
        else PoolPair(weights=shape.budget.weights, kv=shape.budget.kv),
        engine_sized=shape.engine_sized,
        contract=shape.contract,
        origin=loaded,
        derived=loaded.derived,
    )

"""A shape as the KV question its engine answers: the model's geometry and the serving figures."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from fakplan.errors import GeometryError
from fakplan.geometry import Geometry
from fakplan.geometry.resolve import ModelSource, resolve_model
from fakplan.kv import KvQuery

if TYPE_CHECKING:
    from fakplan.shape import LoadedShape


def shape_geometry(loaded: LoadedShape) -> Geometry:
    """The geometry a shape's ``model:`` names: a path against the shape's folder, a Hub
    id, or a catalog id. Never the working directory: a path that is not beside the shape
    is refused with the path looked at, so no spelling works for one command and not for
    another. Read once per loaded shape."""
    return _once(loaded, "geometry", _shape_geometry)


def _shape_geometry(loaded: LoadedShape) -> Geometry:
    return shape_model_source(loaded)[0]


def shape_model_source(loaded: LoadedShape) -> tuple[Geometry, ModelSource]:
    """The shape's model resolved (``fakplan.geometry.resolve``): its geometry and where
    it came from (a path, the Hub or its cache at a commit, the catalog). Once per shape."""
    return _once(loaded, "model_source", _resolved)


def _resolved(loaded: LoadedShape) -> tuple[Geometry, ModelSource]:
    shape = loaded.shape
    try:
        return resolve_model(shape.model, base=loaded.path.parent, revision=shape.revision)
    except GeometryError as exc:
        raise loaded.error(str(exc), "model") from None


def pinned_revision(loaded: LoadedShape) -> tuple[str, str] | None:
    """The commit the engine is told to load (``--revision``) and why, where the shape's
    model resolved on the Hub or its cache and the engine loads it by id: the launch then
    loads what the plan counted, whatever the branch points at by boot time."""
    if loaded.shape.launch.weights:
        return None
    snap = shape_model_source(loaded)[1].snapshot
    if snap is None:
        return None
    return snap.commit, (
        f"model {snap.repo} at revision {snap.revision!r} resolved to commit {snap.commit} "
        f"({'the Hub' if snap.origin == 'hub' else 'the Hugging Face cache'}): the engine "
        "loads the commit the plan counted"
    )


def query_for_shape(loaded: LoadedShape) -> KvQuery:
    """The KV question a shape asks of its engine (built once per loaded shape)."""
    return _once(loaded, "query", _query)


T = TypeVar("T")


def _once(loaded: LoadedShape, key: str, build: Callable[[LoadedShape], T]) -> T:
    """What ``build`` derives from the (frozen) shape, kept on the loaded shape."""
    if key not in loaded.derived:
        loaded.derived[key] = build(loaded)
    found: T = loaded.derived[key]
    return found


def _draft(loaded: LoadedShape) -> Geometry | None:
    """The draft model's geometry where a shape names one (launch.speculative.model) for
    a method whose draft keeps attention layers in the pool (an EAGLE head, a draft model),
    resolved as the target is: a path beside the shape, a Hub id, a catalog id."""
    from fakplan.engines import ENGINES  # the registry imports this module

    spec = loaded.shape.launch.speculative
    methods = ENGINES[loaded.shape.engine].draft_model_methods
    if spec is None or spec.model is None or spec.method.lower() not in methods:
        return None  # no draft model, or one whose KV the engine's arithmetic does not read
    try:
        return resolve_model(spec.model, base=loaded.path.parent)[0]
    except GeometryError as exc:
        raise loaded.error(str(exc), "launch", "speculative", "model") from None


def _query(loaded: LoadedShape) -> KvQuery:
    shape = loaded.shape
    serving = shape.serving
    return KvQuery(
        geometry=shape_geometry(loaded),
        engine=shape.engine,
        engine_version=shape.engine_version,
        kv_dtype=serving.kv_cache_dtype,
        model_dtype=serving.dtype,
        quantization=serving.quantization,
        device=shape.card.device,
        capability=shape.card.capability,
        tp=shape.parallel.tensor,
        pp=shape.parallel.pipeline,
        block_size=serving.block_size,
        max_model_len=serving.max_model_len,
        max_num_seqs=serving.max_num_seqs,
        max_num_batched_tokens=serving.max_num_batched_tokens,
        prefix_caching=serving.prefix_caching,
        spec_tokens=serving.spec_tokens,
        spec_method=shape.launch.speculative.method if shape.launch.speculative else None,
        draft=_draft(loaded) if serving.spec_tokens else None,
        kv_unified=serving.kv_unified,
        language_model_only=serving.language_model_only,
        gpu_layers=shape.launch.gpu_layers,
    )

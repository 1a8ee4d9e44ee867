"""A setup as the KV question its engine answers: the model's geometry and the serving
figures, and where its model resolved."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from fakplan.cards import card_sku
from fakplan.errors import GeometryError
from fakplan.geometry import Geometry
from fakplan.geometry.resolve import ModelSource, resolve_model
from fakplan.kv import KvQuery

if TYPE_CHECKING:
    from fakplan.engines.setup import Setup


def setup_geometry(setup: Setup) -> Geometry:
    """The geometry the setup's model names: a path against the shape's folder, a Hub
    id, or a catalog id. Never the working directory: a path that is not beside the shape
    is refused with the path looked at, so no spelling works for one command and not for
    another. Read once per setup."""
    return model_source(setup)[0]


def model_source(setup: Setup) -> tuple[Geometry, ModelSource]:
    """The setup's model resolved (``fakplan.geometry.resolve``): its geometry and where
    it came from (a path, the Hub or its cache at a commit, the catalog). Once."""
    return _once(setup, "model_source", _resolved)


def _resolved(setup: Setup) -> tuple[Geometry, ModelSource]:
    try:
        return resolve_model(setup.model, base=setup.origin.path.parent, revision=setup.revision)
    except GeometryError as exc:
        raise setup.error(str(exc), "model") from None


def pinned_revision(setup: Setup) -> tuple[str, str] | None:
    """The commit the engine is told to load (``--revision``) and why, where the model
    resolved on the Hub or its cache and the engine loads it by id: the launch then
    loads what the plan counted, whatever the branch points at by boot time."""
    if setup.launch.weights:
        return None
    snap = model_source(setup)[1].snapshot
    if snap is None:
        return None
    return snap.commit, (
        f"model {snap.repo} at revision {snap.revision!r} resolved to commit {snap.commit} "
        f"({'the Hub' if snap.origin == 'hub' else 'the Hugging Face cache'}): the engine "
        "loads the commit the plan counted"
    )


T = TypeVar("T")


def _once(setup: Setup, key: str, build: Callable[[Setup], T]) -> T:
    """What ``build`` derives from the (frozen) setup, kept with it."""
    if key not in setup.derived:
        setup.derived[key] = build(setup)
    found: T = setup.derived[key]
    return found


def _draft(setup: Setup) -> Geometry | None:
    """The draft model's geometry where the launch names one (launch.speculative.model) for
    a method whose draft keeps attention layers in the pool (an EAGLE head, a draft model),
    resolved as the target is: a path beside the shape, a Hub id, a catalog id."""
    from fakplan.engines import ENGINES  # the registry imports this module

    spec = setup.launch.speculative
    methods = ENGINES[setup.engine].draft_model_methods
    if spec is None or spec.model is None or spec.method.lower() not in methods:
        return None  # no draft model, or one whose KV the engine's arithmetic does not read
    try:
        return resolve_model(spec.model, base=setup.origin.path.parent)[0]
    except GeometryError as exc:
        raise setup.error(str(exc), "launch", "speculative", "model") from None


def _card_name(sku: str | None) -> str | None:
    """NVML's name of the shape's card, where card.sku names one of the table."""
    row = None if sku is None else card_sku(sku)
    return None if row is None else row.device_name


def setup_query(setup: Setup) -> KvQuery:
    """The KV question a setup asks of its engine (``Setup.query`` keeps it)."""
    serving, launch = setup.serving, setup.launch
    return KvQuery(
        geometry=setup_geometry(setup),
        engine=setup.engine,
        engine_version=setup.engine_version,
        kv_dtype=serving.kv_dtype,
        model_dtype=serving.model_dtype,
        quantization=serving.quantization,
        device=setup.card.device,
        capability=setup.card.capability,
        device_name=_card_name(setup.card.sku),
        tp=setup.parallel.tensor,
        pp=setup.parallel.pipeline,
        block_size=serving.block_size,
        max_model_len=serving.max_model_len,
        max_num_seqs=serving.max_num_seqs,
        max_num_batched_tokens=serving.max_num_batched_tokens,
        prefix_caching=serving.prefix_caching,
        spec_tokens=serving.spec_tokens,
        spec_method=launch.speculative.method if launch.speculative else None,
        draft=_draft(setup) if serving.spec_tokens else None,
        kv_unified=serving.kv_unified,
        language_model_only=serving.language_model_only,
        enforce_eager=serving.enforce_eager,
        gpu_layers=launch.gpu_layers,
    )

"""What an engine serves: the weights' dtype (which a KV cache of ``auto`` follows) and bytes.

vLLM and SGLang share the ``--dtype`` spelling (SGLang's ``_get_and_verify_dtype``
is adapted from vLLM's) and both downcast a float32 checkpoint under ``auto``:
vLLM to its platform's first supported dtype (``_resolve_auto_dtype``, v0.32.0:
bf16 on x86/aarch64 CPUs and GPUs with bf16, fp16 on older GPUs), SGLang to
fp16, or bf16 for Gemma (python/sglang/srt/configs/model_config.py). Two bytes
either way, which is all a KV size needs.

A checkpoint that states no dtype (quantized ones often do not) is float32 to both
(vLLM after reading the safetensors dtypes, fakplan.geometry.checkpoint_dtype); one
stating a dtype neither serves activations in (fp8, uint8) is served in vLLM's preferred
dtype (``_resolve_auto_dtype``) and, as SGLang's ``_STR_DTYPE_TO_TORCH_DTYPE`` knows only
the 16/32-bit floats, in SGLang's float32 downcast: 16 bits in every case.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fakplan.dtypes import MODEL_DTYPES, element_type
from fakplan.engines.weights import vllm_rank_weights, weights_refusal
from fakplan.errors import FakplanError, GeometryError, RuleError
from fakplan.geometry import Geometry, load_geometry
from fakplan.geometry.params import towers
from fakplan.geometry.resolve import HubGguf, resolve_hub_gguf
from fakplan.hub import gguf_ref
from fakplan.kv import KvQuery

if TYPE_CHECKING:
    from fakplan.engines.base import Engine
    from fakplan.engines.setup import Setup

# What --dtype auto serves a float32 checkpoint in: (the dtype, the rule in words)
Downcast = tuple[str, str]


def served_dtype(query: KvQuery, downcast: Downcast) -> tuple[str, str | None]:
    """The weights' served dtype (what KV ``auto`` follows), and the rule that chose it;
    ``downcast`` is the engine's 16-bit dtype for what ``--dtype auto`` does not keep."""
    engine = query.engine
    name = query.model_dtype.lower()
    if name not in MODEL_DTYPES:
        raise RuleError(
            f"{engine} --dtype {query.model_dtype!r}: expected one of {', '.join(MODEL_DTYPES)}",
            "serving",
            "dtype",
        )
    stated = MODEL_DTYPES[name]
    if stated is not None:
        return stated, None
    g = query.geometry
    model = g.dtype
    found = g.dtype_source or f"{g.source} states {model}"
    if model in {"bf16", "fp16"}:
        return model, None if g.dtype_origin == "config" else f"served in {model}: {found}"
    if g.dtype_origin == "gguf":
        raise RuleError(
            f"{engine} --kv-cache-dtype auto follows the model dtype, and {g.source} is a "
            f"GGUF ({model}) whose served dtype fakplan has not read; state the KV dtype "
            "(bfloat16, fp8, ...) or serving.dtype",
            "serving",
            "kv_cache_dtype",
        )
    storage, which = downcast
    if model == "fp32":
        why = f"{found}: --dtype auto serves a float32 checkpoint in 16 bits"
    elif model == "unstated":
        why = (
            f"{found}; {engine} then takes the safetensors dtypes (vLLM) or float32, "
            "which --dtype auto serves in 16 bits"
        )
    else:
        why = f"{found}, not a dtype {engine} serves activations in: --dtype auto uses 16 bits"
    pin = "serving.dtype: float32 to keep 4 B" if model == "fp32" else "serving.dtype to pin it"
    return storage, f"{why} ({which}: 2 B either way); state {pin}"


def hub_gguf(setup: Setup) -> tuple[Geometry, HubGguf] | None:
    """The GGUF ``launch.weights`` names by Hub id (``org/name:Q8_0``, llama.cpp's -hf),
    read from its header; None where launch.weights is no such name or a local file."""
    served = setup.launch.weights
    if not served or setup.resolve(served).exists():
        return None
    ref = gguf_ref(served)
    if ref is None:
        return None
    if "hub_gguf" not in setup.derived:
        try:
            setup.derived["hub_gguf"] = resolve_hub_gguf(*ref)
        except GeometryError as exc:
            raise setup.error(str(exc), "launch", "weights") from None
    found: tuple[Geometry, HubGguf] = setup.derived["hub_gguf"]
    return found


def weights_source(setup: Setup) -> dict[str, Any] | None:
    """Where a GGUF named by Hub id resolved (plan.json's ``weights_source``); None else."""
    found = hub_gguf(setup)
    return None if found is None else found[1].json()


def _text_only_weights(
    setup: Setup, geometry: Geometry, engine: Engine
) -> tuple[int | None, str | None]:
    """A multimodal model served text-only: its checkpoint's total holds the towers the
    engine leaves out, so the text model is counted from the config instead (the
    engine's own count at TP 1, rotary caches included), or not at all."""
    text = geometry.text_config
    assert text is not None
    query = setup.query
    storage = (
        served_dtype(query, engine.auto_downcast)[0] if engine.auto_downcast is not None else None
    )
    card = setup.card
    counted = vllm_rank_weights(
        text, geometry.architecture, served=storage, capability=card.capability,
        sms=card.sms, language_model_only=True,
    )  # fmt: skip
    if counted is None:
        why = weights_refusal(
            text, geometry.architecture, None, 1, 1, card.capability, served=storage,
            language_model_only=True, sms=card.sms,
        )  # fmt: skip
        return None, (
            "served text-only, the checkpoint's total (towers included) is not what the "
            f"engine loads, and the text model is not counted: {why}"
        )
    return counted.bytes, (
        "served text-only (serving.language_model_only): the text model counted from its "
        f"config, not the checkpoint's total, which holds the towers: {counted.derivation}"
    )


def served_weights(
    setup: Setup, geometry: Geometry, engine: Engine
) -> tuple[int | None, str | None]:
    """The bytes of the weights the engine loads, and where that figure came from.

    The model's geometry may come from a catalog id or its published config while the
    engine loads another file (``launch.weights``: a GGUF, an AWQ or FP8 checkpoint):
    that file's own bytes count, or none. A checkpoint served in another dtype than it
    was saved in (vLLM and SGLang downcast float32 under ``--dtype auto``) loads at the
    served size: exact for a count of parameters, unknown for a file's total.
    """
    served = setup.launch.weights
    named_gguf = setup.model.endswith(".gguf") or gguf_ref(setup.model) is not None
    if engine.loads_gguf and not named_gguf and not served:
        return None, (
            f"{setup.engine} loads a GGUF (launch.weights), not {setup.model}'s published "
            "checkpoint"
        )
    if served and served != setup.model:
        local = setup.resolve(served)
        remote = hub_gguf(setup)
        if remote is not None:
            return engine.resident_weights(setup, remote[0])
        if not local.exists():
            return None, (
                f"the engine loads {served} (launch.weights), not {setup.model}'s published "
                "checkpoint, and that file is not on this machine"
            )
        try:
            own = load_geometry(str(local))
        except GeometryError as exc:
            raise setup.error(str(exc), "launch", "weights") from None
        return engine.resident_weights(setup, own)
    if setup.serving.quantization is not None:
        # the checkpoint's size is not what the engine holds: the engine's own count is
        return engine.quantized_weights(setup)
    if setup.serving.language_model_only and towers(geometry.text_config or {}):
        return _text_only_weights(setup, geometry, engine)
    downcast = engine.auto_downcast
    if downcast is None or geometry.weight_bytes is None:
        return engine.resident_weights(setup, geometry)
    try:
        storage, _ = served_dtype(setup.query, downcast)
    except FakplanError:
        return geometry.weight_bytes, geometry.weight_source
    saved = geometry.dtype
    if storage == saved or saved not in {"bf16", "fp16", "fp32"}:
        return geometry.weight_bytes, geometry.weight_source
    params = geometry.weight_params
    if params is None:
        return None, (
            f"the checkpoint is saved in {saved} and served in {storage}: its file total "
            f"({geometry.weight_bytes:,} B) is not what the engine loads"
        )
    size = element_type(storage).block_bytes
    loaded_bytes = params * size
    return loaded_bytes, (
        f"{geometry.weight_source}; served in {storage}: {params:,} parameters x {size} B "
        f"= {loaded_bytes:,} B"
    )

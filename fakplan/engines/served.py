"""What an engine serves: the weights' dtype (which a KV cache of ``auto`` follows) and bytes.

vLLM and SGLang share the ``--dtype`` spelling (SGLang's ``_get_and_verify_dtype``
is adapted from vLLM's) and both downcast a float32 checkpoint under ``auto``:
vLLM to its platform's first supported dtype (``_resolve_auto_dtype``, v0.32.0:
bf16 on x86/aarch64 CPUs and GPUs with bf16, fp16 on older GPUs), SGLang to
fp16, or bf16 for Gemma (python/sglang/srt/configs/model_config.py). Two bytes
either way, which is all a KV size needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fakplan.dtypes import MODEL_DTYPES, element_type
from fakplan.errors import FakplanError, GeometryError
from fakplan.kv import KvQuery

if TYPE_CHECKING:
    from fakplan.geometry import Geometry
    from fakplan.shape import LoadedShape

DOWNCAST: dict[str, tuple[str, str]] = {
    "vllm": ("bf16", "bf16 on CPUs and bf16 GPUs, fp16 on older GPUs"),
    "sglang": ("fp16", "fp16, bf16 for Gemma"),
}


def served_dtype(query: KvQuery) -> tuple[str, str | None]:
    """The weights' served dtype (what KV ``auto`` follows), and the rule that chose it."""
    engine = query.engine
    name = query.model_dtype.lower()
    if name not in MODEL_DTYPES:
        raise FakplanError(
            f"{engine} --dtype {query.model_dtype!r}: expected one of {', '.join(MODEL_DTYPES)}"
        )
    stated = MODEL_DTYPES[name]
    if stated is not None:
        return stated, None
    model = query.geometry.dtype
    if model not in {"bf16", "fp16", "fp32"}:
        raise FakplanError(
            f"{engine} --kv-cache-dtype auto follows the model dtype, which is {model!r} "
            f"for {query.geometry.source}; state the KV dtype (bfloat16, fp8, ...)"
        )
    if model == "fp32":
        storage, which = DOWNCAST[engine]
        return storage, (
            f"--dtype auto serves a float32 checkpoint in 16 bits ({which}: 2 B either "
            "way); state serving.dtype: float32 to keep 4 B"
        )
    return model, None


def served_weights(loaded: LoadedShape, geometry: Geometry) -> tuple[int | None, str | None]:
    """The bytes of the weights the engine loads, and where that figure came from.

    The model's geometry may come from a catalog id or its published config while the
    engine loads another file (``launch.weights``: a GGUF, an AWQ or FP8 checkpoint):
    that file's own bytes count, or none. A checkpoint served in another dtype than it
    was saved in (vLLM and SGLang downcast float32 under ``--dtype auto``) loads at the
    served size: exact for a count of parameters, unknown for a file's total.
    """
    from fakplan.engines import query_for_shape
    from fakplan.geometry import load_geometry

    shape = loaded.shape
    served = shape.launch.weights
    if shape.engine == "llamacpp" and not shape.model.endswith(".gguf") and not served:
        return None, (
            f"llama.cpp loads a GGUF (launch.weights), not {shape.model}'s published checkpoint"
        )
    if served and served != shape.model:
        local = loaded.resolve(served)
        if not local.exists():
            return None, (
                f"the engine loads {served} (launch.weights), not {shape.model}'s published "
                "checkpoint, and that file is not on this machine"
            )
        try:
            own = load_geometry(str(local))
        except GeometryError as exc:
            raise loaded.error(str(exc), "launch", "weights") from None
        return own.weight_bytes, own.weight_source
    if shape.engine not in DOWNCAST or geometry.weight_bytes is None:
        return geometry.weight_bytes, geometry.weight_source
    try:
        storage, _ = served_dtype(query_for_shape(loaded))
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

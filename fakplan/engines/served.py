"""The dtype an engine serves the weights in, which a KV cache of ``auto`` follows.

vLLM and SGLang share the ``--dtype`` spelling (SGLang's ``_get_and_verify_dtype``
is adapted from vLLM's) and both downcast a float32 checkpoint under ``auto``:
vLLM to its platform's first supported dtype (``_resolve_auto_dtype``, v0.32.0:
bf16 on x86/aarch64 CPUs and GPUs with bf16, fp16 on older GPUs), SGLang to
fp16, or bf16 for Gemma (python/sglang/srt/configs/model_config.py). Two bytes
either way, which is all a KV size needs.
"""

from __future__ import annotations

from fakplan.errors import FakplanError
from fakplan.kv import KvQuery

MODEL_DTYPES: dict[str, str | None] = {
    "auto": None,
    "half": "fp16",
    "float16": "fp16",
    "bfloat16": "bf16",
    "float": "fp32",
    "float32": "fp32",
}
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

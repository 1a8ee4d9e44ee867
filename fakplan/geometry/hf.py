"""Geometry from a Hugging Face ``config.json`` (and safetensors headers for weight bytes).

Field names differ per architecture; each known ``model_type`` maps to one
reader (``hf_layouts``). An unknown ``model_type`` is an error naming what is
missing — never a silent default. Weight bytes come from the safetensors headers
(``safetensors``) or, for a plain decoder with none, are counted from its shapes.
"""

from __future__ import annotations

import json
from pathlib import Path

from fakplan.errors import GeometryError
from fakplan.files import load_json, read_bounded
from fakplan.geometry.checkpoint_dtype import checkpoint_dtype
from fakplan.geometry.facts import check_config
from fakplan.geometry.hf_layouts import READERS, Config, Fields
from fakplan.geometry.model import Geometry, KvQuantDecl
from fakplan.geometry.params import ROUTED_EXPERT_FIELDS, TOWER_CONFIGS, counted_weight_bytes
from fakplan.geometry.safetensors import safetensors_bytes, safetensors_dtypes

MAX_CONFIG = 8 << 20  # a config.json is kilobytes; the largest published are under 1 MiB


def _text_config(config: Config) -> Config:
    """A multimodal config's text model, with the top-level fields it inherits."""
    text = config.get("text_config")
    if isinstance(text, dict):
        merged = dict(text)
        inherited = (
            "torch_dtype", "dtype", "quantization_config", "max_position_embeddings",
            "architectures",  # the model class vLLM builds (its runner rule names it)
        )  # fmt: skip
        for key in inherited:
            if key not in merged and key in config:
                merged[key] = config[key]
        if "model_type" not in merged:
            merged["model_type"] = config.get("model_type")
        for tower in TOWER_CONFIGS:
            if isinstance(config.get(tower), dict):
                # a tower the engine loads beside the text model: counted with its weights
                merged[tower] = config[tower]
        return merged
    return config


def _rope_scaling(f: Fields) -> str | None:
    """The RoPE scaling a config switches on (``yarn x4``), None for the default."""
    scaling = f.get("rope_scaling")
    if isinstance(scaling, dict):
        kind = scaling.get("rope_type") or scaling.get("type")
        if kind and kind != "default":
            factor = scaling.get("factor")
            return f"{kind} x{factor:g}" if isinstance(factor, int | float) else str(kind)
    params = f.get("rope_parameters")
    if isinstance(params, dict):
        kind = params.get("rope_type")
        if kind and kind != "default":
            return str(kind)
    return None


def _kv_cache_quant(config: Config) -> str | None:
    """``fp8`` where the checkpoint's quantization stores the KV cache in FP8."""
    quant = config.get("quantization_config")
    if not isinstance(quant, dict):
        return None
    algo = quant.get("kv_cache_quant_algo")
    if isinstance(algo, str) and algo.upper().startswith("FP8"):
        return "fp8"
    scheme = quant.get("kv_cache_scheme")
    if isinstance(scheme, dict) and scheme.get("num_bits") == 8 and scheme.get("type") == "float":
        return "fp8"
    return None


def _kv_quant_decl(config: Config) -> KvQuantDecl | None:
    """The KV-cache entries of a quantization config (ModelOpt nests them under
    ``quantization``), or None where it states none."""
    quant = config.get("quantization_config") or config.get("compression_config")
    if not isinstance(quant, dict):
        return None
    nested = quant.get("quantization")
    inner: Config = nested if isinstance(nested, dict) else {}
    scheme = inner.get("kv_cache_scheme") or quant.get("kv_cache_scheme")
    algo = inner.get("kv_cache_quant_algo") or quant.get("kv_cache_quant_algo")
    if scheme is None and algo is None:
        return None
    scheme = scheme if isinstance(scheme, dict) else {}
    bits, kind, dynamic = scheme.get("num_bits"), scheme.get("type"), scheme.get("dynamic")
    return KvQuantDecl(
        quant_method=_quant_method(config) or "unnamed",
        algo=str(algo).lower() if isinstance(algo, str) else None,
        scheme_bits=bits if isinstance(bits, int) and not isinstance(bits, bool) else None,
        scheme_type=str(kind) if isinstance(kind, str) else None,
        scheme_dynamic=dynamic if isinstance(dynamic, bool) else None,
        has_scheme=bool(scheme),
    )


def _quant_method(config: Config) -> str | None:
    """The checkpoint's quantization format (compressed-tensors may call it compression)."""
    for key in ("quantization_config", "compression_config"):
        quant = config.get(key)
        if isinstance(quant, dict):
            method = quant.get("quant_method") or quant.get("quant_algo")
            if method is None and isinstance(quant.get("quantization"), dict):
                method = quant["quantization"].get("quant_algo")  # legacy ModelOpt
            return str(method).lower() if method else "unnamed"
    return None


def geometry_from_config(
    config: Config,
    *,
    source: str,
    weight_bytes: int | None = None,
    weight_source: str | None = None,
    header_dtypes: frozenset[str] | None = None,
) -> Geometry:
    """The pure reader: a parsed config.json in, a Geometry out."""
    if not isinstance(config, dict):
        raise GeometryError(f"{source}: config.json is not a JSON object")
    check_config(config, source)
    text = _text_config(config)
    model_type = str(text.get("model_type") or config.get("model_type") or "")
    if not model_type:
        raise GeometryError(f"{source}: config.json states no model_type")
    reader = READERS.get(model_type)
    if reader is None:
        known = ", ".join(sorted(READERS))
        raise GeometryError(
            f"{source}: model_type {model_type!r} is not one fakplan knows "
            f"(known: {known}); its KV layout cannot be derived without knowing which "
            "fields hold the layers, KV heads and head sizes"
        )
    f = Fields(text, model_type, source)
    parts = reader(f)
    notes = []
    if f.used_defaults:
        notes.append(f"{', '.join(f.used_defaults)} from {f.default_source}")
    dtype = checkpoint_dtype(config, header_dtypes)
    experts = f.get(*ROUTED_EXPERT_FIELDS)
    weight_params = None
    if weight_bytes is None and text is config:
        # no file states the bytes: a plain decoder's are counted from its shapes
        # (a nested text_config has a tower beside it, which this count would miss)
        derived = counted_weight_bytes(text, model_type)
        if derived is not None:
            weight_bytes, weight_source, weight_params = derived
    return Geometry(
        source=source,
        architecture=model_type,
        num_attention_heads=int(f.need("num_attention_heads")),
        hidden_size=int(f.need("hidden_size")),
        context_length=int(f.need("max_position_embeddings")),
        rope_scaling=_rope_scaling(f),
        dtype=dtype.name,
        dtype_origin=dtype.origin,
        dtype_source=dtype.source,
        quant_method=_quant_method(config),
        kv_cache_quant=_kv_cache_quant(text),
        kv_quant_decl=_kv_quant_decl(text),
        num_experts=int(experts) if experts else None,
        experts_per_token=f.get("num_experts_per_tok", "experts_per_token"),
        weight_bytes=weight_bytes,
        weight_source=weight_source,
        weight_params=weight_params,
        notes=tuple(notes),
        text_config_json=json.dumps(text),
        **parts,
    )


def read_hf(
    path: Path,
    *,
    source: str | None = None,
    remote: tuple[int, str, frozenset[str]] | None = None,
) -> Geometry:
    """An HF folder (config.json + weights) or a config.json file. ``remote`` is what the
    checkpoint's headers said where they were read elsewhere (the Hub): bytes, how they
    were counted, dtypes; the folder's own files, where it has any, come first."""
    config_path = path / "config.json" if path.is_dir() else path
    if not config_path.exists() and not config_path.is_symlink():
        raise GeometryError(f"{config_path}: no config.json")
    data = read_bounded(config_path, MAX_CONFIG, GeometryError, "a config.json")
    config = load_json(data, str(config_path), GeometryError)
    if isinstance(config, dict):
        check_config(config, str(config_path))  # named by the file, before any arithmetic
    weights, weight_source = safetensors_bytes(config_path.parent)
    if weights is None and remote is not None:
        weights, weight_source = remote[0], remote[1]
    headers = None
    if isinstance(config, dict) and checkpoint_dtype(config).origin == "none":
        # vLLM's last place to look
        headers = safetensors_dtypes(config_path.parent) or (remote[2] if remote else None)
    return geometry_from_config(
        config,
        source=source or str(path),
        weight_bytes=weights,
        weight_source=weight_source,
        header_dtypes=headers,
    )

"""The geometry records: what a model's KV cache is made of, layer by layer."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class LayerKind(StrEnum):
    FULL = "full"  # full attention: KV grows with every token
    SLIDING = "sliding"  # sliding-window attention: KV bounded by the window
    MLA = "mla"  # multi-head latent attention: one compressed latent per token
    LINEAR = "linear"  # linear attention / Gated DeltaNet: fixed state per sequence
    MAMBA = "mamba"  # Mamba SSM: fixed state per sequence
    NONE = "none"  # no cache of its own (KV shared with another layer)


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AttentionHeads(_Frozen):
    """KV heads and head sizes of one family of attention layers."""

    num_kv_heads: int
    head_dim: int
    v_head_dim: int


class KvQuantDecl(_Frozen):
    """What a checkpoint's quantization config says of its KV cache, as written: each
    engine reads it by its own rule (vLLM, SGLang differ on which forms count)."""

    quant_method: str = Field(description="the quantization_config's quant_method")
    algo: str | None = Field(None, description="kv_cache_quant_algo, lowercased")
    scheme_bits: int | None = Field(None, description="kv_cache_scheme.num_bits")
    scheme_type: str | None = Field(None, description="kv_cache_scheme.type")
    scheme_dynamic: bool | None = Field(None, description="kv_cache_scheme.dynamic")
    has_scheme: bool = Field(False, description="a kv_cache_scheme is stated at all")


class MlaDims(_Frozen):
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int


class LinearAttentionDims(_Frozen):
    """Gated DeltaNet (Qwen3-Next / Qwen3.5) state dimensions."""

    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    conv_kernel: int
    ssm_dtype: str | None = Field(None, description="dtype the checkpoint asks for the state")


class MambaDims(_Frozen):
    version: int  # 1 or 2
    intermediate_size: int  # d_inner
    state_size: int  # d_state
    n_groups: int
    num_heads: int
    head_dim: int
    conv_kernel: int
    ssm_dtype: str | None = None


class TensorPlacement(_Frozen):
    """A GGUF's tensor bytes by the layer llama.cpp loads each into: what ``-ngl`` puts on a
    GPU is counted from it (engines/llamacpp/offload.py)."""

    input_bytes: int = Field(description="the input layer's tables: always on the CPU")
    block_bytes: tuple[int, ...] = Field(description="blk.0 .. blk.(block_count - 1)")
    output_bytes: int = Field(description="the output layer: norm, head, classifiers")
    every_block_bytes: int = Field(description="duplicated into each buffer holding a block")
    tied_output_bytes: int = Field(
        description="token_embd loaded again as the output head where no output.weight is "
        "stored (TENSOR_DUPLICATED); 0 where one is"
    )
    unused_bytes: int = Field(description="tensors the loader skips, and blocks past the count")


class Geometry(_Frozen):
    source: str = Field(description="where this geometry was read: catalog id, file or folder")
    architecture: str
    num_layers: int = Field(description="decoder layers that serve tokens (MTP/nextn excluded)")
    layer_kinds: tuple[LayerKind, ...]
    num_attention_heads: int
    hidden_size: int
    attention: AttentionHeads | None = None  # full-attention layers
    sliding: AttentionHeads | None = None  # sliding-window layers
    sliding_window: int | None = None
    mla: MlaDims | None = None
    linear: LinearAttentionDims | None = None
    mamba: MambaDims | None = None
    context_length: int = Field(description="trained context (max_position_embeddings)")
    rope_scaling: str | None = Field(None, description="rope scaling the checkpoint declares")
    dtype: str = Field(
        description="the checkpoint's dtype where vLLM finds it ('unstated' where nowhere)"
    )
    dtype_origin: str = Field("config", description="where the dtype was found")
    dtype_source: str | None = Field(None, description="the dtype's source, in words")
    quant_method: str | None = Field(None, description="the checkpoint's quantization format")
    kv_cache_quant: str | None = Field(
        None, description="fp8 where kv_cache_quant_algo FP8 or an 8-bit float kv_cache_scheme"
    )
    kv_quant_decl: KvQuantDecl | None = Field(None, description="the KV quantization as stated")
    num_experts: int | None = None
    experts_per_token: int | None = None
    num_nextn_layers: int = 0
    weight_bytes: int | None = Field(None, description="exact bytes of the weights, if known")
    weight_source: str | None = None
    weight_params: int | None = Field(
        None, description="parameters, where the weight bytes were counted from the config"
    )
    notes: tuple[str, ...] = ()
    placement: TensorPlacement | None = Field(
        None, exclude=True, repr=False, description="a GGUF's tensor bytes by layer"
    )
    # the config the geometry was read from (its text model's part), as JSON text so the
    # record stays hashable: what counting the weights per rank needs; never serialised
    text_config_json: str | None = Field(None, exclude=True, repr=False)

    @property
    def text_config(self) -> dict[str, Any] | None:
        if self.text_config_json is None:
            return None
        config: dict[str, Any] = json.loads(self.text_config_json)
        return config

    def count(self, kind: LayerKind) -> int:
        return sum(1 for k in self.layer_kinds if k == kind)

    @property
    def is_hybrid(self) -> bool:
        """A hybrid as vLLM's model_config.is_hybrid means it: layers with a fixed state per
        sequence (Mamba, linear attention) beside attention layers (a model class that
        implements IsHybrid, config/model.py, 0.33.0). Sliding-window layers beside full
        attention (Gemma 2 and 3, gpt-oss) do not make a model hybrid."""
        kinds = set(self.layer_kinds)
        state = kinds & {LayerKind.LINEAR, LayerKind.MAMBA}
        return bool(state) and bool(kinds - state - {LayerKind.NONE})

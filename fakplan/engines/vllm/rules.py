"""vLLM's releases as data: the rule sets, what each release's parser takes, the constants.

Each value says where it was read (file, release).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fakplan.engines.choices import Choices
from fakplan.engines.releases import Release


@dataclass(frozen=True)
class VllmRules(Release):
    """What differs between the vLLM releases fakplan models, as data.

    Each V1 row was read release by release in vllm/v1/core/kv_cache_utils.py (from
    0.33.0 kv_cache_planning.py), v1/kv_cache_interface.py, model_executor/models/config.py
    and, from 0.20.0, platforms/interface.py; the row's ``read_in`` is the release whose
    code the figures below cite, and every release from ``first`` to the next row agrees
    with it on what decides the printed numbers.
    """

    # FlashMLA forces 64-token blocks for MLA caches (V1; "Forcing kv cache block size to
    # 64", read in v0.11.0); V0 keeps the default 16
    mla_block_64: bool
    # hybrid layouts (recurrent state, or several attention kinds) are sized by page
    # unification (v0.11.0 on); earlier rules are read for uniform models only
    hybrid: bool
    # V0 cache_engine.get_cache_block_size sizes every attention layer as a full one
    sliding_as_full: bool
    # how the boot line's token count follows from the blocks: "blocks" (blocks x block
    # size), "groups" (0.11-0.20: num_blocks // KV groups x the smallest block) or
    # "requests" (0.21 on: int(max_concurrency x max_model_len); 0.21.0
    # kv_cache_utils.py:1708, get_kv_cache_capacity from 0.24.0)
    logged_tokens: Literal["blocks", "groups", "requests"]
    # the word the boot log uses for its block count
    blocks_label: str
    # how the pool is given: --kv-cache-memory-bytes (v0.11.0 on) or, before it, a
    # utilisation fraction of the card
    pool_in_bytes: bool
    # get_kv_cache_groups: the layers per KV group are the largest type's count when it
    # is under ratio x the smallest's, else the smallest's (None: always the smallest;
    # 0.11.0 :977; 1.25 from 0.12.0 :1017; 1.5 from 0.18.0 :1043)
    group_ratio: float | None = None
    # mamba_cache_mode (0.15.0 kv_cache_interface.py:293): "none" keeps 1 + spec state
    # pages a request, "align" (prefix caching) 2 + spec; before 0.15 one page, spec ignored
    state_modes: bool = False
    # prefix caching on by default for hybrid (state) models (0.28.0 arg_utils.py:2650);
    # before, off unless --enable-prefix-caching (0.11-0.14: impossible, forced off)
    hybrid_prefix_default: bool = False
    hybrid_prefix_possible: bool = True
    # sliding windows hold window - 1 + T tokens, T = max_num_batched_tokens x the batches
    # in flight (0.26.0 config/vllm.py:512: 2 with async scheduling at PP 1, else PP)
    batches_in_flight: bool = False
    # the attention block is raised in steps of max(16, --block-size) (0.20.0
    # platforms/interface.py:577), before in steps of 16 (0.11.0 models/config.py:367)
    align_to_block: bool = False


def _v1(
    rule: str,
    first: tuple[int, ...],
    read_in: str,
    logged_tokens: Literal["groups", "requests"],
    *,
    group_ratio: float | None = None,
    state_modes: bool = False,
    hybrid_prefix_default: bool = False,
    hybrid_prefix_possible: bool = True,
    batches_in_flight: bool = False,
    align_to_block: bool = False,
) -> VllmRules:
    """A V1 row from 0.11 on: FlashMLA's 64 blocks, hybrid layouts, the pool in bytes."""
    return VllmRules(
        rule, first, read_in, True, True, False, logged_tokens, "num_blocks", True,
        group_ratio, state_modes, hybrid_prefix_default, hybrid_prefix_possible,
        batches_in_flight, align_to_block,
    )  # fmt: skip


RELEASES = (
    _v1("v1-0.28", (0, 28), "0.33.0", "requests",
        group_ratio=1.5, state_modes=True, hybrid_prefix_default=True,
        batches_in_flight=True, align_to_block=True),
    _v1("v1-0.26", (0, 26), "0.27.0", "requests",
        group_ratio=1.5, state_modes=True, batches_in_flight=True, align_to_block=True),
    _v1("v1-0.21", (0, 21), "0.25.0", "requests",
        group_ratio=1.5, state_modes=True, align_to_block=True),
    _v1("v1-0.20", (0, 20), "0.20.0", "groups",
        group_ratio=1.5, state_modes=True, align_to_block=True),
    _v1("v1-0.18", (0, 18), "0.19.0", "groups",
        group_ratio=1.5, state_modes=True),
    _v1("v1-0.15", (0, 15), "0.17.0", "groups",
        group_ratio=1.25, state_modes=True),
    _v1("v1-0.12", (0, 12), "0.14.0", "groups",
        group_ratio=1.25, hybrid_prefix_possible=False),
    _v1("v1-0.11", (0, 11), "0.11.0", "groups",
        hybrid_prefix_possible=False),
    VllmRules("v1-0.8", (0, 8), "0.8.5.post1", True, False, False, "blocks", "num_blocks", False),
    VllmRules("v0", (0, 3), "0.6.6.post1", False, False, True, "blocks", "# GPU blocks", False),
)  # fmt: skip


@dataclass(frozen=True)
class CheckpointKvRules(Release):
    """Which KV dtype a checkpoint's quantization config makes of ``--kv-cache-dtype auto``."""

    # ModelOpt kv_cache_scheme / kv_cache_quant_algo forms mapped (get_kv_cache_quant_algo_
    # string, vllm/utils/torch_utils.py): "fp8" -> fp8_e4m3; "nvfp4" from 0.20
    modelopt: tuple[str, ...]
    # a compressed-tensors kv_cache_scheme makes the cache fp8 (Attention.__init__):
    # "never" before 0.15, "always" (even over a stated dtype) 0.15-0.21, "auto" from 0.22
    compressed: Literal["never", "always", "auto"]
    source: str


@dataclass(frozen=True)
class StateDtypeRules(Release):
    """The dtype of a recurrent state's SSM part when nothing is stated on the command line."""

    # Gated DeltaNet honours the checkpoint's mamba_ssm_dtype (0.17.0
    # mamba_utils.gated_delta_net_state_dtype takes mamba_ssm_cache_dtype); before, both
    # of its states follow mamba_cache_dtype, the model dtype
    gdn_ssm_dtype: bool
    # NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype: the checkpoint's
    # mamba_ssm_cache_dtype, else this (float16 from 0.13.0, float32 from 0.20.0
    # models/config.py:410); None: the model dtype
    nemotron_h_default: str | None


STATE_DTYPES = (
    StateDtypeRules("state-0.20", (0, 20), "0.20.0", True, "fp32"),
    StateDtypeRules("state-0.17", (0, 17), "0.17.0", True, "fp16"),
    StateDtypeRules("state-0.13", (0, 13), "0.13.0", False, "fp16"),
    StateDtypeRules("state-0.11", (0, 3), "0.12.0", False, None),
)

_CT = "vllm/model_executor/layers/attention/attention.py"
CHECKPOINT_KV = (
    CheckpointKvRules("ckpt-kv-0.22", (0, 22), "0.33.0", ("fp8", "nvfp4"), "auto",
                      f"utils/torch_utils.py:443 (v0.33.0); {_CT}:287 (v0.33.0), :238 (v0.22.0)"),
    CheckpointKvRules("ckpt-kv-0.20", (0, 20), "0.20.0", ("fp8", "nvfp4"), "always",
                      f"utils/torch_utils.py (v0.20.0); {_CT}:232 (v0.20.0)"),
    CheckpointKvRules("ckpt-kv-0.15", (0, 15), "0.15.0", ("fp8",), "always",
                      "utils/torch_utils.py (v0.15.0); vllm/attention/layer.py:199 (v0.15.0)"),
    CheckpointKvRules("ckpt-kv-0.14", (0, 14), "0.14.0", ("fp8",), "never",
                      "utils/torch_utils.py:239 resolve_kv_cache_dtype_string, called in "
                      "engine/arg_utils.py:1398 (v0.14.0)"),
    CheckpointKvRules("ckpt-kv-none", (0, 3), "0.13.0", (), "never",
                      "no checkpoint KV rule in 0.13.0 and before: auto follows the model dtype"),
)  # fmt: skip

# What vLLM's own parser takes, release by release (its CacheDType / ModelDType / BlockSize,
# or the argparse choices= of V0): engines compare exactly, so a shape must spell them so.
KV_CACHE_DTYPE_CHOICES = (
    Choices(
        (0, 33),
        "0.33.0",
        "vllm/config/cache.py:44-67 CacheDType, checked at :172 (no argparse choices)",
        (
            "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc",
            "fp8_ds_mla", "nvfp4_ds_mla", "turboquant_k8v4", "turboquant_4bit_nc",
            "turboquant_k3v4_nc", "turboquant_3bit_nc", "octave_k3v4", "octave_k3v3",
            "octave_k3v3_compact", "ultraquant_4bit", "int4_per_token_head",
            "int8_per_token_head", "fp8_per_token_head", "nvfp4", "nvfp4_4over6",
        ),
    ),
    Choices(
        (0, 11),
        "0.11.0",
        "vllm/config/cache.py:25-26 CacheDType",
        ("auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"),
    ),
    Choices((0, 8), "0.8.5", "vllm/config.py:1291 CacheDType", ("auto", "fp8", "fp8_e4m3", "fp8_e5m2")),
    Choices(
        (0, 3),
        "0.6.6.post1",
        "vllm/engine/arg_utils.py:348 choices=",
        ("auto", "fp8", "fp8_e5m2", "fp8_e4m3"),
    ),
)  # fmt: skip
_MODEL_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
MODEL_DTYPE_CHOICES = (
    Choices((0, 33), "0.33.0", "vllm/config/model.py:100 ModelDType", _MODEL_DTYPES),
    Choices((0, 11), "0.11.0", "vllm/config/model.py:67 ModelDType", _MODEL_DTYPES),
    Choices((0, 8), "0.8.5", "vllm/engine/arg_utils.py:466 choices=", _MODEL_DTYPES),
    Choices((0, 3), "0.6.6.post1", "vllm/engine/arg_utils.py:335 choices=", _MODEL_DTYPES),
)
# --block-size: "any" where the field is a positive int (0.33.0 vllm/config/cache.py:187)
BLOCK_SIZE_CHOICES = (
    Choices((0, 33), "0.33.0", "vllm/config/cache.py:187 block_size: int, gt=0", ("any",)),
    Choices((0, 11), "0.11.0", "vllm/config/cache.py:24 BlockSize", ("1", "8", "16", "32", "64", "128")),
    Choices((0, 8), "0.8.5", "vllm/config.py:1290 BlockSize", ("1", "8", "16", "32", "64", "128")),
    Choices((0, 3), "0.6.6.post1", "vllm/engine/arg_utils.py:431 choices=", ("8", "16", "32", "64", "128")),
)  # fmt: skip

# The bytes of the KV dtypes fakplan has read (vllm/utils/torch_utils.py
# STR_DTYPE_TO_TORCH_DTYPE, v0.33.0: fp8 variants are uint8); the other layouts vLLM
# takes pack scales in ways not read yet.
KV_DTYPES: dict[str, str | None] = {
    "auto": None,
    "bfloat16": "bf16",
    "float16": "fp16",
    "fp8": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "fp8_inc": "fp8",
    "fp8_ds_mla": "fp8",
}
# _resolve_auto_dtype (v0.32.0): a float32 checkpoint under --dtype auto is served in the
# platform's first supported dtype
DOWNCAST = ("bf16", "bf16 on CPUs and bf16 GPUs, fp16 on older GPUs")
FP8_DS_MLA_BYTES = 656  # per token per layer, fixed (vllm MLAAttentionSpec, v0.11.0/v0.33.0)
DEFAULT_BLOCK = 16  # CacheConfig.DEFAULT_BLOCK_SIZE (v0.33.0); CUDA platform default (v0.11.0)
MLA_BLOCK = 64  # FlashMLA forces 64 (v0.11.0 "Forcing kv cache block size to 64")
BLOCK_ALIGN = 16  # hybrid attention block sizes are multiples of the kernel alignment
DEFAULT_BATCHED_TOKENS = 8192  # serve default on large GPUs; only sliding windows depend on it
GIB = 1 << 30
CPU_KV_SPACE = "VLLM_CPU_KVCACHE_SPACE"
RAY_PORT = 6379  # ray start --head's default GCS port


CPU_BLOCK = 128  # platforms/cpu.py check_and_update_config (v0.32.0 CPU build)
CPU_MLA_BLOCK = 16  # "CPU MLA backend requires block_size=16" (v0.32.0 CPU build)

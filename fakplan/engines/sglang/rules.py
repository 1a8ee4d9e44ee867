"""SGLang's releases as data: the rule sets, what its parser takes, its dtypes, constants."""

from __future__ import annotations

from dataclasses import dataclass

from fakplan.engines.choices import Choices
from fakplan.engines.releases import Release


@dataclass(frozen=True)
class SglangRules(Release):
    """What differs between the SGLang releases fakplan models, as data."""

    # sliding-window layers get a pool of their own, sized at swa_full_tokens_ratio of
    # the full pool (0.5); 0.4 gives them full-length slots in the one pool
    swa_pool: bool
    # a cell's V is v_head_dim wide (0.5); 0.4 sizes V as head_dim (2 x head_dim per head)
    own_v_head_dim: bool


RELEASES = (
    SglangRules("0.5", (0, 5), "0.5.23", True, True),
    SglangRules("0.4", (0, 4), "0.4.6.post5", False, False),
)

# What SGLang's own parser takes (argparse choices=), release by release; from 0.5.23 the
# options live in python/sglang/srt/arg_groups/fields/*.py, not server_args.py.
_FP8 = ("auto", "fp8_e5m2", "fp8_e4m3")
KV_CACHE_DTYPE_CHOICES = (
    Choices(
        (0, 5, 23),
        "0.5.23",
        "python/sglang/srt/arg_groups/fields/model.py:209-218 choices=",
        (*_FP8, "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16"),
    ),
    Choices((0, 5), "0.5.2", "python/sglang/srt/server_args.py:1031 choices=", _FP8),
    Choices((0, 4), "0.4.6.post5", "python/sglang/srt/server_args.py:553 choices=", _FP8),
)
_MODEL_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
MODEL_DTYPE_CHOICES = (
    Choices((0, 5, 23), "0.5.23", "python/sglang/srt/arg_groups/fields/model.py:173", _MODEL_DTYPES),
    Choices((0, 5), "0.5.2", "python/sglang/srt/server_args.py:1001 choices=", _MODEL_DTYPES),
    Choices((0, 4), "0.4.6.post5", "python/sglang/srt/server_args.py:539 choices=", _MODEL_DTYPES),
)  # fmt: skip

# The bytes of the KV dtypes fakplan has read (python/sglang/srt/mem_cache/kv_cache_dtype.py,
# v0.5.23); mxfp8, nvfp4 and fp4_mx_block16 pack scales in ways not read yet.
KV_DTYPES: dict[str, str | None] = {
    "auto": None,
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
}
# python/sglang/srt/configs/model_config.py _get_and_verify_dtype: float32 under auto is
# served in fp16 (bf16 for Gemma)
DOWNCAST = ("fp16", "fp16, bf16 for Gemma")
DIST_INIT_PORT = 20000  # a free port for torch.distributed's rendezvous on the head
SWA_FULL_TOKENS_RATIO = 0.8  # server_args default (v0.5.23)
DEFAULT_PAGE = 1  # _page_size_default (v0.5.23); backends such as FlashMLA force 64

# speculative algorithms (--speculative-algorithm, lower-cased as a shape names them): a
# draft model or EAGLE head with a KV pool of its own, NEXTN the checkpoint's MTP layers
# (an alias of EAGLE without a draft path), NGRAM none (speculative/spec_info.py, v0.5.23)
DRAFT_MODEL_METHODS = ("eagle", "eagle3", "standalone")
MTP_METHODS = ("nextn", "eagle")
NO_KV_METHODS = ("ngram",)

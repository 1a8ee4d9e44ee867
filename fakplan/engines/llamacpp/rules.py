"""llama.cpp's builds as data: the rule sets, the cache types its parser takes, constants."""

from __future__ import annotations

from dataclasses import dataclass

from fakplan.dtypes import element_type
from fakplan.engines.choices import Choices
from fakplan.engines.releases import Release


@dataclass(frozen=True)
class LlamacppRules(Release):
    """What differs between the llama.cpp builds fakplan models, as data."""

    # n_ctx is padded to 256 cells always (0c1e57098 llama-context.cpp); the 2024 build
    # padded to 256 with flash attention and to 32 without
    pad_always_256: bool
    # an MLA cache holds K only (0c1e57098: has_v = !is_mla); 2024 kept a V of kv_lora_rank
    mla_k_only: bool
    # slots with a cache of their own each (-np without -kvu, 0c1e57098); 2024: one cache
    split_streams: bool


RELEASES = (
    LlamacppRules("current", (5000,), "0c1e57098", True, True, True),
    LlamacppRules("2024", (1,), "74d73dc", False, False, False),
)
# --cache-type-k / --cache-type-v as llama.cpp's own parser takes them (matched exactly);
# default f16 (common/common.h). fakplan adds "auto" (the default) and "K/V" for a split.
CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
CACHE_TYPE_CHOICES = (
    Choices((5000,), "0c1e57098", "common/arg.cpp:304-314 kv_cache_types", CACHE_TYPES),
    Choices((1,), "74d73dc", "common/common.cpp:999-1029 kv_cache_type_from_str", CACHE_TYPES),
)
UNQUANTIZED = frozenset({"f32", "f16", "bf16"})  # cache types stored element by element
N_UBATCH = 512  # default physical batch (common/common.h)
# recurrent state is kept in f32 (src/llama-memory-recurrent.cpp, 0c1e57098)
STATE_BYTES = element_type("fp32").block_bytes
# -ngl 999: more layers than any model has, so every layer is offloaded (the spelling
# llama.cpp's own server README uses for "all")
ALL_LAYERS = 999
PAD = 256

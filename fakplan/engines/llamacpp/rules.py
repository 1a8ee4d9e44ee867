"""llama.cpp's builds as data: the rule sets, the cache types its parser takes, constants."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fakplan.dtypes import element_type
from fakplan.engines.choices import Choices
from fakplan.engines.releases import Release


@dataclass(frozen=True)
class LlamacppRules(Release):
    """What differs between the llama.cpp builds fakplan models, as data.

    Read in ggml-org/llama.cpp (the ngxson/llama.cpp mirror's upstream tags) at b10573
    (d775b8967): src/llama-context.cpp, llama-kv-cache.cpp, llama-kv-cache-iswa.cpp,
    llama-model.cpp; each boundary is the build of the upstream commit that changed it,
    read there: b7836 d9c6ce46f (#19067), b6981 16bcc1259 (#17046), b6931 cd5e3b575
    (#16736), b6869 85a7d8677 (#16812), b7475 57c1e0564 (#18148), b6325 e81b8e4b7, b5913 225e7a143 (#14363), b5554
    3600cc288, b5429 e298d2fbd, b5137 daa422881 (#12801), b9191 255582687 (#22673).
    """

    # the cells n_ctx is padded to: "256" (b6981, #17046: llama-context.cpp:288), "none"
    # (b6869, #16812: n_pad = 1), "fa" (256 with flash attention, 32 without)
    pad: Literal["256", "none", "fa"]
    # a non-unified stream's cells from n_ctx: "pad" (b6981: pad(n_ctx // n_seq, 256),
    # llama-context.cpp:293), "floor" (b6931, #16736), "ceil" (b6869), "pad_ceil"
    # (b5913: pad(ceil(n_ctx / n_seq))), "none" (before b5913, #14363: one cache for all)
    streams: Literal["pad", "floor", "ceil", "pad_ceil", "none"]
    # the SWA cache: "outside" (b6981: pad(min(base, n_swa x (unified ? n_seq : 1) +
    # n_ubatch), 256), llama-kv-cache-iswa.cpp:73), "inside" (b5913: min(base,
    # pad(n_swa x (unified ? n_seq : 1) + n_ubatch))), "ubatch" (b5554: n_swa x n_seq +
    # n_ubatch), "batch" (b5429: + n_batch), "none" (before b5429: every layer full)
    swa: Literal["outside", "inside", "ubatch", "batch", "none"]
    # an MLA cache: "k_only" (b7836, #19067: has_v = !is_mla), "kv" (b5137, #12801: K of
    # kv_lora_rank + rope, V of kv_lora_rank), "expanded" (before: per-head K and V)
    mla: Literal["k_only", "kv", "expanded"]
    # flash attention on unless stated off (b6325: -fa auto); before, only with -fa
    fa_auto: bool
    # recurrent rows per sequence are 1 + n_rs_seq, the speculative draft's n_max (b9191,
    # 255582687: llama-memory-recurrent.cpp:99); before, 1
    rs_seq: bool = False
    # -ngl N offloads the output layer first, then the last N - 1 blocks (b7475, 57c1e0564,
    # #18148: i_gpu_start = n_layer + 1 - N); before, the last N blocks and the output
    # layer only once N > n_layer (i_gpu_start = n_layer - N; read at 74d73dc too)
    output_first: bool = False

    @property
    def split_streams(self) -> bool:
        return self.streams != "none"


_TAG = "b10573"  # d775b8967
RELEASES = (
    LlamacppRules("b9191", (9191,), _TAG, "256", "pad", "outside", "k_only", True, True, True),
    LlamacppRules("b7836", (7836,), _TAG, "256", "pad", "outside", "k_only", True, False, True),
    LlamacppRules("b7475", (7475,), "b7475", "256", "pad", "outside", "kv", True, False, True),
    LlamacppRules("b6981", (6981,), _TAG, "256", "pad", "outside", "kv", True),
    LlamacppRules("b6931", (6931,), "b6931", "none", "floor", "inside", "kv", True),
    LlamacppRules("b6869", (6869,), "b6869", "none", "ceil", "inside", "kv", True),
    LlamacppRules("b6325", (6325,), "b6325", "fa", "pad_ceil", "inside", "kv", True),
    LlamacppRules("b5913", (5913,), "b5913", "fa", "pad_ceil", "inside", "kv", False),
    LlamacppRules("b5554", (5554,), "b5554", "fa", "none", "ubatch", "kv", False),
    LlamacppRules("b5429", (5429,), "b5429", "fa", "none", "batch", "kv", False),
    LlamacppRules("b5137", (5137,), "b5137", "fa", "none", "none", "kv", False),
    LlamacppRules("2024", (1,), "74d73dc", "fa", "none", "none", "expanded", False),
)  # fmt: skip
# a GGUF by Hub id: -hf <user>/<model>:<quant> picks the file by its quant tag from b4470
# (common : support tag-based --hf-repo like on ollama, 00b4c3da6, #11195); --hf-repo and
# --hf-file name a file from b2528 (common : add HF arg helpers, 80bd33bc2, #6234)
HF_TAG_BUILD = 4470
HF_FILE_BUILD = 2528
# from b5177 -hf also fetches and loads a repository's mmproj (the vision projector) unless
# --no-mmproj (arg : clean up handling --mmproj with -hf, 80982e815, #13082): fakplan plans
# the text model, so the launch says --no-mmproj there
HF_MMPROJ_BUILD = 5177
N_BATCH = 2048  # default logical batch (common/common.h), capped at n_ctx
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

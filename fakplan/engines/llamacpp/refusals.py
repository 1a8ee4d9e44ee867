"""What llama.cpp refuses at boot that a shape can cause (docs/boot-refusals.md).

Read in src/llama-context.cpp at 0c1e57098 (the copy llama-cpp-python 0.3.36 vendors, which
this suite boots) and in the b10361, b10566 and b10809 trees (the same code: b10573 between
them). ``llama_init_from_model`` logs the refusal and returns no context: llama-server exits,
llama-cpp-python raises ``ValueError("Failed to create llama_context")``.

The block-size rows run only where flash attention is not off: fakplan's launch turns it on
for a quantized V cache (``--flash_attn true`` / ``-fa on``); otherwise llama-server leaves it
``auto`` (b6325 on) and llama-cpp-python off (its ``flash_attn`` is a bool, default False:
llama_cpp/llama.py:354-358 at 0.3.36). They hold from b9102 (7d442abf5, whose llama-server
prints "version: 9102 (7d442abf5)"); from 49bfddeca (llama-cpp-python 0.3.17) to then the
check ran under ``-fa auto`` only, and 4227c9be4 (0.3.16) had none.
"""

from __future__ import annotations

from fakplan.dtypes import element_type
from fakplan.engines.llamacpp.cache import split_types
from fakplan.engines.llamacpp.rules import UNQUANTIZED
from fakplan.engines.refusals import BootInputs, BootRefusal, Check, NotChecked
from fakplan.geometry import LayerKind

SINCE = (9102,)  # 7d442abf5: the block-size rule with flash attention anything but off
LLAMA_MAX_SEQ = 256  # src/llama-cparams.h:8 (64 before 49bfddeca)
_ON, _OFF = ("on", "true", "1", "enabled"), ("off", "false", "0", "disabled")


def _stated_flash(extra: tuple[str, ...]) -> str | None:
    """What launch.extra_args says of flash attention (the last word wins), or None."""
    said = None
    for name, value in zip(extra, [*extra[1:], ""], strict=False):
        if name in ("-fa", "--flash-attn", "--flash_attn"):
            said = value.lower()
    return said


def flash_attention(inputs: BootInputs) -> str:
    """``on``, ``auto`` or ``off``: what the rendered launch leaves llama.cpp with."""
    setup = inputs.setup
    said = _stated_flash(setup.launch.extra_args)
    if said in _ON:
        return "on"
    if said in _OFF:
        return "off"
    _, v_name = split_types(setup.serving.kv_dtype)
    if v_name not in UNQUANTIZED:
        return "on"  # fakplan's launch: a quantized V cache needs it
    python = setup.launch.binary == "llama-cpp-python"
    return "off" if python or inputs.version < (6325,) else "auto"


def _head_sizes(inputs: BootInputs, side: str) -> set[int]:
    """The K (or V) head sizes llama.cpp's n_embd_head_k(il) gives its layers: the sliding
    layers' own, every other layer the full attention's (MLA: the latent and rope)."""
    g = inputs.setup.geometry
    sizes = set()
    if g.mla is not None:
        sizes.add(g.mla.kv_lora_rank + (g.mla.qk_rope_head_dim if side == "k" else 0))
    if g.attention is not None:
        sizes.add(g.attention.head_dim if side == "k" else g.attention.v_head_dim)
    if g.sliding is not None and LayerKind.SLIDING in g.layer_kinds:
        sizes.add(g.sliding.head_dim if side == "k" else g.sliding.v_head_dim)
    if not sizes:
        raise NotChecked(f"{g.source} gives no attention head size")
    return sizes


def _block(side: str) -> Check:
    def check(inputs: BootInputs) -> str | None:
        if flash_attention(inputs) == "off":
            return None  # the check runs only with flash attention on or auto
        k_name, v_name = split_types(inputs.setup.serving.kv_dtype)
        name = k_name if side == "k" else v_name
        if name in UNQUANTIZED:
            return None
        block = element_type(name).block_elems
        for size in sorted(_head_sizes(inputs, side)):
            if size % block:
                return (
                    f"llama_init_from_model: {side.upper()} cache type {name} with block size "
                    f"{block} does not divide n_embd_head_{side}={size}"
                )
        return None

    return check


def _quantized_v(inputs: BootInputs) -> str | None:
    _, v_name = split_types(inputs.setup.serving.kv_dtype)
    if v_name in UNQUANTIZED or flash_attention(inputs) != "off":
        return None
    if inputs.version >= (10361,):
        return "llama_init_from_model: quantized V cache requires flash_attn to be enabled"
    return "llama_init_from_model: V cache quantization requires flash_attn"


def _max_seq(inputs: BootInputs) -> str | None:
    setup = inputs.setup
    if (setup.launch.binary or "llama-server") != "llama-server":
        return None  # llama-cpp-python's server passes no n_seq_max: one sequence
    if setup.serving.max_num_seqs <= LLAMA_MAX_SEQ:
        return None
    return (
        "llama_init_from_model: failed to initialize the context: n_seq_max must be <= "
        f"{LLAMA_MAX_SEQ}"
    )


def _mla_types(inputs: BootInputs) -> str | None:
    if inputs.setup.geometry.mla is None:
        return None
    k_name, v_name = split_types(inputs.setup.serving.kv_dtype)
    if k_name == v_name:
        return None
    return (
        f"llama_init_from_model: model does not support different K ({k_name}) and V "
        f"({v_name}) cache types"
    )


_READ = "read at 0c1e57098 (llama-cpp-python 0.3.36) and in b10361, b10566, b10809"


REFUSALS: tuple[BootRefusal, ...] = (
    BootRefusal(
        id="llamacpp-k-block",
        engine="llamacpp",
        releases=f"b9102 on ({_READ})",
        first=SINCE,
        condition="a quantized K cache type (q8_0, q4_0, ...) whose block (32 elements) does "
        "not divide a layer's K head size, with flash attention not off",
        message="%s: K cache type %s with block size %u does not divide n_embd_head_k=%u",
        source="src/llama-context.cpp llama_init_from_model:3851-3860 (message 3855) at "
        "0c1e57098; :3607-3616 at b10566; :3709-3718 at b10809",
        fix="use a K cache type stored element by element (f16, bf16, f32), or a model whose "
        "head size is a multiple of the block",
        check=_block("k"),
    ),
    BootRefusal(
        id="llamacpp-v-block",
        engine="llamacpp",
        releases=f"b9102 on ({_READ})",
        first=SINCE,
        condition="a quantized V cache type whose block does not divide a layer's V head "
        "size, with flash attention not off (checked after K: a failing K is told first)",
        message="%s: V cache type %s with block size %u does not divide n_embd_head_v=%u",
        source="src/llama-context.cpp llama_init_from_model:3862-3871 (message 3866) at "
        "0c1e57098; :3622 at b10566; :3724 at b10809",
        fix="use a V cache type stored element by element (f16, bf16, f32), or a model whose "
        "head size is a multiple of the block",
        check=_block("v"),
    ),
    BootRefusal(
        id="llamacpp-quantized-v-flash",
        engine="llamacpp",
        releases=f'b9102 on ({_READ}); before b10361 the message read "V cache quantization '
        'requires flash_attn"',
        first=SINCE,
        condition="a quantized V cache with flash attention off (launch.extra_args -fa off, "
        "--flash_attn false): fakplan's own launch turns it on",
        message="%s: quantized V cache requires flash_attn to be enabled",
        source="src/llama-context.cpp llama_init_from_model:3840-3849 (message 3846) at "
        "0c1e57098; :3602 at b10566; :3704 at b10809; :3532-3535 at e3546c794",
        fix="drop the flash-attention switch from launch.extra_args, or use an f16 V cache",
        check=_quantized_v,
    ),
    BootRefusal(
        id="llamacpp-max-seq",
        engine="llamacpp",
        releases=f"b9102 on ({_READ}; LLAMA_MAX_SEQ 64 before 49bfddeca)",
        first=SINCE,
        condition=f"llama-server with serving.max_num_seqs (-np) above {LLAMA_MAX_SEQ}",
        message="%s: failed to initialize the context: n_seq_max must be <= 256",
        source="src/llama-context.cpp llama_context::llama_context:101-103 (throw 102), "
        "caught in llama_init_from_model:3898-3900 at 0c1e57098; src/llama-cparams.h:8",
        fix=f"lower serving.max_num_seqs to {LLAMA_MAX_SEQ} or fewer, or run more servers",
        check=_max_seq,
    ),
    BootRefusal(
        id="llamacpp-mla-kv-types",
        engine="llamacpp",
        releases=f"b9102 on ({_READ})",
        first=SINCE,
        condition="a multi-head latent attention (MLA) model with different K and V cache "
        "types (serving.kv_cache_dtype K/V)",
        message="%s: model does not support different K (%s) and V (%s) cache types",
        source="src/llama-context.cpp llama_init_from_model:3835-3838 at 0c1e57098",
        fix="give K and V one cache type",
        check=_mla_types,
    ),
)

"""llama.cpp's boot-ledger lines (llama-server, llama-cpp-python), as data (the format's
code is in ``llamacpp``).

Sources: ``docs/engines.md`` §3.3-§3.7 (format strings read at
commits 0c1e57098, the copy in llama-cpp-python 0.3.36, and 74d73dc, Nov
2024), ``docs/engines-on-cpu.md`` §3 (a real llama-cpp-python
0.3.36 boot) and ``tests/data/public/ledgers/llamacpp-*.log`` (b4462, b9036). Sizes are
"%8.2f MiB": MiB with two decimals, so a tiny cache rounds (0.125 prints 0.12).

Function names moved between builds (``llama_new_context_with_model`` ->
``llama_context``, ``llama_kv_cache_init`` -> ``llama_kv_cache_unified`` ->
``llama_kv_cache``, compute buffers under ``sched_reserve``), so rows match
the message and accept each prefix. Per-device buffers become
``devices.<name>.<buffer>``.

Two ``llama_kv_cache: size`` lines in one context are an iSWA model's two
caches, non-SWA first (``llama-kv-cache-iswa.cpp`` builds ``kv_base`` then
``kv_swa``): the second is the SWA cache.
"""

from __future__ import annotations

from fakplan.ledger.patterns import (
    IN_MIB,
    SERVER_UP,
    Conv,
    Row,
    count,
    fig,
    flag,
    text_,
)

NOW = "llama.cpp 0c1e57098 (llama-cpp-python 0.3.36), b9036"
NOV24 = "llama.cpp 74d73dc (Nov 2024), b4462"
ALL = "llama.cpp 74d73dc-0c1e57098"
_CTX = r"(?:llama_context|llama_new_context_with_model|llama_init_from_model): "
_MIB = r"[\d.]+"


def _param(name: str, source: str, conv: Conv = count, value: str = r"\d+") -> Row:
    """A ``llama_context: <name>   = <value>`` line (printf pads the name), once per context."""
    return Row(
        "context",
        source,
        f"{name} ",
        rf"{_CTX}{name} += (?P<value>{value})\s*$",
        (fig(name, conv, "value"),),
        once=True,
    )


def _device_buffer(
    kind: str,
    label: str,
    figure: str,
    source: str,
    *,
    once: bool = False,
    series: str | None = None,
    occurrence: int = 0,
) -> Row:
    """A ``<device> <label> buffer size = X MiB`` line (``CUDA0``, ``CPU_Mapped``...)."""
    return Row(
        kind,
        source,
        "buffer size",
        rf"\s(?P<device>\S+)\s+{label} buffer size\s*=\s*(?P<size>{_MIB}) MiB",
        (fig(f"devices.{{device}}.{figure}", IN_MIB, "size"),),
        once=once,
        series=series,
        occurrence=occurrence,
    )


_KV_SUMMARY = (
    rf"(?:llama_kv_cache|llama_kv_cache_unified): size = \s*(?P<size>{_MIB}) MiB "
    r"\(\s*(?P<cells>\d+) cells,\s*(?P<layers>\d+) layers,\s*(?P<seqs>\d+)(?:/\s*(?P<streams>\d+))? "
    rf"seqs\), K \((?P<k_type>\w+)\):\s*(?P<k>{_MIB}) MiB, V \((?P<v_type>\w+)\):\s*(?P<v>{_MIB}) MiB"
)

ROWS: tuple[Row, ...] = (
    Row(
        "build",
        "llama-server main (all builds)",
        "build",
        r"\bbuild(?::| =) (?P<engine_version>\d+ \([0-9a-f]+\))",
        (fig("engine_version", text_),),
        starts_boot=True,
        server=True,
    ),
    Row(
        "model_load",
        ALL + " llama_model_loader",
        "loaded meta data with",
        r"llama_model_loader: loaded meta data with \d+ key-value pairs",
        starts_boot=True,
    ),
    Row(
        "draft",
        "llama.cpp 3f545becc common/speculative.cpp: \"loading draft model '%s'\"",
        "loading draft model",
        r"loading draft model",
        second_model=True,
        server=True,
    ),
    Row(
        "draft",
        "llama.cpp 3f545becc common/speculative.cpp (MTP, 255582687 #22673): an MTP head's "
        "draft context on the target model, with a KV cache of its own (issue 31: its size "
        "was read as the pool)",
        "creating MTP draft context",
        r"creating MTP draft context against the target model",
        second_model=True,
        server=True,
    ),
    Row(
        "device",
        "llama.cpp 0c1e57098 llama_prepare_model_devices; 74d73dc llama_load_model_from_file",
        "MiB free",
        r"using device (?P<device>\S+) .*- (?P<free>\d+) MiB free",
        (fig("devices.{device}.free_bytes", IN_MIB, "free"),),
        once=True,
    ),
    Row(
        "n_ctx_train",
        ALL + " print_info / llm_load_print_meta",
        "n_ctx_train",
        r"(?:print_info|llm_load_print_meta): n_ctx_train\s+= (?P<n_ctx_train>\d+)\s*$",
        (fig("n_ctx_train", count),),
    ),
    Row(
        "offload",
        ALL + " load_tensors / llm_load_tensors",
        "layers to GPU",
        r"offloaded (?P<offloaded_layers>\d+)/\d+ layers to GPU",
        (fig("offloaded_layers", count),),
    ),
    _device_buffer("weights", "model", "model_bytes", ALL + " load_tensors", once=True),
    _param("n_seq_max", ALL),
    _param("n_ctx", ALL),
    Row(
        "context",
        NOW,
        "n_ctx_seq ",
        rf"{_CTX}n_ctx_seq += (?P<n>\d+)\s*$",
        (fig("n_ctx_seq", count, "n"), fig("context_len", count, "n")),
        once=True,
    ),
    Row(
        "context",
        NOV24,
        "n_ctx_per_seq ",
        rf"{_CTX}n_ctx_per_seq += (?P<n>\d+)\s*$",
        (fig("n_ctx_seq", count, "n"), fig("context_len", count, "n")),
        once=True,
    ),
    _param("n_batch", ALL),
    _param("n_ubatch", ALL),
    _param("flash_attn", ALL, text_, r"\S+"),
    _param("kv_unified", NOW, flag, "true|false"),
    Row(
        "pipeline",
        NOV24 + " llama_new_context_with_model",
        "pipeline parallelism enabled",
        r"pipeline parallelism enabled \(n_copies=(?P<pipeline_copies>\d+)\)",
        (fig("pipeline_copies", count),),
    ),
    _device_buffer("output_buffer", "output", "output_bytes", ALL, once=True),
    Row(
        "kv_header",
        "llama.cpp b4462 (early 2025) llama_kv_cache_init",
        "llama_kv_cache_init: kv_size = ",
        r"llama_kv_cache_init: kv_size = (?P<kv_cells>\d+), offload = \d+, "
        r"type_k = '(?P<k_type>\w+)', type_v = '(?P<v_type>\w+)', n_layer = (?P<kv_layers>\d+)",
        (
            fig("kv_cells", count),
            fig("k_type", text_),
            fig("v_type", text_),
            fig("kv_layers", count),
        ),
        once=True,
    ),
    Row(
        "kv_header",
        "llama.cpp spring 2025 llama_kv_cache_unified (commit UNCONFIRMED)",
        "llama_kv_cache_unified: kv_size = ",
        r"llama_kv_cache_unified: kv_size = (?P<kv_cells>\d+), type_k = '(?P<k_type>\w+)', "
        r"type_v = '(?P<v_type>\w+)', n_layer = (?P<kv_layers>\d+)",
        (
            fig("kv_cells", count),
            fig("k_type", text_),
            fig("v_type", text_),
            fig("kv_layers", count),
        ),
        series="kv_header",
    ),
    Row(
        "kv_header_swa",
        "llama.cpp spring 2025 llama_kv_cache_unified (commit UNCONFIRMED), second cache",
        "llama_kv_cache_unified: kv_size = ",
        r"llama_kv_cache_unified: kv_size = (?P<cells>\d+), type_k = '\w+', type_v = '\w+', "
        r"n_layer = \d+",
        (fig("swa_kv_tokens", count, "cells"),),
        series="kv_header",
        occurrence=1,
    ),
    Row(
        "kv_iswa",
        NOW + " llama_kv_cache_iswa",
        "creating non-SWA KV cache, size = ",
        r"creating non-SWA KV cache, size = (?P<kv_cells>\d+) cells",
        (fig("kv_cells", count),),
    ),
    Row(
        "kv_iswa",
        NOW + " llama_kv_cache_iswa",
        "SWA KV cache, size = ",
        r"creating\s+SWA KV cache, size = (?P<swa_kv_tokens>\d+) cells",
        (fig("swa_kv_tokens", count),),
        opens=(("kv_summary", 1), ("kv_buffer", 1)),
    ),
    _device_buffer("kv_buffer", "KV", "kv_bytes", ALL, series="kv_buffer"),
    _device_buffer(
        "kv_buffer_swa",
        "KV",
        "swa_kv_bytes",
        NOW + ", second cache",
        series="kv_buffer",
        occurrence=1,
    ),
    Row(
        "kv_summary",
        NOW + " llama_kv_cache (cells per stream; seqs n_seq_max/n_stream); "
        "mid-2025 06bb08ac llama_kv_cache_unified (one shared cache)",
        "cells,",
        _KV_SUMMARY,
        (
            fig("kv_bytes", IN_MIB, "size"),
            fig("kv_cells", count, "cells"),
            fig("kv_layers", count, "layers"),
            fig("n_seq_max", count, "seqs"),
            fig("n_stream", count, "streams"),
            fig("k_type", text_),
            fig("k_bytes", IN_MIB, "k"),
            fig("v_type", text_),
            fig("v_bytes", IN_MIB, "v"),
        ),
        series="kv_summary",
    ),
    Row(
        "kv_summary_swa",
        NOW + " llama_kv_cache, the iSWA model's second (SWA) cache",
        "cells,",
        _KV_SUMMARY,
        (fig("swa_kv_bytes", IN_MIB, "size"), fig("swa_kv_tokens", count, "cells")),
        series="kv_summary",
        occurrence=1,
    ),
    Row(
        "kv_summary",
        NOV24 + " llama_new_context_with_model",
        "KV self size",
        rf"KV self size\s*=\s*(?P<size>{_MIB}) MiB, K \((?P<k_type>\w+)\):\s*(?P<k>{_MIB}) MiB, "
        rf"V \((?P<v_type>\w+)\):\s*(?P<v>{_MIB}) MiB",
        (
            fig("kv_bytes", IN_MIB, "size"),
            fig("k_type", text_),
            fig("k_bytes", IN_MIB, "k"),
            fig("v_type", text_),
            fig("v_bytes", IN_MIB, "v"),
        ),
        once=True,
    ),
    Row(
        "kv_summary_mla",
        "ik_llama.cpp llama_new_context_with_model with -mla (ikawrakow/ik_llama.cpp #240, "
        "#473): the MLA cache is one latent c^KV, and a transposed kv^T or none",
        "KV self size",
        rf"KV self size\s*=\s*(?P<size>{_MIB}) MiB, c\^KV \((?P<k_type>\w+)\):\s*(?P<k>{_MIB}) "
        rf"MiB, kv\^T(?: \((?P<v_type>\w+)\))?:\s*(?:(?P<v>{_MIB}) MiB|not used)",
        (
            fig("kv_bytes", IN_MIB, "size"),
            fig("k_type", text_),
            fig("k_bytes", IN_MIB, "k"),
            fig("v_type", text_),
            fig("v_bytes", IN_MIB, "v"),
        ),
        once=True,
    ),
    _device_buffer(
        "recurrent_buffer", "RS", "recurrent_bytes", NOW + " llama_memory_recurrent", once=True
    ),
    Row(
        "recurrent",
        NOW + " llama_memory_recurrent",
        "llama_memory_recurrent: size = ",
        rf"llama_memory_recurrent: size = \s*(?P<size>{_MIB}) MiB \(\s*(?P<cells>\d+) cells,"
        r"\s*(?P<layers>\d+) layers,\s*\d+ seqs(?:\s+\d+ rs_seq)?\), "
        rf"R \(\w+\):\s*(?P<r>{_MIB}) MiB, S \(\w+\):\s*(?P<s>{_MIB}) MiB",
        (
            fig("recurrent_bytes", IN_MIB, "size"),
            fig("recurrent_cells", count, "cells"),
            fig("recurrent_layers", count, "layers"),
            fig("r_bytes", IN_MIB, "r"),
            fig("s_bytes", IN_MIB, "s"),
        ),
        once=True,
    ),
    _device_buffer(
        "compute_buffer",
        "compute",
        "compute_bytes",
        NOW + " sched_reserve; " + NOV24 + " llama_new_context_with_model",
        once=True,
    ),
    Row(
        "slots",
        "llama-server 0c1e57098 load_model",
        "initializing, n_slots = ",
        r"initializing, n_slots = (?P<n_slots>\d+), n_ctx_slot = (?P<ctx>\d+)",
        (fig("n_slots", count), fig("context_len", count, "ctx")),
        server=True,
        priority=1,
    ),
    Row(
        "slots",
        "llama-server 74d73dc",
        "initializing slots, n_slots = ",
        r"initializing slots, n_slots = (?P<n_slots>\d+)",
        (fig("n_slots", count),),
        server=True,
    ),
    Row(
        "slots",
        "llama-server 74d73dc",
        "new slot",
        r"new slot\b.*?n_ctx_slot = (?P<ctx>\d+)",
        (fig("context_len", count, "ctx"),),
        server=True,
        priority=1,
    ),
    # ---- boot failures
    Row(
        "error",
        ALL + " context creation",
        "_model: ",
        r"(?P<error>llama_(?:init_from|new_context_with)_model: (?:failed to .*|"
        r".*does not divide.*|.*requires flash_attn.*))",
        failure=True,
    ),
    Row(
        "error",
        "llama-cpp-python 0.3.36 llama_cpp/_internals.py LlamaContext",
        "Failed to create llama_context",
        r"(?P<error>Failed to create llama_context.*)",
        failure=True,
    ),
    Row(
        "error",
        ALL + " llama_model_load",
        "error loading model: ",
        r"llama_model_load: error loading model: (?P<error>.*)",
        failure=True,
    ),
    Row(
        "error",
        "ggml CUDA backend",
        "cudaMalloc failed: out of memory",
        # \b: the function name starts at a word's start (tried inside every word, \w+
        # backtracked over it: a long word took hours)
        r"\b(?P<error>\w+: allocating [\d.]+ MiB on device \d+: cudaMalloc failed: out of memory.*)",
        failure=True,
    ),
    SERVER_UP,
)

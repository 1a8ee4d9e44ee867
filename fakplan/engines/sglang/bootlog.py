"""SGLang's boot-ledger lines, as data.

Sources: ``docs/engines.md`` §2.4 and §2.6 (format strings read in
v0.4.6.post5, v0.5.2 and v0.5.23) and ``tests/data/public/ledgers/sglang-*.log``. SGLang
prints "GB" but divides by 2**30, so every size here is read as GiB.

Lines carry ``[2026-01-31 13:50:39 TP2]`` (or ``DP0 TP3``, ``PP1``): the rank.
Every TP rank prints its own weights and pool lines; they usually agree on the
pool and differ slightly on free memory.
"""

from __future__ import annotations

import re

from fakplan.ledger.patterns import (
    GB_IS_GIB,
    SERVER_UP,
    TORCH_OOM,
    TORCH_OOM_TOTAL,
    DerivedFigures,
    Row,
    count,
    fig,
    text_,
)

OLD = "SGLang v0.4.6.post5, v0.5.2"
NEW = "SGLang v0.5.23"
BOTH = "SGLang v0.4.6.post5-v0.5.23"
_GB = r"[\d.]+"

ROWS: tuple[Row, ...] = (
    Row(
        "launch",
        BOTH + " launch_server",
        "server_args=ServerArgs(",
        r"server_args=ServerArgs\(",
        starts_boot=True,
        server=True,
    ),
    Row(
        "weights_begin",
        BOTH + " model_runner.py",
        "Load weight begin. avail mem=",
        rf"Load weight begin\. avail mem=(?P<free_before_load_bytes>{_GB}) GB",
        (fig("free_before_load_bytes", GB_IS_GIB),),
    ),
    Row(
        "weights",
        BOTH + " model_runner.py",
        "Load weight end.",
        rf"Load weight end\. (?:elapsed=[\d.]+ s, )?type=(?P<model_type>[\w.]+),.*?"
        rf"avail mem=(?P<free>{_GB}) GB, mem usage=(?P<weights>{_GB}) GB",
        (
            fig("free_after_weights_bytes", GB_IS_GIB, "free"),
            fig("weights_bytes", GB_IS_GIB, "weights"),
        ),
        once=True,
        identity="model_type",  # a draft (EAGLE, NextN) loads another class in the same boot
    ),
    Row(
        "swa_pool",
        "SGLang main 2026-01 (UNCONFIRMED in v0.5.2)",
        "Use sliding window memory pool.",
        r"Use sliding window memory pool\. full_layer_tokens=(?P<full_kv_tokens>\d+), "
        r"swa_layer_tokens=(?P<swa_kv_tokens>\d+)",
        (fig("full_kv_tokens", count), fig("swa_kv_tokens", count)),
    ),
    Row(
        "kv_pool",
        BOTH + " memory_pool.py (MHA; v0.5.23 adds the dtype)",
        "KV Cache is allocated.",
        rf"KV Cache is allocated\. (?:dtype: (?P<dtype>[\w.]+), )?#tokens: (?P<kv_tokens>\d+), "
        rf"K size: (?P<k>{_GB}) GB, V size: (?P<v>{_GB}) GB",
        (
            fig("kv_tokens", count),
            fig("k_bytes", GB_IS_GIB, "k"),
            fig("v_bytes", GB_IS_GIB, "v"),
            fig("k_type", text_, "dtype"),
            fig("v_type", text_, "dtype"),
        ),
    ),
    Row(
        "kv_pool",
        BOTH + " memory_pool.py (MLA)",
        "KV Cache is allocated.",
        rf"KV Cache is allocated\. (?:dtype: (?P<dtype>[\w.]+), )?#tokens: (?P<kv_tokens>\d+), "
        rf"KV size: (?P<kv>{_GB}) GB",
        (
            fig("kv_tokens", count),
            fig("kv_bytes", GB_IS_GIB, "kv"),
            fig("k_type", text_, "dtype"),
        ),
    ),
    Row(
        "mamba_pool",
        NEW + " memory_pool.py",
        "Mamba Cache is allocated.",
        rf"Mamba Cache is allocated\. max_mamba_cache_size: (?P<mamba_slots>\d+), conv_state "
        rf"size: (?P<conv>{_GB}) ?GB, ssm_state size: (?P<ssm>{_GB}) ?GB",
        (
            fig("mamba_slots", count),
            fig("conv_state_bytes", GB_IS_GIB, "conv"),
            fig("ssm_state_bytes", GB_IS_GIB, "ssm"),
        ),
    ),
    Row(
        "pool_end",
        BOTH + " model_runner.py",
        "Memory pool end.",
        rf"Memory pool end\. avail mem=(?P<free_after_pool_bytes>{_GB}) GB",
        (fig("free_after_pool_bytes", GB_IS_GIB),),
    ),
    Row(
        "graphs_begin",
        OLD + " cuda_graph_runner.py",
        "Capture cuda graph begin.",
        rf"Capture cuda graph begin\..*?avail mem=(?P<free_before_graphs_bytes>{_GB}) GB",
        (fig("free_before_graphs_bytes", GB_IS_GIB),),
    ),
    Row(
        "graphs_end",
        OLD + " cuda_graph_runner.py",
        "Capture cuda graph end.",
        rf"Capture cuda graph end\. Time elapsed: [\d.]+ s\. mem usage=(?P<graph>{_GB}) GB\. "
        rf"avail mem=(?P<free>{_GB}) GB",
        (
            fig("graph_bytes", GB_IS_GIB, "graph"),
            fig("free_after_graphs_bytes", GB_IS_GIB, "free"),
        ),
    ),
    Row(
        "graphs_end",
        NEW + " cuda_graph_runner.py",
        "CUDA graph end.",
        rf"Capture (?:[\w-]+ )*CUDA graph end\. elapsed=[\d.]+ s, mem usage=(?P<graph>{_GB}) GB, "
        rf"avail mem=(?P<free>{_GB}) GB",
        (
            fig("graph_bytes", GB_IS_GIB, "graph"),
            fig("free_after_graphs_bytes", GB_IS_GIB, "free"),
        ),
    ),
    Row(
        "summary",
        BOTH + " scheduler (TP rank 0); earlier tp_worker.py forms (daecfd38057b)",
        "max_total_num_tokens=",
        # every form the scheduler printed: "[gpu_id=0] max_total_num_tokens=N,
        # max_prefill_tokens=N, context_len=N" (managers/controller/tp_worker.py at
        # daecfd38057b), then max_running_requests, chunked_prefill_size and
        # available_gpu_mem joined it; issue 31: the forms without them were skipped
        rf"max_total_num_tokens=(?P<tokens>\d+), (?:chunked_prefill_size=-?\d+, )?"
        rf"max_prefill_tokens=-?\d+, (?:max_running_requests=(?P<max_running_requests>\d+), )?"
        rf"context_len=(?P<context_len>\d+)(?:, available_[gc]pu_mem=(?P<free>{_GB}) GB)?",
        (
            fig("max_total_num_tokens", count, "tokens"),
            fig("kv_tokens", count, "tokens"),
            fig("max_running_requests", count),
            fig("context_len", count),
            fig("free_at_ready_bytes", GB_IS_GIB, "free"),
        ),
        once=True,
        server=True,
    ),
    Row(
        "ready",
        BOTH + " http_server",
        "The server is fired up and ready to roll!",
        r"The server is fired up and ready to roll!",
        server=True,
    ),
    Row(
        "error",
        BOTH + " model_runner.py",
        "Not enough memory. Please try to increase --mem-fraction-static",
        r"(?P<error>Not enough memory\. Please try to increase --mem-fraction-static.*)",
        failure=True,
    ),
    Row(
        "error",
        NEW + " kv_cache_configurator.py",
        "Loaded weights leave no GPU memory for the KV cache",
        r"(?P<error>Loaded weights leave no GPU memory for the KV cache.*)",
        failure=True,
    ),
    TORCH_OOM,
    TORCH_OOM_TOTAL,
    SERVER_UP,
)

_PREFIX = re.compile(
    r"\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?P<rank>(?: [A-Z][A-Z_]*\d+)*)\]"
)
_COMPLETE = frozenset({"kv_tokens", "kv_bytes", "k_bytes", "boot_failed"})


class SglangFormat:
    """SGLang."""

    name = "sglang"
    title = "SGLang"
    rows = ROWS

    def rank(self, text: str) -> str | None:
        """``[2026-01-31 13:50:39 DP0 TP3]`` is ``DP0 TP3``; a line without one is no rank."""
        match = _PREFIX.search(text, 0, 200)
        if match is None or not match["rank"]:
            return None
        return match["rank"].strip()

    def complete(self, names: set[str]) -> bool:
        return bool(names & _COMPLETE)

    def derive(self, figures: DerivedFigures) -> None:
        """The MHA pool is K + V; the Mamba state is conv + ssm (both printed, in GiB)."""
        k, v = figures.value("k_bytes"), figures.value("v_bytes")
        if isinstance(k, int) and isinstance(v, int):
            figures.derive(
                "kv_bytes",
                k + v,
                f"K {figures.cite('k_bytes')} + V {figures.cite('v_bytes')}",
                main="k_bytes",
                source="fakplan: K size + V size",
            )
        conv, ssm = figures.value("conv_state_bytes"), figures.value("ssm_state_bytes")
        if isinstance(conv, int) and isinstance(ssm, int):
            figures.derive(
                "recurrent_bytes",
                conv + ssm,
                f"conv_state {figures.cite('conv_state_bytes')} + ssm_state "
                f"{figures.cite('ssm_state_bytes')}",
                main="conv_state_bytes",
                source="fakplan: conv_state size + ssm_state size",
            )


FORMAT = SglangFormat()

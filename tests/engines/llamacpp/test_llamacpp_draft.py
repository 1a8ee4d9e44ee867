"""A speculative draft model's KV cache in llama-server (``-md``), build era by era.

The expectations are llama-server's own lines: real CPU boots of llama-server built from
the upstream commits of b5873, b9108, b10470 and b10587, with a 4-layer target and a
2-layer draft (tests/data/ledgers/llamacpp-draft, SOURCES.md says how they were made).
Each boot prints the target's cache, "loading draft model", then each draft context's
"llama_kv_cache: size =" line; fakplan must give the draft's contexts, cells, streams
and bytes, and keep the target's cache the pool.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from fakplan.engines.llamacpp.draft import draft_cache, draft_era
from fakplan.geometry import load_geometry
from fakplan.kv import KvQuery
from fakplan.units import printed_interval
from tests.support.paths import DATA

RUNS = DATA / "ledgers" / "llamacpp-draft"
# the runs' two models (LlamaForCausalLM; the GGUFs were written from these dimensions)
TARGET = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
    "num_attention_heads": 8, "num_key_value_heads": 2, "num_hidden_layers": 4,
    "intermediate_size": 512, "max_position_embeddings": 8192, "vocab_size": 32000,
    "torch_dtype": "float16",
}  # fmt: skip
DRAFT = {**TARGET, "hidden_size": 128, "num_attention_heads": 4, "num_key_value_heads": 1,
         "num_hidden_layers": 2, "intermediate_size": 256, "max_position_embeddings": 2048}  # fmt: skip

# (log, build, the -c llama.cpp resolved, the -c given, -np, unified, cache type)
CASES = [
    ("b5873_c0_np1", "b5873", 8192, 0, 1, None, "f16"),
    ("b5873_c4096_np2_fa_q8", "b5873", 4096, 4096, 2, None, "q8_0"),
    ("b9108_c4096_npauto_q8", "b9108", 4096, 4096, 4, True, "q8_0"),
    ("b10470_c0_npauto_lv4", "b10470", 8192, 0, 4, True, "f16"),
    ("b10587_c0_npauto_q8_lv4", "b10587", 8192, 0, 4, True, "q8_0"),
    ("b10587_c4096_np2_lv4", "b10587", 4096, 4096, 2, None, "f16"),
]
_SIZE = re.compile(
    r"size =\s+([\d.]+ MiB) \(\s*(\d+) cells,\s+(\d+) layers,\s+(\d+)(?:/(\d+))? seqs\)"
)


def _geometry(tmp_path: Path, name: str, config: dict[str, Any]) -> Any:
    path = tmp_path / name / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(config))
    return load_geometry(str(path))


def _draft_lines(log: str) -> list[re.Match[str]]:
    after = log.split("loading draft model", 1)[1]
    return [m for line in after.splitlines() if (m := _SIZE.search(line))]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_the_draft_contexts_a_boot_printed(case: tuple[Any, ...], tmp_path: Path) -> None:
    name, build, n_ctx, stated, slots, unified, kv = case
    query = KvQuery(
        geometry=_geometry(tmp_path, "target", TARGET), engine="llamacpp",
        engine_version=build, kv_dtype=kv, max_num_seqs=slots, kv_unified=unified,
        flash_attn=kv != "f16", spec_tokens=3, spec_method="draft_model",
        draft=_geometry(tmp_path, "draft", DRAFT),
    )  # fmt: skip
    found = draft_cache(query, n_ctx, stated)
    assert found is not None
    lines = _draft_lines((RUNS / f"{name}.log").read_text(encoding="utf-8"))
    temporary = 1 if draft_era(build).temporary else 0
    assert len(lines) == found.contexts + temporary  # the temporary one is printed too
    for line in lines:
        low, _, high = printed_interval(line[1])
        assert low <= found.bytes // found.contexts <= high, (line[0], found)
        assert int(line[2]) == found.cells
        assert int(line[3]) == 2  # the draft's layers
        streams = int(line[5]) if line[5] else 1
        assert streams == found.streams


def test_the_pool_of_a_shape_with_a_draft_holds_both_caches(tmp_path: Path) -> None:
    """budget.kv must hold the target's cache and the draft's at the -c fakplan renders:
    b10587, 2 slots x 2,048: the target 4 x 2 x 64 x 2 B x 4,096 cells = 4 MiB, the draft
    2 x 2 x 32 x 2 B x 4,096 = 1 MiB (the run above printed 4.00 and 1.00 MiB)."""
    from fakplan.engines import ENGINES

    query = KvQuery(
        geometry=_geometry(tmp_path, "target", TARGET), engine="llamacpp",
        engine_version="b10587", max_num_seqs=2, max_model_len=2048, spec_tokens=3,
        spec_method="draft_model", draft=_geometry(tmp_path, "draft", DRAFT),
    )  # fmt: skip
    engine = ENGINES["llamacpp"]
    breakdown = engine.breakdown(query)
    assert [c.name for c in breakdown.components][-1] == "draft model"
    fitted = engine.pool(query, breakdown, 5 << 20)
    assert fitted.extra["n_ctx"] == 4096 and fitted.extra["cache_bytes"] == 5 << 20
    short = engine.pool(query, breakdown, (5 << 20) - 1)
    assert short.extra["n_ctx"] < 4096  # without room for the draft, a smaller -c


def _shape(tmp_path: Path, build: str, extra: str = "", kv: str = "8 MiB") -> Path:
    _geometry(tmp_path, "target", TARGET)
    _geometry(tmp_path, "draft", DRAFT)
    path = tmp_path / "drafted.yaml"
    path.write_text(
        f"""name: drafted
engine: llamacpp
engine_version: "{build}"
model: target
card: {{total: 1 GiB}}
budget: {{weights: 64 MiB, kv: {kv}}}
serving: {{max_num_seqs: 2, max_model_len: 2048, spec_tokens: 3}}
launch:
  speculative: {{method: draft_model, model: draft}}
{extra}""",
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(
    ("build", "n_max"), [("b10587", "--spec-draft-n-max"), ("b8954", "--draft-max")]
)
def test_a_shape_with_a_draft_model_launches_it_and_budgets_its_cache(
    tmp_path: Path, build: str, n_max: str
) -> None:
    from fakplan.plan import compile_plan
    from fakplan.shape import load_shape

    plan = compile_plan(load_shape(_shape(tmp_path, build)))
    (role,) = plan.launch.roles
    argv = list(role.argv)
    assert argv[argv.index("-md") + 1] == "draft"
    assert argv[argv.index("-ngld") + 1] == "999"
    assert argv[argv.index(n_max) + 1] == "3"
    assert argv[argv.index("-c") + 1] == "4096"  # 2 slots x 2,048: the pair fits 8 MiB
    assert plan.tokens_backed == 4096


def test_a_draft_that_does_not_fit_shrinks_the_context(tmp_path: Path) -> None:
    """5 MiB less a byte holds the target's 4 MiB at -c 4096 but not the draft's 1 MiB
    beside it: a smaller -c, and the plan says the slots' windows are short."""
    from fakplan.plan import compile_plan
    from fakplan.shape import load_shape

    plan = compile_plan(load_shape(_shape(tmp_path, "b10587", kv=f"{(5 << 20) - 1} B")))
    assert plan.tokens_backed < 4096


@pytest.mark.parametrize(
    ("old", "new", "field"),
    [
        ("{method: draft_model, model: draft}", "{method: mtp}", "launch.speculative.method"),
        ("spec_tokens: 3", "prefix_caching: true", "serving.spec_tokens"),
        ("max_num_seqs: 2", "max_num_seqs: 1", "launch.binary"),
    ],
)
def test_a_draft_fakplan_cannot_count_is_one_located_line(
    tmp_path: Path, old: str, new: str, field: str
) -> None:
    from click.testing import CliRunner

    from fakplan.cli import main

    path = _shape(
        tmp_path, "b10587", extra="  binary: llama-cpp-python\n" if "binary" in field else ""
    )
    path.write_text(path.read_text().replace(old, new))
    result = CliRunner().invoke(main, ["plan", str(path)])
    assert result.exit_code == 2, result.output
    (line,) = [x for x in result.output.splitlines() if x.strip()]
    assert "drafted.yaml" in line and field in line, line


QWEN36_27B = DATA / "public" / "configs" / "nvidia--Qwen3.6-27B-NVFP4" / "config.json"


@pytest.mark.parametrize(
    ("build", "mib"),
    [
        # the boot issue 31 quotes: the target's 16 full-attention layers in q8_0 print
        # 4,352 MiB at 131,072 cells, the MTP context 272 MiB: 1 nextn layer x 4 KV heads x
        # 256 in q8_0 (1,088 B a row, K and V) x 131,072 cells, the target's -ctk/-ctv
        ("b9200", 272),
        # from b9318 the MTP context takes -ctkd/-ctvd, f16: 1 x 2 x 1,024 x 2 B x 131,072
        ("b9318", 512),
    ],
)
def test_the_mtp_context_of_a_gated_deltanet_hybrid(build: str, mib: int) -> None:
    from fakplan.engines import ENGINES

    query = KvQuery(
        geometry=load_geometry(str(QWEN36_27B)), engine="llamacpp", engine_version=build,
        kv_dtype="q8_0", max_num_seqs=4, kv_unified=True, max_model_len=32_768,
        spec_tokens=2, spec_method="mtp",
    )  # fmt: skip
    found = draft_cache(query, 131_072)
    assert found is not None and found.bytes == mib * 2**20
    assert (found.cells, found.streams) == (131_072, 1)
    target = ENGINES["llamacpp"].printed_pool(
        query, ENGINES["llamacpp"].breakdown(query), 4352 << 20
    )
    assert target.extra["n_ctx"] == 131_072  # the printed pool is the target's cache alone


def test_mtp_before_its_build_is_refused() -> None:
    from fakplan.errors import RuleError

    query = KvQuery(
        geometry=load_geometry(str(QWEN36_27B)), engine="llamacpp", engine_version="b9100",
        spec_tokens=2, spec_method="mtp",
    )  # fmt: skip
    with pytest.raises(RuleError, match="b9180"):
        draft_cache(query, 4096)


def test_a_shape_with_mtp_launches_the_draft_type(tmp_path: Path) -> None:
    from fakplan.plan import compile_plan
    from fakplan.shape import load_shape

    path = tmp_path / "mtp.yaml"
    path.write_text(
        f"""name: mtp
engine: llamacpp
engine_version: "b10587"
model: {json.dumps(str(QWEN36_27B))}
card: {{total: 32 GiB}}
budget: {{weights: 20 GiB, kv: 8 GiB}}
serving: {{max_num_seqs: 1, max_model_len: 32768, spec_tokens: 2}}
launch:
  speculative: {{method: mtp}}
""",
        encoding="utf-8",
    )
    plan = compile_plan(load_shape(path))
    (role,) = plan.launch.roles
    argv = list(role.argv)
    assert argv[argv.index("--spec-type") + 1] == "draft-mtp"
    assert argv[argv.index("--spec-draft-n-max") + 1] == "2"
    assert "-md" not in argv
    assert any(c.name == "MTP context" for c in plan.components)


@pytest.mark.parametrize(
    ("log", "build", "kv", "lines"),
    [
        ("b10587_c4096_np2_lv4", "b10587", "auto", 1),  # one shared context
        ("b5873_c4096_np2_fa_q8", "b5873", "q8_0", 3),  # a temporary one and one per slot
    ],
)
def test_verify_closes_the_draft_kv_against_the_boot(
    tmp_path: Path, log: str, build: str, kv: str, lines: int
) -> None:
    """The plan predicts what the draft's cache lines print, summed; `fakplan verify` closes
    it against the real boot (the target's cache stays the pool), and the same window over
    four unified slots is judged by what that build would print."""
    from fakplan.engines import parse_ledger
    from fakplan.plan import compile_plan
    from fakplan.shape import load_shape
    from fakplan.verify import ledger_verdicts

    extra = "" if kv == "auto" else f"  kv_cache_dtype: {kv}\n"
    path = _shape(tmp_path, build)
    path.write_text(path.read_text().replace(
        "serving: {max_num_seqs: 2, max_model_len: 2048, spec_tokens: 3}",
        f"serving:\n  max_num_seqs: 2\n  max_model_len: 2048\n  spec_tokens: 3\n{extra}",
    ))  # fmt: skip
    plan = compile_plan(load_shape(path))
    (predicted,) = [p for p in plan.predictions if p.id == "draft-kv"]
    assert str(lines) in predicted.claim
    ledger = parse_ledger(RUNS / f"{log}.log", "llamacpp")
    assert ledger.draft_kv_contexts == lines
    verdicts = ledger_verdicts(plan, ledger)
    assert verdicts["draft-kv"].status == "held", verdicts["draft-kv"]
    unified = path.read_text().replace("max_num_seqs: 2", "max_num_seqs: 4\n  kv_unified: true")
    path.write_text(unified.replace("max_model_len: 2048", "max_model_len: 1024"))
    other = ledger_verdicts(compile_plan(load_shape(path)), ledger)
    # b10587: one context of the target's 4,096 cells either way, so it still holds; b5873:
    # a context per slot of -c / -np = 1,024 cells, five lines of 0.25 MiB, not three of 0.5
    expected = "held" if build == "b10587" else "killed"
    assert other["draft-kv"].status == expected, other["draft-kv"]

"""A fourth engine, added from the test suite alone: one class, its templates, its shape.

Nothing outside this file changes: the engine registers itself, its templates live in
a folder of its own (``--templates``), and plan, compile, gate and verify take it.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
from click.testing import CliRunner

from fakplan.cli import main
from fakplan.contract import Capacity, CostComponent, KvCost, paged_capacity
from fakplan.engines import ENGINES, Engine, register
from fakplan.figures import Figures
from fakplan.launch import LaunchRecord, RoleRecord
from fakplan.ledger import TABLE, LedgerFormat
from fakplan.render import default_templates
from fakplan.shape import LoadedShape

DATA = Path(__file__).resolve().parent / "data" / "ledgers"
PAGE_TOKENS, PAGE_BYTES = 16, 16 * 2048  # 2 KiB a token, in pages of 16 tokens


class ToyEngine(Engine):
    """An engine with a flat 2 KiB a token, in 16-token pages, started by ``toy-serve``."""

    name = "toy"
    binaries: ClassVar[tuple[str, ...]] = ("toy-serve",)

    def boot_format(self) -> LedgerFormat:
        return TABLE

    def check(self, loaded: LoadedShape) -> None:
        if loaded.shape.serving.max_model_len % PAGE_TOKENS:
            raise loaded.error(f"toy pages are {PAGE_TOKENS} tokens", "serving", "max_model_len")

    def kv_cost(self, loaded: LoadedShape) -> KvCost:
        return KvCost(
            dtype="bf16",
            page_tokens=PAGE_TOKENS,
            components=(CostComponent("kv", "full", PAGE_BYTES, 0, True, "2 KiB x 16 tokens"),),
        )

    def capacity(self, loaded: LoadedShape, cost: KvCost, pool_bytes: int) -> Capacity:
        return paged_capacity(cost, pool_bytes, loaded.shape.serving.max_num_seqs)

    def launch(self, loaded: LoadedShape, figures: Figures) -> LaunchRecord:
        shape = loaded.shape
        argv = ("toy-serve", "--model", shape.model, "--pool-bytes", str(figures.kv_budget_bytes))
        return LaunchRecord(
            binary="toy-serve",
            env={"MODEL": shape.model, "POOL_BYTES": str(figures.kv_budget_bytes)},
            roles=(RoleRecord(name="serve", file="serve.sh", argv=argv),),
        )


SHAPE = """\
name: toy-endpoint
engine: toy
model: toy/model-1
card: {total: 32 GiB}
budget: {weights: 24 GiB, kv: 2 GiB}
serving: {max_num_seqs: 4, max_model_len: 65536, kv_cache_dtype: bf16}
ceiling: 30 GiB
"""


@pytest.fixture
def toy(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """The engine registered, its templates beside the built-in ones, a shape for it."""
    engine = register(ToyEngine())
    try:
        templates = tmp_path / "templates"
        shutil.copytree(default_templates(), templates)
        (templates / "toy").mkdir()
        (templates / "toy" / "env.j2").write_text('{% include "_env.j2" %}')
        (templates / "toy" / "serve.sh.j2").write_text('{% include "_serve.j2" %}')
        shape = tmp_path / "toy.yaml"
        shape.write_text(SHAPE)
        yield shape, templates
    finally:
        assert ENGINES.pop("toy") is engine


def test_plan_compile_gate_and_verify_take_a_registered_engine(
    toy: tuple[Path, Path], tmp_path: Path
) -> None:
    shape, templates = toy
    runner = CliRunner()
    plan = runner.invoke(main, ["plan", str(shape), "--json"])
    assert plan.exit_code == 0, plan.output
    record = json.loads(plan.output)
    # 2 GiB / 32 KiB a page = 65,536 pages x 16 = 1,048,576 tokens: 16 windows of 65,536
    assert record["tokens_backed"] == 1_048_576
    assert record["contract_bytes"] == 4 * 65536 * 2048
    assert record["whole_sessions_at_window"] == 16

    out = tmp_path / "out"
    compiled = runner.invoke(
        main, ["compile", str(shape), "-o", str(out), "--templates", str(templates)]
    )
    assert compiled.exit_code == 0, compiled.output
    serve = (out / "toy-endpoint" / "serve.sh").read_text()
    assert serve.rstrip().endswith("exec toy-serve --model toy/model-1 --pool-bytes 2147483648")

    gated = runner.invoke(main, ["gate", str(shape)])
    assert gated.exit_code == 0, gated.output
    # contract: 4 slots x 65,536 tokens x 2 KiB = 512 MiB
    assert "ok 1 - toy-endpoint: pool ≥ contract (2,048 MiB ≥ 512 MiB)" in gated.output

    verified = runner.invoke(
        main,
        ["verify", str(shape), "--ledger", str(DATA / "table-seed002.log"), "-o", str(out),
         "--templates", str(templates), "--json"],
    )  # fmt: skip
    assert verified.exit_code in (0, 1), verified.output
    doc = json.loads(verified.output)
    assert doc["engine"] == "table"  # the engine's ledger format, by default
    # the boot table measures 32,569.05 MiB of ceiling: the pair (26 GiB) sits under it
    assert doc["verdicts"]["unclaimed"]["status"] == "held"


def test_the_engines_own_rules_and_binaries_are_asked(toy: tuple[Path, Path]) -> None:
    shape, _ = toy
    shape.write_text(SHAPE.replace("max_model_len: 65536", "max_model_len: 1000"))
    result = CliRunner().invoke(main, ["plan", str(shape)])
    assert (
        result.exit_code == 2 and "serving.max_model_len: toy pages are 16 tokens" in result.output
    )
    shape.write_text(SHAPE + "launch: {binary: vllm}\n")
    result = CliRunner().invoke(main, ["plan", str(shape)])
    assert "launch.binary: 'vllm' does not start engine toy; expected toy-serve" in result.output
    shape.write_text(SHAPE + "launch: {binary: toy-serve}\n")
    assert CliRunner().invoke(main, ["plan", str(shape)]).exit_code == 0


def test_an_engine_name_is_registered_once() -> None:
    from fakplan.errors import FakplanError

    with pytest.raises(FakplanError, match="already registered"):
        register(ENGINES["vllm"])

"""A fourth engine, added from the test suite alone: every member of the plug-in filled.

Nothing outside this file changes: the engine registers itself with its arithmetic, its
checks, its launch, a boot-log format of its own, a server (flavour, detection evidence, a
context-overflow wording, where it states its capacity) and cluster facts (image, shm,
health route, alert rules); its templates live in a folder of its own (``--templates``).
plan, compile (scripts and Kubernetes), gate, ledger, verify, rules and the probes take it.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import httpx
import pytest
import yaml
from click.testing import CliRunner
from pytest_httpserver import HTTPServer

from fakplan.cli import main
from fakplan.contract import Capacity, CostComponent, KvCost, paged_capacity
from fakplan.engines import (
    ENGINES,
    AlertFacts,
    AlertRule,
    CapacityReading,
    Engine,
    Evidence,
    Flavour,
    Observed,
    Setup,
    TokenizeRoute,
    register,
)
from fakplan.engines.serving import BY_FIELD, ServerFacts, refusal
from fakplan.figures import Figures
from fakplan.launch import LaunchRecord, RoleRecord
from fakplan.ledger.patterns import DerivedFigures, Row, count, fig
from fakplan.probes.api import Server
from fakplan.probes.capacity import capacity
from fakplan.probes.faults import Deadline
from fakplan.probes.flavours import classify, flavour
from fakplan.probes.http import Endpoint
from fakplan.probes.refusals import parse_refusal
from fakplan.render import default_templates
from fakplan.units import GIB

PAGE_TOKENS, PAGE_BYTES = 16, 16 * 2048  # 2 KiB a token, in pages of 16 tokens


class ToyFormat:
    """toy-serve's boot log: a start line and the pool it sized."""

    name = "toy"
    title = "Toy"
    rows = (
        Row("start", "toy-serve 1.0", "toy-serve starting", r"toy-serve starting",
            starts_boot=True),
        Row("pool", "toy-serve 1.0", "toy pool:", r"toy pool: (?P<kv_tokens>\d+) tokens",
            (fig("kv_tokens", count),)),
    )  # fmt: skip

    def rank(self, text: str) -> str | None:
        return None

    def complete(self, names: set[str]) -> bool:
        return "kv_tokens" in names

    def derive(self, figures: DerivedFigures) -> None:
        return None


TOY_SERVER = ServerFacts(
    flavours=(
        Flavour("toy-serve", (TokenizeRoute("/toy/tokenize", "text"),), True, False, "tests",
                engine="toy"),
    ),
    evidence=(
        Evidence("toy-serve", "/v1/models owned_by 'toy'",
                 lambda o: o.first_model.get("owned_by") == "toy", BY_FIELD + 50),
    ),
    refusals=(
        refusal("toy-over-window", "toy-serve", "1.0",
                r"(?P<prompt>{N}) tokens are over the (?P<context>{N}) window"),
    ),
    capacity=CapacityReading("/metrics", "toy:kv_info", "tokens"),
)  # fmt: skip


class ToyEngine(Engine):
    """An engine with a flat 2 KiB a token, in 16-token pages, started by ``toy-serve``."""

    name = "toy"
    title = "Toy"
    binaries: ClassVar[tuple[str, ...]] = ("toy-serve",)
    server = TOY_SERVER
    image = "toy/serve:{version}"
    shm_bytes = 1 * GIB
    health_route = "/toy/health"

    def boot_format(self) -> ToyFormat:
        return ToyFormat()

    def alert_rules(self, facts: AlertFacts) -> tuple[AlertRule, ...]:
        return (
            AlertRule(
                "ToyPoolBelowPlan",
                f"toy:kv_tokens{facts.selector} < {facts.tokens_backed}",
                f"{facts.name}: the pool is below the plan",
                "toy-serve states its pool; the plan backs more",
            ),
        )

    def check(self, setup: Setup) -> None:
        if setup.serving.max_model_len % PAGE_TOKENS:
            raise setup.error(f"toy pages are {PAGE_TOKENS} tokens", "serving", "max_model_len")

    def kv_cost(self, setup: Setup) -> KvCost:
        return KvCost(
            dtype="bf16",
            page_tokens=PAGE_TOKENS,
            components=(CostComponent("kv", "full", PAGE_BYTES, 0, True, "2 KiB x 16 tokens"),),
        )

    def capacity(self, setup: Setup, cost: KvCost, pool_bytes: int) -> Capacity:
        return paged_capacity(cost, pool_bytes, setup.serving.max_num_seqs)

    def launch(self, setup: Setup, figures: Figures) -> LaunchRecord:
        argv = ("toy-serve", "--model", setup.model, "--pool-bytes", str(figures.kv_budget_bytes))
        return LaunchRecord(
            binary="toy-serve",
            env={"MODEL": setup.model, "POOL_BYTES": str(figures.kv_budget_bytes)},
            roles=(RoleRecord(name="serve", file="serve.sh", argv=argv),),
        )


SHAPE = """\
name: toy-endpoint
engine: toy
engine_version: "1.0"
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

    log = tmp_path / "toy-boot.log"
    log.write_text("toy-serve starting\nloading toy/model-1\ntoy pool: 1048576 tokens\n")
    read = runner.invoke(main, ["ledger", str(log), "--json"])
    assert read.exit_code == 0, read.output
    ledger = json.loads(read.output)
    assert ledger["engine"] == "toy" and ledger["engine_detected"]  # its own format, found
    assert ledger["kv_tokens"] == 1_048_576

    verified = runner.invoke(
        main,
        ["verify", str(shape), "--ledger", str(log), "-o", str(out),
         "--templates", str(templates), "--json"],
    )  # fmt: skip
    assert verified.exit_code == 0, verified.output
    doc = json.loads(verified.output)
    assert doc["engine"] == "toy"  # read as the engine's own format, by default
    assert doc["verdicts"]["kv-tokens"]["status"] == "held"  # 1,048,576 printed, planned


def test_its_cluster_facts_reach_the_manifests_and_the_rules(
    toy: tuple[Path, Path], tmp_path: Path
) -> None:
    shape, templates = toy
    out = tmp_path / "out"
    compiled = CliRunner().invoke(
        main,
        ["compile", str(shape), "-o", str(out), "--templates", str(templates),
         "--target", "kubernetes"],
    )  # fmt: skip
    assert compiled.exit_code == 0, compiled.output
    folder = out / "toy-endpoint" / "kubernetes"
    documents = [
        yaml.safe_load(p.read_text())
        for p in sorted(folder.glob("*.yaml"))
        if "kind" in p.read_text()
    ]
    workload = next(d for d in documents if d and d.get("kind") == "Deployment")
    pod = workload["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "toy/serve:1.0"  # its image, at the shape's release
    assert container["startupProbe"]["httpGet"]["path"] == "/toy/health"
    shm = next(v for v in pod["volumes"] if v.get("emptyDir", {}).get("medium") == "Memory")
    assert shm["emptyDir"]["sizeLimit"] == "1024Mi"  # its 1 GiB of /dev/shm

    rules = CliRunner().invoke(main, ["rules", str(shape)])
    assert rules.exit_code == 0, rules.output
    (group,) = yaml.safe_load(rules.output)["groups"]
    (rule,) = group["rules"]
    assert rule["alert"] == "ToyPoolBelowPlan"
    assert rule["expr"] == 'toy:kv_tokens{job="toy-endpoint",model_name="toy/model-1"} < 1048576'


def test_the_probes_tell_its_server_and_read_it(
    toy: tuple[Path, Path], httpserver: HTTPServer
) -> None:
    listing = {"data": [{"id": "toy/model-1", "owned_by": "toy"}]}
    assert classify(Observed(models=listing)) == ("toy-serve", "/v1/models owned_by 'toy'")
    refused = parse_refusal('{"error": {"message": "5000 tokens are over the 4096 window"}}')
    assert refused is not None and refused.engine == "toy-serve"
    assert (refused.prompt_tokens, refused.context) == (5000, 4096)
    httpserver.expect_request("/metrics").respond_with_data(
        '# TYPE toy:kv_info gauge\ntoy:kv_info{tokens="1048576"} 1.0\n'
    )
    with httpx.Client() as client:
        endpoint = Endpoint(client, httpserver.url_for("/"))
        stated = capacity(endpoint, Server(flavour=flavour("toy-serve")), Deadline(10))
    assert stated.kv_tokens == 1_048_576 and stated.route == "/metrics"
    assert re.fullmatch(r'toy:kv_info\{tokens="1048576"\}', stated.statement or "")


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

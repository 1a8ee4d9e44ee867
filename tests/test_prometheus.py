"""fakplan metrics and fakplan rules (issue 19), checked with the real promtool.

The exposition is parsed with prometheus_client's own parser and linted with
`promtool check metrics`; the rules are checked with `promtool check rules` and each
alert's firing and quiet cases run through `promtool test rules` on series written here.
promtool comes from Debian's prometheus package, which .ci/run installs.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from fakplan.alerts import range_regex
from fakplan.cli import main
from tests.support.paths import DATA, IN_CI, ROOT

SHAPES = ROOT / "shapes"
LEDGERS = DATA / "ledgers"


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if IN_CI:
            pytest.fail("CI checks with the real promtool: apt-get install prometheus")
        pytest.skip("promtool is not installed (apt-get install prometheus)")
    return found


def _run(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, args)
    return result.exit_code, result.stdout, result.stderr


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def _sample(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def test_the_exposition_states_each_plans_figures(tmp_path: Path) -> None:
    code, text, _ = _run(["metrics", str(SHAPES)])
    assert code == 0
    samples = _samples(text)
    for shape in SHAPES.glob("*.yaml"):
        _run(["compile", str(shape), "-o", str(tmp_path)])
    for record in tmp_path.glob("*/plan.json"):
        plan = json.loads(record.read_text())
        name = plan["name"]
        assert (
            _sample(samples, "fakplan_plan_bytes", shape=name, **{"class": "kv_pool"})
            == plan["kv_budget_bytes"]
        )
        assert (
            _sample(samples, "fakplan_plan_bytes", shape=name, **{"class": "weights"})
            == plan["weights_budget_bytes"]
        )
        assert _sample(samples, "fakplan_kv_tokens", shape=name) == plan["tokens_backed"]
        margin = plan["kv_budget_bytes"] - plan["contract_bytes"]
        assert (
            _sample(samples, "fakplan_fit_bytes", shape=name, scope="kv", kind="margin") == margin
        )
        for gate in plan["gates"]:
            for status in ("pass", "fail", "warn", "unknown"):
                value = _sample(
                    samples, "fakplan_gate_status", shape=name, gate=gate["id"], status=status
                )
                assert value == (1 if gate["status"] == status else 0)
        if plan["ceiling_bytes"] is None:
            assert (
                "fakplan_plan_bytes",
                tuple(sorted({"shape": name, "class": "ceiling"}.items())),
            ) not in samples


def test_promtool_lints_the_exposition_clean(promtool: str) -> None:
    _, text, _ = _run(["metrics", str(SHAPES)])
    lint = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    assert lint.stdout.strip() == "" and lint.stderr.strip() == ""


def test_recorded_verdicts_are_counted(tmp_path: Path) -> None:
    shape = SHAPES / "frank-archon.yaml"
    _run(["compile", str(shape), "-o", str(tmp_path)])
    code, _, _ = _run(
        ["verify", str(shape), "--ledger", str(LEDGERS / "table-seed002.log"), "-o", str(tmp_path)]
    )
    assert code in (0, 1)
    plan = json.loads((tmp_path / "frank-archon" / "plan.json").read_text())
    _, text, _ = _run(["metrics", str(shape), "--records", str(tmp_path)])
    samples = _samples(text)
    for prediction in plan["predictions"]:
        latest = (
            prediction["verdicts"][-1]["status"].replace(" ", "_")
            if prediction["verdicts"]
            else "none"
        )
        assert (
            _sample(
                samples,
                "fakplan_prediction_verdict",
                shape="frank-archon",
                prediction=prediction["id"],
                status=latest,
            )
            == 1
        )
        held = sum(v["status"] == "held" for v in prediction["verdicts"])
        assert (
            _sample(
                samples,
                "fakplan_prediction_verdicts_total",
                shape="frank-archon",
                prediction=prediction["id"],
                status="held",
            )
            == held
        )
    assert any(p["verdicts"] for p in plan["predictions"])


def test_a_shape_that_does_not_load_is_one_line_and_the_others_print(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nengine: vllm\n")
    result = CliRunner().invoke(main, ["metrics", str(bad), str(SHAPES / "example.yaml")])
    assert result.exit_code == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"{bad}:")
    assert 'shape="example"' in result.stdout and 'shape="bad"' not in result.stdout


@given(st.integers(min_value=1, max_value=10**7), st.integers(min_value=0, max_value=10**5))
def test_the_block_range_regex_matches_exactly_the_range(low: int, width: int) -> None:
    high = low + width
    pattern = re.compile(range_regex(low, high))
    for n in {
        low - 1,
        low,
        low + 1,
        (low + high) // 2,
        high - 1,
        high,
        high + 1,
        high * 10,
        low // 10,
    }:
        if n >= 1:
            assert bool(pattern.fullmatch(str(n))) == (low <= n <= high), (low, high, n)


def test_promtool_checks_the_rules_and_the_operator_form(promtool: str, tmp_path: Path) -> None:
    _, text, _ = _run(["rules", str(SHAPES)])
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    check = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    groups = yaml.safe_load(text)["groups"]
    assert {g["name"] for g in groups} == {
        "fakplan-example",
        "fakplan-qwen3-32b-sglang",
        "fakplan-llama-3.1-8b-sglang-sized",
    }
    _, operator, _ = _run(["rules", str(SHAPES), "--format", "operator", "--name", "fleet"])
    rule = yaml.safe_load(operator)
    assert rule["kind"] == "PrometheusRule" and rule["metadata"]["name"] == "fleet"
    assert rule["spec"]["groups"] == groups


def _alerts(text: str, shape: str) -> dict[str, dict[str, Any]]:
    (group,) = [g for g in yaml.safe_load(text)["groups"] if g["name"] == f"fakplan-{shape}"]
    return {r["alert"]: r for r in group["rules"]}


def _case(
    rule: dict[str, Any], series: list[dict[str, str]], fires: bool, labels: dict[str, str]
) -> dict[str, Any]:
    expected = (
        [{"exp_labels": {**labels, **rule["labels"]}, "exp_annotations": rule["annotations"]}]
        if fires
        else []
    )
    return {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            {"eval_time": "15m", "alertname": rule["alert"], "exp_alerts": expected}
        ],
    }


# each endpoint's scrape job is named after its shape: what fakplan rules selects by default
MODEL = 'model_name="meta-llama/Llama-3.1-8B-Instruct",instance="a:8000",job="example"'
SG_MODEL = 'model_name="Qwen/Qwen3-32B",instance="b:30000",job="qwen3-32b-sglang"'


def _vllm_cases(rules: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """shapes/example.yaml: 40,960 tokens backed, 16,384 a sequence, 2 slots, 2,560 blocks
    (kv-tokens allows 2,548..2,572)."""
    labels = {
        "model_name": "meta-llama/Llama-3.1-8B-Instruct",
        "instance": "a:8000",
        "job": "example",
    }
    usage, running = "vllm:kv_cache_usage_perc", "vllm:num_requests_running"
    waiting, preempt = "vllm:num_requests_waiting", "vllm:num_preemptions_total"
    info = 'vllm:cache_config_info{instance="a:8000",job="example",engine="0",block_size="16",num_gpu_blocks="%s"}'
    u, w, p, k = (rules[n] for n in ("FakplanKvUsageAbovePlan", "FakplanRequestsWaitingBelowSlots",
                                      "FakplanPreemptionDespiteContract", "FakplanKvTokensDiffer"))  # fmt: skip
    return [
        # one sequence running holds at most 16,384 / 40,960 = 0.4 of the pool
        _case(u, [{"series": f"{usage}{{{MODEL}}}", "values": "0.9x20"},
                  {"series": f"{running}{{{MODEL}}}", "values": "1x20"}], True, labels),
        _case(u, [{"series": f"{usage}{{{MODEL}}}", "values": "0.35x20"},
                  {"series": f"{running}{{{MODEL}}}", "values": "1x20"}], False, labels),
        _case(w, [{"series": f"{waiting}{{{MODEL}}}", "values": "3x20"},
                  {"series": f"{running}{{{MODEL}}}", "values": "1x20"}], True, labels),
        _case(w, [{"series": f"{waiting}{{{MODEL}}}", "values": "3x20"},
                  {"series": f"{running}{{{MODEL}}}", "values": "2x20"}], False, labels),
        _case(p, [{"series": f"{preempt}{{{MODEL}}}", "values": "0+1x20"}], True, labels),
        _case(p, [{"series": f"{preempt}{{{MODEL}}}", "values": "4x20"}], False, labels),
        _case(k, [{"series": info % "3000", "values": "1x20"},
                  {"series": f"{running}{{{MODEL}}}", "values": "0x20"}], True,
              {"instance": "a:8000", "job": "example", "engine": "0", "block_size": "16",
               "num_gpu_blocks": "3000"}),
        _case(k, [{"series": info % "2560", "values": "1x20"},
                  {"series": f"{running}{{{MODEL}}}", "values": "0x20"}], False, {}),
    ]  # fmt: skip


def _sglang_cases(rules: dict[str, dict[str, Any]], low: int, high: int) -> list[dict[str, Any]]:
    labels = {"model_name": "Qwen/Qwen3-32B", "instance": "b:30000", "job": "qwen3-32b-sglang"}
    used, running = "sglang:num_used_tokens", "sglang:num_running_reqs"
    queue, usage = "sglang:num_queue_reqs", "sglang:token_usage"
    u, w, k = (
        rules[n]
        for n in (
            "FakplanKvUsageAbovePlan",
            "FakplanRequestsWaitingBelowSlots",
            "FakplanKvTokensDiffer",
        )
    )
    inside = (low + high) // 2
    return [
        _case(u, [{"series": f"{used}{{{SG_MODEL}}}", "values": "50000x20"},
                  {"series": f"{running}{{{SG_MODEL}}}", "values": "1x20"}], True, labels),
        _case(u, [{"series": f"{used}{{{SG_MODEL}}}", "values": "30000x20"},
                  {"series": f"{running}{{{SG_MODEL}}}", "values": "1x20"}], False, labels),
        _case(w, [{"series": f"{queue}{{{SG_MODEL}}}", "values": "2x20"},
                  {"series": f"{running}{{{SG_MODEL}}}", "values": "3x20"}], True, labels),
        _case(w, [{"series": f"{queue}{{{SG_MODEL}}}", "values": "0x20"},
                  {"series": f"{running}{{{SG_MODEL}}}", "values": "3x20"}], False, labels),
        # a pool half the predicted size: used / usage = 0.5 x the low bound
        _case(k, [{"series": f"{used}{{{SG_MODEL}}}", "values": f"{low // 4}x20"},
                  {"series": f"{usage}{{{SG_MODEL}}}", "values": "0.5x20"}], True, labels),
        _case(k, [{"series": f"{used}{{{SG_MODEL}}}", "values": f"{inside // 2}x20"},
                  {"series": f"{usage}{{{SG_MODEL}}}", "values": "0.5x20"}], False, labels),
    ]  # fmt: skip


def test_each_alert_fires_and_stays_quiet_under_promtool(promtool: str, tmp_path: Path) -> None:
    _, text, _ = _run(
        ["rules", str(SHAPES / "example.yaml"), str(SHAPES / "qwen3-32b-sglang.yaml")]
    )
    _, plan_text, _ = _run(["plan", str(SHAPES / "qwen3-32b-sglang.yaml"), "--json"])
    tokens = next(p for p in json.loads(plan_text)["predictions"] if p["id"] == "kv-tokens")
    tests = _vllm_cases(_alerts(text, "example"))
    tests += _sglang_cases(_alerts(text, "qwen3-32b-sglang"), tokens["low"], tokens["high"])
    # a contract that fails gets no preemption rule: qwen3-32b-sglang's holds, so it has one
    assert "FakplanPreemptionDespiteContract" in _alerts(text, "qwen3-32b-sglang")
    _promtool_test(promtool, tmp_path, text, tests)


# ------------------------------------- two endpoints serving one model (issue 26)


def _two_llamas(folder: Path, small: str = "", big: str = "") -> tuple[Path, Path]:
    """shapes/example.yaml twice, one model: a 5 GiB pool (2,560 blocks) and a 10 GiB one
    (5,120 blocks), each with an optional monitoring block."""
    text = (SHAPES / "example.yaml").read_text()
    one = folder / "llama-small.yaml"
    one.write_text(text.replace("name: example", "name: llama-small") + small)
    two = folder / "llama-big.yaml"
    two.write_text(
        text.replace("name: example", "name: llama-big")
        .replace("kv: 5 GiB", "kv: 10 GiB")
        .replace("total: 24 GiB", "total: 32 GiB")
        .replace("ceiling: 22 GiB", "ceiling: 27 GiB")
        + big
    )
    return one, two


def _pool_cases(rules: dict[str, dict[str, dict[str, Any]]], jobs: dict[str, str]) -> list[Any]:
    """Each endpoint's own pool as its engine states it (cache_config_info), both at once:
    neither shape's FakplanKvTokensDiffer may fire on the other's figures."""
    series = []
    for shape, blocks in (("llama-small", 2560), ("llama-big", 5120)):
        own = f'instance="{shape}:8000",{jobs[shape]}'
        series.append(
            {
                "series": f'vllm:cache_config_info{{{own},engine="0",block_size="16",'
                f'num_gpu_blocks="{blocks}"}}',
                "values": "1x20",
            }
        )
        series.append(
            {
                "series": f"vllm:num_requests_running{{{own},"
                'model_name="meta-llama/Llama-3.1-8B-Instruct"}',
                "values": "1x20",
            }
        )
    # promtool checks every alert of that name, the two groups' alike: none may fire
    return [_case(rules["llama-small"]["FakplanKvTokensDiffer"], series, False, {})]


def _promtool_test(promtool: str, folder: Path, rules: str, tests: list[Any]) -> None:
    (folder / "rules.yaml").write_text(rules)
    suite = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}
    (folder / "test.yaml").write_text(yaml.safe_dump(suite, sort_keys=False))
    run = subprocess.run(
        [promtool, "test", "rules", "test.yaml"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_two_shapes_serving_one_model_get_disjoint_rules(promtool: str, tmp_path: Path) -> None:
    """Issue 26: both shapes selected model_name only, so each fired the other's
    FakplanKvTokensDiffer forever. Selected by the scrape job named after each shape, the
    two endpoints' own pools keep both quiet under promtool, and a pool that is not the
    predicted one still fires its own shape's alert only."""
    small, big = _two_llamas(tmp_path)
    code, text, err = _run(["rules", str(small), str(big)])
    assert code == 0, err
    rules = {shape: _alerts(text, shape) for shape in ("llama-small", "llama-big")}
    for shape, alerts in rules.items():
        for rule in alerts.values():
            assert f'job="{shape}"' in rule["expr"], rule["expr"]
    jobs = {"llama-small": 'job="llama-small"', "llama-big": 'job="llama-big"'}
    tests = _pool_cases(rules, jobs)
    # the small endpoint booting the big one's pool fires the small shape's alert, alone
    wrong = [
        {
            "series": 'vllm:cache_config_info{instance="s:8000",job="llama-small",engine="0",'
            'block_size="16",num_gpu_blocks="5120"}',
            "values": "1x20",
        },
        {
            "series": 'vllm:num_requests_running{instance="s:8000",job="llama-small",'
            'model_name="meta-llama/Llama-3.1-8B-Instruct"}',
            "values": "1x20",
        },
    ]
    fired = {
        "instance": "s:8000",
        "job": "llama-small",
        "engine": "0",
        "block_size": "16",
        "num_gpu_blocks": "5120",
    }
    # exactly one alert of that name fires: the small shape's (the big one's stays quiet)
    tests.append(_case(rules["llama-small"]["FakplanKvTokensDiffer"], wrong, True, fired))
    _promtool_test(promtool, tmp_path, text, tests)


def test_the_operator_names_each_endpoint_by_its_own_labels(promtool: str, tmp_path: Path) -> None:
    """monitoring.selector in each shape, and --selector for one shape, pick the series."""
    small, big = _two_llamas(
        tmp_path,
        small='monitoring: {selector: \'job="vllm", instance="10.0.0.5:8000"\'}\n',
        big='monitoring:\n  selector: \'{job="vllm",instance="10.0.0.6:8000"}\'\n',
    )
    code, text, err = _run(["rules", str(small), str(big)])
    assert code == 0, err
    rules = {shape: _alerts(text, shape) for shape in ("llama-small", "llama-big")}
    assert (
        'job="vllm",instance="10.0.0.5:8000",model_name='
        in (rules["llama-small"]["FakplanKvUsageAbovePlan"]["expr"])
    )
    jobs = {
        "llama-small": 'job="vllm"',
        "llama-big": 'job="vllm"',
    }
    # the series carry the instance the selectors name
    tests = _pool_cases(rules, jobs)
    for case in tests:
        for entry in case["input_series"]:
            entry["series"] = (
                entry["series"]
                .replace('instance="llama-small:8000"', 'instance="10.0.0.5:8000"')
                .replace('instance="llama-big:8000"', 'instance="10.0.0.6:8000"')
            )
    _promtool_test(promtool, tmp_path, text, tests)
    # --selector for the one shape it names
    code, one, err = _run(["rules", str(small), "--selector", 'job="edge",instance=~"a:.*"'])
    assert code == 0, err
    assert 'job="edge",instance=~"a:.*",model_name=' in one
    code, _, err = _run(["rules", str(small), str(big), "--selector", 'job="edge"'])
    assert code == 2 and "--selector names one endpoint" in err


def test_two_shapes_selecting_the_same_series_are_refused(tmp_path: Path) -> None:
    same = "monitoring: {selector: 'job=\"vllm\"'}\n"
    small, big = _two_llamas(tmp_path, small=same, big=same)
    code, text, err = _run(["rules", str(small), str(big)])
    assert code == 2 and text == ""
    assert err.strip() == (
        'shapes llama-small and llama-big select the same series ({job="vllm",model_name='
        '"meta-llama/Llama-3.1-8B-Instruct"}): give each a monitoring.selector naming its own '
        "endpoint (job, instance, ...)"
    )


@pytest.mark.parametrize(
    ("selector", "why"),
    [
        ("job=vllm", "expected a double-quoted value after job="),
        ('job="a" instance="b"', "expected ',' between matchers"),
        ('model_name="x"', "'model_name' is a label fakplan's rules select themselves"),
        ('job=~"("', "the regex of job does not compile"),
        ('"}) or vector(1) #', "expected a label name"),
        ("", "no matchers"),
    ],
)
def test_a_selector_that_is_not_promql_matchers_is_refused(
    tmp_path: Path, selector: str, why: str
) -> None:
    small, _ = _two_llamas(tmp_path)
    code, _, err = _run(["rules", str(small), "--selector", selector])
    assert code == 2 and why in err, err
    text = small.read_text() + f"monitoring: {{selector: {json.dumps(selector)}}}\n"
    small.write_text(text)
    code, _, err = _run(["rules", str(small)])
    assert code == 2 and why in err and "monitoring.selector" in err, err

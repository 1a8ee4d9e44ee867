"""Kubernetes manifests from the plan (issue 18), checked offline against real schemas.

The built-in kinds are validated with kubernetes-validate (the Kubernetes 1.33 OpenAPI
schemas it bundles, strict: an unknown field fails); a LeaderWorkerSet with the
openAPIV3Schema of the LWS v0.7.0 CRD, vendored in tests/data/kubernetes. Every
container's command and args are compared word for word with the plan's argv.
"""

from __future__ import annotations

import json
import shlex
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from fakplan.cli import main
from tests.support.golden import check_golden
from tests.support.paths import DATA, ROOT

K8S = DATA / "kubernetes"
KUBERNETES_VERSION = "1.33.0"
SHAPES = {
    "vllm example": (ROOT / "shapes" / "example.yaml", ["--target", "kubernetes"]),
    "sglang example": (ROOT / "shapes" / "qwen3-32b-sglang.yaml", []),
    "llamacpp example": (ROOT / "shapes" / "qwen2.5-coder-llamacpp.yaml", []),
    "llamacpp, the GGUF in the image": (K8S / "llamacpp.yaml", []),
    "vllm two nodes": (K8S / "vllm-two-node.yaml", []),
    "sglang two nodes": (K8S / "sglang-two-node.yaml", []),
}


@cache
def lws_schema() -> dict[str, Any]:
    crd = yaml.safe_load((K8S / "lws-v0.7.0-leaderworkersets-crd.yaml").read_text())
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return v1["schema"]["openAPIV3Schema"]


def validate(obj: dict[str, Any]) -> None:
    if obj["kind"] == "LeaderWorkerSet":
        jsonschema.validate(obj, lws_schema())
        for template in ("leaderTemplate", "workerTemplate"):
            pod = obj["spec"]["leaderWorkerTemplate"][template]
            # the CRD leaves the pod template open: check it as the built-in PodTemplate
            kubernetes_validate.validate(
                {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "t"},
                 "template": pod},
                KUBERNETES_VERSION,
                strict=True,
            )  # fmt: skip
    elif obj["kind"] == "Kustomization":
        assert set(obj) == {"apiVersion", "kind", "resources"}
    else:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def compile_manifests(
    shape: Path, out: Path, extra: list[str] | None = None
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    result = CliRunner().invoke(main, ["compile", str(shape), "-o", str(out), *(extra or [])])
    assert result.exit_code in (0, 1), result.output
    (folder,) = [p for p in out.iterdir() if p.is_dir()]
    plan = json.loads((folder / "plan.json").read_text())
    docs = {}
    for path in sorted((folder / "kubernetes").iterdir()):
        (doc,) = list(yaml.safe_load_all(path.read_text()))  # one document a file
        docs[path.name] = doc
    return plan, docs


@pytest.mark.parametrize("case", list(SHAPES))
def test_every_manifest_validates_against_the_pinned_schemas(case: str, tmp_path: Path) -> None:
    shape, extra = SHAPES[case]
    _, docs = compile_manifests(shape, tmp_path, extra)
    kustomization = docs.pop("kustomization.yaml")
    assert sorted(kustomization["resources"]) == sorted(docs)
    for doc in docs.values():
        validate(doc)
    validate(kustomization)


def k8s_expand(word: str, env: dict[str, str] | None = None) -> str:
    """What a container receives for a command, args or env word, by Kubernetes' rule
    (pkg/kubelet/container expansion): ``$$`` is one ``$``, ``$(NAME)`` the variable's
    value where it is defined (else left as written), any other ``$`` itself."""
    env = env or {}
    out, i = [], 0
    while i < len(word):
        if word.startswith("$$", i):
            out.append("$")
            i += 2
        elif word.startswith("$(", i) and ")" in word[i:]:
            end = word.index(")", i)
            name = word[i + 2 : end]
            out.append(env.get(name, word[i : end + 1]))
            i = end + 1
        else:
            out.append(word[i])
            i += 1
    return "".join(out)


def _containers(docs: dict[str, dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    if "deployment.yaml" in docs:
        spec = docs["deployment.yaml"]["spec"]["template"]["spec"]
        return [("serve", spec["containers"][0])]
    lws = docs["leaderworkerset.yaml"]["spec"]["leaderWorkerTemplate"]
    return [
        ("leader", lws["leaderTemplate"]["spec"]["containers"][0]),
        ("worker", lws["workerTemplate"]["spec"]["containers"][0]),
    ]


@pytest.mark.parametrize("case", list(SHAPES))
def test_each_container_runs_the_plans_argv_word_for_word(case: str, tmp_path: Path) -> None:
    shape, extra = SHAPES[case]
    plan, docs = compile_manifests(shape, tmp_path, extra)
    roles = plan["launch"]["roles"]
    for (where, container), role in zip(_containers(docs), roles, strict=False):
        if role["before"]:
            # sh -c '<before> && exec "$@"' NAME ARGV...: the argv whole in args
            assert container["command"][:2] == ["sh", "-c"]
            script = k8s_expand(container["command"][2])
            assert script == " && ".join(shlex.join(b) for b in role["before"]) + ' && exec "$@"'
            words = [k8s_expand(w) for w in container["args"]]
        else:
            words = [k8s_expand(w) for w in container["command"] + container["args"]]
        expected = list(role["argv"])
        if where == "worker" and "--node-rank" in expected:  # SGLang: the pod's own rank
            expected[expected.index("--node-rank") + 1] = "$(LWS_WORKER_INDEX)"
        assert words == expected, where
        env = {e["name"]: k8s_expand(e["value"]) for e in container["env"] if "value" in e}
        assert {k: v for k, v in env.items() if k in plan["launch"]["env"]} == plan["launch"]["env"]
        # credentials only by reference: the HF token from its Secret, optional by default
        refs = {e["name"]: e["valueFrom"] for e in container["env"] if "valueFrom" in e}
        assert refs["HF_TOKEN"] == {
            "secretKeyRef": {"name": "hf-token", "key": "token", "optional": True}
        }
        assert env["HF_HOME"] == "/models/huggingface"  # the model cache's mount
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["model-cache"] == env["HF_HOME"]


def test_a_two_node_group_is_one_leaderworkerset_sized_by_the_nodes(tmp_path: Path) -> None:
    plan, docs = compile_manifests(K8S / "vllm-two-node.yaml", tmp_path)
    lws = docs["leaderworkerset.yaml"]
    assert lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1"
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    leader, worker = (c for _, c in _containers(docs))
    assert leader["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert worker["command"] + worker["args"] == [
        "ray", "start", "--address", "$(LWS_LEADER_ADDRESS):6379", "--num-gpus", "8", "--block",
    ]  # fmt: skip
    assert "--distributed-executor-backend" in leader["args"]
    service = docs["service.yaml"]
    assert service["spec"]["selector"] == {
        "leaderworkerset.sigs.k8s.io/name": "llama-405b-two-node",
        "leaderworkerset.sigs.k8s.io/worker-index": "0",
    }
    job = docs["probe-job.yaml"]
    startup = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    budget = startup["startupProbe"]["failureThreshold"] * startup["startupProbe"]["periodSeconds"]
    assert job["spec"]["activeDeadlineSeconds"] == budget + 5 * 600  # bounded: start + probes
    probe = job["spec"]["template"]["spec"]["containers"][0]
    assert probe["args"][:4] == [
        "probe", "/etc/fakplan/shape.yaml", "--url", "http://llama-405b-two-node.inference:8080/v1",
    ]  # fmt: skip
    assert probe["env"] == [
        {"name": "FAKPLAN_API_KEY",
         "valueFrom": {"secretKeyRef": {"name": "llama-api", "key": "token"}}}
    ]  # fmt: skip
    gates = json.loads(lws["metadata"]["annotations"]["fakplan/gates"])
    assert gates == {g["id"]: g["status"] for g in plan["gates"]}


def test_sglang_workers_take_their_rank_from_the_group(tmp_path: Path) -> None:
    _, docs = compile_manifests(K8S / "sglang-two-node.yaml", tmp_path)
    leader, worker = (c for _, c in _containers(docs))
    for container, rank in ((leader, "0"), (worker, "$(LWS_WORKER_INDEX)")):
        args = container["args"]
        assert args[args.index("--node-rank") + 1] == rank
        assert args[args.index("--dist-init-addr") + 1] == "$(LWS_LEADER_ADDRESS):20000"
        assert args[args.index("--nnodes") + 1] == "2"
    assert "startupProbe" in leader and "startupProbe" not in worker  # rank 0 serves HTTP


HOSTILE = [
    "x\n---\nkind: Secret\nmetadata: {name: stolen}",
    "key: value",
    "- item",
    "&anchor *alias",
    "$(rm -rf /)",
    "' \" \\ {}[],#|>",
    "null",
    "true",
]


@pytest.mark.parametrize("engine", ["vllm", "sglang", "llamacpp"])
def test_hostile_strings_stay_words(engine: str, tmp_path: Path) -> None:
    """A shape's strings land as scalars: one document a file, the words as given."""
    source = {"vllm": ROOT / "shapes" / "example.yaml",
              "sglang": K8S / "sglang-two-node.yaml",
              "llamacpp": K8S / "llamacpp.yaml"}[engine]  # fmt: skip
    data = yaml.safe_load(source.read_text())
    data["launch"] = {**data.get("launch", {}), "extra_args": HOSTILE}
    data["launch"].setdefault("kubernetes", {})
    data["launch"]["kubernetes"]["image"] = "registry.example/engine:1"
    shape = tmp_path / "hostile.yaml"
    shape.write_text(yaml.safe_dump(data))
    _, docs = compile_manifests(shape, tmp_path / "out")
    for _, container in _containers(docs):
        if container["name"].endswith("worker"):
            continue
        # as the container receives them: Kubernetes expands nothing of a shape's
        # (issue 27: "$(MODEL)" once reached args unescaped and was expanded)
        received = [k8s_expand(w, {"rm -rf /": "EXPANDED"}) for w in container["args"]]
        assert received[-len(HOSTILE) :] == HOSTILE
        assert "$$(rm -rf /)" in container["args"]
    assert not any(d.get("kind") == "Secret" for d in docs.values())
    for doc in docs.values():
        validate(doc)


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        ({"namespace": "Bad_Namespace"}, "launch.kubernetes.namespace"),
        ({"labels": {"bad key!": "v"}}, "launch.kubernetes.labels"),
        ({"image": "has space:1"}, "launch.kubernetes.image"),
        ({"service_type": "Ingress"}, "launch.kubernetes.service_type"),
        ({"replicas": 0}, "launch.kubernetes.replicas"),
        ({"colour": "blue"}, "launch.kubernetes"),
    ],
)
def test_bad_kubernetes_input_is_one_line(
    edit: dict[str, Any], field: str, tmp_path: Path, runner: CliRunner
) -> None:
    data = yaml.safe_load((K8S / "llamacpp.yaml").read_text())
    data["launch"]["kubernetes"].update(edit)
    shape = tmp_path / "bad.yaml"
    shape.write_text(yaml.safe_dump(data, sort_keys=False))
    result = runner.invoke(main, ["compile", str(shape), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(f"{shape}:") and field in line, line
    assert not (tmp_path / "out").exists()


def test_a_gguf_beside_the_shape_needs_the_shapes_volume(tmp_path: Path, runner: CliRunner) -> None:
    data = yaml.safe_load((ROOT / "shapes" / "qwen2.5-coder-llamacpp.yaml").read_text())
    del data["launch"]["kubernetes"]["shape_volume"]
    shape = tmp_path / "no-volume.yaml"
    shape.write_text(yaml.safe_dump(data))
    result = runner.invoke(main, ["compile", str(shape), "-o", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "no pod has" in result.output and "shape_volume" in result.output


def test_the_shapes_volume_is_the_engines_working_directory(tmp_path: Path) -> None:
    plan, docs = compile_manifests(ROOT / "shapes" / "qwen2.5-coder-llamacpp.yaml", tmp_path)
    ((_, container),) = _containers(docs)
    assert container["workingDir"] == "/fakplan/shape"
    assert {"name": "shape-files", "mountPath": "/fakplan/shape", "readOnly": True} in container[
        "volumeMounts"
    ]
    spec = docs["deployment.yaml"]["spec"]["template"]["spec"]
    assert {
        "name": "shape-files",
        "persistentVolumeClaim": {"claimName": "llm-models", "readOnly": True},
    } in spec["volumes"]
    # the argv names the GGUF as the shape does, relative to that folder
    assert "models/qwen2.5-coder-32b-instruct-q8_0.gguf" in container["args"]
    assert plan["launch"]["shape_paths"] == ["models/qwen2.5-coder-32b-instruct-q8_0.gguf"]


def test_the_cluster_gates(tmp_path: Path, runner: CliRunner) -> None:
    data = yaml.safe_load((K8S / "vllm-two-node.yaml").read_text())
    data["card"]["count"] = 16  # twice the GPUs the layout uses per node
    # 8 ranks a pod x 48 GiB of weights = 384 GiB at 200 MiB/s: ceil(1,966.08) = 1,967 s
    data["launch"]["kubernetes"]["startup_budget_s"] = 60
    del data["launch"]["kubernetes"]["probe_image"]
    data["launch"]["kubernetes"]["shm_size"] = "0 B"
    shape = tmp_path / "gates.yaml"
    shape.write_text(yaml.safe_dump(data))
    result = runner.invoke(main, ["gate", str(shape), "--format", "json"])
    assert result.exit_code == 1, result.output
    report = json.loads(result.output)
    status = {g["id"]: g for g in report["shapes"][0]["gates"]}
    assert status["k8s-gpus"]["status"] == "fail"
    assert status["k8s-parallel"]["status"] == "fail"  # 8 x 2 ranks, 16 x 2 GPUs
    assert status["k8s-startup"]["status"] == "fail"
    assert "= 1,967 s" in status["k8s-startup"]["detail"]
    assert status["k8s-shm"]["status"] == "fail"


def test_a_shape_without_kubernetes_has_no_cluster_gates(tmp_path: Path) -> None:
    plan, _ = compile_manifests(
        ROOT / "shapes" / "example.yaml", tmp_path, ["--target", "kubernetes"]
    )
    assert {g["id"] for g in plan["gates"]} >= {"k8s-gpus", "k8s-startup"}
    result = CliRunner().invoke(
        main, ["compile", str(ROOT / "shapes" / "example.yaml"), "-o", str(tmp_path / "plain")]
    )
    plain = json.loads((tmp_path / "plain" / "example" / "plan.json").read_text())
    assert not any(g["id"].startswith("k8s-") for g in plain["gates"])
    assert not (tmp_path / "plain" / "example" / "kubernetes").exists()
    assert result.exit_code == 0


@pytest.mark.parametrize("case", list(SHAPES))
def test_golden_manifests(case: str, tmp_path: Path) -> None:
    """Reviewed once; FAKPLAN_UPDATE_GOLDEN=1 rewrites them after a reviewed change."""
    shape, extra = SHAPES[case]
    compile_manifests(shape, tmp_path, extra)
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    for path in sorted((folder / "kubernetes").iterdir()):
        check_golden(f"kubernetes/{folder.name}/{path.name}", path.read_text())


def test_a_folder_targets_kubernetes_where_an_engine_runs_in_a_pod(tmp_path: Path) -> None:
    """--target kubernetes over shapes/: manifests for vLLM, SGLang and llama.cpp; the custom
    engine's shapes (no launch fakplan renders) compile as ever, without any."""
    result = CliRunner().invoke(
        main, ["compile", str(ROOT / "shapes"), "-o", str(tmp_path), "--target", "kubernetes"]
    )
    assert result.exit_code == 1, result.output  # frank-archon-fp8 fails its gates, by design
    with_manifests = {p.parent.name for p in tmp_path.glob("*/kubernetes")}
    assert with_manifests == {
        "example",
        "qwen2.5-coder-llamacpp",
        "qwen3-32b-sglang",
        "llama-3.1-8b-sglang-sized",
    }
    assert (tmp_path / "frank-archon" / "plan.json").exists()

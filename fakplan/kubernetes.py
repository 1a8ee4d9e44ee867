"""Kubernetes manifests from a plan: the same argv and env the scripts run, as pods.

One node is a ``Deployment`` and a ``Service``; several are a ``LeaderWorkerSet``
(leaderworkerset.x-k8s.io/v1, one group of ``parallel.nodes`` pods) whose leader runs
the head role of the scripts and whose workers run the others, with a ``Service`` on
the leader. A ``ConfigMap`` carries the shape and, with ``probe_image``, a ``Job`` runs
``fakplan probe`` against the Service. ``kustomization.yaml`` lists them.

Every container's args are its role's argv from ``plan.json`` word for word; a role's
commands that run first (``ray start --head``) go in ``command`` as ``sh -c '…; exec
"$@"'``, so the argv stays whole. Kubernetes expands ``$(LWS_LEADER_ADDRESS)`` and
``$(LWS_WORKER_INDEX)`` in args, and in env values such as ``RAY_ADDRESS``, from the
variables LWS puts first in every container's env (pkg/utils/pod/pod_utils.go
addEnvVarsIfNotExists, v0.7.0), so they are defined before any reference. The YAML is
written by ``yaml.safe_dump``: a shape's strings are scalars, never structure.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from typing import TYPE_CHECKING, Any

import yaml

from fakplan.cluster import ClusterFacts
from fakplan.engines import ENGINES
from fakplan.launch import RoleRecord
from fakplan.units import MIB

if TYPE_CHECKING:
    from fakplan.plan import Plan
    from fakplan.shape import LoadedShape

LWS_API = "leaderworkerset.x-k8s.io/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
WORKER_INDEX = "$(LWS_WORKER_INDEX)"
SHAPE_MOUNT = "/etc/fakplan"
SHAPE_FILES = "/fakplan/shape"  # launch.kubernetes.shape_volume: the engine's working dir
API_KEY_ENV = "FAKPLAN_API_KEY"


# the longest suffix an object adds to the shape's name ("-shape", "-probe")
_LONGEST_SUFFIX = len("-probe")
_LABEL = re.compile(r"[a-z]([a-z0-9-]*[a-z0-9])?")


def object_name(shape_name: str) -> str:
    """A shape name as a Service and pod name take it: a DNS-1035 label with room for the
    longest suffix an object adds (63 characters in all). A name that already is one is
    kept; any other (``a_b``, ``a.b``, too long) is made one and given a stable hash of the
    name as written, so two shapes never render one object name (``a_b`` and ``a-b``)."""
    room = 63 - _LONGEST_SUFFIX
    if len(shape_name) <= room and _LABEL.fullmatch(shape_name):
        return shape_name
    digest = hashlib.sha256(shape_name.encode()).hexdigest()[:8]
    base = re.sub(r"[^a-z0-9-]", "-", shape_name.lower()).strip("-")
    if not base or not base[0].isalpha():
        base = f"fp-{base}"
    return f"{base[: room - len(digest) - 1].rstrip('-')}-{digest}"


# the variables Kubernetes is to expand in args and env: what LeaderWorkerSet sets
_EXPANDED = ("$(LWS_LEADER_ADDRESS)", "$(LWS_WORKER_INDEX)")


def k8s_literal(word: str) -> str:
    """``word`` as a container's command, args or env value must carry it to run as is:
    Kubernetes expands ``$(VAR)`` there (a model named ``$(HF_TOKEN)`` would receive the
    token) and reads ``$$`` as ``$``. Each ``$`` those would take is doubled, but in the
    LeaderWorkerSet variables fakplan's own launch places, which are to be expanded."""
    escaped = re.sub(r"\$(?=[($])", "$$", word)  # "$@" and a trailing "$" mean themselves
    for variable in _EXPANDED:
        escaped = escaped.replace("$" + variable, variable)
    return escaped


def _image(loaded: LoadedShape, plan: Plan) -> str:
    k8s = loaded.shape.launch.kubernetes
    if k8s is not None and k8s.image is not None:
        return k8s.image
    default = ENGINES[plan.engine].image if plan.engine in ENGINES else None
    version = plan.engine_version or loaded.shape.engine_version  # the release stated
    if default is None or version is None:
        raise loaded.error(
            f"engine {plan.engine} has no default image: give launch.kubernetes.image "
            "(the image that runs the engine)",
            "launch",
        )
    return default.format(version=version)


def _env(loaded: LoadedShape, plan: Plan, role: RoleRecord) -> list[dict[str, Any]]:
    """The scripts' variables as values; Secret keys (launch.env, the HF token) by reference,
    so no manifest holds a credential."""
    merged: dict[str, Any] = dict(plan.launch.env)
    merged.update({k: v for k, v in role.environment.items() if v is not None})
    k8s = loaded.shape.launch.kubernetes
    if k8s is not None and k8s.model_cache is not None and "HF_HOME" not in merged:
        merged["HF_HOME"] = k8s.model_cache.path
    entries: list[dict[str, Any]] = [
        {"name": k, "value": k8s_literal(str(v))} for k, v in merged.items()
    ]
    refs = {k: (r.secret, r.key, False) for k, r in plan.launch.secrets.items()}
    token = k8s.hf_token_secret if k8s is not None else None
    if token is not None and "HF_TOKEN" not in merged and "HF_TOKEN" not in refs:
        refs["HF_TOKEN"] = (token.name, token.key, True)  # optional: a public model needs none
    for name, (secret, key, optional) in refs.items():
        ref: dict[str, Any] = {"name": secret, "key": key}
        if optional:
            ref["optional"] = True
        entries.append({"name": name, "valueFrom": {"secretKeyRef": ref}})
    return sorted(entries, key=lambda e: str(e["name"]))


def _command(role: RoleRecord, args: tuple[str, ...]) -> dict[str, Any]:
    """``args`` is the role's argv; what runs first goes in ``command`` (sh -c ... exec).
    Each word is written as Kubernetes must read it to pass it unchanged (``k8s_literal``)."""
    if not role.before:
        return {"command": [k8s_literal(args[0])], "args": [k8s_literal(a) for a in args[1:]]}
    first = " && ".join(shlex.join(words) for words in role.before)
    script = k8s_literal(f'{first} && exec "$@"')
    return {
        "command": ["sh", "-c", script, k8s_literal(role.name)],
        "args": [k8s_literal(a) for a in args],
    }


def _probes(facts: ClusterFacts, port: int) -> dict[str, Any]:
    def get() -> dict[str, Any]:
        route = ENGINES[facts.engine].health_route if facts.engine in ENGINES else "/health"
        return {"path": route, "port": port}

    period = 10
    return {
        "startupProbe": {
            "httpGet": get(),
            "periodSeconds": period,
            "failureThreshold": -(-facts.startup_budget_s // period),
        },
        "readinessProbe": {"httpGet": get(), "periodSeconds": period, "failureThreshold": 3},
        "livenessProbe": {"httpGet": get(), "periodSeconds": 30, "failureThreshold": 3},
    }


def _pod(
    loaded: LoadedShape,
    plan: Plan,
    facts: ClusterFacts,
    role: RoleRecord,
    args: tuple[str, ...],
    serves: bool,
) -> dict[str, Any]:
    k8s = loaded.shape.launch.kubernetes
    port = loaded.shape.launch.port
    container: dict[str, Any] = {
        "name": plan.engine if serves else f"{plan.engine}-{role.name}",
        "image": _image(loaded, plan),
        **_command(role, args),
        "env": _env(loaded, plan, role),
    }
    if serves:
        container["ports"] = [{"name": "http", "containerPort": port}]
        container.update(_probes(facts, port))
    if facts.gpus_per_pod:
        container["resources"] = {"limits": {"nvidia.com/gpu": facts.gpus_per_pod}}
    spec: dict[str, Any] = {"containers": [container]}
    if facts.shm_bytes is not None:
        container["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
        spec["volumes"] = [
            {
                "name": "dshm",
                "emptyDir": {"medium": "Memory", "sizeLimit": f"{-(-facts.shm_bytes // MIB)}Mi"},
            }
        ]
    if k8s is not None and k8s.shape_volume is not None:
        # the argv's relative paths are the shape folder's: that folder is the working dir
        volume = k8s.shape_volume
        mount: dict[str, Any] = {"name": "shape-files", "mountPath": SHAPE_FILES, "readOnly": True}
        if volume.sub_path:
            mount["subPath"] = volume.sub_path
        container.setdefault("volumeMounts", []).append(mount)
        container["workingDir"] = SHAPE_FILES
        spec.setdefault("volumes", []).append(
            {
                "name": "shape-files",
                "persistentVolumeClaim": {"claimName": volume.claim, "readOnly": True},
            }
        )
    if k8s is not None and k8s.model_cache is not None:
        cache = k8s.model_cache
        container.setdefault("volumeMounts", []).append(
            {"name": "model-cache", "mountPath": cache.path}
        )
        source: dict[str, Any] = (
            {"persistentVolumeClaim": {"claimName": cache.claim}}
            if cache.claim
            else {"emptyDir": {"sizeLimit": f"{-(-cache.size // MIB)}Mi"} if cache.size else {}}
        )
        spec.setdefault("volumes", []).append({"name": "model-cache", **source})
    if k8s is not None and k8s.node_selector:
        spec["nodeSelector"] = dict(k8s.node_selector)
    if k8s is not None and k8s.tolerations:
        spec["tolerations"] = [t.model_dump(exclude_none=True) for t in k8s.tolerations]
    return spec


def _annotations(plan: Plan) -> dict[str, str]:
    """The plan's figures, gates and predictions, where kubectl describe shows them."""
    predictions = {p.id: [p.low, p.high, p.unit] for p in plan.predictions}
    return {
        "fakplan/plan": json.dumps(
            {
                "kv_budget_bytes": plan.kv_budget_bytes,
                "weights_budget_bytes": plan.weights_budget_bytes,
                "tokens_backed": plan.tokens_backed,
                "contract_bytes": plan.contract_bytes,
                "pair_bytes": plan.pair_bytes,
                "ceiling_bytes": plan.ceiling_bytes,
            },
            sort_keys=True,
        ),
        "fakplan/derivation": plan.derivations.get("tokens_backed", ""),
        "fakplan/gates": json.dumps({g.id: g.status for g in plan.gates}, sort_keys=True),
        "fakplan/predictions": json.dumps(predictions, sort_keys=True),
    }


def _metadata(loaded: LoadedShape, name: str, annotate: Plan | None = None) -> dict[str, Any]:
    k8s = loaded.shape.launch.kubernetes
    meta: dict[str, Any] = {"name": name, "labels": _labels(loaded)}
    if k8s is not None and k8s.namespace:
        meta["namespace"] = k8s.namespace
    if annotate is not None:
        meta["annotations"] = _annotations(annotate)
    return meta


def _labels(loaded: LoadedShape) -> dict[str, str]:
    k8s = loaded.shape.launch.kubernetes
    own = dict(k8s.labels) if k8s is not None else {}
    return {**own, "app.kubernetes.io/name": object_name(loaded.shape.name),
            "app.kubernetes.io/managed-by": "fakplan"}  # fmt: skip


def workloads(loaded: LoadedShape, plan: Plan, facts: ClusterFacts) -> list[dict[str, Any]]:
    """The Deployment, or the LeaderWorkerSet, that runs the plan's roles."""
    name = object_name(plan.name)
    roles = plan.launch.roles
    k8s = loaded.shape.launch.kubernetes
    replicas = k8s.replicas if k8s is not None else 1
    labels = _labels(loaded)
    if not roles:
        raise loaded.error(
            f"engine {plan.engine}: fakplan renders no launch for it, so no manifest", "engine"
        )
    if facts.nodes == 1:
        (role,) = roles
        return [
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": _metadata(loaded, name, plan),
                "spec": {
                    "replicas": replicas,
                    "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": _pod(loaded, plan, facts, role, role.argv, serves=True),
                    },
                },
            }
        ]
    leader, worker = roles[0], roles[1]
    worker_args = worker.argv
    if "--node-rank" in worker_args:  # SGLang: a worker's rank is its pod's index in the group
        at = worker_args.index("--node-rank") + 1
        worker_args = (*worker_args[:at], WORKER_INDEX, *worker_args[at + 1 :])
    return [
        {
            "apiVersion": LWS_API,
            "kind": "LeaderWorkerSet",
            "metadata": _metadata(loaded, name, plan),
            "spec": {
                "replicas": replicas,
                "leaderWorkerTemplate": {
                    "size": facts.nodes,
                    "restartPolicy": "RecreateGroupOnPodRestart",
                    "leaderTemplate": {
                        "metadata": {"labels": labels},
                        "spec": _pod(loaded, plan, facts, leader, leader.argv, serves=True),
                    },
                    "workerTemplate": {
                        "metadata": {"labels": labels},
                        "spec": _pod(loaded, plan, facts, worker, worker_args, serves=False),
                    },
                },
            },
        }
    ]


def _service(loaded: LoadedShape, plan: Plan, facts: ClusterFacts) -> dict[str, Any]:
    name = object_name(plan.name)
    k8s = loaded.shape.launch.kubernetes
    port = loaded.shape.launch.port
    selector = (
        {"app.kubernetes.io/name": name}
        if facts.nodes == 1
        else {LWS_NAME_LABEL: name, LWS_INDEX_LABEL: "0"}
    )
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(loaded, name),
        "spec": {
            "type": k8s.service_type if k8s is not None else "ClusterIP",
            "selector": selector,
            "ports": [{"name": "http", "port": port, "targetPort": port}],
        },
    }


def _config_map(loaded: LoadedShape, plan: Plan) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(loaded, f"{object_name(plan.name)}-shape"),
        "data": {"shape.yaml": loaded.text},
    }


# the Job's deadline past the engine's startup budget: fakplan probe runs 5 probes by
# default, each allowed its --timeout of 600 s
PROBE_SECONDS = 5 * 600


def _probe_job(loaded: LoadedShape, plan: Plan, facts: ClusterFacts, image: str) -> dict[str, Any]:
    """``fakplan probe`` in the cluster, against the Service: its exit status is the Job's,
    and it ends by the engine's startup budget plus the probes' own time."""
    name = object_name(plan.name)
    k8s = loaded.shape.launch.kubernetes
    assert k8s is not None
    namespace = f".{k8s.namespace}" if k8s.namespace else ""
    url = f"http://{name}{namespace}:{loaded.shape.launch.port}/v1"
    args = ["probe", f"{SHAPE_MOUNT}/shape.yaml", "--url", url, "--json", "-o", "/tmp/fakplan"]
    container: dict[str, Any] = {
        "name": "probe",
        "image": image,
        "command": ["fakplan"],
        "args": args,
    }
    if k8s.api_key_secret is not None:
        args += ["--api-key-env", API_KEY_ENV]
        container["env"] = [
            {
                "name": API_KEY_ENV,
                "valueFrom": {"secretKeyRef": k8s.api_key_secret.model_dump()},
            }
        ]
    container["volumeMounts"] = [{"name": "shape", "mountPath": SHAPE_MOUNT, "readOnly": True}]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(loaded, f"{name}-probe"),
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": facts.startup_budget_s + PROBE_SECONDS,
            "template": {
                "metadata": {"labels": _labels(loaded)},
                "spec": {
                    "restartPolicy": "Never",
                    "initContainers": [
                        {
                            "name": "wait-ready",
                            "image": image,
                            "command": [
                                "python",
                                "-c",
                                _WAIT_READY,
                                url.removesuffix("/v1") + "/health",
                            ],
                        }
                    ],
                    "containers": [container],
                    "volumes": [
                        {"name": "shape", "configMap": {"name": f"{name}-shape"}},
                    ],
                },
            },
        },
    }


# the Job's init container: poll the engine's health route until it answers 200
_WAIT_READY = (
    "import sys, time, urllib.request\n"
    "while True:\n"
    "    try:\n"
    "        if urllib.request.urlopen(sys.argv[1], timeout=5).status == 200: break\n"
    "    except Exception: pass\n"
    "    time.sleep(10)\n"
)


def manifests(loaded: LoadedShape, plan: Plan, facts: ClusterFacts) -> dict[str, str]:
    """``{file name: YAML}`` under ``<name>/kubernetes/``, kustomization.yaml last."""
    k8s = loaded.shape.launch.kubernetes
    if plan.launch.shape_paths and (k8s is None or k8s.shape_volume is None):
        raise loaded.error(
            f"the argv names {', '.join(plan.launch.shape_paths)} beside the shape, which no "
            "pod has: give launch.kubernetes.shape_volume (a claim holding the shape's "
            "folder), a model id, or a path inside the image",
            "model",
        )
    objects: dict[str, dict[str, Any]] = {}
    (workload,) = workloads(loaded, plan, facts)
    kind = "deployment" if workload["kind"] == "Deployment" else "leaderworkerset"
    objects[f"{kind}.yaml"] = workload
    objects["service.yaml"] = _service(loaded, plan, facts)
    objects["shape-configmap.yaml"] = _config_map(loaded, plan)
    if k8s is not None and k8s.probe_image is not None:
        objects["probe-job.yaml"] = _probe_job(loaded, plan, facts, k8s.probe_image)
    kustomization: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": list(objects),
    }
    out = {name: dump(obj) for name, obj in objects.items()}
    out["kustomization.yaml"] = dump(kustomization)
    return out


class _Dumper(yaml.SafeDumper):
    """safe_dump without anchors: every manifest reads whole, as kubectl shows it."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump(obj: dict[str, Any]) -> str:
    """One YAML document: every string a scalar (safe_dump quotes what YAML would read)."""
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)

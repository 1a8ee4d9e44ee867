"""What a shape asks of a Kubernetes cluster: GPUs per pod, /dev/shm, the startup budget.

Pure figures the cluster gates judge and the manifests are rendered from
(``fakplan.kubernetes``), so the gates check the very numbers the manifests carry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fakplan.units import human

if TYPE_CHECKING:
    from fakplan.shape import Shape

STARTUP_FLOOR_S = 600  # an engine compiles, profiles and captures graphs after the weights


@dataclass(frozen=True)
class ClusterFacts:
    """The pod layout of one shape on Kubernetes."""

    engine: str
    nodes: int
    gpus_per_pod: int  # card.count (0 on a CPU card)
    ranks_per_node: int  # TP x PP / nodes: the GPUs the parallel layout uses on each node
    tensor: int
    pipeline: int
    shm_bytes: int | None
    weights_per_pod: int
    load_rate: int
    load_estimate_s: int
    startup_budget_s: int
    startup_stated: bool

    @property
    def load_derivation(self) -> str:
        return (
            f"{human(self.weights_per_pod)} of weights a pod loads / "
            f"{human(self.load_rate)}/s (launch.kubernetes.load_rate) = "
            f"{self.load_estimate_s:,} s"
        )


def cluster_facts(
    shape: Shape, weights_per_rank: int, engine_shm: int | None
) -> ClusterFacts | None:
    """The layout a shape with ``launch.kubernetes`` deploys; None without one."""
    k8s = shape.launch.kubernetes
    if k8s is None:
        return None
    par = shape.parallel
    ranks = par.tensor * par.pipeline
    per_node = -(-ranks // par.nodes)
    weights = weights_per_rank * per_node
    estimate = math.ceil(weights / k8s.load_rate)
    default_budget = max(STARTUP_FLOOR_S, -(-2 * estimate // 10) * 10)
    # /dev/shm per pod where the shape does not say: what the engine's own multi-node
    # example gives it (Engine.shm_bytes; None: its server shares no tensors between
    # processes)
    shm = k8s.shm_size if k8s.shm_size is not None else engine_shm
    return ClusterFacts(
        engine=shape.engine,
        nodes=par.nodes,
        gpus_per_pod=shape.card.count if shape.card.device == "gpu" else 0,
        ranks_per_node=per_node,
        tensor=par.tensor,
        pipeline=par.pipeline,
        shm_bytes=shm,
        weights_per_pod=weights,
        load_rate=k8s.load_rate,
        load_estimate_s=estimate,
        startup_budget_s=k8s.startup_budget_s or default_budget,
        startup_stated=k8s.startup_budget_s is not None,
    )

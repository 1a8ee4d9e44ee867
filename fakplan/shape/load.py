"""Loading a shape: YAML in (bounded, line-mapped), a validated ``LoadedShape`` out."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fakplan.budget import DeviceBudget, probe_budget
from fakplan.engines import ENGINES
from fakplan.errors import ShapeError
from fakplan.shape.checks import check_semantics
from fakplan.shape.messages import field_path, first_error, message
from fakplan.shape.model import AUTO, KubernetesLaunch, Shape
from fakplan.shape.source import LineMap, read_shape_file, read_yaml


def load_shape(path: str | Path, budget: BudgetProbe | None = None) -> LoadedShape:
    """Read and validate one shape file (``budget`` answers ``card.total: auto``)."""
    path = Path(path)
    return load_shape_text(read_shape_file(path), path, budget)


BudgetProbe = Callable[[bool], DeviceBudget]


def _probe(gpu: bool) -> DeviceBudget:
    return probe_budget(gpu=gpu)


def _resolve_card_total(
    data: dict[str, Any], path: Path, lines: LineMap, budget: BudgetProbe
) -> DeviceBudget | None:
    """``card.total: auto`` becomes the device budget's bytes; returns the budget read."""
    card = data.get("card")
    if not isinstance(card, dict) or card.get("total") != AUTO:
        return None
    gpu = card.get("device", "gpu") != "cpu"
    answer = budget(gpu)
    if gpu and answer.source == "host":
        # host RAM is no GPU's memory: a made-up card size, and one that changes with
        # whichever machine compiles the shape
        raise ShapeError(
            f"'auto' on a GPU card needs the GPU's own answer, and NVML gave none "
            f"({answer.sentence.partition('because ')[2] or answer.sentence}); compile on "
            "the serving machine, set FAKPLAN_DEVICE_BUDGET_BYTES, or state the card's "
            'memory, e.g. "80 GiB"',
            file=path,
            line=lines.line(("card", "total")),
            field="card.total",
        )
    if answer.budget_bytes is None:
        raise ShapeError(
            f"'auto' needs the device budget, and it is unknown ({answer.sentence}); "
            'state the card\'s memory, e.g. "80 GiB", or set FAKPLAN_DEVICE_BUDGET_BYTES',
            file=path,
            line=lines.line(("card", "total")),
            field="card.total",
        )
    card["total"] = f"{answer.budget_bytes} B"
    return answer


def load_shape_text(text: str, path: Path, budget: BudgetProbe | None = None) -> LoadedShape:
    """Validate shape text that ``path`` names (for errors and relative references),
    e.g. a file as it was at an earlier git revision."""
    data, lines = read_yaml(path, text)
    read = _resolve_card_total(data, path, lines, budget or _probe)
    try:
        shape = Shape.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        first = first_error(errors, lines)
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ShapeError(
            message(first, Shape, errors) + more,
            file=path,
            line=lines.line(first["loc"]),
            field=field_path(first["loc"]) or None,
        ) from None
    loaded = LoadedShape(shape=shape, path=path, lines=lines, budget=read, text=text)
    check_semantics(loaded)
    return loaded


class LoadedShape:
    """A validated shape and where it came from (for later line-numbered errors)."""

    def __init__(
        self,
        shape: Shape,
        path: Path,
        lines: LineMap,
        budget: DeviceBudget | None = None,
        text: str = "",
    ) -> None:
        self.shape = shape
        self.path = path
        self._lines = lines
        self.text = text  # the shape as read (the Kubernetes ConfigMap carries it)
        # the device budget card.total: auto read (None: the shape states the card)
        self.budget = budget
        # what is derived from the (frozen) shape once and asked for many times per plan:
        # its geometry and KV query (fakplan.engines.query)
        self.derived: dict[str, Any] = {}

    def targeting_kubernetes(self) -> LoadedShape:
        """This shape with a ``launch.kubernetes`` block (its own, else every default);
        unchanged for an engine fakplan renders no launch for (custom: no pod to run)."""
        if self.shape.launch.kubernetes is not None or ENGINES[self.shape.engine].needs_contract:
            return self
        launch = self.shape.launch.model_copy(update={"kubernetes": KubernetesLaunch()})
        shape = self.shape.model_copy(update={"launch": launch})
        return LoadedShape(
            shape=shape, path=self.path, lines=self._lines, budget=self.budget, text=self.text
        )

    @property
    def lines(self) -> LineMap:
        """Where each field of the shape is written (for errors at a line)."""
        return self._lines

    @property
    def card_note(self) -> str | None:
        """Where card.total came from when the shape said 'auto' (the budget's sentence) or
        left it out beside card.sku (the CUDA total public logs print for that card)."""
        if self.budget is None:
            return self.shape.card.total_from
        return f"auto: {self.budget.sentence}"

    def engine_total(self) -> tuple[int, str]:
        """What an engine sizing its own pool multiplies by its fraction, and why."""
        total = self.shape.card.total
        if self.budget is None:
            if self.shape.card.total_from is not None:
                return total, f"card.total {total:,} B: {self.shape.card.total_from}"
            return total, (
                f"card.total {total:,} B as stated: the total the engine multiplies "
                "(CUDA's on a GPU, e.g. 79.19 GiB on an H100 80GB; MemTotal on a CPU)"
            )
        if self.budget.engine_total_bytes is None:
            raise self.error(
                f"'auto' read {self.budget.source}, and what the engine multiplies is "
                f"{self.budget.engine_total_sentence or 'unknown'}; state card.total as "
                "the engine's total (CUDA's, e.g. \"79.19 GiB\" on an H100 80GB)",
                "card",
                "total",
            )
        return self.budget.engine_total_bytes, f"auto: {self.budget.engine_total_sentence}"

    def line(self, loc: tuple[str | int, ...]) -> int:
        """The line of the shape file that holds ``loc`` (the nearest enclosing key)."""
        return self._lines.line(loc)

    def error(self, message: str, *loc: str | int) -> ShapeError:
        """A ShapeError located at ``loc`` in this file."""
        return ShapeError(
            message, file=self.path, line=self._lines.line(loc), field=field_path(loc)
        )

    def resolve(self, reference: str) -> Path:
        """A path named in the shape: absolute as given, else against the shape's folder —
        never the working directory, so every command reads the same file."""
        candidate = Path(reference)  # "~" is a folder name here: no home is expanded
        if candidate.is_absolute():
            return candidate
        return (self.path.parent / candidate).resolve()


def shape_paths(argument: str | Path) -> list[Path]:
    """The shape files one command-line argument names: a file, or a folder's sorted *.yaml."""
    path = Path(argument)
    if not path.is_dir():
        return [path]
    found = sorted([*path.glob("*.yaml"), *path.glob("*.yml")])
    if not found:
        raise ShapeError("no *.yaml shapes in this folder", file=path)
    return found

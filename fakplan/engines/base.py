"""The engine plug-in: what the planner, the shape's checks, the launch, the boot-log
reader, the probes, the cluster manifests and the alert rules ask of an engine, with the
defaults of an engine that has no opinion.

An engine is one folder (``fakplan/engines/<name>/``): a subclass of ``Engine`` (of
``ModelledEngine`` when fakplan derives its arithmetic from the model's geometry) whose
attributes name its parts, its templates (``templates/<name>/env.j2`` and
``serve.sh.j2``) and its tests. ``fakplan.engines.ENGINES`` lists the built-in ones;
``register`` adds another.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from fakplan.contract import Capacity, KvCost
from fakplan.engines.alerting import AlertFacts, AlertRule
from fakplan.engines.refusals import BootRefusal
from fakplan.engines.serving import ServerFacts
from fakplan.errors import FakplanError
from fakplan.kv import KvBreakdown, KvQuery, PoolResult
from fakplan.rates import AllReduce, EfficiencyBand
from fakplan.sizing import SizingUnknown
from fakplan.units import human

if TYPE_CHECKING:
    from fakplan.engines.setup import Setup
    from fakplan.figures import Figures
    from fakplan.geometry import Geometry
    from fakplan.launch import LaunchRecord
    from fakplan.ledger.patterns import LedgerFormat
    from fakplan.sizing import EngineSizing


class Engine:
    """One engine fakplan plans for. Class attributes state what it takes; methods cost a
    token, count a pool and build the launch."""

    name: ClassVar[str]
    # as its own documentation spells it, for messages (default: the name)
    title: ClassVar[str | None] = None
    # launch.binary spellings this engine starts with (the first is the default)
    binaries: ClassVar[tuple[str, ...]] = ()
    # it shards a model over cards by tensor (and pipeline) ranks: `fakplan fit` and the
    # fixes try wider layouts (llama.cpp splits by layers instead)
    tensor_parallel: ClassVar[bool] = True
    # serving.dtype reaches a --dtype flag of the engine's
    takes_model_dtype: ClassVar[bool] = False
    # serving.language_model_only reaches a flag that leaves a multimodal model's towers out
    takes_language_model_only: ClassVar[bool] = False
    # serving.enforce_eager reaches a flag that turns CUDA graphs off (and, in vLLM, the
    # graph estimate the pool is sized without)
    takes_enforce_eager: ClassVar[bool] = False
    # the variable that picks the engine's model runner (fakplan kv --model-runner), if any
    runner_variable: ClassVar[str | None] = None
    # serving.spec_tokens needs launch.speculative.method to become the engine's flags
    speculative_flags: ClassVar[bool] = False
    # the speculative methods (launch.speculative.method) whose separate draft model's KV the
    # engine's arithmetic counts (vLLM: in the target's blocks; SGLang: a pool beside):
    # their launch.speculative.model is resolved as the target is
    draft_model_methods: ClassVar[tuple[str, ...]] = ()
    # the KV contract is typed into the shape (an engine fakplan does not model)
    needs_contract: ClassVar[bool] = False
    # it loads a GGUF (launch.weights), never the model's published checkpoint
    loads_gguf: ClassVar[bool] = False
    # the pool the boot log prints is the cache allocated (llama.cpp's "size ="), not
    # memory the engine then divides into blocks
    printed_pool_is_cache: ClassVar[bool] = False
    # its boot log prints the memory it then divides into the pool (vLLM's "Available KV
    # cache memory"): verify recounts a missed token count from it, to tell the pool
    # from the rule
    log_prints_divided_pool: ClassVar[bool] = False
    # how the engine sizes the cache of several ranks from the pools each rank finds (a
    # sentence with its source); None where it serves from one rank
    pool_over_ranks: ClassVar[str | None] = None
    # the share of a card's peak it reaches, measured (fakplan.rates, engines/rate_bands.py),
    # per device class ("gpu", "cpu"): decode against the memory bandwidth, prefill against
    # the dense peak; a class without a band gets no rate prediction, and says why
    decode_bands: ClassVar[Mapping[str, EfficiencyBand]] = {}
    prefill_bands: ClassVar[Mapping[str, EfficiencyBand]] = {}
    # one all-reduce between its tensor ranks at decode sizes, measured, per link (the
    # card table's: nvlink, pcie): a link without one gets no decode rate at TP > 1
    all_reduce: ClassVar[Mapping[str, AllReduce]] = {}
    # where a band is another engine's measurement, the sentence that says so
    borrowed_band: ClassVar[str | None] = None
    # what --dtype auto serves a float32 checkpoint in, where it downcasts: (dtype, rule)
    auto_downcast: ClassVar[tuple[str, str] | None] = None
    # the module of its boot log's lines (its ``bootlog``, whose FORMAT ``boot_format``
    # imports when a log is read, so a plan never compiles its rows); None: the engine
    # prints none fakplan reads
    bootlog_module: ClassVar[str | None] = None
    # its OpenAI-compatible server (``server``): flavours, evidence, refusals, capacity
    server: ClassVar[ServerFacts] = ServerFacts()
    # the server flavour the probes assume where the endpoint's routes do not tell
    probe_flavour: ClassVar[str | None] = None
    # on a cluster (``cluster``): the image a pod runs by default, a format string of the
    # release ("{version}"; None: the shape must name one), the /dev/shm a pod gets where
    # the shape does not say (None: none mounted), and the route a pod is probed on
    image: ClassVar[str | None] = None
    shm_bytes: ClassVar[int | None] = None
    health_route: ClassVar[str] = "/health"
    # the serving field (gpu_memory_utilization, mem_fraction_static) whose fraction lets
    # the engine size its own pool, which fakplan then predicts; None: the shape states it
    sizing_field: ClassVar[str | None] = None
    # where fakplan cannot predict that pool: how the shape states it instead (a budget,
    # and the engine flag the launch then passes)
    stated_pool: ClassVar[str] = "state budget {weights, kv} instead"
    # what the engine refuses at boot that a shape can cause (engines.refusals): the
    # ``boots`` gate checks each row that applies at the planned release
    boot_refusals: ClassVar[tuple[BootRefusal, ...]] = ()
    # the KV dtypes `fakplan fit` tries by default, smallest loss first: the model's own,
    # then the engine's 8-bit cache; () where fakplan does not derive the arithmetic
    fit_kv_dtypes: ClassVar[tuple[str, ...]] = ()
    # serving.quantization values the engine is modelled with (its weights counted)
    quantizations: ClassVar[tuple[str, ...]] = ()

    def boot_format(self) -> LedgerFormat | None:
        """How its boot log reads (``fakplan verify`` reads a shape's log as it); None:
        the engine prints none fakplan reads, so a log's format is detected."""
        if self.bootlog_module is None:
            return None
        found: LedgerFormat = importlib.import_module(self.bootlog_module).FORMAT
        return found

    def alert_rules(self, facts: AlertFacts) -> tuple[AlertRule, ...]:
        """The Prometheus rules that hold the engine's live metrics to a plan (``cluster``);
        () where its server exports no such figures."""
        return ()

    def check(self, setup: Setup) -> None:
        """The engine's own rules a shape must meet; raise ``setup.error`` at the field."""
        return None

    def probe_hint(self, setup: Setup) -> str | None:
        return self.probe_flavour

    def kv_cost(self, setup: Setup) -> KvCost:
        """The per-page, per-sequence and fixed cost of the shape's KV on one rank."""
        raise NotImplementedError

    def capacity(self, setup: Setup, cost: KvCost, pool_bytes: int) -> Capacity:
        """Tokens the pool backs, counted as this engine counts them at boot."""
        raise NotImplementedError

    def version_used(self, setup: Setup) -> str | None:
        """The release whose arithmetic applied (None where there are none)."""
        return None

    def window_step(self, setup: Setup) -> int:
        """The tokens between two windows that cost differently: a page (block) of KV by
        default; `fakplan fit` steps a window by it."""
        return self.kv_cost(setup).page_tokens

    def offload_layers(self, setup: Setup) -> int | None:
        """The layer count that puts every layer on the card, where the engine can leave
        some in RAM (llama.cpp's -ngl): `fakplan fit` searches below it. None: the engine
        holds all of the model on its cards or none."""
        return None

    def quantized_weights(self, setup: Setup) -> tuple[int | None, str]:
        """The weights' bytes where the engine quantizes them as it loads
        (``serving.quantization``), and how they were counted; None with the reason where
        fakplan does not count them."""
        return None, (
            f"quantized as it loads (--quantization {setup.serving.quantization}): "
            f"fakplan does not count what {self.name} then holds"
        )

    def resident_weights(self, setup: Setup, geometry: Geometry) -> tuple[int | None, str | None]:
        """The bytes of the checkpoint ``geometry`` describes that the card holds, and how
        they were counted: all of them, unless the engine keeps some in RAM."""
        return geometry.weight_bytes, geometry.weight_source

    def card_bound(self, setup: Setup) -> tuple[int, str]:
        """The most weights + KV one card can hold under this engine whatever else is
        unknown: the card itself, less what the engine is known to take beside the pair.
        A pair above it fails even where no ceiling is stated, read or predicted."""
        total = setup.card.total
        return total, f"the card's {human(total)} ({total:,} B, card.total)"

    def predicted_ceiling(self, setup: Setup) -> tuple[int | None, str]:
        """A stated pair's ceiling before any boot, from the engine's predicted floor."""
        return None, "unknown: the shape states no ceiling"

    def size_pool(
        self,
        query: KvQuery,
        fraction: float,
        total: int,
        total_derivation: str,
        *,
        sms: int,
        max_num_seqs: int | None,
    ) -> EngineSizing | SizingUnknown:
        """The pool one rank sizes for itself at ``fraction`` (``sizing_field``) of a card
        whose total is ``total``, term by term, or why it is not predicted: the one route
        ``sized_pool`` (the shape) and ``fakplan kv`` share."""
        raise FakplanError(f"{self.name} does not size its own pool")

    def sized_pool(self, setup: Setup) -> EngineSizing:
        """The pool the engine will size for itself on one rank, from the shape's fraction
        (``sizing_field``) and card: ``size_pool`` on the shape's query, a reason turned into
        the shape's located error."""
        field = self.sizing_field
        assert field is not None  # the shape's checks refuse a fraction the engine lacks
        fraction = getattr(setup.serving, field)
        total, total_derivation = setup.engine_total()
        found = self.size_pool(
            self.sizing_query(setup), fraction, total, total_derivation,
            sms=setup.card.sms or 0, max_num_seqs=setup.serving.max_num_seqs,
        )  # fmt: skip
        if not isinstance(found, SizingUnknown):
            return found
        raise setup.error(
            f"fakplan cannot predict the pool {self.title or self.name} sizes here: "
            f"{found.reason}; {self.stated_pool}",
            "serving",
            field,
        )

    def sizing_query(self, setup: Setup) -> KvQuery:
        """The KV query ``sized_pool`` asks about: the shape's."""
        return setup.query

    def launch(self, setup: Setup, figures: Figures) -> LaunchRecord:
        """The env file's variables and each node role's argv."""
        raise NotImplementedError


class ModelledEngine(Engine):
    """An engine whose arithmetic fakplan derives from the model's geometry.

    vLLM, SGLang and llama.cpp differ in how they cost a token and count a pool
    (``breakdown`` and ``pool``); how a shape becomes a query, and a pool result a
    ``Capacity``, is the same for all three and lives here once.
    """

    def breakdown(self, query: KvQuery) -> KvBreakdown:
        raise NotImplementedError

    def pool(self, query: KvQuery, breakdown: KvBreakdown, pool_bytes: int) -> PoolResult:
        raise NotImplementedError

    def printed_pool(self, query: KvQuery, breakdown: KvBreakdown, pool_bytes: int) -> PoolResult:
        """The tokens behind a pool figure the engine's boot log printed: the pool itself,
        unless the printed line covers part of it (llama.cpp's attention cache)."""
        return self.pool(query, breakdown, pool_bytes)

    def kv_cost(self, setup: Setup) -> KvCost:
        return self.breakdown(setup.query)

    def capacity(self, setup: Setup, cost: KvCost, pool_bytes: int) -> Capacity:
        query = setup.query
        breakdown = cost if isinstance(cost, KvBreakdown) else self.breakdown(query)
        result = self.pool(query, breakdown, pool_bytes)
        pages = (
            result.num_blocks
            if result.num_blocks is not None
            else result.tokens // cost.page_tokens
        )
        return Capacity(result.tokens, pages, pool_bytes, result.derivation)

"""The escape hatch: an engine fakplan does not model, with its contract typed in.

Each component is stated once, at one dtype (or as dtype-independent); the rate
at any other dtype is derived here, never typed in twice. That is the classic
trap: an index key that does not double with the cache makes bf16 1.89x fp8.
"""

from __future__ import annotations

import shlex
from fractions import Fraction
from typing import TYPE_CHECKING

from fakplan.contract import Capacity, CostComponent, KvCost, exact_number, paged_capacity
from fakplan.dtypes import element_type, known_dtype
from fakplan.engines.base import Engine
from fakplan.engines.choices import suggest
from fakplan.engines.custom.server import SERVER
from fakplan.launch import LaunchRecord
from fakplan.units import MIB, format_bytes

if TYPE_CHECKING:
    from fakplan.engines.setup import Component, Setup
    from fakplan.figures import Figures


def _stated_page(part: Component, page_tokens: int) -> tuple[Fraction, str]:
    """A component's page as the contract states it, and those words."""
    if part.per_page is not None:
        return Fraction(
            part.per_page
        ), f"{format_bytes(part.per_page)} per {page_tokens}-token page"
    assert part.per_token is not None
    return (
        Fraction(part.per_token * page_tokens),
        f"{format_bytes(part.per_token)}/token x {page_tokens} tokens per page",
    )


def _component(setup: Setup, index: int) -> CostComponent:
    """Component ``index`` at the shape's dtype: scaled by the element size where it was
    stated at one dtype, the same at every dtype where it was not; whole bytes a page."""
    contract = setup.contract
    assert contract is not None
    part, dtype = contract.per_token[index], setup.serving.kv_dtype
    loc = ("contract", "per_token", index)
    page, how = _stated_page(part, contract.page_tokens)
    if part.dtype is None:
        how += " at every dtype"
    else:
        for name, where in ((part.dtype, (*loc, "dtype")), (dtype, ("serving", "kv_cache_dtype"))):
            if not known_dtype(name):
                raise setup.error(f"unknown KV dtype {name!r}", *where)
        ratio = element_type(dtype).bytes_per_element / element_type(part.dtype).bytes_per_element
        page *= ratio
        how += f" at {part.dtype}" + (
            f" x {ratio} ({dtype}/{part.dtype} element size)" if ratio != 1 else ""
        )
    if page.denominator != 1:
        raise setup.error(
            f"{part.name} at {dtype} comes to {float(page):.3f} B per page, not whole bytes; "
            "state it per page at a dtype where it is exact",
            *loc,
        )
    return CostComponent(
        name=part.name,
        kind="contract",
        page_bytes=int(page),
        per_seq_bytes=0,
        scales_with_dtype=part.dtype is not None,
        derivation=(
            f"{how} = {int(page):,} B per page = "
            f"{exact_number(page / contract.page_tokens):,} B/token"
        ),
    )


class CustomEngine(Engine):
    name = "custom"
    needs_contract = True
    server = SERVER

    def check(self, setup: Setup) -> None:
        """The KV dtype is one the contract says the engine takes (contract.dtypes)."""
        contract = setup.contract
        dtype = setup.serving.kv_dtype
        accepted = tuple(contract.dtypes) if contract and contract.dtypes else None
        if accepted is not None and dtype not in accepted:
            meant = suggest(dtype, accepted)
            hint = f" (did you mean {' or '.join(repr(m) for m in meant)}?)" if meant else ""
            raise setup.error(
                f"{dtype!r} is not a KV dtype this engine takes{hint}: contract.dtypes "
                f"lists {', '.join(accepted)}",
                "serving",
                "kv_cache_dtype",
            )

    def version_used(self, setup: Setup) -> str | None:
        return setup.engine_version

    def kv_cost(self, setup: Setup) -> KvCost:
        contract = setup.contract
        assert contract is not None, "checked when the shape was loaded"
        components = [_component(setup, index) for index in range(len(contract.per_token))]
        if contract.per_seq:
            components.append(
                CostComponent(
                    name="per_seq",
                    kind="state",
                    page_bytes=0,
                    per_seq_bytes=contract.per_seq,
                    scales_with_dtype=False,
                    derivation=f"{contract.per_seq:,} B per sequence slot, stated in the contract",
                )
            )
        return KvCost(
            dtype=setup.serving.kv_dtype,
            page_tokens=contract.page_tokens,
            components=tuple(components),
            fixed_bytes=contract.fixed,
        )

    def capacity(self, setup: Setup, cost: KvCost, pool_bytes: int) -> Capacity:
        return paged_capacity(cost, pool_bytes, setup.serving.max_num_seqs)

    def launch(self, setup: Setup, figures: Figures) -> LaunchRecord:
        """The env pair such an engine takes (--vram-kv-mib / --vram-weights-mib) and its flags."""
        weights = _whole_mib(setup, setup.stated_budget.weights, "budget", "weights")
        kv = _whole_mib(setup, setup.stated_budget.kv, "budget", "kv")
        s = setup.serving
        args = [
            "--vram-kv-mib",
            str(kv),
            "--vram-weights-mib",
            str(weights),
            "--max-num-seqs",
            str(s.max_num_seqs),
            "--max-model-len",
            str(s.max_model_len),
            "--kv-cache-dtype",
            s.kv_dtype,
            *setup.launch.extra_args,
        ]
        env = {
            "MODEL": setup.model,
            "VRAM_WEIGHTS_MIB": str(weights),
            "VRAM_KV_MIB": str(kv),
            "MAX_NUM_SEQS": str(s.max_num_seqs),
            "MAX_MODEL_LEN": str(s.max_model_len),
            "KV_CACHE_DTYPE": s.kv_dtype,
        }
        if s.spec_tokens:
            env["SPEC_TOKENS"] = str(s.spec_tokens)
        env["ENGINE_ARGS"] = shlex.join(args)
        return LaunchRecord(binary=None, env=env, roles=())


def _whole_mib(setup: Setup, value: int, *loc: str) -> int:
    if value % MIB:
        raise setup.error(
            f"the custom engine's flags take whole MiB; {value:,} B is {value / MIB:.2f} MiB",
            *loc,
        )
    return value // MIB

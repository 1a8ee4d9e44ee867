"""llama.cpp's partial offload (-ngl): the weights and the cache the card holds, and
`fakplan fit`'s search over it (issue 29).

The rules (docs/engines.md §3.6a) are checked against a public boot's own buffer lines and
against counts written out by hand below; the GGUFs are headers alone (tinymodels
``write_gguf_header``): fakplan never reads tensor data.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as T
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fakplan.cli import main
from fakplan.engines.llamacpp.offload import offload
from fakplan.engines.llamacpp.rules import RELEASES
from fakplan.engines.releases import select
from fakplan.fit import FitPoint, Fitter, Layout
from fakplan.geometry import load_geometry
from fakplan.plan import compile_plan
from fakplan.shape import load_shape, load_shape_text
from tests.support.paths import ROOT
from tests.support.tinymodels import write_gguf_header

MIB = 1 << 20
OFFLOAD = ROOT / "tests" / "data" / "public" / "offload"


def _llama_table(
    layers: int, h: int, q: int, kv: int, ff: int, vocab: int, kind: T, *, tied: bool = False
) -> list[tuple[str, tuple[int, ...], T]]:
    """A llama-architecture tensor table: 2-D weights of ``kind``, norms in f32."""
    table = [("token_embd.weight", (vocab, h), kind), ("output_norm.weight", (h,), T.F32)]
    if not tied:
        table.append(("output.weight", (vocab, h), kind))
    for i in range(layers):
        p = f"blk.{i}."
        table += [
            (p + "attn_norm.weight", (h,), T.F32),
            (p + "attn_q.weight", (q, h), kind),
            (p + "attn_k.weight", (kv, h), kind),
            (p + "attn_v.weight", (kv, h), kind),
            (p + "attn_output.weight", (h, q), kind),
            (p + "ffn_norm.weight", (h,), T.F32),
            (p + "ffn_gate.weight", (ff, h), kind),
            (p + "ffn_up.weight", (ff, h), kind),
            (p + "ffn_down.weight", (h, ff), kind),
        ]
    return table


def _llama_meta(
    layers: int, h: int, heads: int, kv_heads: int, ff: int, ctx: int
) -> dict[str, int]:
    return {
        "context_length": ctx,
        "embedding_length": h,
        "block_count": layers,
        "feed_forward_length": ff,
        "attention.head_count": heads,
        "attention.head_count_kv": kv_heads,
        "attention.key_length": h // heads,
        "attention.value_length": h // heads,
    }


def _nemo(path: Path) -> Path:
    """Mistral-Nemo's tensor table in Q8_0, from its published config (hidden 5,120, 40
    layers, 32 heads of 128, 8 KV heads, intermediate 14,336, vocabulary 131,072, no tied
    head): what the public boot llamacpp-110 loaded (tests/data/public/corpus)."""
    meta = _llama_meta(40, 5120, 32, 8, 14336, 131072)
    meta["attention.key_length"] = meta["attention.value_length"] = 128  # not 5,120 / 32
    return write_gguf_header(path, meta, _llama_table(40, 5120, 4096, 1024, 14336, 131072, T.Q8_0))


def _plan(folder: Path, gguf: Path, **serving: Any) -> Any:
    launch = serving.pop("launch", {})
    data = {
        "name": "offload",
        "engine": "llamacpp",
        "engine_version": serving.pop("engine_version", "b7475"),
        "model": gguf.name,
        "card": {"total": serving.pop("card", "24 GiB")},
        "budget": serving.pop("budget", {"weights": "20 GiB", "kv": "4 GiB"}),
        "serving": {"max_num_seqs": 1, "max_model_len": 4096, **serving},
    }
    if launch:
        data["launch"] = launch
    loaded = load_shape_text(yaml.safe_dump(data), folder / "offload.yaml")
    return compile_plan(loaded)


def _gate(plan: Any, gate: str) -> Any:
    return next(g for g in plan.gates if g.id == gate)


# ------------------------------------------------------------- a public boot


def test_every_layer_offloaded_leaves_token_embd_in_ram_as_the_public_boot_printed(
    tmp_path: Path,
) -> None:
    """llamacpp-110 (b5359, Mistral-Nemo Q8_0, 41/41 layers, -c 22000 padded to 22,016)
    printed `ROCm0 model buffer size = 11731.58 MiB`, `CPU_Mapped model buffer size =
    680.00 MiB` and `ROCm0 KV buffer size = 3440.00 MiB`. The card holds every block and the
    output layer; token_embd (131,072 x 5,120 in Q8_0: 34 B a block of 32) stays in RAM."""
    gguf = _nemo(tmp_path / "nemo-q8_0.gguf")
    plan = _plan(tmp_path, gguf, engine_version="b5359", max_model_len=22000,
                 budget={"weights": "11732 MiB", "kv": "3440 MiB"})  # fmt: skip
    on_gpu = _gate(plan, "weights-fit").numbers["weights_per_rank_bytes"]
    assert round(on_gpu / MIB, 2) == 11731.58
    token_embd = 131072 * 5120 // 32 * 34
    assert round(token_embd / MIB, 2) == 680.00
    assert f"in RAM: {token_embd:,} B" in _gate(plan, "weights-fit").detail
    assert plan.tokens_backed == 22016
    # 40 layers x 22,016 cells x 2 x 1,024 elements x 2 B = 3,440.00 MiB
    assert "take 3,607,101,440 B of budget.kv" in plan.derivations["tokens_backed"]


def _printed(log: str, pattern: str) -> float:
    """A MiB figure a public boot printed (tests/data/public/offload/SOURCES.md)."""
    text = (OFFLOAD / log).read_text()
    match = re.search(pattern + r"\s*=\s*([\d.]+) MiB", text)
    assert match, (log, pattern)
    return float(match[1])


def _pythia(path: Path, kind: T) -> Path:
    """EleutherAI/pythia-2.8b as llama.cpp's converter writes gptneox (published config:
    hidden 2,560, 32 layers of 32 heads, intermediate 10,240, vocabulary 50,304, an
    embed_out head of its own): 2-D weights in ``kind``, norms and biases in f32 (the CI's
    files: 258 f32 + 130 tensors of the file type)."""
    h, ff, vocab, layers = 2560, 10240, 50304, 32
    table: list[tuple[str, tuple[int, ...], T]] = [
        ("token_embd.weight", (vocab, h), kind),
        ("output_norm.weight", (h,), T.F32),
        ("output_norm.bias", (h,), T.F32),
        ("output.weight", (vocab, h), kind),
    ]
    for i in range(layers):
        p = f"blk.{i}."
        table += [
            (p + "attn_norm.weight", (h,), T.F32), (p + "attn_norm.bias", (h,), T.F32),
            (p + "attn_qkv.weight", (3 * h, h), kind), (p + "attn_qkv.bias", (3 * h,), T.F32),
            (p + "attn_output.weight", (h, h), kind), (p + "attn_output.bias", (h,), T.F32),
            (p + "ffn_norm.weight", (h,), T.F32), (p + "ffn_norm.bias", (h,), T.F32),
            (p + "ffn_up.weight", (ff, h), kind), (p + "ffn_up.bias", (ff,), T.F32),
            (p + "ffn_down.weight", (h, ff), kind), (p + "ffn_down.bias", (h,), T.F32),
        ]  # fmt: skip
    assert len(table) == 388
    meta = _llama_meta(layers, h, 32, 32, ff, 2048)
    return write_gguf_header(path, meta, table, arch="gptneox")


@pytest.mark.parametrize(
    ("log", "kind"), [("pythia-2.8b-f16-b4010.log", T.F16), ("pythia-2.8b-q8_0-b4010.log", T.Q8_0)]
)
def test_the_ci_boots_of_pythia_hold_the_rule_in_two_file_types(
    tmp_path: Path, log: str, kind: T
) -> None:
    """llama.cpp's own CI (b4010, -ngl 999) printed the CUDA0 and CPU_Mapped model buffers of
    Pythia-2.8B in F16 and Q8_0: everything but token_embd on the card."""
    gguf = _pythia(tmp_path / f"pythia-{kind.name.lower()}.gguf", kind)
    plan = _plan(tmp_path, gguf, engine_version="b4010", max_model_len=2048,
                 budget={"weights": "6 GiB", "kv": "640 MiB"})  # fmt: skip
    gate = _gate(plan, "weights-fit")
    assert round(gate.numbers["weights_per_rank_bytes"] / MIB, 2) == _printed(
        log, "CUDA0 model buffer size"
    )
    block, size = GGML_QUANT_SIZES[kind]
    token_embd = 50304 * 2560 // block * size
    assert round(token_embd / MIB, 2) == _printed(log, "CPU_Mapped model buffer size")
    assert f"in RAM: {token_embd:,} B" in gate.detail
    # 32 layers x 2,048 cells x 2 x 2,560 elements x 2 B (f16)
    assert plan.contract_bytes == int(_printed(log, "CUDA0 KV buffer size") * MIB)


def test_twenty_layers_of_mistral_7b_keep_twenty_layers_cache_on_the_card(tmp_path: Path) -> None:
    """A boot before b7475 at -ngl 20 (arXiv 2509.11947): layers 12-31 on CUDA0, so 20 of
    32 layers' cache there and 12 in RAM; 768 cells of f16 K and V of 8 heads of 128."""
    log = "mistral-7b-v0.1-q4_k_m-ngl20.log"
    data = {
        "name": "mistral",
        "engine": "llamacpp",
        "engine_version": "b6000",
        "model": "mistralai/Mistral-7B-Instruct-v0.3",  # v0.1's attention: the same geometry
        "card": {"total": "8 GiB"},
        "budget": {"weights": "4 GiB", "kv": "1 GiB"},
        "launch": {"gpu_layers": 20},
        "serving": {"max_num_seqs": 1, "max_model_len": 768},
    }
    plan = compile_plan(load_shape_text(yaml.safe_dump(data), tmp_path / "m.yaml"))
    assert plan.contract_bytes == int(_printed(log, "CUDA0 KV buffer size") * MIB)
    every = 32 * 768 * 2 * 1024 * 2
    assert every - plan.contract_bytes == int(_printed(log, "CPU KV buffer size") * MIB)


# ------------------------------------------------------------- by hand


H, HEADS, KV_HEADS, FF, VOCAB, LAYERS = 64, 4, 2, 128, 256, 4
HD = H // HEADS
BLOCK = 4 * (2 * H + H * H + 2 * KV_HEADS * HD * H + H * H + 3 * FF * H)  # f32, per block
HEAD = 4 * VOCAB * H  # output.weight (and token_embd) in f32
NORM = 4 * H  # output_norm


def _tiny(path: Path, *, tied: bool = False) -> Path:
    meta = _llama_meta(LAYERS, H, HEADS, KV_HEADS, FF, 4096)
    table = _llama_table(LAYERS, H, HEADS * HD, KV_HEADS * HD, FF, VOCAB, T.F32, tied=tied)
    return write_gguf_header(path, meta, table)


def _on_gpu(folder: Path, gguf: Path, ngl: int, build: str) -> int:
    plan = _plan(folder, gguf, engine_version=build, launch={"gpu_layers": ngl},
                 budget={"weights": "1 MiB", "kv": "1 MiB"})  # fmt: skip
    share = _gate(plan, "weights-fit").numbers["weights_per_rank_bytes"]
    assert isinstance(share, int)
    return share


def test_ngl_offloads_the_output_layer_first_from_b7475(tmp_path: Path) -> None:
    gguf = _tiny(tmp_path / "tiny.gguf")
    # b7475 (#18148): -ngl 1 is the output layer alone; 2 adds the last block; 5 (n + 1) is all
    assert _on_gpu(tmp_path, gguf, 0, "b7475") == 0
    assert _on_gpu(tmp_path, gguf, 1, "b7475") == NORM + HEAD
    assert _on_gpu(tmp_path, gguf, 2, "b7475") == NORM + HEAD + BLOCK
    assert _on_gpu(tmp_path, gguf, 4, "b7475") == NORM + HEAD + 3 * BLOCK
    assert _on_gpu(tmp_path, gguf, 5, "b7475") == NORM + HEAD + 4 * BLOCK
    assert _on_gpu(tmp_path, gguf, 999, "b7475") == NORM + HEAD + 4 * BLOCK
    # before: the last N blocks, the output layer only past them
    assert _on_gpu(tmp_path, gguf, 1, "b7474") == BLOCK
    assert _on_gpu(tmp_path, gguf, 4, "b7474") == 4 * BLOCK
    assert _on_gpu(tmp_path, gguf, 5, "b7474") == NORM + HEAD + 4 * BLOCK


def test_a_tied_head_is_token_embd_loaded_again_on_the_card(tmp_path: Path) -> None:
    gguf = _tiny(tmp_path / "tied.gguf", tied=True)
    assert _on_gpu(tmp_path, gguf, 1, "b7475") == NORM + HEAD  # token_embd again, as the head
    assert _on_gpu(tmp_path, gguf, 4, "b7474") == 4 * BLOCK  # the head stays in RAM


def test_the_card_holds_the_cache_of_its_own_layers(tmp_path: Path) -> None:
    """Each layer's K and V on its layer's device: at -ngl 2, b7475 offloads one block
    (one layer's cache), b7474 two. f16, 4,096 cells: 2 x 32 elements x 2 B a layer a cell."""
    gguf = _tiny(tmp_path / "tiny.gguf")
    per_layer_cell = 2 * KV_HEADS * HD * 2
    for build, layers in (("b7475", 1), ("b7474", 2), ("b7475", 4)):
        ngl = 2 if layers < 4 else 5
        plan = _plan(tmp_path, gguf, engine_version=build, launch={"gpu_layers": ngl},
                     budget={"weights": "1 MiB", "kv": "8 MiB"})  # fmt: skip
        assert plan.rate_bytes_per_token == layers * per_layer_cell, build
        assert plan.contract_bytes == 4096 * layers * per_layer_cell


def test_the_rules_change_at_b7475() -> None:
    new, _ = select("llamacpp", RELEASES, "7475", build=True)
    old, _ = select("llamacpp", RELEASES, "7474", build=True)
    assert new.output_first and not old.output_first
    assert offload(3, 10, new).first == 8 and offload(3, 10, new).output
    assert offload(3, 10, old).first == 7 and not offload(3, 10, old).output
    assert offload(None, 10, old).everything and offload(-1, 10, new).everything


def test_the_placement_is_read_from_the_header(tmp_path: Path) -> None:
    g = load_geometry(_tiny(tmp_path / "tiny.gguf"))
    assert g.placement is not None
    assert g.placement.block_bytes == (BLOCK,) * LAYERS
    assert g.placement.input_bytes == HEAD and g.placement.output_bytes == HEAD + NORM
    assert g.placement.tied_output_bytes == 0
    assert g.weight_bytes == 2 * HEAD + NORM + LAYERS * BLOCK


# ------------------------------------------------------------- fit


def test_fit_finds_the_most_layers_an_8_gib_card_holds(tmp_path: Path) -> None:
    """Nemo Q8_0 needs 11,732 MiB on the card: nothing fits every layer on 8 GiB. With one
    session at 4,096 tokens the card holds the output layer, k blocks and their cache, where
    k is the most with (weights rounded up to MiB) + k layers' cache <= 8,192 MiB."""
    gguf = _nemo(tmp_path / "nemo.gguf")
    out = tmp_path / "fitted"
    result = CliRunner().invoke(
        main,
        ["fit", str(gguf), "--engine", "llamacpp", "--engine-version", "b7475",
         "--card", "8 GiB", "--kv-dtype", "f16", "--json", "--emit", str(out)],
    )  # fmt: skip
    assert "Traceback" not in result.output, result.output
    document = json.loads(result.stdout)
    assert result.exit_code == 0  # an offload point fits
    (layout,) = document["layouts"]
    assert layout["frontier"] == []  # not every layer, at any window
    block = 2 * 5120 * 4 + (5120 * (2 * 4096 + 2 * 1024) + 3 * 5120 * 14336) // 32 * 34
    head = 131072 * 5120 // 32 * 34 + 5120 * 4
    layers_at: dict[int, int] = {}
    for window in (4096, 8192, 32768, 131072):
        point = next(p for p in layout["offload"] if p["max_model_len"] == window)
        cache_layer = window * 2 * 1024 * 2  # f16 K and V of 8 heads of 128 a cell

        def fits(k: int, cache_layer: int = cache_layer) -> bool:
            weights = -(-(head + k * block) // MIB) * MIB
            return weights + k * cache_layer <= 8 * 1024 * MIB

        k = max(k for k in range(41) if fits(k))
        layers_at[window] = 1 + k
        assert point["gpu_layers"] == 1 + k, window
        assert point["beyond"]["field"] == "launch.gpu_layers"
        assert point["beyond"]["value"] == 2 + k
        assert point["beyond"]["gate"] in ("pool-contract", "pair-ceiling")
    readme = (ROOT / "docs" / "fit.md").read_text()
    assert (
        f"{layers_at[8192]} layers at 8k, {layers_at[32768]} at\n  32k, "
        f"{layers_at[131072]} at 128k" in readme
    )
    # every emitted point gates clean as a file
    gated = CliRunner().invoke(main, ["gate", str(out)])
    assert gated.exit_code == 0, gated.output
    assert any(f"ngl{layers_at[4096]}-4096x1" in path for path in document["emitted"])


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    layers=st.integers(min_value=1, max_value=24),
    hidden=st.sampled_from([512, 1024, 2048]),
    vocab=st.sampled_from([32000, 128256]),
    kind=st.sampled_from([T.F32, T.F16, T.Q8_0]),
    tied=st.booleans(),
    share=st.integers(min_value=1, max_value=99),
    window=st.sampled_from([1024, 4096, 32768]),
    build=st.sampled_from(["b7474", "b7475"]),
)
def test_every_offload_point_gates_clean_and_one_more_layer_fails(
    tmp_path: Path, layers: int, hidden: int, vocab: int, kind: T, tied: bool, share: int,
    window: int, build: str,
) -> None:  # fmt: skip
    """Generated models (headers of up to 2 GB of tensors) on a card holding ``share`` % of
    their bytes: the most layers -ngl puts on it, written as a file, passes every gate;
    one layer more, written as a file, fails the gate the point names."""
    heads = hidden // 32
    gguf = tmp_path / "m.gguf"
    write_gguf_header(
        gguf,
        _llama_meta(layers, hidden, heads, heads, 2 * hidden, 131072),
        _llama_table(layers, hidden, hidden, hidden, 2 * hidden, vocab, kind, tied=tied),
    )
    total = load_geometry(gguf).weight_bytes
    assert total is not None
    card = max(1, total * share // 100 // MIB) * MIB
    data = {"name": "gen", "engine": "llamacpp", "engine_version": build, "model": gguf.name,
            "card": {"total": f"{card} B"},
            "serving": {"max_num_seqs": 1, "max_model_len": 1024}}  # fmt: skip
    path = tmp_path / "fit.yaml"
    probe = dict(data, budget={"weights": "1 MiB", "kv": "1 MiB"})
    loaded = load_shape_text(yaml.safe_dump(probe), path)
    fitter = Fitter(data, path, loaded.lines, loaded.budget)
    found = fitter.most_layers(Layout("f16"), window, 1)
    event("every layer fits" if found is None else "partial offload")
    if found is None:  # then the sessions are the frontier: tight in slots
        _tight_in_sessions(fitter, window, tmp_path)
        return
    assert isinstance(found, FitPoint), found  # -ngl 0 holds nothing on the card: it fits
    point = tmp_path / "point.yaml"
    point.write_text(yaml.safe_dump(dict(found.outcome.data, name="point")))
    plan = compile_plan(load_shape(point))
    assert [g.id for g in plan.gates if g.status == "fail"] == []
    assert found.beyond.field == "launch.gpu_layers"
    more = fitter.outcome(Layout("f16", gpu_layers=found.beyond.value), window, 1)
    past = tmp_path / "past.yaml"
    past.write_text(yaml.safe_dump(dict(more.data, name="past")))
    failing = [g.id for g in compile_plan(load_shape(past)).gates if g.status == "fail"]
    assert found.beyond.gate in failing


def _tight_in_sessions(fitter: Fitter, window: int, folder: Path) -> None:
    found = fitter.most_sessions(Layout("f16"), window)
    assert isinstance(found, FitPoint), found
    point = folder / "sessions.yaml"
    point.write_text(yaml.safe_dump(dict(found.outcome.data, name="sessions")))
    assert [g.id for g in compile_plan(load_shape(point)).gates if g.status == "fail"] == []
    more = fitter.outcome(Layout("f16"), window, found.outcome.sessions + 1)
    past = folder / "more.yaml"
    past.write_text(yaml.safe_dump(dict(more.data, name="more")))
    failing = [g.id for g in compile_plan(load_shape(past)).gates if g.status == "fail"]
    assert found.beyond.gate in failing, (found.beyond, failing)


def test_a_shape_over_its_card_is_offered_layers_in_ram(tmp_path: Path) -> None:
    """Nemo Q8_0 (11,732 MiB on the card) on an 8 GiB card fails weights-fit: the proven
    fixes include leaving layers in RAM (-ngl), gated before they are offered."""
    _nemo(tmp_path / "nemo.gguf")
    shape = tmp_path / "nemo.yaml"
    shape.write_text(
        "name: nemo\nengine: llamacpp\nengine_version: b7475\nmodel: nemo.gguf\n"
        "card: {total: 8 GiB}\nbudget: {weights: 7 GiB, kv: 1 GiB}\n"
        "serving: {max_num_seqs: 1, max_model_len: 8192, kv_cache_dtype: f16}\n"
    )
    result = CliRunner().invoke(main, ["gate", str(shape), "--format", "json"])
    (entry,) = json.loads(result.stdout)["shapes"]
    failing = [g for g in entry["gates"] if g["status"] == "fail"]
    offloads = [f for f in failing[0]["fixes"] if f["gives_up"] == ["offload"]]
    assert offloads, failing[0]["fixes"]
    n = failing[0]["fixes"].index(offloads[0]) + 1
    applied = CliRunner().invoke(main, ["gate", str(shape), "--fix-apply", str(n)])
    assert applied.exit_code == 0, applied.output
    assert (
        yaml.safe_load(shape.read_text())["launch"]["gpu_layers"] == 25
    )  # 8,192 tokens: fit's row


def test_llamacpp_plans_one_card_and_fit_offers_no_tensor_parallelism(tmp_path: Path) -> None:
    """llama.cpp splits a model over cards by layers (-sm layer), which no per-rank share
    describes: a shape with TP 2 is refused at the field, and fit names no wider TP for a
    model that fits no card whole (its answer is the -ngl table)."""
    gguf = _nemo(tmp_path / "nemo.gguf")
    shape = tmp_path / "tp.yaml"
    shape.write_text(
        f"name: tp\nengine: llamacpp\nmodel: {gguf.name}\ncard: {{total: 24 GiB, count: 2}}\n"
        "parallel: {tensor: 2}\nbudget: {weights: 20 GiB, kv: 2 GiB}\n"
        "serving: {max_num_seqs: 1, max_model_len: 4096}\n"
    )
    refused = CliRunner().invoke(main, ["plan", str(shape)])
    assert refused.exit_code == 2
    assert "parallel.tensor" in refused.output and "-sm layer" in refused.output
    found = CliRunner().invoke(
        main,
        ["fit", str(gguf), "--engine", "llamacpp", "--card", "8 GiB", "--cards", "4",
         "--kv-dtype", "f16", "--json"],
    )  # fmt: skip
    document = json.loads(found.stdout)
    assert [lay["tensor"] for lay in document["layouts"]] == [1]
    assert document["wider"] == [] and document["layouts"][0]["offload"]

"""Hugging Face ids resolved by the real ``huggingface_hub``: against a Hub-compatible
server in the suite (``HF_ENDPOINT``), then offline from the cache the library laid out
itself; the Hub's faults each give one line and leave nothing written."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakplan.geometry import resolve
from tests.support.hubserver import Repo, safetensors_header, serve_hub
from tests.support.paths import DATA

LLAMA_CONFIG = (DATA / "hub" / "llama-3.1-8b-instruct.config.json").read_bytes()
BF16 = {"BF16": 2, "F32": 4, "F8_E4M3": 1}
COMMIT_A = "a" * 40
COMMIT_B = "b" * 40
TOKEN = "hf_fakplanTestToken0123456789abcdef"


def llama_tensors(config: dict[str, int]) -> dict[str, tuple[str, list[int]]]:
    """LlamaForCausalLM's state dict as transformers names and shapes it, in BF16."""
    h, inter, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    d = h // heads
    tensors = {"model.embed_tokens.weight": ("BF16", [vocab, h])}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        tensors |= {
            p + "input_layernorm.weight": ("BF16", [h]),
            p + "self_attn.q_proj.weight": ("BF16", [heads * d, h]),
            p + "self_attn.k_proj.weight": ("BF16", [kv * d, h]),
            p + "self_attn.v_proj.weight": ("BF16", [kv * d, h]),
            p + "self_attn.o_proj.weight": ("BF16", [h, heads * d]),
            p + "post_attention_layernorm.weight": ("BF16", [h]),
            p + "mlp.gate_proj.weight": ("BF16", [inter, h]),
            p + "mlp.up_proj.weight": ("BF16", [inter, h]),
            p + "mlp.down_proj.weight": ("BF16", [h, inter]),
        }
    tensors |= {"model.norm.weight": ("BF16", [h]), "lm_head.weight": ("BF16", [vocab, h])}
    return tensors


def sharded_llama(commit: str = COMMIT_A) -> Repo:
    """The Llama-3.1-8B-Instruct checkpoint's metadata: published config, an index naming
    four shards, and the shards' headers."""
    tensors = llama_tensors(json.loads(LLAMA_CONFIG))
    names = list(tensors)
    shards = [names[i::4] for i in range(4)]
    files = {"config.json": LLAMA_CONFIG, "generation_config.json": b'{"do_sample": true}'}
    weight_map = {}
    for n, part in enumerate(shards, start=1):
        shard = f"model-{n:05d}-of-00004.safetensors"
        files[shard] = safetensors_header({k: tensors[k] for k in part}, BF16)
        weight_map |= {k: shard for k in part}
    index = {"metadata": {"total_size": 16_060_522_496}, "weight_map": weight_map}
    files["model.safetensors.index.json"] = json.dumps(index).encode()
    return Repo(files=files, commit=commit)


def single_file(config: bytes, tensors: dict[str, tuple[str, list[int]]], **kw: object) -> Repo:
    return Repo(
        files={"config.json": config, "model.safetensors": safetensors_header(tensors, BF16)},
        **kw,  # type: ignore[arg-type]
    )


@pytest.fixture
def hub_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty Hugging Face cache, online; the resolver's per-process memo cleared."""
    cache = tmp_path / "hf-cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "2")
    resolve._resolve.cache_clear()
    yield cache
    resolve._resolve.cache_clear()


def write_shape(folder: Path, model: str, extra: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "hubshape.yaml"
    path.write_text(
        "name: hubshape\n"
        "engine: vllm\n"
        "engine_version: 0.19.0\n"
        f"model: {model}\n"
        f"{extra}"
        "card: {total: 80 GiB}\n"
        "budget: {weights: 20 GiB, kv: 10 GiB}\n"
        "serving: {max_num_seqs: 4, max_model_len: 8192}\n",
        encoding="utf-8",
    )
    return path


def fakplan(*args: str, env_url: str | None = None) -> subprocess.CompletedProcess[str]:
    """The installed command in a fresh process, as an operator runs it."""
    import os

    env = dict(os.environ)
    if env_url is not None:
        env["HF_ENDPOINT"] = env_url
    return subprocess.run(
        [sys.executable, "-m", "fakplan", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )


def test_an_id_resolves_online_then_offline_from_the_cache_the_library_laid_out(
    hub_env: Path, tmp_path: Path
) -> None:
    with serve_hub({"acme/llama-copy": sharded_llama()}) as hub:
        shape = write_shape(tmp_path / "shapes", "acme/llama-copy")
        online = fakplan("plan", str(shape), "--json", env_url=hub.url)
        assert online.returncode == 0, online.stderr
        plan = json.loads(online.stdout)
        # only metadata was asked for: the index's total_size counts the bytes, so no
        # shard is read at all
        asked = hub.repos["acme/llama-copy"].requests
        assert not [r for r in asked if "-of-00004.safetensors" in r]
    source = plan["model_source"]
    assert (source["kind"], source["repo"], source["revision"]) == (
        "hub",
        "acme/llama-copy",
        "main",
    )
    assert source["commit"] == COMMIT_A and source["loadable"] is True
    assert f"acme/llama-copy at 'main': commit {COMMIT_A}" in plan["derivations"]["model"]
    # the published index's total_size is the weights the plan counts
    weights = [p for p in plan["predictions"] if p["id"] == "weights-load"]
    assert not weights or weights[0]["expected"]["weights_per_rank_bytes"] == 16_060_522_496
    # the launch loads the commit the plan counted
    argv = plan["launch"]["roles"][0]["argv"]
    assert argv[argv.index("--revision") + 1] == COMMIT_A
    # laid out by huggingface_hub itself: refs/main names the commit, the snapshot holds
    # the metadata files and never a shard
    repo_dir = hub_env / "models--acme--llama-copy"
    assert (repo_dir / "refs" / "main").read_text() == COMMIT_A
    held = sorted(p.name for p in (repo_dir / "snapshots" / COMMIT_A).iterdir())
    assert held == ["config.json", "generation_config.json", "model.safetensors.index.json"]

    # the Hub gone: offline, the cache answers with the same commit and the same plan figures
    offline = fakplan("--offline", "plan", str(shape), "--json", env_url="http://127.0.0.1:9")
    assert offline.returncode == 0, offline.stderr
    again = json.loads(offline.stdout)
    # the record is the same online and offline: where the answer came from is printed
    assert again["model_source"] == source
    assert again["derivations"]["model"] == plan["derivations"]["model"]
    assert again["tokens_backed"] == plan["tokens_backed"]
    told = fakplan("--offline", "plan", str(shape), env_url="http://127.0.0.1:9").stdout
    assert f"commit {COMMIT_A} named by the cache" in " ".join(told.split())


def test_a_hub_that_ignores_the_range_sends_no_more_than_asked(hub_env: Path) -> None:
    """A server that answers a ranged GET with the whole file (200): fakplan reads the
    stream up to the bytes it asked for and closes it."""
    from fakplan.hub import HubFiles, HubSettings, read_head

    body = b"GGUF" + bytes(8 << 20)
    with serve_hub(
        {"acme/big": Repo(files={"m.gguf": body}, commit=COMMIT_A, ignore_range=True)}
    ) as hub:
        import os

        os.environ["HF_ENDPOINT"] = hub.url
        try:
            settings = HubSettings.from_environment()
        finally:
            del os.environ["HF_ENDPOINT"]
        listing = HubFiles("acme/big", "main", COMMIT_A, ("m.gguf",), "hub", None)
        head = read_head(listing, "m.gguf", 1024, settings)
    assert head == body[:1024]


def test_weights_are_counted_from_the_headers_read_by_ranged_requests(
    hub_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A single-file checkpoint with no index: the weights are the sum of the tensors'
    extents in its header, read by a ranged GET (no byte past the header is asked for)."""
    config = json.loads(LLAMA_CONFIG)
    config |= {
        "num_hidden_layers": 2,
        "vocab_size": 1024,
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
    }
    tensors = llama_tensors(config)
    # by hand: embed + head 2 x 1024 x 256, norm 256, per layer 2 x 256 norms +
    # q,o 2 x 256 x 256 + k,v 2 x 128 x 256 + mlp 3 x 512 x 256; 2 B each
    params = 2 * 1024 * 256 + 256 + 2 * (2 * 256 + 2 * 256 * 256 + 2 * 128 * 256 + 3 * 512 * 256)
    repo = single_file(json.dumps(config).encode(), tensors, commit=COMMIT_A)
    with serve_hub({"acme/small": repo}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        geometry, source = resolve.resolve_model("acme/small")
        ranged = [r for r in hub.repos["acme/small"].requests if "model.safetensors" in r]
    assert geometry.weight_bytes == params * 2
    assert geometry.weight_source is not None and "safetensors headers of 1 file" in (
        geometry.weight_source
    )
    assert source.snapshot is not None and source.snapshot.headers is not None
    assert ranged == [f"GET /acme/small/resolve/{COMMIT_A}/model.safetensors [bytes=0-99999]"]
    # offline, the cache has the config alone: the headers fakplan kept count the same
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    resolve._resolve.cache_clear()
    again, cached = resolve.resolve_model("acme/small")
    assert cached.snapshot is not None and cached.snapshot.origin == "cache"
    assert again.weight_bytes == params * 2


@pytest.mark.parametrize(
    ("repo", "expected"),
    [
        (Repo(files={}, gated=True), "gated repository"),
        (
            Repo(
                files={
                    "config.json": LLAMA_CONFIG,
                    "model.safetensors": b"\x10\x27\x00\x00\x00\x00\x00\x00{",
                }
            ),
            "safetensors header",
        ),
        (
            Repo(
                files={
                    "config.json": LLAMA_CONFIG,
                    "model.safetensors": (10**18).to_bytes(8, "little") + b"{}",
                }
            ),
            "safetensors header",
        ),
    ],
    ids=["gated", "truncated-header", "header-claims-1e18-bytes"],
)
def test_the_hubs_faults_give_one_line_and_nothing_written(
    hub_env: Path, tmp_path: Path, repo: Repo, expected: str
) -> None:
    with serve_hub({"acme/broken": repo}) as hub:
        shape = write_shape(tmp_path / "shapes", "acme/broken")
        out = tmp_path / "out"
        proc = fakplan("compile", str(shape), "-o", str(out), env_url=hub.url)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith(f"{shape}:4: model: ") and expected in lines[0]
    assert not out.exists()


def test_a_missing_repo_and_an_offline_miss_are_one_line_each(
    hub_env: Path, tmp_path: Path
) -> None:
    shape = write_shape(tmp_path / "shapes", "acme/nowhere")
    with serve_hub({}) as hub:
        online = fakplan("plan", str(shape), env_url=hub.url)
    offline = fakplan("--offline", "plan", str(shape))
    assert online.returncode == offline.returncode == 2
    assert "has no such model repository" in online.stderr
    assert "not in the Hugging Face cache" in offline.stderr and "offline" in offline.stderr
    for proc in (online, offline):
        assert len(proc.stderr.strip().splitlines()) == 1


def test_a_slow_hub_times_out_into_one_line(
    hub_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "1")  # whole seconds: the library reads it too
    slow = Repo(files={"config.json": LLAMA_CONFIG}, delay_s=4.0)
    shape = write_shape(tmp_path / "shapes", "acme/slow")
    with serve_hub({"acme/slow": slow}) as hub:
        proc = fakplan("plan", str(shape), env_url=hub.url)
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert "unreachable" in line and "Timeout" in line


def test_a_gated_repo_takes_the_token_from_the_environment_and_writes_it_nowhere(
    hub_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    repo = sharded_llama()
    repo.gated = True
    shape = write_shape(tmp_path / "shapes", "acme/gated")
    out = tmp_path / "out"
    with serve_hub({"acme/gated": repo}) as hub:
        proc = fakplan(
            "compile", str(shape), "-o", str(out), "--target", "kubernetes", env_url=hub.url
        )
    assert proc.returncode in (0, 1), proc.stderr
    assert json.loads((out / "hubshape" / "plan.json").read_text())["model_source"]["commit"]
    written = [p for p in out.rglob("*") if p.is_file()]
    assert written
    for path in written:
        assert TOKEN not in path.read_text(encoding="utf-8", errors="replace"), path
    assert TOKEN not in proc.stdout + proc.stderr
    # the pod takes it by Secret reference
    manifests = "\n".join(p.read_text() for p in (out / "hubshape" / "kubernetes").glob("*.yaml"))
    assert "secretKeyRef" in manifests and "HF_TOKEN" in manifests


def test_a_moved_branch_is_said_at_the_next_compile(hub_env: Path, tmp_path: Path) -> None:
    shape = write_shape(tmp_path / "shapes", "acme/moving")
    out = tmp_path / "out"
    with serve_hub({"acme/moving": sharded_llama(COMMIT_A)}) as hub:
        first = fakplan("compile", str(shape), "-o", str(out), env_url=hub.url)
        hub.repos["acme/moving"] = sharded_llama(COMMIT_B)
        second = fakplan("compile", str(shape), "-o", str(out), env_url=hub.url)
    assert "moved from commit" not in first.stdout
    assert f"moved from commit {COMMIT_A} to {COMMIT_B}" in second.stdout
    assert (
        json.loads((out / "hubshape" / "plan.json").read_text())["model_source"]["commit"]
        == COMMIT_B
    )


def test_a_revision_pins_the_commit(hub_env: Path, tmp_path: Path) -> None:
    shape = write_shape(tmp_path / "shapes", "acme/pinned", extra=f"revision: {COMMIT_A}\n")
    with serve_hub({"acme/pinned": sharded_llama(COMMIT_A)}) as hub:
        ok = fakplan("plan", str(shape), "--json", env_url=hub.url)
        bad = write_shape(tmp_path / "bad", "acme/pinned", extra="revision: v9\n")
        refused = fakplan("plan", str(bad), env_url=hub.url)
    assert json.loads(ok.stdout)["model_source"]["revision"] == COMMIT_A
    assert refused.returncode == 2 and "no revision 'v9'" in refused.stderr


def test_a_near_catalog_id_is_suggested(tmp_path: Path) -> None:
    shape = write_shape(tmp_path, "meta-llama/Meta-Llama-3.1-8B-Instruct")
    proc = fakplan("plan", str(shape))
    assert proc.returncode == 2
    assert "did you mean 'meta-llama/Llama-3.1-8B-Instruct'" in proc.stderr


def test_a_catalog_id_off_the_hub_falls_back_and_says_why(tmp_path: Path) -> None:
    shape = write_shape(tmp_path, "meta-llama/Llama-3.1-8B-Instruct")
    proc = fakplan("plan", str(shape), "--json")
    assert proc.returncode in (0, 1), proc.stderr
    source = json.loads(proc.stdout)["model_source"]
    assert source["kind"] == "catalog" and source["commit"] is None
    assert "neither the Hub nor the Hugging Face cache" in source["notes"][0]
    told = " ".join(fakplan("plan", str(shape)).stdout.split())
    assert "the catalog, as offline" in told


def test_a_folder_with_a_config_and_no_weights_is_said_unloadable(tmp_path: Path) -> None:
    folder = tmp_path / "shapes" / "models" / "llama"
    folder.mkdir(parents=True)
    (folder / "config.json").write_bytes(LLAMA_CONFIG)
    shape = write_shape(tmp_path / "shapes", "models/llama")
    out = tmp_path / "out"
    proc = fakplan("compile", str(shape), "-o", str(out))
    assert proc.returncode in (0, 1), proc.stderr
    assert "holds a config.json and no weights" in proc.stdout
    source = json.loads((out / "hubshape" / "plan.json").read_text())["model_source"]
    assert source["kind"] == "path" and source["loadable"] is False


def test_kv_resolves_an_id_from_the_hub(hub_env: Path) -> None:
    with serve_hub({"acme/llama-copy": sharded_llama()}) as hub:
        proc = fakplan("kv", "acme/llama-copy", "--json", env_url=hub.url)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    # 32 layers x 8 KV heads x (128 + 128) x 2 B, from the published config
    assert report["bytes_per_token"] == 32 * 8 * 256 * 2
    assert report["model_source"]["commit"] == COMMIT_A


# ------------------------------------------------ a GGUF by Hub id (llama.cpp's -hf)


def test_llama_cpps_pick_of_a_gguf_by_quant_tag() -> None:
    """common/download.cpp find_best_model (llama.cpp 3f545becc): the first model file
    whose name holds the tag then '.' or '-', any case; mmproj and imatrix files are not
    models; a split model is all its shards; no tag: Q4_K_M, then Q8_0, then the first."""
    from fakplan.hub import pick_gguf

    files = (
        "README.md",
        "mmproj-m-Q8_0.gguf",
        "m-Q4_K_M.gguf",
        "m-Q8_0.gguf",
        "big/m-Q6_K-00001-of-00002.gguf",
        "big/m-Q6_K-00002-of-00002.gguf",
    )
    assert pick_gguf(files, "q8_0") == ("m-Q8_0.gguf",)
    assert pick_gguf(files, "") == ("m-Q4_K_M.gguf",)
    assert pick_gguf(files, "Q6_K") == (
        "big/m-Q6_K-00001-of-00002.gguf",
        "big/m-Q6_K-00002-of-00002.gguf",
    )
    assert pick_gguf(files, "m-Q8_0.gguf") == ("m-Q8_0.gguf",)
    assert pick_gguf(files, "IQ2_XS") is None
    assert pick_gguf(("only-F16.gguf",), "") == ("only-F16.gguf",)


def _gguf_with_vocab(path: Path, tokens: int) -> bytes:
    """Mistral-Nemo's Q8_0 tensor table (tests/engines/llamacpp) with a vocabulary array of
    ``tokens`` strings: a header of megabytes, past a first ranged read of 1 MiB."""
    import gguf

    from tests.engines.llamacpp.test_llamacpp_offload import _llama_meta, _llama_table
    from tests.support.tinymodels import write_gguf_header

    meta = _llama_meta(40, 5120, 32, 8, 14336, 131072)
    meta["attention.key_length"] = meta["attention.value_length"] = 128
    table = _llama_table(40, 5120, 4096, 1024, 14336, 131072, gguf.GGMLQuantizationType.Q8_0)
    vocab = {"tokenizer.ggml.tokens": [f"token-{i:07d}" for i in range(tokens)]}
    return write_gguf_header(path, meta, table, strings=vocab).read_bytes()


def _llamacpp_plan(folder: Path, weights: str) -> Any:
    import yaml

    from fakplan.plan import compile_plan
    from fakplan.shape import load_shape_text

    data = {
        "name": "hubgguf",
        "engine": "llamacpp",
        "engine_version": "b7475",
        "model": "nemo.gguf",
        "card": {"total": "24 GiB"},
        "budget": {"weights": "20 GiB", "kv": "3 GiB"},
        "serving": {"max_num_seqs": 1, "max_model_len": 4096},
        "launch": {"weights": weights},
    }
    return compile_plan(load_shape_text(yaml.safe_dump(data), folder / "hubgguf.yaml"))


def test_a_gguf_by_hub_id_is_read_from_its_header_and_launched_with_hf(
    hub_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same GGUF, named by path and by Hub id, gives the same weights on the card; the
    Hub's copy is read by ranged GETs (1 MiB, then 4 MiB: its 3 MB vocabulary runs past
    the first), never whole; the launch fetches it with -hf."""
    from fakplan.geometry import resolve

    raw = _gguf_with_vocab(tmp_path / "nemo.gguf", 150_000)
    assert 1 << 20 < len(raw) < 4 << 20
    resolve._hub_gguf.cache_clear()
    local = _llamacpp_plan(tmp_path, "nemo.gguf")
    repo = Repo(
        files={
            "Nemo-Q8_0.gguf": raw,
            "mmproj-Nemo-Q8_0.gguf": b"GGUF",
            "README.md": b"# Nemo",
        },
        commit=COMMIT_A,
    )
    with serve_hub({"acme/Nemo-GGUF": repo}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        remote = _llamacpp_plan(tmp_path, "acme/Nemo-GGUF:q8_0")
        asked = list(hub.repos["acme/Nemo-GGUF"].requests)
    resolve._hub_gguf.cache_clear()

    def on_card(plan: Any) -> Any:
        return next(g for g in plan.gates if g.id == "weights-fit").numbers

    assert on_card(remote) == on_card(local)
    reads = [r for r in asked if "Nemo-Q8_0.gguf" in r]
    assert reads == [
        f"GET /acme/Nemo-GGUF/resolve/{COMMIT_A}/Nemo-Q8_0.gguf [bytes=0-{(1 << 20) - 1}]",
        f"GET /acme/Nemo-GGUF/resolve/{COMMIT_A}/Nemo-Q8_0.gguf [bytes=0-{(4 << 20) - 1}]",
    ]
    argv = remote.launch.roles[0].argv
    # b7475 would also fetch and load the repository's mmproj: the launch says not to
    assert argv[:4] == ("llama-server", "-hf", "acme/Nemo-GGUF:q8_0", "--no-mmproj")
    assert "acme/Nemo-GGUF:q8_0" not in remote.launch.shape_paths
    assert remote.weights_source == {
        "repo": "acme/Nemo-GGUF",
        "selector": "q8_0",
        "commit": COMMIT_A,
        "files": ["Nemo-Q8_0.gguf"],
    }
    assert local.weights_source is None


def test_a_gguf_by_hub_id_the_repo_lacks_is_one_line(
    hub_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fakplan.errors import ShapeError

    (tmp_path / "nemo.gguf").write_bytes(_gguf_with_vocab(tmp_path / "nemo.gguf", 10))
    repo = Repo(files={"Nemo-Q4_K_M.gguf": b"GGUF"}, commit=COMMIT_A)
    with serve_hub({"acme/Nemo-GGUF": repo}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        with pytest.raises(ShapeError) as caught:
            _llamacpp_plan(tmp_path, "acme/Nemo-GGUF:IQ2_XS")
    message = str(caught.value)
    assert "launch.weights" in message and "IQ2_XS" in message and "Nemo-Q4_K_M.gguf" in message
    assert "\n" not in message


def test_a_gguf_by_hub_id_may_be_the_model_itself(
    hub_env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``model: org/name:Q8_0`` for llama.cpp: its geometry, weights and launch from the
    GGUF's header on the Hub, as the same file named by path gives them."""
    import yaml

    from fakplan.geometry import resolve
    from fakplan.plan import compile_plan
    from fakplan.shape import load_shape_text

    raw = _gguf_with_vocab(tmp_path / "nemo.gguf", 1000)

    def plan_of(model: str) -> Any:
        data = {
            "name": "hubmodel",
            "engine": "llamacpp",
            "engine_version": "b7475",
            "model": model,
            "card": {"total": "24 GiB"},
            "budget": {"weights": "20 GiB", "kv": "3 GiB"},
            "serving": {"max_num_seqs": 1, "max_model_len": 4096},
        }
        return compile_plan(load_shape_text(yaml.safe_dump(data), tmp_path / "hubmodel.yaml"))

    local = plan_of("nemo.gguf")
    resolve._hub_gguf.cache_clear()
    repo = Repo(files={"Nemo-Q8_0.gguf": raw}, commit=COMMIT_A)
    with serve_hub({"acme/Nemo-GGUF": repo}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        remote = plan_of("acme/Nemo-GGUF:Q8_0")
        kv = fakplan("kv", "acme/Nemo-GGUF:Q8_0", "--engine", "llamacpp", "--json", env_url=hub.url)
    resolve._hub_gguf.cache_clear()
    assert remote.tokens_backed == local.tokens_backed
    assert remote.rate_bytes_per_token == local.rate_bytes_per_token

    def on_card(plan: Any) -> Any:
        return next(g for g in plan.gates if g.id == "weights-fit").numbers

    assert on_card(remote) == on_card(local)
    assert remote.model_source is not None and remote.model_source["commit"] == COMMIT_A
    assert remote.launch.roles[0].argv[1:3] == ("-hf", "acme/Nemo-GGUF:Q8_0")
    assert kv.returncode == 0, kv.stderr
    assert json.loads(kv.stdout)["bytes_per_token"] == local.rate_bytes_per_token

"""Geometry from a GGUF header: metadata and the tensor table, never tensor data.

``gguf.GGUFReader`` maps the whole file and builds a numpy view per tensor;
planning needs only the header, so this reads the header bytes once and walks
them with ``struct``. Type sizes come from the ``gguf`` package's own tables.
Split models (``*-00001-of-0000N.gguf``) are read shard by shard as one model.
"""

from __future__ import annotations

import mmap
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType, LlamaFileType

from fakplan.errors import GeometryError
from fakplan.files import open_regular
from fakplan.geometry.facts import check_gguf
from fakplan.geometry.model import (
    AttentionHeads,
    Geometry,
    LayerKind,
    LinearAttentionDims,
    MlaDims,
    TensorPlacement,
)

# A scalar value type's (struct format, size); strings and arrays are read apart.
_SCALARS: dict[int, tuple[str, int]] = {
    GGUFValueType.UINT8: ("B", 1),
    GGUFValueType.INT8: ("b", 1),
    GGUFValueType.UINT16: ("H", 2),
    GGUFValueType.INT16: ("h", 2),
    GGUFValueType.UINT32: ("I", 4),
    GGUFValueType.INT32: ("i", 4),
    GGUFValueType.FLOAT32: ("f", 4),
    GGUFValueType.BOOL: ("?", 1),
    GGUFValueType.UINT64: ("Q", 8),
    GGUFValueType.INT64: ("q", 8),
    GGUFValueType.FLOAT64: ("d", 8),
}
_U64 = struct.Struct("<Q")
_KEEP_ARRAY_MAX = 4096  # per-layer arrays are kept; token tables are skipped

_SHARD = re.compile(r"^(?P<prefix>.*)-(?P<shard>\d{5})-of-(?P<total>\d{5})\.gguf$")

# llama.cpp llama-model.cpp set_swa_pattern(n): layer il is SWA when il % n < n - 1.
_SWA_PATTERN = {"gemma2": 2, "gemma3": 6, "gpt-oss": 2, "cohere2": 4, "gemma3n": 5}
_DELTANET_ARCHES = {"qwen3next", "qwen35", "qwen35moe"}
# general.file_type: what most of the tensors are stored as (the dtype fakplan reports).
_FILE_TYPES: dict[int, str] = {
    LlamaFileType.ALL_F32: "fp32",
    LlamaFileType.MOSTLY_F16: "fp16",
    LlamaFileType.MOSTLY_Q8_0: "q8_0",
    LlamaFileType.MOSTLY_Q4_0: "q4_0",
    LlamaFileType.MOSTLY_Q4_1: "q4_1",
    LlamaFileType.MOSTLY_BF16: "bf16",
    LlamaFileType.MOSTLY_Q4_K_M: "q4_k_m",
    LlamaFileType.MOSTLY_Q5_K_M: "q5_k_m",
    LlamaFileType.MOSTLY_Q6_K: "q6_k",
}


# Where llama.cpp puts a tensor by its name (src/llama-arch.cpp LLM_TENSOR_INFOS, read at
# 0c1e57098): row-gather tables of the input layer, which load_tensors always keeps on the
# CPU ("there is very little benefit to offloading the input layer"); tensors whose op is
# GGML_OP_NONE, which the loader skips ("model has unused tensor"); repeating tensors named
# without a block (created for block 0, or duplicated into every block's buffer); the rest
# is the output layer.
_INPUT_TENSORS = frozenset({"token_embd", "position_embd", "token_types", "per_layer_token_embd"})
_UNUSED_TENSORS = frozenset({"masked_embd_centroids", "masked_embd_ordering"})
_FIRST_BLOCK_TENSORS = frozenset({"token_embd_norm"})  # created with block 0 (bert, bloom)
_EVERY_BLOCK_TENSORS = frozenset({"rope_freqs"})  # TENSOR_DUPLICATED into each block
_BLOCK = re.compile(r"^blk\.(\d{1,9})\.")


@dataclass
class TensorPlaces:
    """A GGUF's tensor bytes by the layer llama.cpp loads them into."""

    input_bytes: int = 0
    output_bytes: int = 0
    blocks: dict[int, int] = field(default_factory=dict)
    every_block_bytes: int = 0  # one copy in each buffer that holds a block
    unused_bytes: int = 0
    embd_bytes: int = 0  # token_embd.weight: the output head too where none is stored
    has_output: bool = False  # an output.weight of its own (not tied to token_embd)

    def add(self, name: str, size: int) -> None:
        block = _BLOCK.match(name)
        base = name.split(".", 1)[0]
        if block:
            index = int(block[1])
            self.blocks[index] = self.blocks.get(index, 0) + size
        elif base in _FIRST_BLOCK_TENSORS:
            self.blocks[0] = self.blocks.get(0, 0) + size
        elif base in _EVERY_BLOCK_TENSORS:
            self.every_block_bytes += size
        elif base in _INPUT_TENSORS:
            self.input_bytes += size
            if name == "token_embd.weight":
                self.embd_bytes = size
        elif base in _UNUSED_TENSORS:
            self.unused_bytes += size
        else:
            self.output_bytes += size
            self.has_output = self.has_output or name == "output.weight"


@dataclass
class GgufHeader:
    """What one GGUF (all shards) says about itself."""

    path: Path
    version: int
    metadata: dict[str, Any] = field(default_factory=dict)
    tensor_count: int = 0
    tensor_bytes: int = 0
    shards: int = 1
    places: TensorPlaces = field(default_factory=TensorPlaces)


class _Cursor:
    """A position in the header's bytes; reading past the end raises EOFError (truncated)."""

    def __init__(self, data: bytes | mmap.mmap, path: Path) -> None:
        self.data = data
        self.pos = 0
        self.path = path

    def take(self, fmt: str, size: int) -> Any:
        if self.pos + size > len(self.data):
            raise EOFError
        (value,) = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += size
        return value

    def string(self) -> str:
        length = self.take("Q", 8)
        if length > 1 << 24 or self.pos + length > len(self.data):
            raise EOFError
        raw = bytes(self.data[self.pos : self.pos + length])
        self.pos += length
        return raw.decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        length = self.take("Q", 8)
        self.pos += length
        if self.pos > len(self.data):
            raise EOFError

    def skip_strings(self, count: int) -> None:
        """Walk a string array (a 150k-token vocabulary) without decoding it."""
        data, pos, end = self.data, self.pos, len(self.data)
        unpack = _U64.unpack_from
        try:
            for _ in range(count):
                pos += 8 + unpack(data, pos)[0]
        except struct.error:
            raise EOFError from None
        if pos > end:
            raise EOFError
        self.pos = pos

    def value(self, kind: int) -> Any:
        """A metadata value of type ``kind``; long arrays (a vocabulary) are skipped as None."""
        if kind in _SCALARS:
            return self.take(*_SCALARS[kind])
        if kind == GGUFValueType.STRING:
            return self.string()
        if kind == GGUFValueType.ARRAY:
            item_kind = self.take("I", 4)
            count = self.take("Q", 8)
            if item_kind == GGUFValueType.STRING:
                self.skip_strings(count)
                return None
            if item_kind not in _SCALARS:
                raise ValueError(f"array of unknown value type {item_kind}")
            fmt, size = _SCALARS[item_kind]
            if self.pos + size * count > len(self.data):
                raise EOFError
            if count > _KEEP_ARRAY_MAX:
                self.pos += size * count
                return None
            values = list(struct.unpack_from(f"<{count}{fmt}", self.data, self.pos))
            self.pos += size * count
            return values
        raise ValueError(f"unknown value type {kind}")


def _read_one(path: Path, header: GgufHeader) -> None:
    """Map the file and walk its header in place: tensor data is never read."""
    fd, size = open_regular(path, GeometryError, "a GGUF")  # a FIFO or a device refused
    try:
        if size < 24:
            raise GeometryError(f"{path}: not a GGUF file ({size} bytes)")
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as data:
            cursor = _Cursor(data, path)
            try:
                _parse(cursor, header)
            except EOFError:
                raise GeometryError(
                    f"{path}: truncated GGUF: the file ends inside its header"
                ) from None
    except OSError as exc:
        raise GeometryError(f"{path}: cannot read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def _parse(cursor: _Cursor, header: GgufHeader) -> None:
    """One file's header into ``header``: its metadata (the first shard's wins) and the
    bytes its tensor table declares."""
    path = cursor.path
    magic = cursor.data[:4]
    if magic != b"GGUF":
        raise GeometryError(f"{path}: not a GGUF file (magic {magic!r}, expected b'GGUF')")
    cursor.pos = 4
    version = cursor.take("I", 4)
    if version not in (2, 3):
        raise GeometryError(
            f"{path}: GGUF version {version} is not supported (2 and 3 are; "
            "a big-endian file also reads as an absurd version)"
        )
    header.version = version
    tensors = cursor.take("Q", 8)
    kv_count = cursor.take("Q", 8)
    if tensors > 1 << 24 or kv_count > 1 << 20:
        raise GeometryError(f"{path}: corrupt GGUF header ({tensors} tensors, {kv_count} keys)")
    metadata: dict[str, Any] = {}
    try:
        for _ in range(kv_count):
            key = cursor.string()
            metadata[key] = cursor.value(cursor.take("I", 4))
        total = 0
        for _ in range(tensors):
            name = cursor.string()
            dims = cursor.take("I", 4)
            if dims > 8:
                raise ValueError(f"tensor with {dims} dimensions")
            elements = 1
            for _ in range(dims):
                elements *= cursor.take("Q", 8)
            kind = cursor.take("I", 4)
            cursor.take("Q", 8)  # offset into the data section
            try:
                block, size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
            except (ValueError, KeyError):
                raise ValueError(f"tensor of unknown ggml type {kind}") from None
            nbytes = elements // block * size
            total += nbytes
            header.places.add(name, nbytes)
    except ValueError as exc:
        raise GeometryError(f"{path}: corrupt GGUF header ({exc})") from None
    metadata.pop("split.no", None)
    for key, value in metadata.items():
        header.metadata.setdefault(key, value)
    header.tensor_count += tensors
    header.tensor_bytes += total


def shard_paths(path: Path) -> list[Path]:
    """Every shard of a split model (``*-00001-of-0000N.gguf``); a whole file is its own."""
    match = _SHARD.match(path.name)
    if not match:
        return [path]
    total = int(match["total"])
    return [
        path.with_name(f"{match['prefix']}-{i:05d}-of-{total:05d}.gguf")
        for i in range(1, total + 1)
    ]


def read_header(path: Path) -> GgufHeader:
    """The header of a GGUF, all its shards read as one model."""
    header = GgufHeader(path=path, version=0)
    shards = shard_paths(path)
    for shard in shards:
        if not shard.exists():
            raise GeometryError(f"{shard}: shard of a split GGUF is missing")
        _read_one(shard, header)
    header.shards = len(shards)
    return header


def _per_layer(value: Any, layers: int, name: str, path: Path) -> list[int]:
    """A per-layer figure, stated once for every layer or as a list of one per layer."""
    if isinstance(value, list):
        if len(value) != layers:
            raise GeometryError(f"{path}: {name} lists {len(value)} layers, expected {layers}")
        return [int(v) for v in value]
    return [int(value)] * layers


class _Keys:
    """The header's metadata under its architecture's prefix: a key the model needs and the
    header lacks is an error naming it."""

    def __init__(self, header: GgufHeader) -> None:
        arch = header.metadata.get("general.architecture")
        if not isinstance(arch, str):
            raise GeometryError(f"{header.path}: GGUF states no general.architecture")
        self.meta, self.arch, self.path = header.metadata, arch, header.path

    def get(self, name: str) -> Any:
        return self.meta.get(f"{self.arch}.{name}")

    def need(self, name: str) -> Any:
        value = self.get(name)
        if value is None:
            raise GeometryError(
                f"{self.path}: architecture {self.arch!r} needs {self.arch}.{name}, "
                "not in the header"
            )
        return value


def geometry_from_header(header: GgufHeader) -> Geometry:
    """A model's geometry from its header's metadata, by llama.cpp's keys and layer rules."""
    k = _Keys(header)
    blocks = int(k.need("block_count"))
    nextn = int(k.get("nextn_predict_layers") or 0)
    layers = blocks - nextn
    embd = int(k.need("embedding_length"))
    heads = _per_layer(k.need("attention.head_count"), blocks, "attention.head_count", k.path)
    kv_heads = _per_layer(
        k.get("attention.head_count_kv") or heads, blocks, "head_count_kv", k.path
    )
    head_count = max(heads)
    key_len = int(k.get("attention.key_length") or embd // head_count)
    value_len = int(k.get("attention.value_length") or key_len)
    kinds, parts = _layer_kinds(k, layers)
    parts.update(_attention(k, kinds, kv_heads, key_len, value_len))
    ftype = k.meta.get("general.file_type")
    scaling = k.get("rope.scaling.type")
    return Geometry(
        source=str(k.path),
        architecture=k.arch,
        num_layers=layers,
        layer_kinds=tuple(kinds),
        num_attention_heads=head_count,
        hidden_size=embd,
        context_length=int(k.need("context_length")),
        rope_scaling=str(scaling) if scaling and scaling != "none" else None,
        dtype=_FILE_TYPES.get(int(ftype), f"file_type {ftype}") if ftype is not None else "unknown",
        dtype_origin="gguf",
        dtype_source="GGUF general.file_type",
        num_experts=int(k.get("expert_count")) if k.get("expert_count") else None,
        experts_per_token=int(k.get("expert_used_count")) if k.get("expert_used_count") else None,
        num_nextn_layers=nextn,
        weight_bytes=header.tensor_bytes,
        weight_source=(
            f"GGUF tensor table ({header.tensor_count} tensors"
            f"{f' in {header.shards} shards' if header.shards > 1 else ''})"
        ),
        notes=(f"GGUF v{header.version}",),
        placement=_placement(header.places, blocks),
        **parts,
    )


def _placement(places: TensorPlaces, blocks: int) -> TensorPlacement:
    """The tensor bytes by layer for ``blocks`` blocks; a block the header numbers past
    them is never created (unused)."""
    stray = sum(size for index, size in places.blocks.items() if index >= blocks)
    return TensorPlacement(
        input_bytes=places.input_bytes,
        block_bytes=tuple(places.blocks.get(i, 0) for i in range(blocks)),
        output_bytes=places.output_bytes,
        every_block_bytes=places.every_block_bytes,
        tied_output_bytes=0 if places.has_output else places.embd_bytes,
        unused_bytes=places.unused_bytes + stray,
    )


def _layer_kinds(k: _Keys, layers: int) -> tuple[list[LayerKind], dict[str, Any]]:
    """Each layer's kind and the dims of the caches that are not plain attention: MLA's
    latent, Gated DeltaNet's state, or attention with llama.cpp's sliding-window rules."""
    if (
        k.get("attention.kv_lora_rank") is not None
        and k.get("attention.key_length_mla") is not None
    ):
        rope = int(k.need("rope.dimension_count"))
        mla = MlaDims(
            kv_lora_rank=int(k.need("attention.kv_lora_rank")),
            qk_rope_head_dim=rope,
            qk_nope_head_dim=int(k.need("attention.key_length_mla")) - rope,
            v_head_dim=int(k.need("attention.value_length_mla")),
        )
        return [LayerKind.MLA] * layers, {"mla": mla}
    if k.arch in _DELTANET_ARCHES:
        return _deltanet(k, layers)
    if k.get("ssm.state_size") is not None:
        raise GeometryError(
            f"{k.path}: architecture {k.arch!r} (Mamba-style state) is not modelled from GGUF yet"
        )
    return _windowed(k, layers)


def _deltanet(k: _Keys, layers: int) -> tuple[list[LayerKind], dict[str, Any]]:
    """Qwen3-Next style: every interval-th layer full attention, the rest Gated DeltaNet."""
    interval = int(k.need("full_attention_interval"))
    kinds = [LayerKind.FULL if (i + 1) % interval == 0 else LayerKind.LINEAR for i in range(layers)]
    v_heads = int(k.need("ssm.time_step_rank"))
    linear = LinearAttentionDims(
        num_k_heads=int(k.need("ssm.group_count")),
        num_v_heads=v_heads,
        head_k_dim=int(k.need("ssm.state_size")),
        head_v_dim=int(k.need("ssm.inner_size")) // v_heads,
        conv_kernel=int(k.need("ssm.conv_kernel")),
        ssm_dtype="fp32",  # llama.cpp keeps recurrent state in f32 (llama-memory-recurrent.cpp)
    )
    return kinds, {"linear": linear}


def _windowed(k: _Keys, layers: int) -> tuple[list[LayerKind], dict[str, Any]]:
    """Attention layers, sliding where the header flags them or llama.cpp's pattern for the
    architecture says so (set_swa_pattern), full otherwise."""
    window = k.get("attention.sliding_window")
    pattern = k.get("attention.sliding_window_pattern")
    if isinstance(pattern, list):
        # per-layer flags: true marks a sliding-window layer
        kinds = [LayerKind.SLIDING if p else LayerKind.FULL for p in pattern[:layers]]
    elif window and k.arch in _SWA_PATTERN:
        n = int(pattern or _SWA_PATTERN[k.arch])
        kinds = [LayerKind.SLIDING if i % n < n - 1 else LayerKind.FULL for i in range(layers)]
    else:
        kinds = [LayerKind.FULL] * layers
    if LayerKind.SLIDING in kinds:
        return kinds, {"sliding_window": int(window) if window else None}
    return kinds, {}


def _attention(
    k: _Keys, kinds: list[LayerKind], kv_heads: list[int], key_len: int, value_len: int
) -> dict[str, Any]:
    """The heads of the full and sliding attention layers, which must share one KV head
    count (per-layer counts are not modelled)."""
    attending = (LayerKind.FULL, LayerKind.SLIDING)
    distinct_kv = {kv_heads[i] for i, kind in enumerate(kinds) if kind in attending}
    if len(distinct_kv) > 1:
        raise GeometryError(
            f"{k.path}: per-layer KV head counts {sorted(distinct_kv)} are not modelled yet"
        )
    if LayerKind.FULL not in kinds and LayerKind.SLIDING not in kinds:
        return {}
    kv = distinct_kv.pop() if distinct_kv else kv_heads[0]
    parts: dict[str, Any] = {
        "attention": AttentionHeads(num_kv_heads=kv, head_dim=key_len, v_head_dim=value_len)
    }
    if LayerKind.SLIDING in kinds:
        swa_key = int(k.get("attention.key_length_swa") or key_len)
        parts["sliding"] = AttentionHeads(
            num_kv_heads=kv,
            head_dim=swa_key,
            v_head_dim=int(k.get("attention.value_length_swa") or swa_key),
        )
    return parts


class ShortHeader(Exception):
    """The bytes read of ``shard`` end inside its header: read more of it."""

    def __init__(self, shard: str) -> None:
        super().__init__(shard)
        self.shard = shard


def geometry_from_bytes(shards: list[tuple[str, bytes]]) -> Geometry:
    """A GGUF's geometry from the first bytes of each shard (read elsewhere: the Hub);
    ``ShortHeader`` names a shard whose bytes end inside its header."""
    header = GgufHeader(path=Path(shards[0][0]), version=0)
    for name, data in shards:
        try:
            if len(data) < 24:
                raise EOFError
            _parse(_Cursor(data, Path(name)), header)
        except EOFError:
            raise ShortHeader(name) from None
    header.shards = len(shards)
    check_gguf(header.metadata, shards[0][0])
    return geometry_from_header(header)


def read_gguf(path: Path) -> Geometry:
    """A GGUF file's geometry, from its header alone, its figures checked first."""
    header = read_header(path)
    check_gguf(header.metadata, str(path))
    return geometry_from_header(header)

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

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from fakplan.errors import GeometryError
from fakplan.geometry.model import (
    AttentionHeads,
    Geometry,
    LayerKind,
    LinearAttentionDims,
    MlaDims,
)

# GGUFValueType: (struct format, size) for scalars; 8 = string, 9 = array.
_SCALARS: dict[int, tuple[str, int]] = {
    0: ("B", 1),
    1: ("b", 1),
    2: ("H", 2),
    3: ("h", 2),
    4: ("I", 4),
    5: ("i", 4),
    6: ("f", 4),
    7: ("?", 1),
    10: ("Q", 8),
    11: ("q", 8),
    12: ("d", 8),
}
_STRING, _ARRAY = 8, 9
_U64 = struct.Struct("<Q")
_KEEP_ARRAY_MAX = 4096  # per-layer arrays are kept; token tables are skipped

_SHARD = re.compile(r"^(?P<prefix>.*)-(?P<shard>\d{5})-of-(?P<total>\d{5})\.gguf$")

# llama.cpp llama-model.cpp set_swa_pattern(n): layer il is SWA when il % n < n - 1.
_SWA_PATTERN = {"gemma2": 2, "gemma3": 6, "gpt-oss": 2, "cohere2": 4, "gemma3n": 5}
_DELTANET_ARCHES = {"qwen3next", "qwen35", "qwen35moe"}
_FILE_TYPES = {
    0: "fp32",
    1: "fp16",
    7: "q8_0",
    2: "q4_0",
    3: "q4_1",
    32: "bf16",
    15: "q4_k_m",
    17: "q5_k_m",
    18: "q6_k",
}


@dataclass
class GgufHeader:
    """What one GGUF (all shards) says about itself."""

    path: Path
    version: int
    metadata: dict[str, Any] = field(default_factory=dict)
    tensor_count: int = 0
    tensor_bytes: int = 0
    shards: int = 1


class _Cursor:
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
        if kind in _SCALARS:
            return self.take(*_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind == _ARRAY:
            item_kind = self.take("I", 4)
            count = self.take("Q", 8)
            if item_kind == _STRING:
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
    try:
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < 24:
                raise GeometryError(f"{path}: not a GGUF file ({size} bytes)")
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                cursor = _Cursor(data, path)
                try:
                    _parse(cursor, header)
                except EOFError:
                    raise GeometryError(
                        f"{path}: truncated GGUF: the file ends inside its header"
                    ) from None
    except OSError as exc:
        raise GeometryError(f"{path}: cannot read ({exc.strerror or exc})") from None


def _parse(cursor: _Cursor, header: GgufHeader) -> None:
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
            cursor.skip_string()
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
            total += elements // block * size
    except ValueError as exc:
        raise GeometryError(f"{path}: corrupt GGUF header ({exc})") from None
    metadata.pop("split.no", None)
    for key, value in metadata.items():
        header.metadata.setdefault(key, value)
    header.tensor_count += tensors
    header.tensor_bytes += total


def shard_paths(path: Path) -> list[Path]:
    match = _SHARD.match(path.name)
    if not match:
        return [path]
    total = int(match["total"])
    return [
        path.with_name(f"{match['prefix']}-{i:05d}-of-{total:05d}.gguf")
        for i in range(1, total + 1)
    ]


def read_header(path: Path) -> GgufHeader:
    header = GgufHeader(path=path, version=0)
    shards = shard_paths(path)
    for shard in shards:
        if not shard.exists():
            raise GeometryError(f"{shard}: shard of a split GGUF is missing")
        _read_one(shard, header)
    header.shards = len(shards)
    return header


def _per_layer(value: Any, layers: int, name: str, path: Path) -> list[int]:
    if isinstance(value, list):
        if len(value) != layers:
            raise GeometryError(f"{path}: {name} lists {len(value)} layers, expected {layers}")
        return [int(v) for v in value]
    return [int(value)] * layers


def geometry_from_header(header: GgufHeader) -> Geometry:
    meta, path = header.metadata, header.path
    arch = meta.get("general.architecture")
    if not isinstance(arch, str):
        raise GeometryError(f"{path}: GGUF states no general.architecture")

    def key(name: str) -> Any:
        return meta.get(f"{arch}.{name}")

    def need(name: str) -> Any:
        value = key(name)
        if value is None:
            raise GeometryError(
                f"{path}: architecture {arch!r} needs {arch}.{name}, not in the header"
            )
        return value

    blocks = int(need("block_count"))
    nextn = int(key("nextn_predict_layers") or 0)
    layers = blocks - nextn
    embd = int(need("embedding_length"))
    heads = _per_layer(need("attention.head_count"), blocks, "attention.head_count", path)
    kv_heads = _per_layer(key("attention.head_count_kv") or heads, blocks, "head_count_kv", path)
    head_count = max(heads)
    key_len = int(key("attention.key_length") or embd // head_count)
    value_len = int(key("attention.value_length") or key_len)
    parts: dict[str, Any] = {}
    kinds: list[LayerKind]
    if key("attention.kv_lora_rank") is not None and key("attention.key_length_mla") is not None:
        rope = int(need("rope.dimension_count"))
        parts["mla"] = MlaDims(
            kv_lora_rank=int(need("attention.kv_lora_rank")),
            qk_rope_head_dim=rope,
            qk_nope_head_dim=int(need("attention.key_length_mla")) - rope,
            v_head_dim=int(need("attention.value_length_mla")),
        )
        kinds = [LayerKind.MLA] * layers
    elif arch in _DELTANET_ARCHES:
        interval = int(need("full_attention_interval"))
        kinds = [
            LayerKind.FULL if (i + 1) % interval == 0 else LayerKind.LINEAR for i in range(layers)
        ]
        v_heads = int(need("ssm.time_step_rank"))
        parts["linear"] = LinearAttentionDims(
            num_k_heads=int(need("ssm.group_count")),
            num_v_heads=v_heads,
            head_k_dim=int(need("ssm.state_size")),
            head_v_dim=int(need("ssm.inner_size")) // v_heads,
            conv_kernel=int(need("ssm.conv_kernel")),
            ssm_dtype="fp32",  # llama.cpp keeps recurrent state in f32 (llama-memory-recurrent.cpp)
        )
    elif key("ssm.state_size") is not None:
        raise GeometryError(
            f"{path}: architecture {arch!r} (Mamba-style state) is not modelled from GGUF yet"
        )
    else:
        window = key("attention.sliding_window")
        pattern = key("attention.sliding_window_pattern")
        if isinstance(pattern, list):
            # per-layer flags: true marks a sliding-window layer
            kinds = [LayerKind.SLIDING if p else LayerKind.FULL for p in pattern[:layers]]
        elif window and arch in _SWA_PATTERN:
            n = int(pattern or _SWA_PATTERN[arch])
            kinds = [LayerKind.SLIDING if i % n < n - 1 else LayerKind.FULL for i in range(layers)]
        else:
            kinds = [LayerKind.FULL] * layers
        if LayerKind.SLIDING in kinds:
            parts["sliding_window"] = int(window) if window else None
    distinct_kv = {
        kv_heads[i] for i, k in enumerate(kinds) if k in (LayerKind.FULL, LayerKind.SLIDING)
    }
    if len(distinct_kv) > 1:
        raise GeometryError(
            f"{path}: per-layer KV head counts {sorted(distinct_kv)} are not modelled yet"
        )
    if LayerKind.FULL in kinds or LayerKind.SLIDING in kinds:
        kv = distinct_kv.pop() if distinct_kv else kv_heads[0]
        attention = AttentionHeads(num_kv_heads=kv, head_dim=key_len, v_head_dim=value_len)
        parts["attention"] = attention
        if LayerKind.SLIDING in kinds:
            swa_key = int(key("attention.key_length_swa") or key_len)
            parts["sliding"] = AttentionHeads(
                num_kv_heads=kv,
                head_dim=swa_key,
                v_head_dim=int(key("attention.value_length_swa") or swa_key),
            )
    ftype = meta.get("general.file_type")
    scaling = key("rope.scaling.type")
    return Geometry(
        source=str(path),
        architecture=arch,
        num_layers=layers,
        layer_kinds=tuple(kinds),
        num_attention_heads=head_count,
        hidden_size=embd,
        context_length=int(need("context_length")),
        rope_scaling=str(scaling) if scaling and scaling != "none" else None,
        dtype=_FILE_TYPES.get(int(ftype), f"file_type {ftype}") if ftype is not None else "unknown",
        num_experts=int(key("expert_count")) if key("expert_count") else None,
        experts_per_token=int(key("expert_used_count")) if key("expert_used_count") else None,
        num_nextn_layers=nextn,
        weight_bytes=header.tensor_bytes,
        weight_source=(
            f"GGUF tensor table ({header.tensor_count} tensors"
            f"{f' in {header.shards} shards' if header.shards > 1 else ''})"
        ),
        notes=(f"GGUF v{header.version}",),
        **parts,
    )


def read_gguf(path: Path) -> Geometry:
    if not path.exists():
        raise GeometryError(f"{path}: no such file")
    return geometry_from_header(read_header(path))

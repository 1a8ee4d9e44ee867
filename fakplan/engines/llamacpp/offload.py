"""What ``-ngl`` puts on the GPU: the blocks, the output layer, their weights and cache.

llama.cpp assigns each layer to a device (src/llama-model.cpp ``load_tensors``, read at
0c1e57098 and at 74d73dc): the input layer (token_embd and the other row-gather tables)
always to the CPU; of the ``block_count`` blocks and the output layer, ``-ngl N`` offloads
the output layer first and then the last N - 1 blocks from b7475 (57c1e0564, #18148), and
before it the last N blocks, the output layer only once N > block_count. Each layer's K/V
cache lives on its layer's device (src/llama-kv-cache.cpp: ``model.dev_layer(il)`` while
``offload_kqv``, on by default). A tied output head (no output.weight) is token_embd
loaded a second time into the output layer's buffer (TENSOR_DUPLICATED).
"""

from __future__ import annotations

from dataclasses import dataclass

from fakplan.engines.llamacpp.rules import LlamacppRules
from fakplan.geometry.model import TensorPlacement


@dataclass(frozen=True)
class Offload:
    """Which layers ``-ngl`` puts on the GPU: blocks ``first .. blocks - 1``, and the
    output layer or not."""

    gpu_layers: int | None  # as stated; None: every layer
    blocks: int  # block_count (MTP/nextn blocks included)
    first: int  # the first block on the GPU (== blocks: none)
    output: bool
    release: LlamacppRules

    @property
    def on_gpu(self) -> int:
        return self.blocks - self.first

    @property
    def everything(self) -> bool:
        return self.first == 0 and self.output

    def block_on_gpu(self, index: int) -> bool:
        return index >= self.first

    def describe(self) -> str:
        ngl = "all" if self.gpu_layers is None else str(self.gpu_layers)
        order = (
            f"output layer first, then the last blocks (from b7475, #18148; rules {self.release.rule})"
            if self.release.output_first
            else f"the last blocks, the output layer past them (before b7475; rules {self.release.rule})"
        )
        head = "and the output layer" if self.output else "not the output layer"
        return f"-ngl {ngl}: {self.on_gpu} of {self.blocks} blocks on the GPU {head} ({order})"


def offload(gpu_layers: int | None, blocks: int, release: LlamacppRules) -> Offload:
    """The layers -ngl ``gpu_layers`` offloads (None or negative: every one; llama.cpp's
    n_gpu_layers() reads a negative count as block_count + 1)."""
    n = blocks
    ngl = n + 1 if gpu_layers is None or gpu_layers < 0 else gpu_layers
    active = min(ngl, n + 1)  # act_gpu_layers
    start = max(n + 1 - ngl, 0) if release.output_first else max(n - ngl, 0)
    # layer il is on the GPU when il >= start and il - start < active (get_layer_buft_list)
    first = n if active == 0 else start
    output = active > 0 and n - start < active
    return Offload(
        gpu_layers if gpu_layers is None or gpu_layers >= 0 else None, n, first, output, release
    )


def gpu_weights(placement: TensorPlacement, where: Offload) -> tuple[int, str]:
    """The weight bytes on the GPU, and their derivation."""
    blocks = sum(placement.block_bytes[where.first :])
    parts = [f"{where.on_gpu} blocks {blocks:,} B"]
    total = blocks
    if where.on_gpu and placement.every_block_bytes:
        total += placement.every_block_bytes
        parts.append(f"rope_freqs {placement.every_block_bytes:,} B")
    if where.output:
        total += placement.output_bytes
        parts.append(f"output layer {placement.output_bytes:,} B")
        if placement.tied_output_bytes:
            total += placement.tied_output_bytes
            parts.append(
                f"token_embd again as the tied output head {placement.tied_output_bytes:,} B"
            )
    host = sum(placement.block_bytes[: where.first]) + placement.input_bytes
    if not where.output:
        host += placement.output_bytes
    stays = f"; in RAM: {host:,} B (the input layer's {placement.input_bytes:,} B always)"
    return total, f"{where.describe()}: " + " + ".join(parts) + f" = {total:,} B{stays}"

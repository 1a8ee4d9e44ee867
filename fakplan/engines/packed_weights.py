"""Weight-only integer checkpoints (GPTQ, AWQ, compressed-tensors W4A16/W8A16) as vLLM holds them.

vLLM 0.19.0 loads such a linear layer into the first mixed-precision kernel that can take
it (model_executor/kernels/linear/__init__.py ``_POSSIBLE_KERNELS``, CUDA: CutlassW4A8,
Machete, AllSpark, Marlin, ...), and each kernel keeps its own set of tensors after the load
(``process_weights_after_loading``), so the bytes a rank holds depend on the card:

- **Machete** (compute capability 9.0 only; group -1, 64 or 128; input a multiple of 64,
  output of 128; not with act order on a row-parallel layer split over TP; machete.py,
  machete_utils.py): the packed weight re-laid in place of the old (same bytes), the scales
  copied contiguous (same bytes). Nothing is dropped: a GPTQ layer keeps its ``qzeros`` and
  ``g_idx`` (gptq_marlin.py creates both; symmetric, so Machete never reads the zeros), and
  act order keeps the int32 permutation of the input (``act_perm``).
- **Marlin** (capability 7.5 on; output a multiple of 64, input of 128; marlin.py,
  marlin_utils.py): the weight repacked and the scales permuted (same bytes); the zero
  points and, without act order, ``g_idx`` replaced by empty tensors; with act order the
  sorted ``g_idx`` and its int32 sort indices; an int32 workspace of one word per SM
  (``marlin_make_workspace_new``) per layer.
- AllSpark (8-bit, one scale per channel, capability 8.x) and the rest: not read.
- A GPTQ or AWQ mixture of experts' fused experts go to **Marlin's MoE kernel** on every
  card (GPTQMarlinMoEMethod, AWQMarlinMoEMethod): the weights repacked and the scales
  permuted at the same size, the zero points kept, act order's sorted g_idx and sort
  indices per expert, a workspace of 4 int32 words per SM a layer.

An AWQ checkpoint (awq_marlin.py) has zero points: its int32 ``qweight`` and ``qzeros`` are
re-packed GPTQ-like at the same size (``_convert_awq_to_standard_format``); Machete then
keeps the zero points pre-multiplied by the scales, one per output per group in the scales'
dtype (``transform_w_zp``), Marlin keeps them packed (``marlin_zero_points``).

Created tensors (gptq_marlin.py ``GPTQMarlinLinearMethod.create_weights``; schemes/
compressed_tensors_wNa16.py): the weight in ``bits`` per element packed into int32, the
scales in the model dtype, one row per group of the input (all of the input where act
order or one scale per channel repeats them on every rank: ``marlin_repeat_scales_on_all_
ranks``), GPTQ's int32 ``qzeros`` (bits per output per group row) and ``g_idx`` (one int32
per input), compressed-tensors' int64 ``weight_shape`` pair and, with act order by group,
its ``weight_g_idx``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MACHETE_GROUPS = (-1, 64, 128)  # query_machete_supported_group_sizes (16-bit activations)
MARLIN_GROUPS = (-1, 32, 64, 128)  # MARLIN_SUPPORTED_GROUP_SIZES
INT32 = 4


def capability_number(capability: str) -> int:
    """ "9.0" -> 90, as vLLM's DeviceCapability.to_int does."""
    major, _, minor = capability.partition(".")
    return int(major) * 10 + int(minor or 0)


@dataclass(frozen=True)
class PackedStorage:
    """How one rank holds a weight-only integer checkpoint's linear layers on a card of
    ``capability``; ``layout``: ``gptq``, ``awq`` or ``compressed-tensors``; ``group``: -1 for one
    scale per output channel; ``sms``: the card's SMs, for Marlin's workspaces (None: not
    counted, 4 B an SM a layer)."""

    bits: int
    group: int
    act_order: bool
    layout: str
    capability: str
    tp: int = 1
    sms: int | None = None

    @property
    def text(self) -> str:
        group = "per channel" if self.group == -1 else f"groups of {self.group}"
        order = ", act order" if self.act_order else ""
        return f"{self.layout} int{self.bits}, {group}{order}"

    def kernel(self, rows: int, columns: int, split_input: bool, experts: int = 1) -> str | None:
        """The kernel vLLM picks for a layer of ``rows`` outputs and ``columns`` inputs on
        the rank (a fused MoE's ``experts`` stacked), or None where it is one fakplan does
        not read."""
        cap = capability_number(self.capability)
        if experts > 1:
            return self._moe_kernel(rows // experts, columns, split_input, cap)
        partitioned = split_input and self.tp > 1
        if self.layout == "awq" and not self._marlin_fits(rows, columns, split_input):
            return None  # AWQMarlinConfig.get_quant_method keeps such a layer on AWQ's kernel
        if (
            cap == 90
            and self.group in MACHETE_GROUPS
            and not (self.act_order and partitioned)
            and columns % 64 == 0
            and rows % 128 == 0
        ):
            return "Machete"
        if 80 <= cap < 90 and self.group == -1 and self.bits == 8 and not self.act_order:
            return None  # AllSpark takes 8-bit per-channel layers on Ampere and Ada
        if cap >= 75 and self._marlin_fits(rows, columns, split_input):
            return "Marlin"
        return None

    def _marlin_fits(self, rows: int, columns: int, split_input: bool) -> bool:
        """verify_marlin_supports_shape (marlin_utils.py): outputs a multiple of 64, inputs
        of 128, and of the group where the group is narrower than the whole input."""
        full = columns * self.tp if split_input else columns
        fits = self.group == -1 or self.group >= full or columns % self.group == 0
        return rows % 64 == 0 and columns % 128 == 0 and fits

    def _moe_kernel(self, rows: int, columns: int, split_input: bool, cap: int) -> str | None:
        """GPTQ and AWQ experts go to Marlin's MoE kernel on every card that runs Marlin,
        where check_moe_marlin_supports_layer passes (hidden a multiple of 128, the rank's
        intermediate of 64 and of the group; marlin_utils.py); else MoeWNA16, not read."""
        if self.layout not in ("gptq", "awq") or cap < 75:
            return None
        hidden, share = (rows, columns) if split_input else (columns, rows // 2)
        fits = hidden % 128 == 0 and share % max(64, self.group) == 0
        return "Marlin MoE" if fits else None

    def scale_rows(self, columns: int, split_input: bool) -> int:
        """Scale (and zero-point) rows on the rank: one per group of the input, of all of
        it where act order (or one scale per channel on a split input) repeats them."""
        if self.group == -1:
            return 1
        full = columns * self.tp if split_input else columns
        return (full if self.act_order else columns) // self.group

    def allocations(
        self, elements: int, rows: int, split_input: bool, size: int, experts: int = 1
    ) -> list[int] | None:
        """One linear layer's tensors after the load, in bytes, in creation order; None
        where the kernel is not read."""
        columns = elements // rows
        kernel = self.kernel(rows, columns, split_input, experts)
        if kernel is None:
            return None
        weight = elements * self.bits // 8
        scales = self.scale_rows(columns, split_input) * rows * size
        zeros = self.scale_rows(columns, split_input) * rows * self.bits // 8
        index = columns * INT32
        if kernel == "Marlin MoE":
            # GPTQMarlinMoEMethod (gptq_marlin.py) and AWQMarlinMoEMethod (awq_marlin.py):
            # the qweight repacked, the scales permuted, the qzeros as loaded (GPTQ's a
            # float tensor of one element per 32 bits of zeros, in the model dtype; AWQ's
            # int32, re-packed at the same size); with act order each expert's sorted g_idx and its
            # sort indices, else empty ones; the layer's workspace, 4 int32 words per SM
            # (marlin_make_workspace_new(device, 4)), counted with w13
            if self.layout == "gptq":  # GPTQ's expert qzeros are created in the model dtype
                zeros = self.scale_rows(columns, split_input) * rows * self.bits // 32 * size
            order = [experts * index] * 2 if self.act_order else []
            space = [4 * self.sms * INT32] if self.sms is not None and not split_input else []
            return [weight, scales, zeros, *order, *space]
        out = [weight]
        if self.layout == "awq":
            out += [scales, scales if kernel == "Machete" else zeros]
        elif self.layout == "gptq":
            # g_idx: Machete keeps it; Marlin sorts it (act order) or empties it
            out += [index] if kernel == "Machete" or self.act_order else []
            out.append(scales)
            out += [zeros] if kernel == "Machete" else []
        else:
            out += [scales, 16]  # weight_scale, weight_shape (2 x int64)
            out += [index] if self.act_order else []
        if self.act_order:
            out.append(index)  # Machete's act_perm, Marlin's g_idx_sort_indices
        if kernel == "Marlin" and self.sms is not None:
            out.append(self.sms * INT32)  # the workspace
        return out


def packed_storage(
    scheme: dict[str, Any], capability: str | None, tp: int, sms: int | None
) -> PackedStorage | str:
    """A GPTQ quantization_config (quant_method gptq: bits, group_size, desc_act, sym) as
    vLLM 0.19.0 serves it (converted to gptq_marlin, GPTQMarlinConfig
    ``is_gptq_marlin_compatible``), or why it is not counted."""
    bits, group, sym = scheme.get("bits"), scheme.get("group_size"), scheme.get("sym")
    if sym is None:
        return "a GPTQ checkpoint without sym: vLLM keeps it on the GPTQ kernel, not read"
    if sym is not True:
        return "an asymmetric GPTQ checkpoint: vLLM keeps it on the GPTQ kernel, not read"
    if type(bits) is not int or type(group) is not int:
        return f"a GPTQ checkpoint whose bits ({bits!r}) or group_size ({group!r}) is not a number"
    if bits not in (4, 8) or group not in MARLIN_GROUPS:
        return f"a GPTQ checkpoint of {bits} bits in groups of {group}: not read"
    if scheme.get("lm_head") or scheme.get("dynamic") or scheme.get("modules_in_block_to_quantize"):
        return (
            "a GPTQ checkpoint that quantizes lm_head, sets per-module overrides (dynamic) or "
            "quantizes only some modules (modules_in_block_to_quantize): not read"
        )
    order = scheme.get("desc_act")
    if not isinstance(order, bool):
        return "a GPTQ checkpoint without desc_act: vLLM keeps it on the GPTQ kernel, not read"
    return _with_card(int(bits), int(group), order, "gptq", capability, tp, sms)


def awq_storage(
    scheme: dict[str, Any], capability: str | None, tp: int, sms: int | None
) -> PackedStorage | str:
    """An AWQ quantization_config (quant_method awq: bits, group_size, zero_point) as vLLM
    0.19.0 serves it (converted to awq_marlin, AWQMarlinConfig ``is_awq_marlin_compatible``:
    4 bits with zero points), or why it is not counted."""
    bits, group = scheme.get("bits"), scheme.get("group_size")
    if bits != 4 or scheme.get("zero_point") is not True:
        return (
            f"an AWQ checkpoint of {bits} bits, zero_point {scheme.get('zero_point')}: vLLM "
            "keeps it on the AWQ kernel, not read"
        )
    if group not in MARLIN_GROUPS or group == -1:
        return f"an AWQ checkpoint in groups of {group}: not read"
    if scheme.get("lm_head") or scheme.get("modules_to_not_convert"):
        return "an AWQ checkpoint that quantizes lm_head or leaves modules unquantized: not read"
    return _with_card(4, int(group), False, "awq", capability, tp, sms)


def wna16_storage(
    weights: dict[str, Any], capability: str | None, tp: int, sms: int | None
) -> PackedStorage | str:
    """compressed-tensors' weight-only int4/int8 scheme (``pack-quantized``, symmetric, by
    group or channel; CompressedTensorsWNA16), or why it is not counted."""
    bits, strategy = weights.get("num_bits"), weights.get("strategy")
    if weights.get("symmetric") is not True:
        return "an asymmetric weight-only compressed-tensors checkpoint: zero points not read"
    if bits not in (4, 8) or strategy not in ("group", "channel"):
        return f"a weight-only compressed-tensors checkpoint of {bits} bits by {strategy}"
    group = -1 if strategy == "channel" else weights.get("group_size")
    if not isinstance(group, int) or group not in MARLIN_GROUPS:
        return f"a weight-only compressed-tensors checkpoint in groups of {group}: not read"
    order = weights.get("actorder") == "group"
    return _with_card(int(bits), group, order, "compressed-tensors", capability, tp, sms)


def _with_card(
    bits: int,
    group: int,
    act_order: bool,
    layout: str,
    capability: str | None,
    tp: int,
    sms: int | None,
) -> PackedStorage | str:
    if capability is None:
        return (
            f"{article(layout)} {layout} int{bits} checkpoint: the kernel vLLM loads it into "
            "(Machete on compute capability 9.0, Marlin elsewhere) keeps different tensors; "
            "name the card (card.sku or card.capability; fakplan kv --card-capability or "
            "--card-sku)"
        )
    if capability_number(capability) < 75:
        return (
            f"{article(layout)} {layout} checkpoint on compute capability {capability}: "
            "below 7.5 vLLM keeps it on its own kernel, not read"
        )
    return PackedStorage(bits, group, act_order, layout, capability, tp, sms)


def article(word: str) -> str:
    """ "a" or "an" before ``word`` as it is spoken (an awq, a gptq)."""
    return "an" if word[:1].lower() in "aeiou" else "a"

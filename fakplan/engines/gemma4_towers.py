"""Gemma 4's vision and audio towers as vLLM builds them, from config.json alone.

vLLM 0.19.0's ``Gemma4ForConditionalGeneration`` (``models/gemma4_mm.py``) builds each
tower with ``AutoModel.from_config`` -- transformers' ``Gemma4VisionModel`` and
``Gemma4AudioModel`` -- and beside each a ``Gemma4MultimodalEmbedder`` of its own: one
``ReplicatedLinear`` from the tower's width (the audio tower's ``output_proj_dims``) to the
text model's ``hidden_size``, and a norm without weight. The towers come first, in that
order, before the language model. Nothing in them is split over TP: every rank holds
them whole, and no quantization config reaches them.

The towers' modules are read in transformers 5.5.0's ``models/gemma4/modeling_gemma4.py``
(the first release with Gemma 4); 5.25.0's create the same tensors and its config classes
the same defaults. ``_from_config`` builds a tower in its config's ``dtype``
(``modeling_utils.py``), the default dtype -- vLLM's model dtype -- where the config names
none; buffers made from Python scalars take that dtype too. Only the rotary inverse
frequencies are float32.

Vision (``Gemma4VisionModel``): the patch embedder (``input_proj`` of ``3 x patch_size^2``
inputs, a position table of ``2 x position_embedding_size x hidden``), per layer q/k/v/o
of ``heads x head_dim`` (k and v of the KV heads), q/k norms of ``head_dim``, a gated MLP
and four norms; the rotary embedding's two float32 buffers of ``head_dim / 4`` values;
with ``standardize``, a bias and a scale of ``hidden``.

Audio (``Gemma4AudioModel``, a conformer): two subsampling convolutions (3 x 3, no bias)
with their LayerNorms and ``input_proj_linear``, the relative position encoding's
timescales (``hidden / 2``), per layer two feed-forward blocks (``hidden`` to ``4 x hidden``
and back, two norms each), the attention (q/k/v and ``post``, a ``relative_k_proj``, a
``per_dim_scale`` and a soft-cap scalar), the light convolution (``linear_start`` to ``2 x
hidden``, ``linear_end``, a depthwise kernel of ``conv_kernel_size``, two norms) and three
norms; ``output_proj`` with its bias.

With ``use_clipped_linears`` (the audio default) each of the towers' linear layers but
``relative_k_proj``, ``input_proj_linear``, ``output_proj`` and the patch embedder's holds
four scalar clipping bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fakplan.geometry.params import stated_dtype

# Gemma4VisionConfig's and Gemma4AudioConfig's defaults (configuration_gemma4.py,
# transformers 5.5.0 and 5.25.0): what a config that leaves a field out gets
VISION_DEFAULTS: dict[str, int | bool] = {
    "hidden_size": 768,
    "intermediate_size": 3072,
    "num_hidden_layers": 16,
    "num_attention_heads": 12,
    "num_key_value_heads": 12,
    "head_dim": 64,
    "patch_size": 16,
    "position_embedding_size": 10 * 1024,
    "use_clipped_linears": False,
    "standardize": False,
}
AUDIO_DEFAULTS: dict[str, int | bool] = {
    "hidden_size": 1024,
    "num_hidden_layers": 12,
    "num_attention_heads": 8,
    "conv_kernel_size": 5,
    "use_clipped_linears": True,
    "output_proj_dims": 1536,
}
AUDIO_CONV_CHANNELS = (128, 32)  # subsampling_conv_channels' default
TRANSFORMERS_SOURCE = "transformers 5.5.0 models/gemma4/modeling_gemma4.py"


@dataclass(frozen=True)
class TowerTensor:
    """One tensor a tower creates: its elements and its dtype (fakplan's name)."""

    name: str
    elements: int
    dtype: str


@dataclass(frozen=True)
class Towers:
    """Every tensor of the towers and their embedders, in creation order, and what each
    tower holds in words."""

    tensors: tuple[TowerTensor, ...]
    said: tuple[str, ...]


def _fields(config: dict[str, Any], defaults: dict[str, int | bool], tower: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, default in defaults.items():
        value = config.get(name)
        if value is None:
            value = default
        if isinstance(default, bool):
            out[name] = int(bool(value))
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(
                f"gemma4: its {tower}_config's {name} is {value!r}, not a positive count"
            )
        out[name] = value
    return out


def _dtype(config: dict[str, Any], served: str) -> str:
    return stated_dtype(config) or served


class _Builder:
    """Collects a tower's tensors in its dtype as its modules create them."""

    def __init__(self, dtype: str) -> None:
        self.dtype = dtype
        self.tensors: list[TowerTensor] = []

    def add(self, name: str, elements: int, dtype: str | None = None) -> None:
        self.tensors.append(TowerTensor(name, elements, dtype or self.dtype))

    def linear(self, name: str, inputs: int, outputs: int, clipped: int) -> None:
        """``Gemma4ClippableLinear``: the weight, then four scalar bounds when clipped."""
        self.add(name, outputs * inputs)
        for bound in ("input_min", "input_max", "output_min", "output_max") if clipped else ():
            self.add(f"{name}.{bound}", 1)

    def elements(self) -> int:
        return sum(t.elements for t in self.tensors)


def _vision(config: dict[str, Any], text_hidden: int, served: str) -> tuple[list[TowerTensor], str]:
    v = _fields(config, VISION_DEFAULTS, "vision")
    hidden, head_dim, clip = v["hidden_size"], v["head_dim"], v["use_clipped_linears"]
    heads, kv_heads, inter = (
        v["num_attention_heads"],
        v["num_key_value_heads"],
        v["intermediate_size"],
    )
    tower = _Builder(_dtype(config, served))
    tower.add("patch_embedder.input_proj", 3 * v["patch_size"] ** 2 * hidden)
    tower.add("patch_embedder.position_embedding_table", 2 * v["position_embedding_size"] * hidden)
    # Gemma4VisionRotaryEmbedding: inv_freq and original_inv_freq, float32, the length of
    # arange(0, head_dim // 2, 2): each spatial axis rotates half the head
    rotary = -(-(head_dim // 2) // 2)
    tower.add("encoder.rotary_emb.inv_freq", rotary, "fp32")
    tower.add("encoder.rotary_emb.original_inv_freq", rotary, "fp32")
    for index in range(v["num_hidden_layers"]):
        at = f"encoder.layers.{index}."
        tower.linear(f"{at}self_attn.q_proj", hidden, heads * head_dim, clip)
        tower.linear(f"{at}self_attn.k_proj", hidden, kv_heads * head_dim, clip)
        tower.linear(f"{at}self_attn.v_proj", hidden, kv_heads * head_dim, clip)
        tower.linear(f"{at}self_attn.o_proj", heads * head_dim, hidden, clip)
        tower.add(f"{at}self_attn.q_norm", head_dim)
        tower.add(f"{at}self_attn.k_norm", head_dim)
        tower.linear(f"{at}mlp.gate_proj", hidden, inter, clip)
        tower.linear(f"{at}mlp.up_proj", hidden, inter, clip)
        tower.linear(f"{at}mlp.down_proj", inter, hidden, clip)
        for norm in ("input", "post_attention", "pre_feedforward", "post_feedforward"):
            tower.add(f"{at}{norm}_layernorm", hidden)
    if v["standardize"]:
        tower.add("std_bias", hidden)
        tower.add("std_scale", hidden)
    embedder = TowerTensor("embed_vision.embedding_projection", hidden * text_hidden, served)
    said = (
        f"vision tower {tower.elements():,} elements in {tower.dtype} ({v['num_hidden_layers']} "
        f"layers of {hidden:,} wide, {heads} heads of {head_dim}, MLP {inter:,}"
        + (", clipped linears" if clip else "")
        + (", standardized" if v["standardize"] else "")
        + f") and its embedder {hidden:,} x {text_hidden:,}"
    )
    return [*tower.tensors, embedder], said


def _audio(config: dict[str, Any], text_hidden: int, served: str) -> tuple[list[TowerTensor], str]:
    a = _fields(config, AUDIO_DEFAULTS, "audio")
    channels = config.get("subsampling_conv_channels") or list(AUDIO_CONV_CHANNELS)
    if (
        not isinstance(channels, list | tuple)
        or len(channels) != 2
        or not all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in channels)
    ):
        raise ValueError(
            f"gemma4: its audio_config's subsampling_conv_channels is {channels!r}, not two counts"
        )
    first, second = channels
    hidden, heads, clip = a["hidden_size"], a["num_attention_heads"], a["use_clipped_linears"]
    head_dim = hidden // heads  # Gemma4AudioAttention: hidden_size // num_attention_heads
    tower = _Builder(_dtype(config, served))
    tower.add("subsample_conv_projection.layer0.conv", first * 1 * 3 * 3)
    tower.add("subsample_conv_projection.layer0.norm", first)
    tower.add("subsample_conv_projection.layer1.conv", second * first * 3 * 3)
    tower.add("subsample_conv_projection.layer1.norm", second)
    tower.add("subsample_conv_projection.input_proj_linear", first // 4 * second * hidden)
    tower.add("rel_pos_enc.inv_timescales", hidden // 2)
    for index in range(a["num_hidden_layers"]):
        at = f"layers.{index}."
        for block in ("feed_forward1", "feed_forward2"):
            tower.linear(f"{at}{block}.ffw_layer_1", hidden, 4 * hidden, clip)
            tower.linear(f"{at}{block}.ffw_layer_2", 4 * hidden, hidden, clip)
            tower.add(f"{at}{block}.pre_layer_norm", hidden)
            tower.add(f"{at}{block}.post_layer_norm", hidden)
        for proj in ("q_proj", "k_proj", "v_proj"):
            tower.linear(f"{at}self_attn.{proj}", hidden, heads * head_dim, clip)
        tower.linear(f"{at}self_attn.post", hidden, hidden, clip)
        tower.add(f"{at}self_attn.relative_k_proj", hidden * heads * head_dim)
        tower.add(f"{at}self_attn.per_dim_scale", head_dim)
        tower.add(f"{at}self_attn.softcap", 1)
        tower.linear(f"{at}lconv1d.linear_start", hidden, 2 * hidden, clip)
        tower.linear(f"{at}lconv1d.linear_end", hidden, hidden, clip)
        tower.add(f"{at}lconv1d.depthwise_conv1d", hidden * a["conv_kernel_size"])
        tower.add(f"{at}lconv1d.pre_layer_norm", hidden)
        tower.add(f"{at}lconv1d.conv_norm", hidden)
        for norm in ("norm_pre_attn", "norm_post_attn", "norm_out"):
            tower.add(f"{at}{norm}", hidden)
    out = a["output_proj_dims"]
    tower.add("output_proj.weight", hidden * out)
    tower.add("output_proj.bias", out)
    embedder = TowerTensor("embed_audio.embedding_projection", out * text_hidden, served)
    said = (
        f"audio tower {tower.elements():,} elements in {tower.dtype} ({a['num_hidden_layers']} "
        f"conformer layers of {hidden:,} wide, {heads} heads"
        + (", clipped linears" if clip else "")
        + f") and its embedder {out:,} x {text_hidden:,}"
    )
    return [*tower.tensors, embedder], said


def gemma4_towers(text: dict[str, Any], served: str) -> Towers | str:
    """The towers a merged Gemma 4 config carries, as vLLM creates them (``served``: the
    model dtype, fakplan's name), or why they cannot be read (a sentence)."""
    try:
        text_hidden = int(text["hidden_size"])
        tensors: list[TowerTensor] = []
        said: list[str] = []
        for key, count in (("vision_config", _vision), ("audio_config", _audio)):
            config = text.get(key)
            if isinstance(config, dict):
                found, words = count(config, text_hidden, served)
                tensors += found
                said.append(words)
    except (KeyError, TypeError, ValueError) as err:
        reason = str(err.args[0]) if err.args and isinstance(err, ValueError) else ""
        return reason if reason.startswith("gemma4:") else "gemma4: its tower config is unreadable"
    return Towers(tuple(tensors), tuple(said))

#!/usr/bin/env bash
# qwen3-32b-sglang: compiled by fakplan from shapes/qwen3-32b-sglang.yaml. Edit the shape, not this file.
# Record: plan.json sha256 4866e1c9012add4e1ae6be512413b5b8b3e44efcb050c6868db185d76c4e89f7
# engine sglang (0.5.2), model Qwen/Qwen3-32B
# 12 sequence slots x 40,960-token window, KV fp8_e4m3
#
# Derivation (per card, per rank)
#   rate       full attention 65,536 = 65,536 B/token/rank at fp8_e4m3
#   rules      sglang 0.5 cell arithmetic (read in 0.5.23)
#   contract   12 seqs x 40,960 tokens x 65,536 B/token = 32,212,254,720 B (30,720.00 MiB)
#   tokens     max_total_num_tokens = 32,212,254,720 B // 65,536 B per cell = 491,520
#   sessions   491,520 tokens / 40,960 = 12.00 sessions at the full window
#   pair       36,864 MiB weights + 30,720 MiB KV = 67,584 MiB
#   card       81,920 MiB as stated in the shape (card.total)
#   ceiling    73,728 MiB as stated in the shape
#   unclaimed  73,728 MiB ceiling - 67,584 MiB pair = 6,144 MiB
#
# Gates
#   ok       pool ≥ contract (30,720 MiB ≥ 30,720 MiB)
#   ok       pair ≤ ceiling (67,584 MiB ≤ 73,728 MiB)
#   ok       weights fit their budget (31,244 MiB ≤ 36,864 MiB)
#   ok       max_model_len ≤ trained context (40,960 ≤ 40,960)
#   ok       the engine boots the shape (none of 3 refusal rows applies)
#   warn     unclaimed VRAM (6,144 MiB unclaimed > 1,024 MiB)
#            fix: set serving.max_num_seqs: 14, budget.kv: 36864 MiB (gives up nothing; gated: every gate passes)
#   ok       GPUs per pod = cards the layout uses per node (nvidia.com/gpu 2 = 2 ranks per node (TP 2 x PP 1 / 1 node(s)))
#   ok       TP x PP = GPUs per pod x pods (2 x 1 = 2 = 2 x 1 = 2)
#   ok       startup budget ≥ load estimate (740 s ≥ 369 s)
#   ok       /dev/shm with TP > 1 (/dev/shm 32,768 MiB per pod)
#
# Predictions (falsifiable; each verdict is written under its prediction)
#   kv-tokens: the boot ledger reports 491,520 KV tokens (± 0.5 %)
#     closed by ledger: fakplan verify shapes/qwen3-32b-sglang.yaml --ledger BOOT.log
#     verdict: open
#   sessions-at-window: backs 12 sequences all at 40,960 tokens at once
#     closed by ledger: fakplan verify shapes/qwen3-32b-sglang.yaml --ledger BOOT.log
#     verdict: open
#   boundary: 12 concurrent prompts of max_model_len - gen tokens each: 12/12 are accepted and served in full (none refused or preempted)
#     closed by probe boundary: fakplan probe shapes/qwen3-32b-sglang.yaml --url URL --only boundary
#     verdict: open
#   weights: the boot's weights fit budget.weights (36,864 MiB)
#     closed by ledger: fakplan verify shapes/qwen3-32b-sglang.yaml --ledger BOOT.log
#     verdict: open
#   unclaimed: the pair (67,584 MiB) fits under the ceiling the boot ledger measures, 6,144 MiB unclaimed by the shape's ceiling
#     closed by ledger: fakplan verify shapes/qwen3-32b-sglang.yaml --ledger BOOT.log
#     verdict: open
#   decode-tps: with all 12 slots decoding at once near 40,960 tokens, each session gets 35.7..39.4 tokens/s (428..473 tokens/s in all; at the full window 35.7..39.2 tokens/s a session); decode alone: prefills the engine runs in the same steps slow it further
#     closed by probe decode-load: fakplan probe shapes/qwen3-32b-sglang.yaml --url URL --only decode-load
#     verdict: open
#   decode-tps-one: one session decodes at 68.1..76.9 tokens/s (the decode probe's run, context up to 1,024 tokens)
#     closed by probe decode: fakplan probe shapes/qwen3-32b-sglang.yaml --url URL --only decode
#     verdict: open
#
# Role: serve
# --max-total-tokens: the tokens budget.kv backs: max_total_num_tokens = 32,212,254,720 B // 65,536 B per cell = 491,520
# --mem-fraction-static: (budget.weights 38,654,705,664 B + budget.kv 32,212,254,720 B) / (card.total 85,899,345,920 B - 2,823,940,997 B, the top of the memory in use before the weights at TP 2: from the least CUDA context measured beside the collectives (four PCIe-only L4s at TP 4: 22.03 GiB total less 21.63 free, less the 0.13 their collectives took) to the most in use at TP 1 (660,351,222 B) plus the most the collectives took at any TP > 1 (2.01 GiB on eight ranks, sgl-project/sglang#11716): borrowed across TPs and cards, as no public boot gives both figures at one TP on an NVSwitch machine; another card's CUDA context may differ) = 0.854, rounded up; SGLang keeps 1 - fraction of what is free before the weights load, and --max-total-tokens caps the pool
set -euo pipefail
exec python3 -m sglang.launch_server --model-path Qwen/Qwen3-32B --host 0.0.0.0 --port 8000 --tp 2 --context-length 40960 --max-running-requests 12 --kv-cache-dtype fp8_e4m3 --page-size 1 --max-total-tokens 491520 --mem-fraction-static 0.854

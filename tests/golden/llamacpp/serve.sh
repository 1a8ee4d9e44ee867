#!/usr/bin/env bash
# qwen2.5-coder-llamacpp: compiled by fakplan from shapes/qwen2.5-coder-llamacpp.yaml. Edit the shape, not this file.
# Record: plan.json sha256 43bae2c4e34f1c09e36d9252e29246e8eec57fa8683ccd35d2e578d9d962b423
# engine llamacpp (b10573), model Qwen/Qwen2.5-Coder-32B-Instruct
# 2 sequence slots x 32,768-token window, KV q8_0
#
# Derivation (per card, per rank)
#   rate       full attention 139,264 = 139,264 B/token/rank at q8_0
#   rules      llama.cpp b9191 arithmetic (read in b10573)
#   contract   2 seqs x 32,768 tokens x 139,264 B/token = 9,126,805,504 B (8,704.00 MiB)
#   tokens     -c 65,536 = 2 slot(s) x max_model_len 32,768; llama.cpp pads to 256: 32,768 cells x 2 stream(s) take 9,126,805,504 B of budget.kv's 9,126,805,504 B
#   sessions   65,536 tokens / 32,768 = 2.00 sessions at the full window; 2 of 2 slot(s) hold a full window (32,768 cells each; a sequence needs a slot)
#   pair       33,792 MiB weights + 8,704 MiB KV = 42,496 MiB
#   card       49,152 MiB as stated in the shape (card.total)
#   ceiling    47,104 MiB as stated in the shape
#   unclaimed  47,104 MiB ceiling - 42,496 MiB pair = 4,608 MiB
#   idle KV    8,704 MiB budget.kv - 8,704 MiB the cache takes = 0 MiB (the engine sizes its cache by the context it is given, not by budget.kv)
#
# Gates
#   ok       pool ≥ contract (8,704 MiB ≥ 8,704 MiB)
#   ok       pair ≤ ceiling (42,496 MiB ≤ 47,104 MiB)
#   unknown  weights fit their budget (budget 33,792 MiB, weight bytes unknown)
#            fix: point model: at the GGUF or HF folder so fakplan can read the weight bytes
#   ok       max_model_len ≤ trained context (32,768 ≤ 32,768)
#   ok       the engine boots the shape (none of 5 refusal rows applies)
#   warn     unclaimed VRAM (4,608 MiB unclaimed > 1,024 MiB)
#            fix: set serving.max_num_seqs: 3, budget.kv: 13056 MiB (gives up nothing; gated: every gate passes)
#   ok       GPUs per pod = cards the layout uses per node (nvidia.com/gpu 1 = 1 ranks per node (TP 1 x PP 1 / 1 node(s)))
#   ok       TP x PP = GPUs per pod x pods (1 x 1 = 1 = 1 x 1 = 1)
#   ok       startup budget ≥ load estimate (600 s ≥ 169 s)
#
# Predictions (falsifiable; each verdict is written under its prediction)
#   kv-tokens: the boot ledger reports 65,536 KV tokens (± 0.5 %)
#     closed by ledger: fakplan verify shapes/qwen2.5-coder-llamacpp.yaml --ledger BOOT.log
#     verdict: open
#   sessions-at-window: backs 2 sequences all at 32,768 tokens at once
#     closed by ledger: fakplan verify shapes/qwen2.5-coder-llamacpp.yaml --ledger BOOT.log
#     verdict: open
#   boundary: 2 concurrent prompts of max_model_len - gen tokens each: 2/2 are accepted and served in full (none refused or preempted)
#     closed by probe boundary: fakplan probe shapes/qwen2.5-coder-llamacpp.yaml --url URL --only boundary
#     verdict: open
#   weights: the boot's weights fit budget.weights (33,792 MiB)
#     closed by ledger: fakplan verify shapes/qwen2.5-coder-llamacpp.yaml --ledger BOOT.log
#     verdict: open
#   unclaimed: the pair (42,496 MiB) fits under the ceiling the boot ledger measures, 4,608 MiB unclaimed by the shape's ceiling
#     closed by ledger: fakplan verify shapes/qwen2.5-coder-llamacpp.yaml --ledger BOOT.log
#     verdict: open
#   prefill-tps: a prompt of 32,752 tokens prefills at 1,238..1,791 tokens/s: first token after 18.3..26.5 s
#     closed by probe prefill: fakplan probe shapes/qwen2.5-coder-llamacpp.yaml --url URL --only prefill
#     verdict: open
#
# Role: serve
# -c: -c 65,536 = 2 slot(s) x max_model_len 32,768; llama.cpp pads to 256: 32,768 cells x 2 stream(s) take 9,126,805,504 B of budget.kv's 9,126,805,504 B
set -euo pipefail
# models/qwen2.5-coder-32b-instruct-q8_0.gguf: relative to the shape's folder, where the engine runs
# (found from this script; FAKPLAN_SHAPE_DIR names it where the two trees are not side by side)
if [ -n "${FAKPLAN_SHAPE_DIR:-}" ]; then cd -- "$FAKPLAN_SHAPE_DIR"; else cd -- "$(dirname -- "${BASH_SOURCE[0]}")"/../../shapes; fi
exec llama-server -m models/qwen2.5-coder-32b-instruct-q8_0.gguf --host 0.0.0.0 --port 8000 -c 65536 -np 2 --cache-type-k q8_0 --cache-type-v q8_0 -ngl 999 -fa on

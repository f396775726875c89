#!/usr/bin/env python3
"""Write small random-weight GGUF models, one per architecture sjkv-replay runs.

No real weights of these families ship with the project, so each forward pass is checked
against llama.cpp on these files (tests/golden/arch/README.md). The bytes depend only on
the table below and the seed: the weights come from a counter-based generator written here
(splitmix64, sums of uniforms; no numpy.random, no transcendental functions), so neither
numpy's version nor the CPU changes them. The writer is the PyPI package gguf, pinned to
0.19.0 because its layout is part of the bytes (--check).

  python3 scripts/make-test-models.py --out DIR [--only NAME...] \\
      [--check tests/golden/arch/models.sha256] [--write-hashes FILE]

Models: 4 layers (the hybrids 8, gemma4 6, gemma4-e 8, gemma4moe 4, gemma4-tok 2, gptoss-tok 2), n_ff 512, rms eps 1e-6, every tensor F32 (BPE:
byte-level with merges, SPM: SentencePiece-style pieces with byte fallback; both learned from
TEXT below).

  name     arch    n_embd  heads q/kv x size  vocab                 context  rope base
  qwen2    qwen2   256     2/1 x 128          BPE, pre qwen2, 500   32768    1e6
  qwen3    qwen3   256     4/2 x 128          BPE, pre qwen2, 500   32768    1e6
  llama3   llama   256     4/2 x 128          BPE, pre llama-bpe, 520  32768 5e5
  mistral  llama   256     4/1 x 128          SPM, 480              32768    1e6
  gemma2   gemma2  256     4/2 x 128          SPM, 520              32768    1e4 (key absent)
  phi3     phi3    384     4/2 x 96           SPM, 460              131072   1e4
  qwen2-yarn qwen2  256     2/1 x 128          BPE, pre qwen2, 500   32768    1e6
  qwen3-yarn qwen3  256     4/2 x 128          BPE, pre qwen2, 500   32768    1e6
  qwen3moe qwen3moe 256    4/2 x 128          BPE, pre qwen2, 500   32768    1e6
  qwen3moe-ties qwen3moe 256 4/2 x 128        BPE, pre qwen2, 500   32768    1e6
  qwen3moe-yarn qwen3moe 256 4/2 x 128        BPE, pre qwen2, 500   32768    1e6
  mixtral  llama   256     4/1 x 128          SPM, 480              32768    1e6
  qwen35   qwen35  256     4/2 x 256          BPE, pre qwen35, 500  32768    1e7
  qwen35moe qwen35moe 256  4/2 x 256          BPE, pre qwen35, 500  32768    1e7
  gemma4   gemma4  256     4/1 x 512, 4/2 x 128 SPM, 520            32768    1e6, sliding 1e4
  gemma4-e gemma4  256     4/1 x 512, 4/1 x 128 SPM, 520            32768    1e6, sliding 1e4
  gemma4moe gemma4 256     4/1 x 512, 4/2 x 128 SPM, 520            32768    1e6, sliding 1e4
  gemma4-tok gemma4 256    4/1 x 512, 4/2 x 128 gemma4 BPE, 600     32768    1e6, sliding 1e4
  gptoss-tok llama 256     4/2 x 128          BPE, pre gpt-4o, 800  32768    1.5e5
  gpt-oss  gpt-oss 256     8/2 x 64           BPE, pre gpt-4o, 800  32768    1.5e5

  qwen2    q/k/v biases; tied output (no output.weight); no BOS added
  qwen3    attn_q_norm/attn_k_norm [128]; attn_q [256, 512]; untied
  qwen2-yarn, qwen3-yarn  qwen2's and qwen3's layers (own weights) with YaRN: rope.scaling.type
           yarn, factor 4, original_context_length 1024 (so positions past 4096 extrapolate);
           q and k divided by YaRN's magnitude factor 1 + 0.1 ln 4
  llama3   rope_freqs [64] by the Llama 3 rule (factor 8, low 1, high 4, original context
           8192); bos <|begin_of_text|>; untied
  mistral  sliding_window 64 declared, which llama.cpp's llama graph ignores; untied
  gemma2   sliding window 48 on even layers (pattern 2); attention softcap 50, final softcap
           30; post_attention_norm, post_ffw_norm; tied; add_space_prefix false
  phi3     fused attn_qkv [384, 768] (q, k, v rows); fused ffn_up [384, 1024] (gate rows, then
           up rows); longrope: rope_factors_long/short [48], original context 4096,
           attn_factor sqrt(1 + ln 32 / ln 4096); sliding_window 2047 declared, which
           llama.cpp disables; Phi-3's added tokens, eos <|endoftext|>; untied
  qwen3moe qwen3's attention (q/k norms, attn_q [256, 512]); every FFN a mixture of experts:
           expert_count 8, expert_used_count 2, expert_feed_forward_length 128 (feed_forward_length
           512 written and unused, as the converter writes the dense width): ffn_gate_inp
           [256, 8], ffn_gate_exps / ffn_up_exps [256, 128, 8], ffn_down_exps [128, 256, 8]; no
           shared expert; untied
  qwen3moe-yarn qwen3moe's layers (own weights) with qwen3-yarn's YaRN (factor 4, original context 1024),
           as the converter writes it for Qwen3-30B-A3B's long-context use
  qwen3moe-ties qwen3moe's shapes with 24 experts of 32, top 2, whose ffn_gate_inp rows come in
           identical triples (experts 3j, 3j+1, 3j+2 tie for every token): which two of a tied
           triple are chosen is ggml's argsort's order of equal values (std::sort over 24)
  mixtral  the llama architecture with experts (Mixtral): expert_count 8, expert_used_count 2,
           each expert of feed_forward_length 128 (llama.cpp's llama reads no
           expert_feed_forward_length): ffn_gate_inp and the ffn_*_exps as qwen3moe's, no dense
           FFN; untied
  qwen35   Gated DeltaNet hybrid: 8 main layers, 3 and 7 gated full attention (attn_q [256, 2048]:
           query and output gate interleaved per head; attn_q_norm/attn_k_norm [256]; rope on
           64 dims, imrope sections [11, 11, 10, 0]), the others Gated DeltaNet (ssm conv_kernel 4,
           state_size 64, group_count 2 k heads, time_step_rank 4 v heads, inner_size 256:
           attn_qkv, attn_gate, ssm_conv1d, ssm_dt.bias, ssm_a, ssm_beta, ssm_alpha, ssm_norm,
           ssm_out); post_attention_norm and a dense FFN in every layer; block_count 9 with
           nextn_predict_layers 1 (blk.8: an MTP block llama.cpp loads and skips);
           attention.recurrent_layers written (false for blk.8) and full_attention_interval 4;
           tied
  qwen35moe the same layers without MTP (block_count 8) and without recurrent_layers (the
           interval decides); MoE FFN: 8 experts, top 2, expert n_ff 128, a shared expert of
           n_ff 256 gated by sigmoid(ffn_gate_inp_shexp . x); no feed_forward_length; untied

  gemma4   6 layers, full attention at 2 and 5 (sliding_window_pattern array), window 48;
           full layers 1 KV head of 512 (key_length), rope.dimension_count 512 with rope_freqs
           [256] (64 ones, 192 x 1e30: proportional RoPE); sliding layers 2 KV heads of 128
           (key_length_swa, head_count_kv array), rope.dimension_count_swa 128; attn_q_norm /
           attn_k_norm (scale 1 attention: their weights set the scores); no attn_v at layer 5
           (V from K); layer_output_scale on every layer but 3; post norms; final soft-cap 30;
           tied, small embeddings and a final norm of mean 12 as gemma2; Gemma's SPM vocabulary
  gemma4-e gemma4's features in the E2B/E4B form: 8 layers, full at 2, 4, 7; shared_kv_layers 3
           (layers 5, 6 read layer 3's cache, layer 7 layer 4's; attn_k absent on 5 and 7,
           present and unused on 6); per-layer embeddings of 64 (per_layer_token_embd [512, 520],
           per_layer_model_proj [256, 512], per_layer_proj_norm [64]; inp_gate [256, 64], proj
           [64, 256], post_norm per layer); feed_forward_length [512 x 5, 1024 x 3]; no
           final_logit_softcapping key (llama.cpp's default 30 applies)
  gemma4moe the 26B-A4B's experts: 4 layers, full at 1 and 3 (no attn_v: V from K), window 48;
           a dense FFN of 256 (the shared expert, post_ffw_norm_1) and 8 experts of 128, top 2
           (expert_count, expert_used_count, expert_feed_forward_length): ffn_gate_inp [256, 8]
           and its .scale [256], pre_ffw_norm_2 / post_ffw_norm_2, ffn_gate_up_exps [256, 256, 8]
           on layers 0-1, ffn_gate_exps / ffn_up_exps [256, 128, 8] on 2-3, ffn_down_exps
           [128, 256, 8] and its .scale [8]; layer_output_scale on every layer but 2
  gemma4-tok 2 layers (sliding, full) of gemma4's shapes, for the tokenizer kind "gemma4" (BPE over
           raw UTF-8 with spaces as U+2581, merges learned on whole lines; <pad> <eos> <bos> <unk>,
           newline runs of 1-3, 256 byte tokens <0xXX>, its chat markers): tests/golden/tokenizer/arch-gemma4-tok.txt
  gpt-oss  the published gpt-oss layers at small size: q/k/v and attn_output with biases; attn_sinks
           [8] (one learned logit per query head, mean SINK_MEAN); post_attention_norm before the
           FFN (no ffn_norm); sliding_window 128, no pattern key (llama.cpp's pattern 2: layers 0
           and 2 slide); YaRN as its converter writes it (type, factor 32, original context 256,
           yarn_beta_fast 32, yarn_beta_slow 1), q and k divided by 1 + 0.1 ln 32; every FFN 8
           experts of 128, top 4: ffn_gate_inp [256, 8] with its bias, ffn_gate/up/down_exps with
           biases [128, 8] / [256, 8], gate and up of std EXPERT_GLU_STD so the clamp at 7 of
           swiglu_oai bites; feed_forward_length 128 (the converter writes the experts' width);
           gpt-oss's vocabulary (gptoss-tok's); untied
  gpt-oss-mxfp4, gpt-oss-mxfp4-f32  gpt-oss's numbers with ffn_gate/up/down_exps in MXFP4
           (gguf.quants' rounding, as the published files store experts), and the same blocks decoded
           back to F32 (llama.cpp multiplies those in f32, so sjkv on the MXFP4 file must agree with it
           to the F32 bound; file_type MOSTLY_MXFP4_MOE and ALL_F32)
  gptoss-tok 2 llama layers, for gpt-oss's tokenizer (pre-tokenizer gpt-4o: merges learned on TEXT and GPTOSS_TEXT
           cut by GPT4O_SPLIT and by COARSE_SPLIT, so that some cross GPT-4o's cuts; the harmony markers as
           control tokens, <|startoftext|> bos not added, <|return|> eos): tests/golden/tokenizer/arch-gptoss-tok.txt

Written only when named (--only qwen35-0.8b; never by default, and not in models.sha256):

  qwen35-0.8b  qwen35's layers in the published shape of Qwen 3.5 0.8B (docs/design/qwen35.md
           section 10), for timing (scripts/bench-hybrid-long): 24 main layers (full attention at
           3, 7, ..., 23) + 1 MTP block (block_count 25), n_embd 1024, n_ff 3584, 8/2 x 256 heads,
           Gated DeltaNet 16 k heads and 16 v heads of 128 (inner_size 2048, conv_dim 6144),
           context 262144, tied; the 500-token qwen35 vocabulary padded to 248320 with [PADn]
           tokens of type UNUSED (5), as llama.cpp's converter pads one (no text gives them).
           Q8_0 (gguf.quants, ggml's reference rounding) for every matrix whose rows are whole
           32-value blocks; norms, ssm_dt.bias, ssm_a and ssm_conv1d (rows of 4) stay F32. The
           same scale rules as the small models; the numbers come from normals16 (one splitmix64
           output per value), drawn and written one tensor at a time: 828 MB in about 20 s.

Weight scales (SCORE_STD and the lines after it) keep the models far from degenerate:
attention scores with a std of about 2.5 across keys, logits with a std of about 4; in the
hybrids every gate, decay and router in its working range (the lines after NORM_STD).
"""
import argparse
import hashlib
import math
import os
import re
import sys

import numpy as np

SEED = 20250101
N_LAYER = 4
N_FF = 512
RMS_EPS = 1e-6

# name: arch, n_embd, n_head, n_head_kv, head size, vocab kind, vocab size, context, extras
MODELS = {
    "qwen2":   dict(arch="qwen2", n_embd=256, n_head=2, n_head_kv=1, head=128, vocab="bpe-qwen2", n_vocab=500,
                    ctx=32768, rope_base=1e6, qkv_bias=True, tied=True),
    "qwen3":   dict(arch="qwen3", n_embd=256, n_head=4, n_head_kv=2, head=128, vocab="bpe-qwen2", n_vocab=500,
                    ctx=32768, rope_base=1e6, qk_norm=True, head_keys=True),
    "qwen2-yarn": dict(arch="qwen2", n_embd=256, n_head=2, n_head_kv=1, head=128, vocab="bpe-qwen2", n_vocab=500,
                       ctx=32768, rope_base=1e6, qkv_bias=True, tied=True, yarn=dict(factor=4.0, orig_ctx=1024)),
    "qwen3-yarn": dict(arch="qwen3", n_embd=256, n_head=4, n_head_kv=2, head=128, vocab="bpe-qwen2", n_vocab=500,
                       ctx=32768, rope_base=1e6, qk_norm=True, head_keys=True, yarn=dict(factor=4.0, orig_ctx=1024)),
    "llama3":  dict(arch="llama", n_embd=256, n_head=4, n_head_kv=2, head=128, vocab="bpe-llama3", n_vocab=520,
                    ctx=32768, rope_base=5e5, head_keys=True, llama3_rope=True),
    "mistral": dict(arch="llama", n_embd=256, n_head=4, n_head_kv=1, head=128, vocab="spm", n_vocab=480,
                    ctx=32768, rope_base=1e6, head_keys=True, swa=64),
    "gemma2":  dict(arch="gemma2", n_embd=256, n_head=4, n_head_kv=2, head=128, vocab="spm-gemma", n_vocab=520,
                    ctx=32768, rope_base=None, head_keys=True, swa=48, tied=True, post_norms=True,
                    attn_softcap=50.0, final_softcap=30.0, embd_std=0.02, out_norm_mean=12.0),
    "phi3":    dict(arch="phi3", n_embd=384, n_head=4, n_head_kv=2, head=96, vocab="spm-phi3", n_vocab=460,
                    ctx=131072, rope_base=1e4, fused=True, longrope=True, orig_ctx=4096, swa=2047),
    # Mixtures of experts through build(): routed experts only, softmax router of std ROUTER_STD
    "qwen3moe": dict(arch="qwen3moe", n_embd=256, n_head=4, n_head_kv=2, head=128, vocab="bpe-qwen2", n_vocab=500,
                     ctx=32768, rope_base=1e6, qk_norm=True, head_keys=True,
                     moe=dict(n_expert=8, n_used=2, n_ff_exp=128)),
    "qwen3moe-yarn": dict(arch="qwen3moe", n_embd=256, n_head=4, n_head_kv=2, head=128, vocab="bpe-qwen2", n_vocab=500,
                          ctx=32768, rope_base=1e6, qk_norm=True, head_keys=True,
                          moe=dict(n_expert=8, n_used=2, n_ff_exp=128), yarn=dict(factor=4.0, orig_ctx=1024)),
    # ties: 24 experts (more than the 16 that libstdc++'s std::sort orders by insertion alone) whose
    # router rows come in identical triples, so every token's top 2 is chosen among tied experts
    # and only the order ggml's argsort gives equal values decides which (docs/design/moe.md)
    "qwen3moe-ties": dict(arch="qwen3moe", n_embd=256, n_head=4, n_head_kv=2, head=128, vocab="bpe-qwen2",
                          n_vocab=500, ctx=32768, rope_base=1e6, qk_norm=True, head_keys=True,
                          moe=dict(n_expert=24, n_used=2, n_ff_exp=32, tie_group=3)),
    "mixtral": dict(arch="llama", n_embd=256, n_head=4, n_head_kv=1, head=128, vocab="spm", n_vocab=480,
                    ctx=32768, rope_base=1e6, head_keys=True, n_ff=128, moe=dict(n_expert=8, n_used=2)),
    # Gated DeltaNet hybrids (build_hybrid): GDN = the linear-attention geometry below
    "qwen35":  dict(arch="qwen35", n_embd=256, n_head=4, n_head_kv=2, head=256, vocab="bpe-qwen35", n_vocab=500,
                    ctx=32768, rope_base=1e7, tied=True, n_layer=8, n_mtp=1, recurrent_array=True),
    "qwen35moe": dict(arch="qwen35moe", n_embd=256, n_head=4, n_head_kv=2, head=256, vocab="bpe-qwen35",
                      n_vocab=500, ctx=32768, rope_base=1e7, n_layer=8, n_mtp=0, recurrent_array=False,
                      moe=dict(n_expert=8, n_used=2, n_ff_exp=128, n_ff_shexp=256)),
    # Gemma 4 dense (build_gemma4): the layer pattern and shapes in GEMMA4 below
    "gemma4":  dict(arch="gemma4", n_embd=256, n_head=4, n_head_kv=2, head=128, vocab="spm-gemma", n_vocab=520,
                    ctx=32768, rope_base=1e6, tied=True, gemma4="dense"),
    "gemma4-e": dict(arch="gemma4", n_embd=256, n_head=4, n_head_kv=1, head=128, vocab="spm-gemma", n_vocab=520,
                     ctx=32768, rope_base=1e6, tied=True, gemma4="e"),
    # gemma4's tokenizer kind on a 2-layer gemma4 (its tokenizer golden, not a logits fixture)
    "gemma4-tok": dict(arch="gemma4", n_embd=256, n_head=4, n_head_kv=2, head=128, vocab="bpe-gemma4", n_vocab=600,
                       ctx=32768, rope_base=1e6, tied=True, gemma4="tok"),
    # gpt-oss's tokenizer (pre-tokenizer gpt-4o, harmony markers) on 2 llama layers (its tokenizer golden)
    "gptoss-tok": dict(arch="llama", n_embd=256, n_head=4, n_head_kv=2, head=128, vocab="bpe-gptoss", n_vocab=800,
                       ctx=32768, rope_base=1.5e5, head_keys=True, n_block=2),
    # gpt-oss (build(): the gptoss flag adds sinks, biases, post_attention_norm and its experts)
    "gpt-oss": dict(arch="gpt-oss", n_embd=256, n_head=8, n_head_kv=2, head=64, vocab="bpe-gptoss", n_vocab=800,
                    ctx=32768, rope_base=1.5e5, head_keys=True, qkv_bias=True, swa=128, n_ff=128, gptoss=True,
                    yarn=dict(factor=32.0, orig_ctx=256, betas=True), moe=dict(n_expert=8, n_used=4, n_ff_exp=128)),
    # gpt-oss's weights with the experts in MXFP4 (as gpt-oss ships them: gguf.quants rounds the same
    # numbers), and its twin with those blocks decoded back to F32 (llama.cpp then multiplies in f32)
    "gpt-oss-mxfp4": dict(arch="gpt-oss", n_embd=256, n_head=8, n_head_kv=2, head=64, vocab="bpe-gptoss",
                          n_vocab=800, ctx=32768, rope_base=1.5e5, head_keys=True, qkv_bias=True, swa=128, n_ff=128,
                          gptoss=True, yarn=dict(factor=32.0, orig_ctx=256, betas=True),
                          moe=dict(n_expert=8, n_used=4, n_ff_exp=128), weights_of="gpt-oss", experts_mxfp4="blocks"),
    "gpt-oss-mxfp4-f32": dict(arch="gpt-oss", n_embd=256, n_head=8, n_head_kv=2, head=64, vocab="bpe-gptoss",
                              n_vocab=800, ctx=32768, rope_base=1.5e5, head_keys=True, qkv_bias=True, swa=128,
                              n_ff=128, gptoss=True, yarn=dict(factor=32.0, orig_ctx=256, betas=True),
                              moe=dict(n_expert=8, n_used=4, n_ff_exp=128), weights_of="gpt-oss",
                              experts_mxfp4="twin"),
    "gemma4moe": dict(arch="gemma4", n_embd=256, n_head=4, n_head_kv=2, head=128, vocab="spm-gemma", n_vocab=520,
                      ctx=32768, rope_base=1e6, tied=True, gemma4="moe"),
    # Written only when named (--only): the published shape of Qwen 3.5 0.8B (docs/design/qwen35.md
    # section 10) in Q8_0, for timing at long context (scripts/bench-hybrid-long). About 0.8 GB.
    "qwen35-0.8b": dict(arch="qwen35", n_embd=1024, n_head=8, n_head_kv=2, head=256, vocab="bpe-qwen35",
                        n_vocab=500, n_vocab_padded=248320, ctx=262144, rope_base=1e7, tied=True, n_layer=24,
                        n_mtp=1, recurrent_array=True, n_ff=3584, gdn=(16, 16, 128), q8_0=True, explicit=True),
}

# The hybrids' shared geometry: full attention every FULL_ATTN_INTERVAL-th layer (3 and 7),
# the rest Gated DeltaNet layers with GDN_HK key heads and GDN_HV value heads (Hv != Hk, so the
# tiled v-head -> k-head mapping matters) of GDN_S dims, a causal conv of GDN_CONV taps; rope on
# the first ROPE_DIMS of each 256-dim head, interleaved M-RoPE sections ROPE_SECTIONS.
FULL_ATTN_INTERVAL = 4
GDN_HK, GDN_HV, GDN_S, GDN_CONV = 2, 4, 64, 4
ROPE_DIMS = 64
ROPE_SECTIONS = [11, 11, 10, 0]

# gemma4: 6 layers, full attention at 2 and 5 (pattern as the converter writes it, true =
# sliding), sliding window 48; full layers 1 KV head of 512 values (key_length), proportional
# RoPE over the whole head (rope.dimension_count 512) with rope_freqs holding 64 ones and 192 x
# 1e30 (partial factor 0.25), base 1e6; sliding layers 2 KV heads of 128 (key_length_swa),
# rope.dimension_count_swa 128, base 1e4. attn_v absent on layer 5 (V from K); layer_output_scale
# on every layer but 3; final soft-cap 30 written.
# gemma4-e (the E2B/E4B features): 8 layers, full at 2, 4 and 7, 1 KV head everywhere; the last 3
# share KV (K0 = 5: layers 5 and 6 read layer 3, layer 7 reads layer 4), attn_k/attn_k_norm
# absent on 5 and 7 and present (unused) on 6; per-layer embeddings of 64
# (per_layer_token_embd [512, V], per_layer_model_proj, per_layer_proj_norm; inp_gate, proj,
# post_norm per layer); feed_forward_length per layer (1024 on the shared layers, as E2B's
# double-wide MLP); no final soft-cap key (llama.cpp's default 30 applies).
# gemma4moe (the 26B-A4B's experts): 4 layers, full at 1 and 3 (K-as-V, as the 26B's), a dense
# FFN of 256 that is the shared expert in every layer, 8 experts of 128 with top 2: fused
# ffn_gate_up_exps on layers 0-1, separate gate/up on 2-3; router scale, per-expert scale and
# the three extra norms.
GEMMA4 = {
    "dense": dict(swa=[True, True, False, True, True, False], window=48, d_full=512, d_swa=128, kv_full=1, kv_swa=2,
                  rope_swa=1e4, partial=0.25, no_v=[5], out_scale=[0.7, 1.3, 0.6, None, 1.4, 0.8], softcap=30.0,
                  shared=0, no_k=[], pe=0, n_ff=None),
    "e": dict(swa=[True, True, False, True, False, True, True, False], window=48, d_full=512, d_swa=128, kv_full=1,
              kv_swa=1, rope_swa=1e4, partial=0.25, no_v=[], out_scale=[0.8, 1.2, 0.7, 1.3, 0.9, 1.1, None, 1.25],
              softcap=None, shared=3, no_k=[5, 7], pe=64, n_ff=[512] * 5 + [1024] * 3),
    "tok": dict(swa=[True, False], window=48, d_full=512, d_swa=128, kv_full=1, kv_swa=2, rope_swa=1e4,
                partial=0.25, no_v=[], out_scale=[None, None], softcap=30.0, shared=0, no_k=[], pe=0, n_ff=None),
    "moe": dict(swa=[True, False, True, False], window=48, d_full=512, d_swa=128, kv_full=1, kv_swa=2,
                rope_swa=1e4, partial=0.25, no_v=[1, 3], out_scale=[0.7, 1.3, None, 0.8], softcap=30.0,
                shared=0, no_k=[], pe=0, n_ff=None, dense_ff=256,
                moe=dict(n_expert=8, n_used=2, n_ff_exp=128, fused=[0, 1])),
}
EXP_SCALE_RANGE = (0.5, 1.5)  # gemma4moe's ffn_down_exps.scale (the converter's router.per_expert_scale)
ROUTER_SCALE_STD = 0.3        # ffn_gate_inp.scale: mean 1, so each channel's weight in the routing differs
PE_GATE_STD = 0.5  # inp_gate on the raw residual (rms ~2): gelu inputs of rms ~1

# Scales of the random weights, chosen by measuring llama.cpp's logits and a float64 forward
# pass on these files. A std of c/sqrt(n_in) gives outputs of rms about c for inputs of rms 1
# (most inputs are rms-normed). q and k: c such that the scores of one query have a std of about SCORE_STD
# across its keys (divided by attn_factor, which rope multiplies into q and k); qwen3
# normalizes q and k per head, so there the norm weights (mean QK_NORM_MEAN) set it. The
# output layer gives logits of std about LOGIT_STD. A tied output reuses the embeddings, which
# then have that std too and stay small beside the layers' outputs, or the logits would only
# repeat the input token; gemma2 multiplies its input by sqrt(n_embd), so its embeddings are
# smaller still (embd_std) and its final norm (out_norm_mean) restores the logit scale.
SCORE_STD = 2.5
LOGIT_STD = 4.0
QK_NORM_MEAN = 1.6
EMBD_STD = 1.0     # untied token embeddings
BIAS_STD = 0.3     # qwen2's q/k/v biases
NORM_STD = 0.1     # norm weights: mean (1 unless said) + NORM_STD * n
# Hybrids (qwen35, qwen35moe). Pre-activations in units of rms, for inputs of rms 1:
ATTN_GATE_STD = 1.5   # attn_q (query half normed away; gate half: sigmoid(gate) spread over ~0.1-0.9)
CONV_IN_STD = 1.5     # attn_qkv: conv inputs, so SiLU after the conv is neither linear nor off
CONV_TAP_STD = 0.5    # ssm_conv1d taps, each as large as the others
Z_STD = 1.5           # attn_gate: silu(z) of the gated norm
BETA_STD = 1.0        # ssm_beta: beta = sigmoid(.) over ~0.2-0.8
ALPHA_STD = 1.0       # ssm_alpha; plus ssm_dt.bias (mean DT_BIAS_MEAN, std DT_BIAS_STD)
DT_BIAS_MEAN, DT_BIAS_STD = -1.0, 0.5
SSM_A_RANGE = (0.05, 1.2)  # ssm_a = -(uniform in this range): decays exp(softplus(.) * ssm_a) ~0.3-0.99
SSM_OUT_STD = 1.5     # ssm_out (its input, the gated norm's output, has rms ~0.5)
ROUTER_STD = 2.0      # ffn_gate_inp: router logits of std ~2, so the top-2 changes from token to token
SHEXP_GATE_STD = 1.5  # ffn_gate_inp_shexp: sigmoid(.) of the shared expert
# gpt-oss: sink logits of mean SINK_MEAN (a query's log-sum-exp over 64 to 4096 keys of score std
# 2.5 is about 7 to 11, so a sink takes a share that matters), gate and up pre-activations of std
# EXPERT_GLU_STD (a few per cent beyond swiglu_oai's clamp at 7), router and expert biases of BIAS_STD.
SINK_MEAN, SINK_STD = 8.0, 2.0
EXPERT_GLU_STD = 3.0


# ---- deterministic numbers ------------------------------------------------------------------
U64 = np.uint64
GAMMA = 0x9E3779B97F4A7C15
M64 = (1 << 64) - 1


def _mix(z):
    """splitmix64's finalizer on a uint64 array (wrapping arithmetic)."""
    z = (z ^ (z >> U64(30))) * U64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> U64(27))) * U64(0x94D049BB133111EB)
    return z ^ (z >> U64(31))


def _mix_int(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def stream_key(seed, name):
    """64-bit key of one tensor: FNV-1a of its name, mixed with the seed."""
    h = 0xCBF29CE484222325
    for b in name.encode():
        h = ((h ^ b) * 0x100000001B3) & M64
    return _mix_int((h ^ _mix_int((seed + GAMMA) & M64)) & M64)


def uniforms(key, n):
    """n uniforms in [0, 1): element i is splitmix64's output at counter i of stream key."""
    with np.errstate(over="ignore"):
        state = U64(key) + np.arange(1, n + 1, dtype=U64) * U64(GAMMA)
        return (_mix(state) >> U64(11)).astype(np.float64) * (1.0 / (1 << 53))


def normals(key, shape):
    """Unit-variance normal-like numbers: (sum of 4 uniforms - 2) * sqrt(3); only exact adds and
    one multiply, so the result is the same on every platform."""
    n = int(np.prod(shape))
    u = uniforms(key, 4 * n).reshape(n, 4)
    return (((u[:, 0] + u[:, 1]) + (u[:, 2] + u[:, 3])) - 2.0) * math.sqrt(3.0)


def rand_tensor(seed, name, shape, std, mean=0.0):
    return (mean + std * normals(stream_key(seed, name), shape)).reshape(shape).astype(np.float32)


def normals16(key, start, n):
    """The big model's cheaper normal-like numbers (one splitmix64 output per value, not four):
    the output at counter start+1+i split into four 16-bit uniforms, summed, centred and scaled to
    unit variance; float32 arithmetic on exact integers, so again the same on every platform."""
    with np.errstate(over="ignore"):
        z = _mix(U64(key) + np.arange(start + 1, start + n + 1, dtype=U64) * U64(GAMMA))
    m = U64(0xFFFF)
    s = ((z & m) + ((z >> U64(16)) & m)) + (((z >> U64(32)) & m) + (z >> U64(48)))
    return (s.astype(np.float32) - np.float32(2 * 65535)) * np.float32(math.sqrt(3.0) / 65536)


def rand_tensor16(seed, name, shape, std, mean=0.0, q8_0=False):
    """rand_tensor by normals16, drawn in chunks of whole rows (the values do not depend on the
    chunking); with q8_0 each chunk is quantized at once by gguf's Q8_0 (ggml's reference
    rounding), so only the quantized bytes of a whole tensor are held."""
    import gguf

    key = stream_key(seed, name)
    cols = shape[-1]
    rows = int(np.prod(shape[:-1]))
    step = max(1, (1 << 18) // cols)
    parts = []
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        x = (np.float32(mean) + np.float32(std) * normals16(key, r0 * cols, (r1 - r0) * cols)).reshape(r1 - r0, cols)
        parts.append(gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0) if q8_0 else x)
    out = np.concatenate(parts, axis=0)
    return out.reshape(tuple(shape[:-1]) + (out.shape[-1],))


# ---- vocabularies ---------------------------------------------------------------------------
# Training text of the mini BPE (written for this script): prose and a little code, so that the
# merges hold common English pieces, digits and operators.
TEXT = r"""
A small model needs a small vocabulary. This one is learned from the text you are reading now:
the script counts every pair of neighbouring symbols, joins the most frequent pair into a new
symbol, and repeats until the list is long enough. The same steps give the merges of a byte
level tokenizer and the pieces of a sentence piece tokenizer, so both kinds of vocabulary can be
tested without downloading anything.

The weights are random, but they are not arbitrary. Each matrix is drawn with a scale that keeps
the hidden state of every layer in a sensible range: the attention of a query must prefer some
keys over others, the feed forward block must add something to the residual stream, and the
output layer must give logits whose spread is a few units. When the numbers are right, the
distribution over the next token changes clearly from one position to the next, and a small
error in the rotation of a key or in the order of two halves of a matrix shows up at once.

Three of the models use a byte level vocabulary and three use pieces with byte fallback. The
first kind maps every byte to a printable character and then applies merges; the second kind
replaces each space with a special mark, looks for the pieces with the best score, and writes
any character it does not know as one token per byte. Numbers like 1, 22, 333 and 2024 are
common in real text, and so are dates such as 2024-06-01, times such as 12:30, prices such as
$4.99 and versions such as 3.10.2.

The quick brown fox jumps over the lazy dog. She sells sea shells by the sea shore. It was the
best of times and the worst of times; then the rain stopped, the wind turned, and the long road
home was dry again. They're here, we'll see, it's fine, I'd say, you've won, don't stop.

int main(int argc, char **argv) {
    std::vector<float> values(argc, 0.0f);
    for (int i = 0; i < argc; ++i) {
        values[i] = static_cast<float>(std::strlen(argv[i])) * 0.5f;
    }
    if (values.empty()) return 1;
    printf("%d values, first %f\n", (int)values.size(), values[0]);
    return 0;
}

def softmax(xs):
    top = max(xs)
    exps = [math.exp(x - top) for x in xs]
    total = sum(exps)
    return [e / total for e in exps]

class Counter:
    def __init__(self, name):
        self.name = name
        self.count = 0

    def add(self, n=1):
        self.count += n
        return self.count

for name, value in sorted(table.items()):
    if value is None or value == "":
        continue
    print(f"{name}: {value}")

The tokenizer of a model decides how text becomes numbers, and the forward pass decides what the
numbers mean. A test of the forward pass does not need meaningful text: any sequence of token
ids will do, as long as both programs see the same ids. A test of the tokenizer needs text with
spaces, new lines, tabs, punctuation, digits, accents and characters from other scripts, and it
needs a vocabulary that is small enough to read but complete enough to cover every byte.
"""

# gptoss-tok's text besides TEXT: what GPT-4o's pre-tokenizer cuts apart and others do not (case
# changes, contractions in capitals, digit runs, punctuation runs with slashes and newlines),
# letters of other scripts, combining marks, and a conversation in gpt-oss's harmony format.
GPTOSS_TEXT = """
CamelCase and camelCase names: HTTPServer, XMLHttpRequest, getHTTPResponse, iPhone, McDonald, ALLCAPS.
getHTTPResponse setHTTPHeader getXMLValue toUpperCase iPhone eBay; getHTTPResponse setHTTPHeader getXMLValue.
DON'T SHOUT, WE'RE FINE, IT'S OK, YOU'VE WON, THEY'LL SEE, I'M HERE, HE'D GO; don't, it's, we'll.
Numbers: 7, 42, 365, 2048, 12345, 9876543, 3.14159, 1,000,000, 2025-12-05, 0x7FFF, v1.2.3.
Paths and comments: /usr/local/bin, http://example.com/a/b/c, // note\n, /* block */, ../../x, ==> !== ...
Кириллица и Латиница: Привет, Мир! ПРИВЕТ мир. Ελληνικά: Καλημέρα ΚΟΣΜΕ. 日本語のテキスト、中文文本。
Marks: cafe\u0301, nai\u0308ve, नमस्ते दुनिया, हिन्दी में, สวัสดีชาวโลก, שָׁלוֹם, مَرْحَبًا.
<|start|>user<|message|>What is 2+2?<|end|><|start|>assistant<|channel|>analysis<|message|>Simple sum.<|end|>
<|start|>assistant<|channel|>final<|message|>4<|return|>
"""
GPT4O_SPLIT = re.compile(r"[^\r\n\w]?[^\W\d_a-z]*[^\W\d_A-Z]+(?:'(?:[sStTmMdD]|[rR][eE]|[vV][eE]|[lL][lL]))?|"
                         r"[^\r\n\w]?[^\W\d_a-z]+[^\W\d_A-Z]*(?:'(?:[sStTmMdD]|[rR][eE]|[vV][eE]|[lL][lL]))?|"
                         r"\d{1,3}| ?[^\s\w]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
COARSE_SPLIT = re.compile(r"[^\r\n\w]?[^\W\d_]+(?:'(?:[sStTmMdD]|[rR][eE]|[vV][eE]|[lL][lL]))?| ?\d+| ?[^\s\w]+\s*|\s+")
BPE_SPLIT = re.compile(r"'(?:s|t|re|ve|m|ll|d)| ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")
SPM_SPLIT = re.compile(r" ?[A-Za-z]+| ?[0-9]| ?[^\sA-Za-z0-9]+")
SPACE_MARK = "\u2581"


def byte_chars():
    """GPT-2's byte -> printable character map, as a list in its vocabulary order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1)) + \
        list(range(ord("\u00ae"), ord("\u00ff") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return bs, [chr(c) for c in cs]


def learn_merges(words, n_merges):
    """Plain BPE on a word -> count table (each word a tuple of symbols). Ties go to the
    smallest pair, so the result does not depend on dict order."""
    words = dict(words)
    merges = []
    while len(merges) < n_merges:
        pairs = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + c
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        if pairs[best] < 2:
            break
        merges.append(best)
        joined = best[0] + best[1]
        new = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(joined)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] = new.get(tuple(out), 0) + c
        words = new
    return merges


def count_words(pieces):
    counts = {}
    for p in pieces:
        counts[p] = counts.get(p, 0) + 1
    return counts


# token types of llama.cpp's GGUF vocabularies
NORMAL, UNKNOWN, CONTROL, UNUSED, BYTE = 1, 2, 3, 5, 6

BPE_SPECIALS = {
    "bpe-qwen2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    "bpe-qwen35": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
    # gpt-oss's o200k_harmony markers, control in the file (llama.cpp makes <|start|> <|message|>
    # <|channel|> <|constrain|> user-defined, and <|end|> too when <|return|> and <|call|> are EOG)
    "bpe-gptoss": ["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>", "<|start|>",
                   "<|end|>", "<|message|>", "<|call|>"],
    "bpe-llama3": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
}


def bpe_vocab(kind, n_vocab):
    bs, chars = byte_chars()
    enc = {b: c for b, c in zip(bs, chars)}
    specials = BPE_SPECIALS[kind]
    if kind == "bpe-gptoss":
        # merges learned on GPT-4o's words (approximated by GPT4O_SPLIT) and on coarser ones
        # (COARSE_SPLIT: letters of any case together, digit runs whole), so that some merges
        # cross GPT-4o's cuts and a pre-tokenizer that cuts less gives other ids
        text = TEXT + GPTOSS_TEXT
        words = count_words(tuple(enc[b] for b in w.encode())
                            for w in GPT4O_SPLIT.findall(text) + COARSE_SPLIT.findall(text))
    else:
        words = count_words(tuple(enc[b] for b in w.encode()) for w in BPE_SPLIT.findall(TEXT))
    n_merges = n_vocab - 256 - len(specials)
    merges = learn_merges(words, n_merges)
    tokens = list(chars)
    seen = set(tokens)
    for a, b in merges:
        if a + b not in seen:
            seen.add(a + b)
            tokens.append(a + b)
    if len(tokens) != n_vocab - len(specials):
        raise SystemExit("make-test-models.py: internal error: the training text gives %d merge tokens, "
                         "%d wanted" % (len(tokens) - 256, n_merges))
    types = [NORMAL] * len(tokens) + [CONTROL] * len(specials)
    tokens += specials
    return dict(tokens=tokens, types=types, merges=["%s %s" % m for m in merges])


# Phi-3's added tokens come last; llama.cpp looks <|endoftext|> up by text when general.name holds
# "phi3" and fails to load the vocabulary without it.
SPM_TAIL = {"spm-phi3": ["<|endoftext|>", "<|assistant|>", "<|end|>", "<|user|>"]}


def spm_vocab(kind, n_vocab):
    """SentencePiece-style: <unk> <s> </s>, 256 byte tokens, merged pieces (score -rank), the
    single characters of the training text (lowest scores), then any added control tokens."""
    specials = ["<unk>", "<s>", "</s>"]
    tail = SPM_TAIL.get(kind, [])
    pieces = [p.replace(" ", SPACE_MARK) for p in SPM_SPLIT.findall(TEXT)]
    alphabet = sorted(set("".join(pieces)))
    n_merges = n_vocab - len(specials) - 256 - len(alphabet) - len(tail)
    merges = learn_merges(count_words(tuple(p) for p in pieces), n_merges)
    merged = []
    for a, b in merges:
        if a + b not in merged and a + b not in alphabet:
            merged.append(a + b)
    tokens = specials + ["<0x%02X>" % i for i in range(256)] + merged + alphabet + tail
    if len(tokens) != n_vocab:
        raise SystemExit("make-test-models.py: internal error: SPM vocabulary of %d tokens, %d wanted"
                         % (len(tokens), n_vocab))
    types = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256 + [NORMAL] * (len(merged) + len(alphabet))
    types += [CONTROL] * len(tail)
    scores = [0.0] * (3 + 256) + [-float(i) for i in range(len(merged))] + \
        [-float(len(merged) + i) for i in range(len(alphabet))] + [0.0] * len(tail)
    return dict(tokens=tokens, types=types, scores=scores)


GEMMA4_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>"]
GEMMA4_NEWLINES = ["\n", "\n\n", "\n\n\n"]
# Gemma 4's chat markers (the names its chat template writes), control tokens at the end.
GEMMA4_CHAT = ["<|turn>", "<turn|>", "<|tool>", "<tool|>", "<|tool_call>", "<tool_call|>", "<|tool_response>",
               "<tool_response|>", "<|channel>", "<channel|>", '<|"|>']


def gemma4_vocab(n_vocab):
    """Gemma 4's kind (tokenizer.ggml.model "gemma4"): BPE over raw UTF-8 with spaces as U+2581,
    learned on whole lines (merges may cross words, as SentencePiece's); <pad> <eos> <bos> <unk>,
    newline runs as tokens, 256 byte tokens <0xXX>, the single characters, the merged pieces, and
    its chat markers as control tokens (GEMMA4_CHAT)."""
    lines = [ln.replace(" ", SPACE_MARK) for ln in TEXT.split("\n") if ln]
    alphabet = sorted(set("".join(lines)))
    fixed = GEMMA4_SPECIALS + GEMMA4_NEWLINES + ["<0x%02X>" % i for i in range(256)] + alphabet
    merges, merged = [], []
    for a, b in learn_merges(count_words(tuple(ln) for ln in lines), n_vocab):
        if a + b in fixed or a + b in merged:
            continue
        if len(fixed) + len(merged) + len(GEMMA4_CHAT) == n_vocab:
            break
        merges.append((a, b))
        merged.append(a + b)
    tokens = fixed + merged + GEMMA4_CHAT
    if len(tokens) != n_vocab:
        raise SystemExit("make-test-models.py: internal error: gemma4 vocabulary of %d tokens, %d wanted"
                         % (len(tokens), n_vocab))
    types = [CONTROL, CONTROL, CONTROL, UNKNOWN] + [NORMAL] * len(GEMMA4_NEWLINES) + [BYTE] * 256
    types += [NORMAL] * (len(alphabet) + len(merged)) + [CONTROL] * len(GEMMA4_CHAT)
    return dict(tokens=tokens, types=types, merges=["%s %s" % m for m in merges])


def add_vocab(w, spec):
    kind, n_vocab = spec["vocab"], spec["n_vocab"]
    if kind == "bpe-gemma4":
        v = gemma4_vocab(n_vocab)
        w.add_tokenizer_model("gemma4")
        w.add_tokenizer_pre("gemma4")
        w.add_token_list(v["tokens"])
        w.add_token_types(v["types"])
        w.add_token_merges(v["merges"])
        w.add_pad_token_id(0)
        w.add_eos_token_id(1)
        w.add_bos_token_id(2)
        w.add_unk_token_id(3)
        w.add_add_bos_token(True)
        w.add_add_space_prefix(False)
        return n_vocab
    if kind.startswith("bpe"):
        v = bpe_vocab(kind, n_vocab)
        pad = spec.get("n_vocab_padded", n_vocab) - n_vocab
        # ids no text maps to, as llama.cpp's converter pads a vocabulary to the embedding rows
        v["tokens"] += ["[PAD%d]" % i for i in range(n_vocab, n_vocab + pad)]
        v["types"] += [UNUSED] * pad
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre({"bpe-qwen2": "qwen2", "bpe-qwen35": "qwen35", "bpe-gptoss": "gpt-4o"}.get(kind, "llama-bpe"))
        w.add_token_list(v["tokens"])
        w.add_token_types(v["types"])
        w.add_token_merges(v["merges"])
        first_special = n_vocab - len(BPE_SPECIALS[kind])
        if kind == "bpe-gptoss":  # as gpt-oss's GGUF: <|startoftext|> BOS (not added), <|return|> EOS
            w.add_bos_token_id(first_special)
            w.add_eos_token_id(first_special + 2)
            w.add_pad_token_id(first_special + 1)
            w.add_add_bos_token(False)
        elif kind in ("bpe-qwen2", "bpe-qwen35"):  # Qwen: <|endoftext|> is both, and no BOS is added
            w.add_bos_token_id(first_special)
            w.add_eos_token_id(first_special)
            w.add_add_bos_token(False)
        else:  # Llama 3: <|begin_of_text|> / <|end_of_text|>, BOS added
            w.add_bos_token_id(first_special)
            w.add_eos_token_id(first_special + 1)
            w.add_add_bos_token(True)
    else:
        v = spm_vocab(kind, n_vocab)
        w.add_tokenizer_model("llama")
        w.add_tokenizer_pre("default")  # what the converter writes for SentencePiece vocabularies
        w.add_token_list(v["tokens"])
        w.add_token_scores(v["scores"])
        w.add_token_types(v["types"])
        w.add_unk_token_id(0)
        w.add_bos_token_id(1)
        w.add_eos_token_id(v["tokens"].index("<|endoftext|>") if kind == "spm-phi3" else 2)
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)
        if kind == "spm-gemma":
            w.add_add_space_prefix(False)
    return len(v["tokens"])


# ---- rope factors ---------------------------------------------------------------------------
def llama3_rope_factors(head, base, factor=8.0, low=1.0, high=4.0, orig=8192):
    """The Llama 3 rule of llama.cpp's converter: 1 for short wavelengths, factor for long
    ones, a smooth blend between."""
    out = []
    for i in range(0, head, 2):
        wavelen = 2 * math.pi * base ** (i / head)
        if wavelen < orig / high:
            out.append(1.0)
        elif wavelen > orig / low:
            out.append(factor)
        else:
            s = (orig / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - s) / factor + s))
    return np.array(out, dtype=np.float32)


def longrope_factors(n):
    """Positive, distinct, increasing with the dimension like Phi-3's: long 1..~30, short 1..~1.5."""
    long_f = np.array([1.0 + 29.0 * (i / (n - 1)) ** 2 + 0.01 * i for i in range(n)], dtype=np.float32)
    short_f = np.array([1.0 + 0.5 * (i / (n - 1)) ** 3 + 0.001 * i for i in range(n)], dtype=np.float32)
    return long_f, short_f


# ---- models ---------------------------------------------------------------------------------
def build(name, spec, path, seed):
    import gguf

    if "n_layer" in spec:
        return build_hybrid(name, spec, path, seed)
    if spec.get("gemma4"):
        return build_gemma4(name, spec, path, seed)
    w = gguf.GGUFWriter(path, spec["arch"])
    arch = spec["arch"]
    attn_factor = 1.0
    E, H, HKV, D = spec["n_embd"], spec["n_head"], spec["n_head_kv"], spec["head"]
    n_ff = spec.get("n_ff", N_FF)
    moe = spec.get("moe")
    w.add_name(name)
    w.add_context_length(spec["ctx"])
    w.add_embedding_length(E)
    n_block = spec.get("n_block", N_LAYER)
    w.add_block_count(n_block)
    w.add_feed_forward_length(n_ff)
    if moe:
        w.add_expert_count(moe["n_expert"])
        w.add_expert_used_count(moe["n_used"])
        if "n_ff_exp" in moe:
            w.add_expert_feed_forward_length(moe["n_ff_exp"])
    w.add_head_count(H)
    w.add_head_count_kv(HKV)
    w.add_layer_norm_rms_eps(RMS_EPS)
    if spec["rope_base"] is not None:
        w.add_rope_freq_base(spec["rope_base"])
    if spec.get("head_keys"):
        w.add_key_length(D)
        w.add_value_length(D)
    if arch in ("llama", "phi3"):
        w.add_rope_dimension_count(D)
    if arch == "llama":
        w.add_vocab_size(spec["n_vocab"])
    if "swa" in spec:
        w.add_sliding_window(spec["swa"])
    if "attn_softcap" in spec:
        w.add_attn_logit_softcapping(spec["attn_softcap"])
        w.add_final_logit_softcapping(spec["final_softcap"])
    if spec.get("longrope"):
        scale = spec["ctx"] / spec["orig_ctx"]
        w.add_rope_scaling_type(gguf.RopeScalingType.LONGROPE)
        w.add_rope_scaling_orig_ctx_len(spec["orig_ctx"])
        attn_factor = math.sqrt(1 + math.log(scale) / math.log(spec["orig_ctx"]))
        w.add_rope_scaling_attn_factors(attn_factor)
    if spec.get("yarn"):
        # as the converter writes YaRN (conversion/base.py): type, factor, original context; the
        # yarn_beta_* keys only where the HF config names them (gpt-oss's). rope multiplies q and k
        # by 1 + 0.1 ln(factor).
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(spec["yarn"]["factor"])
        w.add_rope_scaling_orig_ctx_len(spec["yarn"]["orig_ctx"])
        if spec["yarn"].get("betas"):
            w.add_rope_scaling_yarn_beta_fast(32.0)
            w.add_rope_scaling_yarn_beta_slow(1.0)
        attn_factor = 1 + 0.1 * math.log(spec["yarn"]["factor"])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_MXFP4_MOE if spec.get("experts_mxfp4") == "blocks"
                    else gguf.LlamaFileType.ALL_F32)
    n_vocab = add_vocab(w, spec)

    qk = math.sqrt(SCORE_STD / E) / attn_factor
    unit_in = 1 / math.sqrt(E)  # v, gate, up: outputs of rms 1

    key = spec.get("weights_of", name)  # whose weights (gpt-oss-mxfp4: gpt-oss's numbers)

    def t(tname, shape, std, mean=0.0):
        w.add_tensor(tname, rand_tensor(seed, key + "/" + tname, shape, std, mean))

    def norm(tname, n, mean=1.0):
        t(tname, (n,), NORM_STD, mean)

    def experts(tname, shape, std):
        # experts_mxfp4: "blocks" writes gguf.quants' MXFP4 rounding of the numbers, "twin" those
        # blocks decoded to F32
        x = rand_tensor(seed, key + "/" + tname, shape, std)
        how = spec.get("experts_mxfp4")
        if how is None:
            w.add_tensor(tname, x)
            return
        qt = gguf.GGMLQuantizationType.MXFP4
        blocks = gguf.quants.quantize(x, qt)
        if how == "blocks":
            w.add_tensor(tname, blocks, raw_dtype=qt)
        else:
            w.add_tensor(tname, gguf.quants.dequantize(blocks, qt).astype(np.float32))

    # numpy shapes are (rows, columns) = llama.cpp's (ne1, ne0)
    t("token_embd.weight", (n_vocab, E), spec.get("embd_std", LOGIT_STD * unit_in if spec.get("tied") else EMBD_STD))
    if spec.get("llama3_rope"):
        w.add_tensor("rope_freqs.weight", llama3_rope_factors(D, spec["rope_base"]))
    if spec.get("longrope"):
        long_f, short_f = longrope_factors(D // 2)
        w.add_tensor("rope_factors_long.weight", long_f)
        w.add_tensor("rope_factors_short.weight", short_f)
    for il in range(n_block):
        b = "blk.%d." % il
        norm(b + "attn_norm.weight", E)
        if spec.get("fused"):
            q = rand_tensor(seed, name + "/" + b + "attn_q", (H * D, E), qk)
            k = rand_tensor(seed, name + "/" + b + "attn_k", (HKV * D, E), qk)
            v = rand_tensor(seed, name + "/" + b + "attn_v", (HKV * D, E), unit_in)
            w.add_tensor(b + "attn_qkv.weight", np.concatenate([q, k, v], axis=0))
        else:
            t(b + "attn_q.weight", (H * D, E), qk)
            t(b + "attn_k.weight", (HKV * D, E), qk)
            t(b + "attn_v.weight", (HKV * D, E), unit_in)
        if spec.get("qkv_bias"):
            t(b + "attn_q.bias", (H * D,), BIAS_STD)
            t(b + "attn_k.bias", (HKV * D,), BIAS_STD)
            t(b + "attn_v.bias", (HKV * D,), BIAS_STD)
        if spec.get("qk_norm"):
            norm(b + "attn_q_norm.weight", D, QK_NORM_MEAN)
            norm(b + "attn_k_norm.weight", D, QK_NORM_MEAN)
        t(b + "attn_output.weight", (E, H * D), 1 / math.sqrt(H * D))
        gptoss = spec.get("gptoss")
        if gptoss:
            t(b + "attn_output.bias", (E,), BIAS_STD)
            t(b + "attn_sinks.weight", (H,), SINK_STD, SINK_MEAN)
            norm(b + "post_attention_norm.weight", E)  # gpt-oss: the FFN's input norm
        elif spec.get("post_norms"):
            norm(b + "post_attention_norm.weight", E)
        if not gptoss:
            norm(b + "ffn_norm.weight", E)
        if moe and gptoss:
            X, F = moe["n_expert"], moe["n_ff_exp"]
            t(b + "ffn_gate_inp.weight", (X, E), ROUTER_STD * unit_in)
            t(b + "ffn_gate_inp.bias", (X,), BIAS_STD)
            experts(b + "ffn_gate_exps.weight", (X, F, E), EXPERT_GLU_STD * unit_in)
            t(b + "ffn_gate_exps.bias", (X, F), BIAS_STD)
            experts(b + "ffn_up_exps.weight", (X, F, E), EXPERT_GLU_STD * unit_in)
            t(b + "ffn_up_exps.bias", (X, F), BIAS_STD)
            experts(b + "ffn_down_exps.weight", (X, E, F), 1 / (EXPERT_GLU_STD * math.sqrt(F)))
            t(b + "ffn_down_exps.bias", (X, E), BIAS_STD)
        elif moe:
            X, F = moe["n_expert"], moe.get("n_ff_exp", n_ff)
            if "tie_group" in moe:
                r = moe["tie_group"]
                g = rand_tensor(seed, name + "/" + b + "ffn_gate_inp.weight", (X // r, E), ROUTER_STD * unit_in)
                w.add_tensor(b + "ffn_gate_inp.weight", np.repeat(g, r, axis=0))
            else:
                t(b + "ffn_gate_inp.weight", (X, E), ROUTER_STD * unit_in)
            t(b + "ffn_gate_exps.weight", (X, F, E), unit_in)
            t(b + "ffn_up_exps.weight", (X, F, E), unit_in)
            t(b + "ffn_down_exps.weight", (X, E, F), 1 / math.sqrt(F))
        else:
            if spec.get("fused"):
                # llama.cpp's SWIGLU on the fused output: silu(first half) * second half
                g = rand_tensor(seed, name + "/" + b + "ffn_gate", (N_FF, E), unit_in)
                u = rand_tensor(seed, name + "/" + b + "ffn_up", (N_FF, E), unit_in)
                w.add_tensor(b + "ffn_up.weight", np.concatenate([g, u], axis=0))
            else:
                t(b + "ffn_gate.weight", (N_FF, E), unit_in)
                t(b + "ffn_up.weight", (N_FF, E), unit_in)
            t(b + "ffn_down.weight", (E, N_FF), 1 / math.sqrt(N_FF))
        if spec.get("post_norms"):
            norm(b + "post_ffw_norm.weight", E)
    norm("output_norm.weight", E, spec.get("out_norm_mean", 1.0))
    if not spec.get("tied"):
        t("output.weight", (n_vocab, E), LOGIT_STD * unit_in)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def build_hybrid(name, spec, path, seed):
    """qwen35 / qwen35moe: Gated DeltaNet layers and gated full-attention layers (FULL_ATTN_INTERVAL),
    a post_attention_norm before each FFN (dense, or routed experts plus a gated shared expert),
    n_mtp trailing multi-token-prediction blocks that llama.cpp loads and never runs."""
    import gguf

    arch = spec["arch"]
    E, H, HKV, D = spec["n_embd"], spec["n_head"], spec["n_head_kv"], spec["head"]
    n_main, n_mtp = spec["n_layer"], spec["n_mtp"]
    n_all = n_main + n_mtp
    n_ff = spec.get("n_ff", N_FF)
    gdn_hk, gdn_hv, gdn_s = spec.get("gdn", (GDN_HK, GDN_HV, GDN_S))
    big = spec.get("q8_0", False)
    key_dim, value_dim = gdn_hk * gdn_s, gdn_hv * gdn_s
    conv_dim = 2 * key_dim + value_dim
    recurrent = [il < n_main and (il + 1) % FULL_ATTN_INTERVAL != 0 for il in range(n_all)]
    moe = spec.get("moe")

    w = gguf.GGUFWriter(path, arch)
    w.add_name(name)
    w.add_context_length(spec["ctx"])
    w.add_embedding_length(E)
    w.add_block_count(n_all)
    if n_mtp:
        w.add_nextn_predict_layers(n_mtp)
    if moe:
        w.add_expert_count(moe["n_expert"])
        w.add_expert_used_count(moe["n_used"])
        w.add_expert_feed_forward_length(moe["n_ff_exp"])
        w.add_expert_shared_feed_forward_length(moe["n_ff_shexp"])
    else:
        w.add_feed_forward_length(n_ff)
    w.add_head_count(H)
    w.add_head_count_kv(HKV)
    w.add_key_length(D)
    w.add_value_length(D)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_rope_freq_base(spec["rope_base"])
    w.add_rope_dimension_count(ROPE_DIMS)
    w.add_rope_dimension_sections(ROPE_SECTIONS)
    w.add_ssm_conv_kernel(GDN_CONV)
    w.add_ssm_state_size(gdn_s)
    w.add_ssm_group_count(gdn_hk)
    w.add_ssm_time_step_rank(gdn_hv)
    w.add_ssm_inner_size(value_dim)
    if spec["recurrent_array"]:  # what the converter writes from layer_types (false for MTP layers)
        w.add_array("%s.attention.recurrent_layers" % arch, recurrent)
    w.add_full_attention_interval(FULL_ATTN_INTERVAL)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0 if big else gguf.LlamaFileType.ALL_F32)
    n_vocab = add_vocab(w, spec)

    unit_in = 1 / math.sqrt(E)
    # The big model is written as it is drawn: tensor infos first, then each tensor's bytes in
    # turn (a list of makers), so no more than one tensor is held. Q8_0 for every matrix whose
    # rows are whole 32-value blocks, F32 for the rest (norms, ssm_dt.bias, ssm_a, ssm_conv1d
    # with its rows of 4 taps), as llama.cpp's converter keeps them.
    pending = []

    def t(tname, shape, std, mean=0.0):
        if not big:
            w.add_tensor(tname, rand_tensor(seed, name + "/" + tname, shape, std, mean))
            return
        q8 = len(shape) >= 2 and shape[-1] % 32 == 0
        if q8:
            byte_shape = tuple(shape[:-1]) + (shape[-1] // 32 * 34,)
            w.add_tensor_info(tname, byte_shape, np.dtype(np.uint8), int(np.prod(byte_shape)),
                              raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            w.add_tensor_info(tname, shape, np.dtype(np.float32), 4 * int(np.prod(shape)))
        pending.append(lambda: rand_tensor16(seed, name + "/" + tname, shape, std, mean, q8))

    def norm(tname, n, mean=1.0):
        t(tname, (n,), NORM_STD, mean)

    def full_attention(b):
        # attn_q holds per head [query (D), gate (D)]; the query is rms-normed, so only the gate
        # half's scale matters. q/k norms of mean QK_NORM_MEAN give scores of std ~SCORE_STD.
        t(b + "attn_q.weight", (2 * H * D, E), ATTN_GATE_STD * unit_in)
        t(b + "attn_k.weight", (HKV * D, E), unit_in)
        t(b + "attn_v.weight", (HKV * D, E), unit_in)
        norm(b + "attn_q_norm.weight", D, QK_NORM_MEAN)
        norm(b + "attn_k_norm.weight", D, QK_NORM_MEAN)
        t(b + "attn_output.weight", (E, H * D), 1 / math.sqrt(H * D))

    def ffn(b):
        if moe:
            X, F, FS = moe["n_expert"], moe["n_ff_exp"], moe["n_ff_shexp"]
            t(b + "ffn_gate_inp.weight", (X, E), ROUTER_STD * unit_in)
            t(b + "ffn_gate_exps.weight", (X, F, E), unit_in)
            t(b + "ffn_up_exps.weight", (X, F, E), unit_in)
            t(b + "ffn_down_exps.weight", (X, E, F), 1 / math.sqrt(F))
            t(b + "ffn_gate_inp_shexp.weight", (E,), SHEXP_GATE_STD * unit_in)
            t(b + "ffn_gate_shexp.weight", (FS, E), unit_in)
            t(b + "ffn_up_shexp.weight", (FS, E), unit_in)
            t(b + "ffn_down_shexp.weight", (E, FS), 1 / math.sqrt(FS))
        else:
            t(b + "ffn_gate.weight", (n_ff, E), unit_in)
            t(b + "ffn_up.weight", (n_ff, E), unit_in)
            t(b + "ffn_down.weight", (E, n_ff), 1 / math.sqrt(n_ff))

    # numpy shapes are (rows, columns) = llama.cpp's (ne1, ne0)
    t("token_embd.weight", (n_vocab, E), LOGIT_STD * unit_in if spec.get("tied") else EMBD_STD)
    for il in range(n_all):
        b = "blk.%d." % il
        norm(b + "attn_norm.weight", E)
        if recurrent[il]:
            # rows of attn_qkv: q (key_dim), k (key_dim), v (value_dim); v heads in tiled order
            t(b + "attn_qkv.weight", (conv_dim, E), CONV_IN_STD * unit_in)
            t(b + "attn_gate.weight", (value_dim, E), Z_STD * unit_in)
            t(b + "ssm_conv1d.weight", (conv_dim, GDN_CONV), CONV_TAP_STD)
            t(b + "ssm_dt.bias", (gdn_hv,), DT_BIAS_STD, DT_BIAS_MEAN)
            lo, hi = SSM_A_RANGE  # -exp(A_log) as the converter stores it, drawn directly
            u = uniforms(stream_key(seed, name + "/" + b + "ssm_a"), gdn_hv)
            ssm_a = (-(lo + (hi - lo) * u)).astype(np.float32)
            if big:
                w.add_tensor_info(b + "ssm_a", ssm_a.shape, ssm_a.dtype, ssm_a.nbytes)
                pending.append(lambda a=ssm_a: a)
            else:
                w.add_tensor(b + "ssm_a", ssm_a)
            t(b + "ssm_beta.weight", (gdn_hv, E), BETA_STD * unit_in)
            t(b + "ssm_alpha.weight", (gdn_hv, E), ALPHA_STD * unit_in)
            norm(b + "ssm_norm.weight", gdn_s)
            t(b + "ssm_out.weight", (E, value_dim), SSM_OUT_STD / math.sqrt(value_dim))
        else:
            full_attention(b)
        norm(b + "post_attention_norm.weight", E)
        ffn(b)
        if il >= n_main:  # MTP block: never run by the main pass; the loader requires these
            t(b + "nextn.eh_proj.weight", (E, 2 * E), 1 / math.sqrt(2 * E))
            norm(b + "nextn.enorm.weight", E)
            norm(b + "nextn.hnorm.weight", E)
    norm("output_norm.weight", E)
    if not spec.get("tied"):
        t("output.weight", (n_vocab, E), LOGIT_STD * unit_in)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    if big:
        w.write_ti_data_to_file()
        for make in pending:
            w.write_tensor_data(make())
    else:
        w.write_tensors_to_file()
    w.close()


def build_gemma4(name, spec, path, seed):
    """gemma4 dense: sliding and full layers of different head sizes (GEMMA4), q/k norms whose
    weights set the attention scores (the attention scale is 1), V normed without a weight,
    post norms, a GELU-gated FFN, layer_output_scale; tied, inputs times sqrt(n_embd) (small
    embeddings and a large final norm as gemma2)."""
    import gguf

    g = GEMMA4[spec["gemma4"]]
    E, H = spec["n_embd"], spec["n_head"]
    n = len(g["swa"])
    k0 = n - g["shared"]
    P = g["pe"]
    dense_ff = g.get("dense_ff", N_FF)
    n_ff = g["n_ff"] or [dense_ff] * n
    moe = g.get("moe")
    heads_kv = [g["kv_swa"] if sl else g["kv_full"] for sl in g["swa"]]
    w = gguf.GGUFWriter(path, spec["arch"])
    w.add_name(name)
    w.add_context_length(spec["ctx"])
    w.add_embedding_length(E)
    w.add_block_count(n)
    w.add_feed_forward_length(n_ff if g["n_ff"] else dense_ff)
    if moe:
        w.add_expert_count(moe["n_expert"])
        w.add_expert_used_count(moe["n_used"])
        w.add_expert_feed_forward_length(moe["n_ff_exp"])
    w.add_head_count(H)
    w.add_head_count_kv(heads_kv)
    if g["shared"]:
        w.add_shared_kv_layers(g["shared"])
    w.add_key_length(g["d_full"])
    w.add_value_length(g["d_full"])
    w.add_key_length_swa(g["d_swa"])
    w.add_value_length_swa(g["d_swa"])
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_rope_freq_base(spec["rope_base"])
    w.add_rope_freq_base_swa(g["rope_swa"])
    w.add_rope_dimension_count(g["d_full"])
    w.add_rope_dimension_count_swa(g["d_swa"])
    w.add_sliding_window(g["window"])
    w.add_sliding_window_pattern(g["swa"])
    w.add_embedding_length_per_layer_input(P)
    if g["softcap"] is not None:
        w.add_final_logit_softcapping(g["softcap"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    n_vocab = add_vocab(w, spec)

    unit_in = 1 / math.sqrt(E)

    def t(tname, shape, std, mean=0.0):
        w.add_tensor(tname, rand_tensor(seed, name + "/" + tname, shape, std, mean))

    def norm(tname, n, mean=1.0):
        t(tname, (n,), NORM_STD * mean, mean)

    t("token_embd.weight", (n_vocab, E), 0.02)
    rot = int(g["d_full"] * g["partial"]) // 2
    w.add_tensor("rope_freqs.weight", np.array([1.0] * rot + [1e30] * (g["d_full"] // 2 - rot), dtype=np.float32))
    if P:
        # token rows of rms 1 / sqrt(P) (times sqrt(P) in the graph); the projection's output is normed
        t("per_layer_token_embd.weight", (n_vocab, P * n), 1 / math.sqrt(P))
        t("per_layer_model_proj.weight", (P * n, E), unit_in)
        norm("per_layer_proj_norm.weight", P)
    for il in range(n):
        b = "blk.%d." % il
        D = g["d_swa"] if g["swa"][il] else g["d_full"]
        KV = heads_kv[il]
        # q and k are normed per head: scores q.k of std SCORE_STD need weights of sqrt(SCORE_STD / sqrt(D))
        qk_w = math.sqrt(SCORE_STD / math.sqrt(D))
        norm(b + "attn_norm.weight", E)
        t(b + "attn_q.weight", (H * D, E), unit_in)
        if il not in g["no_k"]:
            t(b + "attn_k.weight", (KV * D, E), unit_in)
        if il not in g["no_v"] and il < k0:
            t(b + "attn_v.weight", (KV * D, E), unit_in)
        norm(b + "attn_q_norm.weight", D, qk_w)
        if il not in g["no_k"]:
            norm(b + "attn_k_norm.weight", D, qk_w)
        t(b + "attn_output.weight", (E, H * D), 1 / math.sqrt(H * D))
        norm(b + "post_attention_norm.weight", E)
        norm(b + "ffn_norm.weight", E)
        F = n_ff[il]
        t(b + "ffn_gate.weight", (F, E), unit_in)
        t(b + "ffn_up.weight", (F, E), unit_in)
        t(b + "ffn_down.weight", (E, F), 1 / math.sqrt(F))
        norm(b + "post_ffw_norm.weight", E)
        if moe:
            X, FE = moe["n_expert"], moe["n_ff_exp"]
            # the router's input is rms-normed / sqrt(E) (rms 1 / sqrt(E)): logits of std ROUTER_STD
            t(b + "ffn_gate_inp.weight", (X, E), ROUTER_STD)
            t(b + "ffn_gate_inp.scale", (E,), ROUTER_SCALE_STD, 1.0)
            norm(b + "post_ffw_norm_1.weight", E)
            norm(b + "pre_ffw_norm_2.weight", E)
            norm(b + "post_ffw_norm_2.weight", E)
            if il in moe["fused"]:
                t(b + "ffn_gate_up_exps.weight", (X, 2 * FE, E), unit_in)
            else:
                t(b + "ffn_gate_exps.weight", (X, FE, E), unit_in)
                t(b + "ffn_up_exps.weight", (X, FE, E), unit_in)
            t(b + "ffn_down_exps.weight", (X, E, FE), 1 / math.sqrt(FE))
            lo, hi = EXP_SCALE_RANGE
            u = uniforms(stream_key(seed, name + "/" + b + "ffn_down_exps.scale"), X)
            w.add_tensor(b + "ffn_down_exps.scale", (lo + (hi - lo) * u).astype(np.float32))
        if P:
            t(b + "inp_gate.weight", (P, E), PE_GATE_STD * unit_in)
            t(b + "proj.weight", (E, P), 1 / math.sqrt(P))
            norm(b + "post_norm.weight", E)
        if g["out_scale"][il] is not None:
            w.add_tensor(b + "layer_output_scale.weight", np.array([g["out_scale"][il]], dtype=np.float32))
    norm("output_norm.weight", E, 12.0)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_hashes(path):
    out = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip() and not line.startswith("#"):
                    digest, fname = line.split()
                    out[fname] = digest
    except (OSError, ValueError) as e:
        fail("cannot read hashes from %s (%s)" % (path, e), 2)
    return out


def fail(msg, code):
    print("make-test-models.py: " + msg, file=sys.stderr)
    sys.exit(code)


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2
        fail("error: %s (see --help)" % message, 2)


def main():
    ap = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="directory to write NAME.gguf into (created if missing)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="write only these models (%s; %s only when named)" % (
        ", ".join(MODELS), ", ".join(n for n in MODELS if MODELS[n].get("explicit"))))
    ap.add_argument("--check", metavar="FILE", help="compare the SHA-256 of each file written with FILE "
                    "(lines 'sha256  NAME.gguf'); exit 1 on a mismatch")
    ap.add_argument("--write-hashes", metavar="FILE", help="write the SHA-256 of the files written to FILE")
    ap.add_argument("--seed", type=int, default=SEED, help="global seed (default %(default)s; the committed "
                    "hashes are for the default)")
    a = ap.parse_args()
    names = a.only or [n for n in MODELS if not MODELS[n].get("explicit")]
    for n in names:
        if n not in MODELS:
            ap.error("unknown model '%s' (known: %s)" % (n, ", ".join(MODELS)))
    try:
        import gguf  # noqa: F401
    except ImportError:
        fail("the Python package gguf is missing (pip install gguf==0.19.0)", 2)
    expected = read_hashes(a.check) if a.check else None
    try:
        os.makedirs(a.out, exist_ok=True)
    except OSError as e:
        fail("cannot create --out %s (%s)" % (a.out, e.strerror), 2)
    digests = {}
    for n in names:
        final = os.path.join(a.out, n + ".gguf")
        tmp = final + ".tmp%d" % os.getpid()
        try:
            build(n, MODELS[n], tmp, a.seed)
            os.replace(tmp, final)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        digests[n + ".gguf"] = sha256(final)
        print("%s  %s (%d bytes)" % (digests[n + ".gguf"], final, os.path.getsize(final)))
    hash_list(digests, a.write_hashes, expected, a.check)


def hash_list(digests, write_path, expected, check_path):
    """Writes the files' SHA-256 list to write_path (when given) and checks them against
    `expected` (the list read from check_path, or None)."""
    if write_path:
        with open(write_path, "w", encoding="utf-8") as f:
            for fname, d in digests.items():
                f.write("%s  %s\n" % (d, fname))
    if expected is not None:
        for fname, d in digests.items():
            if expected.get(fname) != d:
                fail("%s: SHA-256 %s differs from %s in %s (is gguf 0.19.0 installed?)"
                     % (fname, d, expected.get(fname, "(none)"), check_path), 1)
        print("all %d files match %s" % (len(digests), check_path))


if __name__ == "__main__":
    main()

/*
 * attn_profile.c: the table of kernel profiles (attn_profile.h) and their
 * rules, each with the source it was read from.
 *
 * Sources, read 2026-12-03 (notes: /work/wt/notes/sources15.md):
 *   FORK = vllm-project/flash-attention @ 617264c1 (2026-08-06)
 *   UP   = Dao-AILab/flash-attention @ 0251105a (2026-08-15)
 *   VLLM = vllm-project/vllm, vllm/v1/attention/backends/flashinfer.py
 */
#include <stdio.h>
#include <string.h>

#include "attn_profile_impl.h"
#include "numerics.h"

#define FA3_FP8_MAX_OFFSET ATTN_FA3_FP8_MAX_OFFSET
/* TensorRT-LLM fmha_v2: Softmax_fp_quant_scale<e4m3_t>() = 256.f, "the largest
 * power-of-2 below the e4m3 limit" (fmha/numeric_types.h), applied as
 * - log2f(256) = -8 in the exponent (warpspec/epilogue.h). */
#define TRTLLM_FP8_EXP_OFFSET 8.0f
/* FlashInfer StandardFP8Attention: p_scale = std::numeric_limits<DTypeKV>::max(),
 * 448 for e4m3 (include/flashinfer/attention/hopper/variants.cuh). */
#define FLASHINFER_FP8_P_SCALE FP8_E4M3_MAX

/* Separator of MODE@PROFILE variant names. */

static const char rules_bf16[] =
    "Q, K, V bf16; S = (sum_d q*k in fp32, d ascending) * sm_scale in fp32.\n"
    "Softmax with the final row max (two passes); the gpt-oss sink enters the max and the sum\n"
    "  (openai/gpt-oss gpt_oss/torch/model.py sdpa).\n"
    "P = exp(S - m) in double rounded once to fp32 (the correctly rounded expf but within\n"
    "  2^-29 of a rounding boundary: one rule for the CPU and the GPU, where the C library's\n"
    "  and CUDA's expf differ by an ulp now and then), rounded to bf16 for P.V; l summed in\n"
    "  fp32 over the unrounded P.\n"
    "O = bf16((sum_t bf16(P) v in fp32, t ascending) / l).\n";

static const char rules_fp8kv_fixed[] =
    "K, V written to a paged e4m3 cache as e4m3(x / scale), nearest even, saturating\n"
    "  (vllm csrc/quantization/w8a8/fp8/nvidia/quant_utils.cuh scaled_convert).\n"
    "Dequant gather to a compact bf16 cache: bf16(fp8 * scale)\n"
    "  (vllm PR #24197 trtllm_prefill_attn_kvfp8_dequant).\n"
    "Then bf16 attention (rules of bf16) given sm_scale alone: the scales are applied once,\n"
    "  as vLLM PR #48016 restores.\n";

static const char rules_fp8kv_vllm24197[] =
    "K, V: paged e4m3 cache and dequant gather bf16(fp8 * scale), as fp8kv@fixed.\n"
    "Then bf16 attention given bmm1_scale = q_scale * k_scale * sm_scale and bmm2_scale = v_scale\n"
    "  (vllm vllm/v1/attention/backends/flashinfer.py FlashInferImpl.forward: python floats,\n"
    "  products in double left to right, passed to trtllm_batch_context_with_kv_cache as float).\n"
    "S = (sum_d q*k in fp32) * bmm1_scale: K scaled twice, q_scale on a Q never quantized.\n"
    "O = bf16((sum_t bf16(P) v in fp32) * bmm2_scale / l): V scaled twice.\n"
    "trtllm-gen's kernels are closed cubins: where bmm2_scale is applied is not public; this\n"
    "  profile multiplies the fp32 sum before / l (exact at scale 1.0, so @vllm-24197 = @fixed\n"
    "  there).\n"
    "Reported as vLLM issue #47847, fixed by PR #48016.\n";

/* Rules shared by the FA3 profiles (FORK and UP agree here). */
#define RULES_FA3_COMMON                                                                         \
    "Q = e4m3(q * fp32(1 / q_scale)) (vllm csrc/quantization/w8a8/fp8/common.cu\n"            \
    "  scaled_fp8_quant_kernel, run by the attention layer's query_quant); K, V from the paged\n" \
    "  e4m3 cache (x / scale, nearest even, saturating).\n"                                      \
    "S = q8 . k8 raw, one wgmma chain per key over the head dim: k = 32 steps from a zero\n"     \
    "  accumulator (FORK hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp mma: gemm<zero_init=true>),\n" \
    "  each step by the Hopper fp8 rule of kernels/fp8_mma.h.\n"                                 \
    "s = float(sm_scale * M_LOG2E) * (q_descale * k_descale) in fp32\n"                          \
    "  (FORK mainloop to_underlying_arguments; hopper/flash_fwd_kernel_sm90.h).\n"               \
    "Key tiles of kBlockN keys aligned at key 0, visited from the last (the partial one) to\n"   \
    "  the first (FORK mainloop mma: n_block = n_block_max - 1, then --n_block).\n"              \
    "Running max m over the raw S of the tiles seen, masked keys excluded; at each new tile\n"   \
    "  a = exp2f((m_old - m_new) * s) rescales l and the fp32 O\n"                               \
    "  (hopper/softmax.h Softmax::max_get_scale, rescale_o).\n"                                  \
    "P = exp2f(fma(S, s, -fma(m, s, -8))) in [0, 256]: Max_offset 8 (hopper/softmax.h\n"         \
    "  scale_apply_exp2); l sums the unrounded fp32 P (online_softmax reduce_sum).\n"            \
    "P rounded to e4m3, nearest even, saturating (hopper/utils.h convert_type_out:\n"            \
    "  cvt.rn.satfinite.e4m3x2.f32).\n"                                                          \
    "Sink (FORK only): l += exp2f(fma(float(M_LOG2E), sink, -fma(m, s, -8))) with the final m,\n" \
    "  not in the max, never rounded (hopper/softmax.h Softmax::finalize_aux).\n"                \
    "O = bf16(acc * ((1 / l) * v_descale)) (hopper/softmax.h finalize; 0 when l is 0 or NaN).\n" \
    "exp2f: the kernel's ex2.approx.ftz (--use_fast_math) is modelled by the C library's exp2f.\n"

static const char rules_fp8qkv_fa3[] =
    "vLLM's FlashAttention-3 fork, fp8 on Hopper (FLASH_ATTN backend, --kv-cache-dtype fp8).\n"
    RULES_FA3_COMMON
    "kBlockN (FORK hopper/tile_size.h tile_size_fwd_sm90, fp8, two-level tiles of PR #125):\n"
    "  d <= 64: 128, <= 96: 128, <= 128: 192, <= 192: 96, else 128 (local: 64). The fork\n"
    "  commit a vLLM release pins (cmake/external_projects/vllm_flash_attn.cmake GIT_TAG) may\n"
    "  predate PR #125 and use upstream's widths: check the pin of the vLLM you model.\n"
    "P.V two-level: each tile's P.V chains its k = 32 steps (keys chunked from the tile start)\n"
    "  from a zero accumulator, then one fp32 add into O (FORK hopper/utils.h gemm,\n"
    "  Use_Two_Level = Is_FP8 && !zero_init; PR #104).\n";

static const char rules_fp8qkv_fa3_1level[] =
    "FlashAttention-3 fp8 on Hopper without two-level accumulation: upstream (UP, no sinks), or\n"
    "  vLLM's fork built with FLASH_ATTENTION_DISABLE_FP8_TWO_LEVEL_ACCUMULATION=TRUE (FORK\n"
    "  hopper/setup.py; it also restores upstream's tile table).\n"
    RULES_FA3_COMMON
    "kBlockN (UP hopper/tile_size.h tile_size_fwd_sm90, fp8, paged KV without TMA as with\n"
    "  vLLM's 16-token pages): d <= 64: 160, <= 96: 128, <= 128: 160, <= 192: 160 (local: 128),\n"
    "  else 128 (local: 64).\n"
    "P.V single-level: the running O (rescaled in fp32 between tiles) is the incoming\n"
    "  accumulator of every k = 32 step (UP hopper/utils.h gemm).\n";

static const char rules_fp8qkv_trtllm[] =
    "TensorRT-LLM fmha_v2 fp8 context FMHA on Hopper (sm90 warp-specialized qgmma kernels;\n"
    "  read in flashinfer csrc/fmha_v2/, the kernel table in NVIDIA/TensorRT-LLM\n"
    "  cpp/kernels/fmha_v2/setup.py). vLLM's TRT-LLM path is FlashInfer's trtllm-gen (Blackwell,\n"
    "  closed cubins): this profile is the open proxy of that family.\n"
    "Q = e4m3(q * fp32(1 / q_scale)); K, V from the paged e4m3 cache.\n"
    "S = q8 . k8 raw, wgmma k = 32 chain over the head dim from 0 (kernels/fp8_mma.h).\n"
    "s = fp32(q_scale * k_scale * sm_scale in double) * float(M_LOG2E) in fp32\n"
    "  (csrc/fmha_v2_run.cu set_alpha(scale_bmm1, fused_scale_bmm1 * float(M_LOG2E))).\n"
    "Tiles of kv_loop_step keys, first to last (fmha/warpspec/compute.h Compute::run):\n"
    "  d <= 128: 256, else 128 (setup.py enumerate_qgmma_flash_warpspec_kernels).\n"
    "Running max of raw S including the tile; corr = exp2f((m_old - m_new) * s); O *= corr in\n"
    "  fp32 before the tile's P.V; l = fma(l_old, corr, tile sum)\n"
    "  (warpspec/epilogue.h Softmax::compute_and_update_scale; the FFMA is INFERENCE).\n"
    "P = exp2f(fma.rz(S, s, -fma(m, s, -log2f(256)))) in [0, 256] (fmha/utils.h custom_exp2f:\n"
    "  fma.rz.ftz.f32 then ex2.approx.ftz.f32, modelled by the C library's exp2f);\n"
    "  l sums the unrounded fp32 P; P -> e4m3 cvt.rn.satfinite (fmha/utils.h float4_to_e4m3x4).\n"
    "P.V single-level: the running O is the wgmma accumulator of every k = 32 step of every tile\n"
    "  (compute_single_tile ctile_o.compute).\n"
    "Sink: l += exp2f(sink * M_LOG2E - m * s + log2f(256)), double then fp32, final m\n"
    "  (warpspec/epilogue.h add_attention_sink).\n"
    "O = bf16((acc * (1 / l)) * bmm2_scale), bmm2_scale = v_scale (Tile_o_epilogue::scale,\n"
    "  fmha/gmem_tile_o_packed.h Acc_packer; 1 / l is 1 when l is 0).\n";

static const char rules_fp8qkv_flashinfer_fa3[] =
    "FlashInfer's own FA3 fp8 prefill on Hopper (flashinfer-ai/flashinfer, include/flashinfer/\n"
    "  attention/hopper/variants.cuh StandardFP8Attention). FlashInfer runs it only with an fp8\n"
    "  query (flashinfer/utils.py is_fa3_backend_supported); it has no attention sinks, so a\n"
    "  layer with sinks is refused.\n"
    "Q = e4m3(q * fp32(1 / q_scale)); K, V from the paged e4m3 cache.\n"
    "S = q8 . k8 raw, wgmma k = 32 chain over the head dim from 0 (kernels/fp8_mma.h).\n"
    "s = q_scale * k_scale * sm_scale * math::log2e, fp32 left to right (sm_scale_with_qk_log2).\n"
    "Tiles of CTA_KV keys, last to first (hopper/quantization/mainloop_mma.cuh: kv_tile_idx\n"
    "  counts down); paged KV (BatchFP8PrefillWithPagedKVCacheDispatched,\n"
    "  hopper/quantization/prefill_sm90.cuh): d <= 128: 128, else 64.\n"
    "Running max of raw S; O *= exp2f((m_old - m_new) * s) before the tile's P.V, l likewise\n"
    "  (hopper/attention_updater.cuh OnlineSoftmax::update, rescale_o).\n"
    "P = exp2f(fma(S, s, -m * s)) in [0, 1]; l sums it unscaled; then P * p_scale, p_scale =\n"
    "  448, rounded to e4m3 (variants.cuh PQuantize; CUTLASS converter, nearest even, satfinite).\n"
    "P.V single-level into O (hopper/utils.cuh gemm).\n"
    "O = bf16(acc * (pv_scale / l)), pv_scale = v_scale / 448 (attention_updater.cuh finalize).\n";

static const char rules_fp8qkv_ideal[] =
    "The ideal bound (precgate's fp8qkv before issue #15); no kernel rounds like this.\n"
    "Q, K, V e4m3 as in @fa3; S = (sum_d q8 k8 in fp32, exact products, d ascending) *\n"
    "  float(q_scale * k_scale * sm_scale in double).\n"
    "Softmax with the final row max; P = exp(S - m) as bf16's (double, rounded once to fp32),\n"
    "  rounded to e4m3 unscaled.\n"
    "O = bf16((sum_t p8 v8 in fp32, t ascending) * v_scale / l): exact fp32 accumulation.\n";

static const char rules_fp8kv_e5m2_fixed[] =
    "vLLM --kv-cache-dtype fp8_e5m2 (vllm/config/cache.py CacheDType). The per-tensor scales\n"
    "  are applied as for e4m3: the cache write divides, e5m2(x / scale) in fp32, nearest even,\n"
    "  saturating at 57344 (csrc/quantization/w8a8/fp8/nvidia/quant_utils.cuh scaled_convert,\n"
    "  kFp8E5M2: __nv_cvt_float_to_fp8(x / scale, __NV_SATFINITE, __NV_E5M2)).\n"
    "FlashInfer views the cache as float8_e5m2 (vllm/v1/attention/backends/flashinfer.py\n"
    "  get_fp8_dtype_for_flashinfer). This profile is the path of fp8kv@fixed on that view:\n"
    "  PR #24197's dequant loads the fp8 view, multiplies by the scale in fp32 and writes a\n"
    "  compact bf16 copy, bf16(fp8 * scale); then bf16 attention (rules of bf16) given sm_scale\n"
    "  alone. That the trtllm-gen prefill (sm100, closed cubins) takes an e5m2 cache was not\n"
    "  read from source; on Hopper FlashInfer's own prefill casts the e5m2 codes in registers,\n"
    "  folds k_scale into sm_scale and multiplies the bf16 output by v_scale\n"
    "  (flashinfer/prefill.py run): a profile not modelled yet.\n"
    "Backends: FLASHINFER and TRITON_ATTN list fp8_e5m2; FLASH_ATTN (FA3) takes fp8 e4m3 only.\n"
    "  TRITON_ATTN views every fp8* cache as current_platform.fp8_dtype(), float8_e4m3fn on\n"
    "  CUDA (vllm/v1/attention/backends/triton_attn.py TritonAttentionImpl.forward, and\n"
    "  triton_reshape_and_cache_flash): there fp8_e5m2 stores e4m3 codes, which is fp8kv, not\n"
    "  this mode (diagnosis: an output nearest intended-fp8kv).\n";

static const char rules_fp8kv_per_token_head_triton[] =
    "vLLM --kv-cache-dtype fp8_per_token_head (KVQuantMode.FP8_PER_TOKEN_HEAD,\n"
    "  vllm/v1/kv_cache_interface.py), served by TRITON_ATTN (Triton unified attention).\n"
    "Cache write, per (token, KV head) row of d values in fp32 (vllm/v1/attention/ops/\n"
    "  triton_quant_kv/_per_token_head_core.py _reshape_cache_per_token_head_kernel):\n"
    "  scale = max(absmax / 448, 1e-6) in fp32, stored as float32 beside the codes;\n"
    "  codes = e4m3(clamp(x * fp32(1 / scale), -448, 448)) (Triton's fp32 -> fp8e4nv store,\n"
    "  cvt.rn.satfinite). Triton lowers an fp32 '/' to div.full.f32 (up to 2 ulp); the\n"
    "  specification divides correctly rounded: only the GPU can hold the two together.\n"
    "Attention (vllm/v1/attention/ops/triton_unified_attention.py kernel_unified_attention,\n"
    "  KV_QUANT_MODE 3): Q stays bf16; K and V codes cast to bf16 as loaded (exact, no scale:\n"
    "  _cast_kv_tile); S = (q . k in fp32) * fp32(sm_scale * k_scale of the key's row).\n"
    "Online softmax over tiles of 32 keys (TILE_SIZE of a prefill, _get_tile_size) aligned at\n"
    "  key 0, first to last (triton_attention_helpers.py softmax_step): M starts at the sink\n"
    "  logit (unscaled) or -inf, L at 1; m = max(M, tile max) (0 when still -inf);\n"
    "  P = exp(S - m), alpha = exp(M - m), L = L * alpha + sum P, O = O * alpha +\n"
    "  bf16(P * v_scale of the key's row) . V in fp32.\n"
    "exp: Triton's fp32 exp is ex2.approx.f32(x * log2e), the product in fp32\n"
    "  (ExpOpConversionApprox), modelled by the C library's exp2f.\n"
    "O = bf16(acc / L) (the 2D kernel of a prefill). Sums within a tile are in key order here;\n"
    "  tl.sum and tl.dot choose theirs. A q block whose first tiles are fully masked for a row\n"
    "  without sinks starts that row's running max at 0 (the clamp), not modelled per block.\n";

static const char rules_int8kv_per_token_head_triton[] =
    "vLLM --kv-cache-dtype int8_per_token_head (KVQuantMode.INT8_PER_TOKEN_HEAD,\n"
    "  vllm/v1/kv_cache_interface.py), served by TRITON_ATTN alone (Triton unified attention).\n"
    "Cache write: fp8_per_token_head's kernel with QUANT_MAX 127, QUANT_MIN -128 (vllm/v1/\n"
    "  attention/ops/triton_quant_kv/_per_token_head_core.py):\n"
    "  scale = max(absmax / 127, 1e-6) in fp32, stored as float32 beside the codes;\n"
    "  codes = trunc(clamp(x * fp32(1 / scale), -128, 127)): Triton stores fp32 to int8 with\n"
    "  fptosi (triton/language/semantic.py cast), toward zero. The module's docstring says\n"
    "  round(); the kernel truncates, as vLLM's own test config says (tests/quantization/\n"
    "  test_per_token_kv_cache.py INT8_CONFIG uses_trunc). Truncation biases every code\n"
    "  toward 0 by half a step on average and sends |x| < scale to 0.\n"
    "Attention: fp8kv_per_token_head@triton's rules with KV_QUANT_MODE 2 (int8 codes cast to\n"
    "  bf16 as loaded, exact: |code| <= 128 fits bf16's 8 significant bits).\n";

static const char rules_int4kv_per_token_head_triton[] =
    "vLLM --kv-cache-dtype int4_per_token_head (KVQuantMode.INT4_PER_TOKEN_HEAD, PR #40835),\n"
    "  served by TRITON_ATTN alone (vllm/v1/attention/ops/triton_quant_kv/int4_per_token_head.py\n"
    "  and _hadamard.py, read at 1882959 and 3629cf0).\n"
    "Rotation: K and V before the cache write, and Q to match, go through single_rht(x) =\n"
    "  fwht(x * signs) in fp32, cast back to bf16; fwht is Sylvester's d x d transform,\n"
    "  unnormalized, so the kernel's softmax scale is sm_scale / d; the output is rotated back,\n"
    "  bf16(fwht(out) * signs / d). signs = 2 * bernoulli(0.5) - 1 from a CPU torch.Generator\n"
    "  seeded 0x9E3779B9, the same for every layer (kernels/rht.h: MT19937, bit 23 of each\n"
    "  draw). On CUDA vLLM runs the transform with hadacore (bf16 MMA stages, then x sqrt(d));\n"
    "  this specification takes the fp32 butterfly of _hadamard.py's PyTorch fallback, rounded\n"
    "  once to bf16 (inferred equivalent up to the stages' bf16 roundings, not modelled).\n"
    "Cache write per rotated row of d values in fp32 (_reshape_cache_int4_kernel):\n"
    "  scale = max((max - min) / 15, 1e-6); zp = clamp(round_half_away(-min / scale), 0, 15);\n"
    "  code = clamp(round_half_away(x * (1 / scale) + zp), 0, 15) (one fma, inferred from\n"
    "  Triton's default fp fusion); the float32 scale stores zp in its low 4 mantissa bits,\n"
    "  which the reader clears. Two codes per byte in vLLM's page (even element low nibble).\n"
    "Attention (_attn_packed): Q in fp32; S = fma(-sum(q), zp_k, q . code) x fp32(sm_scale / d\n"
    "  x k scale); the online softmax of fp8kv_per_token_head@triton (tiles of 32 keys,\n"
    "  inferred: the kernel's own tile was not read); per tile O = O x alpha + (p . code_v -\n"
    "  sum(p x zp_v)) with p = P x v scale kept in fp32 (fp32 tl.dot: Triton's default there is\n"
    "  TF32, which would round p to 10 bits; not modelled). Head dim: a power of two.\n";

/* Shared by the TurboQuant presets. Sources, read at vllm-project/vllm:
 * triton_turboquant_decode.py @055e47c, triton_turboquant_store.py and
 * turboquant_attn.py @0135d08, centroids.py @06d0369, config.py @1471680. */
#define RULES_TURBOQUANT_COMMON                                                                  \
    "The cache (vllm/v1/attention/ops/triton_turboquant_store.py): one slot per (token, KV\n"    \
    "  head), K then V, rounded up to an even size (config.py slot_size_aligned).\n"            \
    "V: min, max of the fp32 row; scale = max((max - min) / (2^bits - 1), 1e-8); codes\n"         \
    "  trunc((v - min) / scale + 0.5) clamped, packed from bit 0; fp16(scale), fp16(min) stored\n" \
    "  (the codes use the fp32 scale).\n"                                                        \
    "Attention: the decode kernel (triton_turboquant_decode.py) for every query row, the row's\n" \
    "  keys [0, hi] split into 32 ranges of cdiv(hi + 1, 32) (tq_max_kv_splits_for_cuda_graph),\n" \
    "  each an online softmax over tiles of 4 keys (BLOCK_KV = 4): m = max(tile, m), re =\n"      \
    "  exp(m_old - m), p = exp(s - m), acc = acc * re + sum p v, l = l * re + sum p, all fp32;\n" \
    "  each split stores acc / l and m + log l; stage 2 (triton_decode_attention.py\n"          \
    "  _fwd_kernel_stage2) merges them by log-sum-exp; O = bf16(acc / e_sum).\n"                 \
    "V in registers: code * fp16 scale + fp16 min (an fma: inferred, as Triton contracts it).\n" \
    "exp = ex2.approx(x * log2e) (modelled by exp2f); log, / and sqrt IEEE (inferred: Triton may\n" \
    "  emit approximate ones, within 2 ulp); sums in index order (tl.sum's tree order inferred).\n" \
    "Not modelled: vLLM's first prefill chunk attends over the raw bf16 K and V (flash-attn) and\n" \
    "  only later reads see the cache; a continuation chunk over 128 tokens dequantizes K and V\n" \
    "  to fp16 for flash-attn. Refused: sinks and sliding windows (the kernel has neither; the\n" \
    "  backend drops sliding_window), head dims not a power of two.\n"

#define RULES_TURBOQUANT_MSE                                                                     \
    "K: norm = sqrt(sum k^2) in fp32; y = (k / (norm + 1e-8)) . Pi^T in fp32, Pi = H / sqrt(d),\n" \
    "  Sylvester's Hadamard matrix without signs (turboquant_attn.py _build_hadamard); each y\n"   \
    "  indexed into the Lloyd-Max codebook of N(0, 1/d) (centroids.py solve_lloyd_max, in\n"      \
    "  double, 200 iterations, tol 1e-10) by a binary search of the fp32 midpoints, ties up;\n"   \
    "  indices packed from bit 0; fp16(norm) after them.\n"                                       \
    "Scores: q_rot = q . Pi^T in fp32 (a cuBLAS GEMM: its order inferred), s = norm * (q_rot .\n" \
    "  c) * sm_scale, c the key's centroids.\n"

static const char rules_turboquant_k8v4[] =
    "K: e4m3(k) unscaled and unrotated (Triton's fp32 -> float8e4nv, nearest even, saturating:\n"
    "  inferred), the bf16 Q scored against it: s = (q . k8) * sm_scale in fp32.\n"
    "V: 4-bit codes.\n" RULES_TURBOQUANT_COMMON;

static const char rules_turboquant_4bit_nc[] =
    "K: 4-bit Lloyd-Max indices; V: 4-bit codes.\n" RULES_TURBOQUANT_MSE
    "Norm correction (_nc): c = c / sqrt(sum c^2 + 1e-16) before the dot product.\n"
    RULES_TURBOQUANT_COMMON;

static const char rules_turboquant_k3v4_nc[] =
    "K: 3-bit Lloyd-Max indices (8 in 3 bytes); V: 4-bit codes.\n" RULES_TURBOQUANT_MSE
    "Norm correction (_nc): c = c / sqrt(sum c^2 + 1e-16) before the dot product.\n"
    RULES_TURBOQUANT_COMMON;

static const char rules_turboquant_3bit_nc[] =
    "K: 3-bit Lloyd-Max indices; V: 3-bit codes (8 in 3 bytes).\n" RULES_TURBOQUANT_MSE
    "Norm correction (_nc): c = c / sqrt(sum c^2 + 1e-16) before the dot product.\n"
    RULES_TURBOQUANT_COMMON;

static const char rules_nvfp4kv_trtllm_gen[] =
    "vLLM --kv-cache-dtype nvfp4 (PRs #37332, #40177), served by FLASHINFER's trtllm-gen\n"
    "  kernels on SM100 / SM103 alone (FlashInferBackend.supports_kv_cache_dtype:\n"
    "  is_device_capability_family(100)); on Hopper this specification is the only place to\n"
    "  see its error.\n"
    "Cache write (csrc/libtorch_stable/nvfp4_kv_cache_kernels.cu reshape_and_cache_nvfp4_kernel\n"
    "  -> quantization/fp4/nvfp4_utils.cuh cvt_warp_fp16_to_fp4, read at bde9006), per block of\n"
    "  16 elements of a row, with SFScaleVal = 1 / k_scale (v_scale for V; k_scale = amax /\n"
    "  448 as the tests and FlashInfer calibrate it, or 1.0 without a checkpoint scale):\n"
    "  sf = e4m3(SFScaleVal * (amax * rcp(6))) (nearest even, satfinite); out_scale = sf != 0 ?\n"
    "  rcp(sf * rcp(SFScaleVal)) : 0; code = e2m1(x * out_scale) (cvt.rn.satfinite, +-6).\n"
    "  rcp.approx.ftz is modelled as the correctly rounded reciprocal. Two codes per byte, the\n"
    "  even element in the low nibble; the sf bytes after the page's data.\n"
    "Attention: Q quantized to e4m3 with q_scale (QuantFP8, static: q_scale, or k_scale when\n"
    "  the checkpoint has none); bmm1_scale = sm_scale * q_scale * k_scale, bmm2_scale =\n"
    "  v_scale. The kernel converts K and V to Q's type (transformsKv, DataTypeK != DataTypeQ):\n"
    "  modelled as e4m3(e2m1 * sf), the product exact in fp32 then rounded once (inferred: the\n"
    "  conversion is in closed cubins). The softmax and fp8 P.V are fp8qkv@trtllm's (the same\n"
    "  proxy for trtllm-gen, tiles of 256 keys at d <= 128). The output is e4m3 (vLLM's\n"
    "  _nvfp4_fp8_out, then .to(bf16) without a scale): O = bf16(e4m3(acc / l * bmm2_scale)).\n"
    "Head dim: a multiple of 16.\n";

/* The table, in the order attn_profile_at lists it. */
static const attn_profile profiles[VARIANT_PROFILE_COUNT] = {
    [VARIANT_BF16] = {
     .summary = "bf16 Q, K, V and P, fp32 sums, final row max", .rules = rules_bf16},
    [VARIANT_FP8KV_FIXED] = {
     .summary = "e4m3 paged KV cache, dequant to bf16 once, bf16 attention with sm_scale",
     .rules = rules_fp8kv_fixed, .kv_scales = ATTN_KV_SCALES_FIXED},
    [VARIANT_FP8KV_VLLM_24197] = {
     .summary = "vLLM PR #24197 as merged: dequant, then q/k/v scales applied again",
     .rules = rules_fp8kv_vllm24197, .kv_scales = ATTN_KV_SCALES_TWICE},
    [VARIANT_FP8QKV_FA3] = {
     .summary = "vLLM's FA3 fork on Hopper: tiled running max, P x 256, two-level fp8 MMA",
     .rules = rules_fp8qkv_fa3, .softmax = ATTN_SOFTMAX_FA3,
     .p_exp_offset = FA3_FP8_MAX_OFFSET, .q_by_inverse = 1, .accum = ATTN_ACCUM_MMA_2LEVEL,
     .tiles = {{64, 128, 128}, {96, 128, 128}, {128, 192, 192}, {192, 96, 96}, {256, 128, 64}}},
    [VARIANT_FP8QKV_FA3_1LEVEL] = {
     .summary = "upstream FA3 on Hopper: as @fa3 with single-level fp8 MMA, its tiles",
     .rules = rules_fp8qkv_fa3_1level, .softmax = ATTN_SOFTMAX_FA3,
     .p_exp_offset = FA3_FP8_MAX_OFFSET, .q_by_inverse = 1, .accum = ATTN_ACCUM_MMA_1LEVEL,
     .tiles = {{64, 160, 160}, {96, 128, 128}, {128, 160, 160}, {192, 160, 128}, {256, 128, 64}}},
    [VARIANT_FP8QKV_TRTLLM] = {
     .summary = "TensorRT-LLM fmha_v2 fp8 on Hopper: tiles first to last, P x 256, fp8 MMA",
     .rules = rules_fp8qkv_trtllm, .softmax = ATTN_SOFTMAX_TRTLLM,
     .p_exp_offset = TRTLLM_FP8_EXP_OFFSET, .q_by_inverse = 1, .accum = ATTN_ACCUM_MMA_1LEVEL,
     .tiles = {{64, 256, 256}, {96, 256, 256}, {128, 256, 256}, {192, 128, 128}, {256, 128, 128}}},
    [VARIANT_FP8QKV_FLASHINFER_FA3] = {
     .summary = "FlashInfer's FA3 fp8 on Hopper: P x 448, scale_pv = v_scale / 448, no sinks",
     .rules = rules_fp8qkv_flashinfer_fa3, .softmax = ATTN_SOFTMAX_FLASHINFER,
     .p_scale = FLASHINFER_FP8_P_SCALE, .q_by_inverse = 1, .no_sinks = 1,
     .accum = ATTN_ACCUM_MMA_1LEVEL,
     .tiles = {{64, 128, 128}, {96, 128, 128}, {128, 128, 128}, {192, 64, 64}, {256, 64, 64}}},
    [VARIANT_FP8QKV_IDEAL] = {
     .summary = "ideal bound: final row max, P unscaled e4m3, exact fp32 sums",
     .rules = rules_fp8qkv_ideal, .softmax = ATTN_SOFTMAX_FINAL_MAX, .accum = ATTN_ACCUM_EXACT},
    [VARIANT_FP8KV_E5M2_FIXED] = {
     .summary = "e5m2 paged KV cache, dequant to bf16 once, bf16 attention with sm_scale",
     .rules = rules_fp8kv_e5m2_fixed, .kv_scales = ATTN_KV_SCALES_FIXED},
    [VARIANT_FP8KV_PER_TOKEN_HEAD_TRITON] = {
     .summary = "e4m3 KV with a scale per (token, KV head), Triton: scales on S and P",
     .rules = rules_fp8kv_per_token_head_triton, .softmax = ATTN_SOFTMAX_TRITON,
     .accum = ATTN_ACCUM_EXACT}, /* tiles: ATTN_TRITON_PREFILL_TILE at every head dim */
    [VARIANT_INT8KV_PER_TOKEN_HEAD_TRITON] = {
     .summary = "int8 KV (codes truncated) with a scale per (token, KV head), Triton",
     .rules = rules_int8kv_per_token_head_triton, .softmax = ATTN_SOFTMAX_TRITON,
     .accum = ATTN_ACCUM_EXACT}, /* tiles: as fp8kv_per_token_head@triton */
    [VARIANT_INT4KV_PER_TOKEN_HEAD_TRITON] = {
     .summary = "int4 KV, Hadamard-rotated, a scale and zero point per (token, KV head), Triton",
     .rules = rules_int4kv_per_token_head_triton, .softmax = ATTN_SOFTMAX_TRITON,
     .pv_in_fp32 = 1, .accum = ATTN_ACCUM_EXACT}, /* tiles: as fp8kv_per_token_head@triton */
    [VARIANT_NVFP4KV_TRTLLM_GEN] = {
     .summary = "nvfp4 KV (e2m1, e4m3 scale per 16), fp8 Q, trtllm-gen proxy, e4m3 output",
     .rules = rules_nvfp4kv_trtllm_gen, .softmax = ATTN_SOFTMAX_TRTLLM,
     .p_exp_offset = TRTLLM_FP8_EXP_OFFSET, .q_by_inverse = 1, .accum = ATTN_ACCUM_MMA_1LEVEL,
     .out_e4m3 = 1,
     .tiles = {{64, 256, 256}, {96, 256, 256}, {128, 256, 256}, {192, 128, 128}, {256, 128, 128}}},
    /* TurboQuant: the decode kernel's knobs are its mode's traits and
     * attn_profile_impl.h's ATTN_TQ_DECODE_*. Neither sinks nor a window:
     * the decode kernel takes no sinks, and its backend takes sliding_window
     * and drops it (vllm/v1/attention/backends/turboquant_attn.py at the
     * commit of rules_turboquant_k8v4). */
    [VARIANT_TURBOQUANT_K8V4_TRITON] = {
     .summary = "TurboQuant K e4m3, V 4-bit min/max, Triton split-KV decode kernel",
     .rules = rules_turboquant_k8v4, .no_sinks = 1, .no_window = 1},
    [VARIANT_TURBOQUANT_4BIT_NC_TRITON] = {
     .summary = "TurboQuant K 4-bit Lloyd-Max (Hadamard, norm-corrected), V 4-bit, Triton decode",
     .rules = rules_turboquant_4bit_nc, .no_sinks = 1, .no_window = 1},
    [VARIANT_TURBOQUANT_K3V4_NC_TRITON] = {
     .summary = "TurboQuant K 3-bit Lloyd-Max (Hadamard, norm-corrected), V 4-bit, Triton decode",
     .rules = rules_turboquant_k3v4_nc, .no_sinks = 1, .no_window = 1},
    [VARIANT_TURBOQUANT_3BIT_NC_TRITON] = {
     .summary = "TurboQuant K 3-bit Lloyd-Max (Hadamard, norm-corrected), V 3-bit, Triton decode",
     .rules = rules_turboquant_3bit_nc, .no_sinks = 1, .no_window = 1},
};

#define N_PROFILES (sizeof profiles / sizeof profiles[0])

size_t attn_profile_count(void) { return N_PROFILES; }

const attn_profile *attn_profile_at(size_t i) { return i < N_PROFILES ? &profiles[i] : NULL; }

variant_profile_id attn_profile_id(const attn_profile *p)
{
    return (variant_profile_id)(p - profiles);
}

const char *attn_profile_variant(const attn_profile *p)
{
    return variant_profile_name(attn_profile_id(p));
}

pg_mode attn_profile_mode(const attn_profile *p)
{
    return variant_profile_mode(attn_profile_id(p));
}

int attn_profile_is_default(const attn_profile *p)
{
    return variant_profile_is_default(attn_profile_id(p));
}

int attn_profile_takes_sinks(const attn_profile *p) { return !p->no_sinks; }

int attn_profile_computes(const attn_profile *p, const attn_batch *b, char *why, size_t why_len)
{
    char none[1];
    if (why == NULL || why_len == 0) {
        why = none;
        why_len = sizeof none;
    }
    why[0] = '\0';
    if (p->no_sinks && b->sinks != NULL) {
        snprintf(why, why_len, "the kernel has no attention sinks, and this layer has them");
        return 0;
    }
    if (p->no_window && b->window > 0) {
        snprintf(why, why_len, "the kernel has no sliding window, and this layer has a window "
                 "of %d keys", b->window);
        return 0;
    }
    return 1;
}

const char *attn_profile_summary(const attn_profile *p) { return p->summary; }

const char *attn_profile_rules(const attn_profile *p) { return p->rules; }

int attn_profile_block_n(const attn_profile *p, int d, int window)
{
    const attn_tile_row *row = &p->tiles[ATTN_TILE_ROWS - 1];
    for (int i = 0; i < ATTN_TILE_ROWS; i++) {
        if (d <= p->tiles[i].max_d) {
            row = &p->tiles[i];
            break;
        }
    }
    return window > 0 ? row->block_n_local : row->block_n;
}

pg_status attn_profile_find(const char *name, const attn_profile **out, pg_err *err)
{
    variant_profile_id id;
    const pg_status st = variant_profile_find(name, &id, err);
    if (st == PG_OK) *out = &profiles[id];
    return st;
}

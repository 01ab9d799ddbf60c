#!/usr/bin/env bash
# gpu_breaks_build.sh: builds gpu_check against deliberately broken kernels
# (issue #31: "a deliberately broken kernel of each kind fails it"), one
# binary per break in .dev/gpu/gpu_check_break_<name>, for bench/gpu_variants.sh
# to run on the GPU machine. Each break is one sed edit of a copy of the
# source (the tree itself is never touched); a break whose pattern no longer
# matches stops the script, so a refactor cannot turn a break into a no-op.
set -euo pipefail
cd "$(dirname "$0")/.."
src=.dev/break-src
bld=.dev/break-build
mkdir -p .dev/gpu "$src"
# The source a build needs (the tree's own files; git ls-files keeps .dev out).
sync_tree() {
  rm -rf "$src"/kernels
  git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$src"
}
# name file sed-expression: one break.
breaks=(
  "tile_width|kernels/cuda_attn_fp8.cu|s/FP8_INSTANCE(64, 128, ATTN_SOFTMAX_FA3, true),/{64, 128, ATTN_SOFTMAX_FA3, true, launch_fp8<64, 160, ATTN_SOFTMAX_FA3, true>},/"
  "p_unscaled|kernels/cuda_attn_fp8.cu|s/mr \* s : __fmaf_rn(mr, s, -ts.max_offset)/mr * s : __fmaf_rn(mr, s, 0.f)/"
  "one_level|kernels/cuda_attn_fp8.cu|s/FP8_INSTANCE(\([0-9]*\), \([0-9]*\), ATTN_SOFTMAX_FA3, true),/{\1, \2, ATTN_SOFTMAX_FA3, true, launch_fp8<\1, \2, ATTN_SOFTMAX_FA3, false>},/"
  "v_scale|kernels/cuda_kv_cache.cu|s/const float scale = which == 0 ? k_scale : v_scale;/const float scale = k_scale;/"
  "tile_order|kernels/cuda_attn_fp8.cu|s/constexpr bool DESCENDING = KIND != ATTN_SOFTMAX_TRTLLM;/constexpr bool DESCENDING = true;/"
  "p_scale_dropped|kernels/cuda_attn_fp8.cu|s/KIND == ATTN_SOFTMAX_FLASHINFER ? p \* ts.p_scale : p;/p;/"
  "ideal_p_bf16|kernels/cuda_attn_bf16.cu|s/if (P_E4M3)$/if (false)/"
  "bf16_no_sink|kernels/cuda_softmax.cuh|s/if (sinks != nullptr) s += attn_final_max_exp(sinks\[h\] - m\[r\]);/(void)sinks;/"
)
for entry in "${breaks[@]}"; do
  IFS='|' read -r name file expr <<<"$entry"
  sync_tree
  # the last break's file is back as it was, with its old time: newer than
  # the broken object, so that make rebuilds it
  if [ -n "${prev:-}" ]; then touch "$src/$prev"; fi
  prev=$file
  before=$(md5sum < "$src/$file")
  sed -i "$expr" "$src/$file"
  if [ "$(md5sum < "$src/$file")" = "$before" ]; then
    echo "gpu_breaks_build: break $name no longer applies to $file" >&2
    exit 1
  fi
  cmake -S "$src" -B "$bld" -DCMAKE_BUILD_TYPE=Release -DPRECGATE_MARCH=x86-64-v3 \
    -DPRECGATE_TESTS=OFF >/dev/null
  cmake --build "$bld" -j "$(nproc)" --target gpu_check >/dev/null
  cp "$bld/gpu_check" ".dev/gpu/gpu_check_break_$name"
  echo "built .dev/gpu/gpu_check_break_$name"
done

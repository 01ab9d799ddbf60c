#!/usr/bin/env bash
# gpu_wgmma.sh: Hopper fp8 accumulation, measured (issue #15): runs
# bench/wgmma_fp8_accum.cu on the GPU machine. Build here first:
#   bench/gpu_build.sh            -> .dev/gpu/wgmma_fp8_accum (among others)
# then run this script there from the repository root with .dev/gpu carried.
# Writes the full log to $OUT/wgmma_fp8_accum.log (or /tmp/precgate-gpu) and
# prints it; the last line is the SUMMARY.
source "$(dirname "$0")/gpu_common.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee "$out/card_wgmma.txt"
echo "== the probe's matrix instruction (SASS): expect QGMMA"
cuobjdump --dump-sass "$bin/wgmma_fp8_accum" 2>/dev/null | grep -oE "QGMMA[.A-Z0-9x]*" | sort | uniq -c
start=$(date +%s)
timeout 300 "$bin/wgmma_fp8_accum" --dump "$out/wgmma_hw.bin" ${WGMMA_BLOCKS:-} > "$out/wgmma_fp8_accum.log" 2>&1
rc=$?
cat "$out/wgmma_fp8_accum.log"
echo "wgmma_fp8_accum exit $rc in $(( $(date +%s) - start )) s"

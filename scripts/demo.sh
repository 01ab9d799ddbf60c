#!/usr/bin/env bash
# demo.sh: the README's first command: installs what is missing, builds,
# synthesizes a gpt-oss-120b-shaped demo capture and sweeps it through every
# precision mode into ./precgate.db (the GPU when one is usable, else the
# CPU), grades the shipped AIME-style demo traces, gates the sweep, and ends in the report:
# the layer x mode table, the eval summary, and build/demo-report.{md,html}.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build -j "$(nproc)"
build/precgate synth -o build/demo.safetensors --preset gpt-oss-120b --layers 4 \
  --seqs 2 --seq-len 512 --context 128
# The run's lines go to stdout as they come and into a log read back for the run
# number (tee to /dev/stderr would reopen a redirected stderr and truncate it).
build/precgate run --capture build/demo.safetensors --label demo "$@" | tee build/demo-run.log
run=$(sed -n 's/^run \([0-9]*\) complete.*/\1/p' build/demo-run.log)
build/precgate eval --traces evals/demo/aime-style-demo.jsonl --replay --label demo
# The sweep gated against the last demo run that passed (none the first time:
# the gaps to bf16 are recorded); the report leads with its verdicts. A
# regression still ends in the report, then in the gate's exit status.
gate_status=0
build/precgate gate --run "$run" || gate_status=$?
build/precgate report --run "$run" -o build/demo-report.html
build/precgate report --run "$run" -o build/demo-report.md
echo "report: build/demo-report.html (open in a browser) and build/demo-report.md"
exit "$gate_status"

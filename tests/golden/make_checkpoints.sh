#!/usr/bin/env bash
# make_checkpoints.sh TOOL OUT_DIR: writes every checkpoint of checkpoints.txt into OUT_DIR/<name>/ (dtype as listed).
set -euo pipefail
tool="$1"; out="$2"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
configs="${here}/../../tools/configs"
mkdir -p "${out}"
grep -v "^#" "${here}/checkpoints.txt" | while read -r name config seed shards dtype; do
  [[ -z "${name}" ]] && continue
  "${tool}" --config "${configs}/${config}" --out "${out}/${name}" --seed "${seed}" --shards "${shards}" --dtype "${dtype}"
done

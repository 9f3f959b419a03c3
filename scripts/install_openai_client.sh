#!/usr/bin/env bash
# Installs the pinned official openai npm package (tests/server/openai_client/package-lock.json) into the
# git-ignored folder tests/server/openai_client/node_modules/, where the server's client test (ctest
# server_openai_client) finds it.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo_root}/tests/server/openai_client"
if [[ -f node_modules/openai/package.json ]] && cmp -s package-lock.json node_modules/.package-lock.json 2>/dev/null; then
  echo "already present: ${PWD}/node_modules"
  exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
echo "installed $(node -p 'require("./node_modules/openai/package.json").version' 2>/dev/null || echo '?') of openai into ${PWD}/node_modules"

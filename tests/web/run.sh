#!/usr/bin/env bash
# Browser test: serves the demo model and drives the page with playwright-core in Debian's chromium.
# Installs playwright-core into tests/web/node_modules on first use. Screenshots: tests/web/screenshots/.
#   tests/web/run.sh BUILD_DIR
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../e2e/lib/server.sh"
if [[ ! -x /usr/bin/chromium ]]; then echo "browser test: /usr/bin/chromium missing (scripts/setup-deps.sh --test)"; exit 1; fi
if [[ ! -d "$HERE/node_modules/playwright-core" ]]; then
  (cd "$HERE" && npm ci --no-audit --no-fund --loglevel=error)
fi
trap stop_server EXIT
start_server "$BUILD"
node "$HERE/test.mjs" "$SERVER_URL" "$HERE/screenshots"

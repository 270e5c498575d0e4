#!/usr/bin/env bash
# Load test: wrk on loopback, 64 connections for 30 s against POST /translate with the demo model. Passes
# when the server survives, answers only 200 and 503 (no socket errors, no timeouts), still serves and
# has given back every KV page; prints p50/p99 (docs/BENCHMARKS.md, "Server load test", has the numbers). A second,
# shorter run with --max-inflight 8 checks that overload is answered with 503 + Retry-After.
#   tests/e2e/server_load.sh BUILD_DIR [SECONDS]
set -uo pipefail
BUILD=$(cd "${1:-build}" && pwd)
SECONDS_MAIN=${2:-30}
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/lib/server.sh"
command -v wrk >/dev/null || { echo "wrk missing (scripts/setup-deps.sh --test)"; exit 1; }
trap stop_server EXIT
failed=0

run_load() {  # name, seconds, serve options...
  local name=$1 secs=$2; shift 2
  start_server "$BUILD" "$@" || return 1
  echo "--- $name: wrk -t2 -c64 -d${secs}s --timeout 30s --latency -s tests/e2e/lib/load.lua (hymt serve $*)"
  local out
  out=$(wrk -t2 -c64 -d"${secs}s" --timeout 30s --latency -s "$HERE/lib/load.lua" "$SERVER_URL" 2>&1)
  echo "$out" | grep -E "^(statuses|latency_ms|requests):"
  local statuses others errors health pages
  statuses=$(echo "$out" | sed -n 's/^statuses: //p')
  others=$(echo "$statuses" | tr ' ' '\n' | grep -vE '^(200|503)=' | grep -c .)
  errors=$(echo "$out" | sed -n 's/.*connect \([0-9]*\) read \([0-9]*\) write \([0-9]*\) timeout \([0-9]*\)/\1 \2 \3 \4/p')
  health=$(curl -s -o /dev/null -w '%{http_code}' "$SERVER_URL/health")
  # Requests still running when wrk stops are cancelled when the server sees their connections closed,
  # at its next step; give it up to 10 s (a sanitizer build's step is slow), then every page must be back.
  local waited=0
  while pages=$(curl -s "$SERVER_URL/metrics" | sed -n 's/^hymt_kv_pages_used //p'); [[ $pages != 0 && $waited -lt 20 ]]; do
    sleep 0.5
    waited=$((waited + 1))
  done
  check() { if eval "$1"; then echo "ok   $2"; else echo "FAIL $2"; failed=1; fi; }
  check '[[ -n "$statuses" && $others -eq 0 ]]' "$name: only 200 and 503 ($statuses)"
  check '[[ "$errors" == "0 0 0 0" ]]' "$name: no socket errors or timeouts ($errors)"
  check '[[ $health == 200 ]] && kill -0 $SERVER_PID' "$name: the server is alive and healthy afterwards"
  check '[[ $pages == 0 ]]' "$name: every KV page is back ($pages used after $((waited / 2)).$((waited % 2 * 5)) s)"
  LAST_STATUSES=$statuses
  stop_server
  check '[[ $? -eq 0 ]]' "$name: SIGTERM exits 0"
}

run_load "default options" "$SECONDS_MAIN"
run_load "overload (--max-inflight 8)" 10 --max-inflight 8
if ! echo "$LAST_STATUSES" | grep -qE '(^| )503='; then echo "FAIL overload: no 503 seen"; failed=1; fi
exit $failed

# Shell helpers for tests that need a running `hymt serve` (sourced, not run).
#   start_server BUILD_DIR [serve options...]   sets SERVER_PID, SERVER_URL, SERVER_LOG; waits for /health
#   stop_server                                 SIGTERM, then waits for the exit
start_server() {
  local build=$1; shift
  SERVER_LOG=$(mktemp /tmp/hymt-serve.XXXXXX)
  HYMT_LOG=${HYMT_LOG:-warn} "$build/hymt" serve --port 0 "$@" >"$SERVER_LOG.out" 2>"$SERVER_LOG" &
  SERVER_PID=$!
  SERVER_URL=""
  for _ in $(seq 1 300); do
    SERVER_URL=$(sed -n 's|^hymt: serving \(http://[^ ]*\).*|\1|p' "$SERVER_LOG.out" | head -1)
    [[ -n "$SERVER_URL" ]] && break
    kill -0 "$SERVER_PID" 2>/dev/null || { echo "hymt serve exited:"; cat "$SERVER_LOG"; return 1; }
    sleep 0.1
  done
  [[ -n "$SERVER_URL" ]] || { echo "hymt serve printed no URL"; return 1; }
  for _ in $(seq 1 600); do
    [[ $(curl -s -o /dev/null -w '%{http_code}' "$SERVER_URL/health") == 200 ]] && return 0
    sleep 0.1
  done
  echo "hymt serve did not become ready:"; cat "$SERVER_LOG"
  return 1
}

stop_server() {
  [[ -n "${SERVER_PID:-}" ]] || return 0
  kill -TERM "$SERVER_PID" 2>/dev/null
  wait "$SERVER_PID" 2>/dev/null
  local rc=$?
  SERVER_PID=""
  rm -f "$SERVER_LOG" "$SERVER_LOG.out"
  return $rc
}

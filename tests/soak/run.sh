#!/usr/bin/env bash
# Soak test: `hymt serve` with the demo model under mixed load for MINUTES (default 10), watching its
# resident memory and open descriptors. tests/soak/soak.py has the load and the pass criteria.
#   tests/soak/run.sh [MINUTES] [BUILD_DIR]
set -uo pipefail
MINUTES=${1:-10}
BUILD=${2:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
exec python3 "$HERE/soak.py" --minutes "$MINUTES" "$BUILD"

#!/usr/bin/env bash
# Installs the Debian packages hymt needs to build, run and test. Idempotent: installs only what is
# missing. Works as root on a fresh Debian 12 (uses sudo when not root).
#   scripts/setup-deps.sh          build + run dependencies
#   scripts/setup-deps.sh --test   also what the tests need (browser and a CJK font for its screenshots,
#                                  load generator, fuzzing)
set -euo pipefail

BUILD_PKGS=(build-essential cmake ninja-build pkg-config git ca-certificates
            libcpp-httplib-dev libicu-dev libcld2-dev libsqlite3-dev zlib1g-dev)
TEST_PKGS=(libgtest-dev libgmock-dev libbenchmark-dev python3 chromium fonts-wqy-zenhei wrk clang
           libclang-rt-14-dev curl)

pkgs=("${BUILD_PKGS[@]}")
if [[ "${1:-}" == "--test" ]]; then pkgs+=("${TEST_PKGS[@]}"); fi

missing=()
# Node.js may come from another source than Debian (whose npm then conflicts): ask for Debian's only
# when the commands are absent.
if [[ "${1:-}" == "--test" ]]; then
  command -v node >/dev/null || missing+=(nodejs)
  command -v npm >/dev/null || missing+=(npm)
fi
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup-deps: all ${#pkgs[@]} packages present"
  exit 0
fi

SUDO=""
if [[ $(id -u) -ne 0 ]]; then
  if command -v sudo >/dev/null; then SUDO=sudo; else
    echo "setup-deps: missing packages (${missing[*]}) and not root; run as root" >&2
    exit 1
  fi
fi
echo "setup-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"

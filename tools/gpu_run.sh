#!/usr/bin/env bash
# Runs vkgate on the lent GPU machine (see ../shared/GPU.md): the device list,
# the whole test suite under the validation layer, and the demo with timings.
# Carry [".gl", "build"]; .gl holds the libvulkan1 and vulkan-validationlayers .debs.
set -uo pipefail
out=${OUT:-/tmp/vkgate-gpu}
mkdir -p "$out"
for f in .gl/*.deb; do dpkg -x "$f" /; done
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
ldconfig
if ! build/tools/vkgate devices 2>/dev/null | grep -qi nvidia; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
{
  echo "== date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  echo "== vkgate devices"
  build/tools/vkgate devices
} 2>&1 | tee "$out/devices.txt"
echo "== tests (validation + synchronization validation)"
# Only the GPU tests: the CPU-only ones read ../shared/golden, which does not travel.
VKGATE_TEST_DEVICE=nvidia build/tests/vkgate_tests -tc='matmul*,rmsnorm*,rope*,softmax*,attention*,gate*,block*,validation*' 2>&1 | tee "$out/tests.txt" | tail -15
echo "== demo"
for t in 64 512; do
  build/tools/vkgate demo --device nvidia --tokens "$t" 2>&1 | tee "$out/demo_T$t.txt"
done

// Internal: support for the sanitizer build (VKGATE_SANITIZE, see CMakeLists.txt).
#pragma once

namespace vkgate::gpu {

// In a sanitizer build: pins the Vulkan driver, the layers and their
// dependencies (libvulkan_*, libVkLayer_*, libLLVM*) in memory with
// RTLD_NODELETE, so that the loader's dlclose at vkDestroyInstance does not
// unload them. LeakSanitizer, which runs at exit, can then name the module a
// leaked allocation came from, and tests/lsan.supp can exclude the driver's
// and the layer's own leaks by module while every leak in vkgate is still
// reported. Elsewhere: does nothing.
void keep_vulkan_modules_loaded() noexcept;

}  // namespace vkgate::gpu

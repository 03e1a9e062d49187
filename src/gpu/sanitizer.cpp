#include "gpu/sanitizer.hpp"

#if defined(VKGATE_SANITIZER_BUILD)
#include <dlfcn.h>
#include <link.h>

#include <cstring>
#endif

namespace vkgate::gpu {

#if defined(VKGATE_SANITIZER_BUILD)
void keep_vulkan_modules_loaded() noexcept {
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void*) -> int {
        const char* name = info->dlpi_name;
        if (!name || !*name) return 0;
        const char* base = std::strrchr(name, '/');
        base = base ? base + 1 : name;
        if (std::strncmp(base, "libvulkan_", 10) == 0 || std::strncmp(base, "libVkLayer_", 11) == 0 ||
            std::strncmp(base, "libLLVM", 7) == 0) {
          // Already loaded: RTLD_NOLOAD only adds RTLD_NODELETE (and a reference, never dropped).
          dlopen(name, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
        }
        return 0;
      },
      nullptr);
}
#else
void keep_vulkan_modules_loaded() noexcept {}
#endif

}  // namespace vkgate::gpu

#if defined(VKGATE_SANITIZER_BUILD)
// Defaults for every program linked with a sanitizer build of the library
// (the tests, the CLI the tests spawn, a consumer); the environment variables
// ASAN_OPTIONS, LSAN_OPTIONS and UBSAN_OPTIONS still override them.
extern "C" const char* __lsan_default_options() {
#if defined(VKGATE_LSAN_SUPPRESSIONS)
  return "suppressions=" VKGATE_LSAN_SUPPRESSIONS ":print_suppressions=0";
#else
  return "";
#endif
}
// abort_on_error: a finding kills the process with SIGABRT, so a test that
// expects a child to exit with 1 or 2 cannot mistake a finding for that exit.
extern "C" const char* __asan_default_options() { return "abort_on_error=1:detect_leaks=1"; }
extern "C" const char* __ubsan_default_options() { return "print_stacktrace=1:halt_on_error=1:abort_on_error=1"; }
#endif

// libFuzzer entry point: see fuzz_targets.hpp.
#include "fuzz_targets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return vkgate::fuzz::chat(data, size);
}

// Internal: the scratch of one plan, shared by every module it records and by
// every layer. While the plan is made each module names the buffers it needs
// (a role and a size); each role is then allocated once, at its largest size.
// Layers run one after another in the command buffer and the recorder orders
// their uses of a role (write after read), so one copy serves the whole stack.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "gpu/context_impl.hpp"
#include "gpu/memory.hpp"

namespace vkgate::nn {

class Workspace {
 public:
  // Asks for `bytes` under `role` (the largest request wins).
  void need(const std::string& role, size_t bytes);
  // The same for a role whose words must start at zero (counters that each
  // dispatch leaves at zero for the next): zeroed once, when allocated.
  void need_zeroed(const std::string& role, size_t bytes);
  // Allocates every role asked for (device memory, named "scratch 'ROLE'").
  void allocate(Context::Impl& vk);
  bool has(const std::string& role) const { return buffers_.count(role) != 0; }
  // Error(invalid_argument) for a role nobody asked for: a module recorded
  // what it did not reserve.
  const gpu::Buffer& operator[](const std::string& role) const;
  // The buffer of `role`, or null when nobody asked for it.
  const gpu::Buffer* find(const std::string& role) const;
  uint64_t bytes() const;

 private:
  std::map<std::string, size_t> sizes_;
  std::set<std::string> zeroed_;
  std::map<std::string, gpu::Buffer> buffers_;
};

}  // namespace vkgate::nn

// Internal: a sequence's recurrent states (GLA, Gated DeltaNet) as a whole:
// the recordings that zero them, and that copy them to a checkpoint and back
// (Sequence::checkpoint, truncate). KV caches have none: for a sequence of
// them alone every call is a no-op.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "gpu/context_impl.hpp"
#include "gpu/memory.hpp"
#include "gpu/recorder.hpp"
#include "gpu/tuning.hpp"
#include "nn/stack.hpp"

namespace vkgate::nn {

class RecurrentStates {
 public:
  RecurrentStates(Context::Impl& vk, const gpu::Tuning& tuning) : vk_(vk), tuning_(tuning) {}
  // Takes the states of `caches` (a sequence's, new or moved to more room);
  // a checkpoint already saved stays, its copy being the states' size.
  void bind(const LayerCaches& caches);
  bool any() const { return !states_.empty(); }
  void clear();
  void save();  // the first call allocates the checkpoint's copy
  void restore();
  uint64_t saved_bytes() const;

 private:
  std::unique_ptr<gpu::Recorder> copies(bool saving);

  Context::Impl& vk_;
  const gpu::Tuning& tuning_;
  const LayerCaches* caches_ = nullptr;
  std::vector<const gpu::Buffer*> states_;
  std::vector<gpu::Buffer> saved_;
  std::unique_ptr<gpu::Recorder> clear_, save_, restore_;  // recorded on first use
};

}  // namespace vkgate::nn

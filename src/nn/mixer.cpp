#include "nn/mixer.hpp"

#include "nn/attention.hpp"
#include "nn/gdn.hpp"
#include "nn/gla.hpp"

namespace vkgate::nn {

namespace {
template <typename... F>
struct Overloaded : F... {
  using F::operator()...;
};
}  // namespace

std::string row_role(const std::string& role, uint32_t row) {
  return row == kAllRows ? role : role + " (row " + std::to_string(row) + ")";
}

ops::View shifted(ops::View v, uint32_t elements) {
  v.base += elements;
  return v;
}

void copy_row(gpu::Recorder& rec, const gpu::Buffer& one, const gpu::Buffer& all, uint32_t row, uint64_t bytes) {
  rec.copy(one, all, {VkBufferCopy{0, VkDeviceSize(row) * bytes, bytes}});
}

std::unique_ptr<Mixer> make_mixer(Context::Impl& vk, const gpu::Tuning& tuning, const MixerConfig& config,
                                  const TensorMap& weights, Storage act) {
  return std::visit(
      Overloaded{
          [&](const BlockConfig& c) -> std::unique_ptr<Mixer> {
            return std::make_unique<Attention>(vk, tuning, c, weights, act);
          },
          [&](const GlaMixer& c) -> std::unique_ptr<Mixer> {
            return std::make_unique<Gla>(vk, tuning, c.config, weights, act);
          },
          [&](const GdnMixer& c) -> std::unique_ptr<Mixer> { return std::make_unique<Gdn>(vk, tuning, c, weights, act); },
      },
      config);
}

}  // namespace vkgate::nn

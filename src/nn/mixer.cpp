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

// Internal: timing a linear-attention layer (an nn::Mixer whose cache is a
// recurrent state: GLA, Gated DeltaNet) over T tokens from a zero state, as
// its facade runs it: in segments of the tokens one step's buffers hold, all
// recorded into one command buffer with the state carried on the device.
#pragma once

#include <cstdint>
#include <vector>

#include "bench/bench_internal.hpp"
#include "nn/mixer.hpp"

namespace vkgate::bench::detail {

// Times `layer` on x [B, T, D] (stored as the layer reads its input: fp32
// before an input norm, else in the activation storage) into
// `c` (time, stages, device memory; the name gains the segment count) and
// returns the output [B, T, D]. Every repetition starts from a cleared state.
std::vector<float> time_recurrent_mixer(Bench& b, const nn::Mixer& layer, uint32_t B, uint32_t T, uint32_t D,
                                        const HostData& x, const Options& opt, Case& c);

// The first `tokens` of each of the B rows of [B, T, D].
std::vector<float> first_tokens(const std::vector<float>& v, uint32_t B, uint32_t T, uint32_t D, uint32_t tokens);

}  // namespace vkgate::bench::detail

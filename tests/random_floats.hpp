// Seeded uniform floats for the CPU-only tests (the GPU tests draw from their fixture's rng).
#pragma once

#include <random>
#include <vector>

namespace vkgate::test {

inline std::vector<float> random_floats(size_t n, unsigned seed, float lo = -1, float hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace vkgate::test

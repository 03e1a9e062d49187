// Internal: what every benchmark case shares (tools/bench/): seeded random
// data rounded to the storage type, device buffers held for one case, the
// timed repetitions of one recording, and the check against the reference.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <limits>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpu/context_impl.hpp"
#include "gpu/memory.hpp"
#include "gpu/recorder.hpp"
#include "gpu/transfer.hpp"
#include "ops/ops.hpp"
#include "bench/bench.hpp"
#include "vkgate/dtype.hpp"
#include "vkgate/reference.hpp"

namespace vkgate::bench::detail {

using gpu::Buffer;
using ops::Storage;

inline Storage storage_of(Precision p) {
  return p == Precision::fp16 ? Storage::f16 : p == Precision::bf16 ? Storage::bf16 : Storage::f32;
}
inline const char* dtype_name(Precision p) { return p == Precision::fp16 ? "f16" : p == Precision::bf16 ? "bf16" : "f32"; }

inline Stat stat_of(std::vector<double> v) {
  Stat s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.median_us = v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  s.min_us = v.front();
  s.max_us = v.back();
  return s;
}

// Warm-up: `run` at least `count` times and, on a GPU, for at least 1 s
// when count > 0: a GPU that idled (while the host checked the result) runs at
// low clocks, and a few short runs do not raise them.
inline void warm_up(const DeviceInfo& d, int count, const std::function<void()>& run) {
  const auto start = std::chrono::steady_clock::now();
  const auto min_time = std::chrono::milliseconds(count > 0 && d.type != "cpu" ? 1000 : 0);
  for (int i = 0; i < count || std::chrono::steady_clock::now() - start < min_time; ++i) run();
}

// Per-stage and whole-run statistics over repeated runs of one recording.
struct Timer {
  std::vector<std::string> labels;
  std::vector<std::vector<double>> per_stage;
  std::vector<double> totals;

  void add(const std::vector<std::pair<std::string, double>>& run) {
    if (labels.empty())
      for (const auto& [label, us] : run) labels.push_back(label);
    per_stage.resize(labels.size());
    double total = 0;
    for (size_t i = 0; i < run.size() && i < labels.size(); ++i) {
      per_stage[i].push_back(run[i].second);
      total += run[i].second;
    }
    totals.push_back(total);
  }
  void fill(Case& c) const {
    c.time = stat_of(totals);
    for (size_t i = 0; i < labels.size(); ++i) c.stages.emplace_back(labels[i], stat_of(per_stage[i]));
  }
};

// Random values, already rounded to the storage type so the reference sees
// exactly what the device holds.
struct HostData {
  std::vector<float> values;
  std::vector<std::byte> stored;
};

inline HostData random_data(size_t n, Storage s, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  HostData d;
  d.values.resize(n);
  d.stored.resize(n * ops::element_bytes(s));
  for (size_t i = 0; i < n; ++i) {
    const float x = dist(rng);
    if (s == Storage::f32) {
      d.values[i] = x;
      std::memcpy(d.stored.data() + 4 * i, &x, 4);
    } else {
      const uint16_t h = s == Storage::f16 ? float_to_half(x) : float_to_bf16(x);
      d.values[i] = s == Storage::f16 ? half_to_float(h) : bf16_to_float(h);
      std::memcpy(d.stored.data() + 2 * i, &h, 2);
    }
  }
  return d;
}

struct Bench {
  Context& ctx;
  Context::Impl& vk;
  std::mt19937 rng{12345};
  std::deque<Buffer> buffers;  // stable addresses: cases hold references

  explicit Bench(Context& c) : ctx(c), vk(c.impl()) {}

  const Buffer& upload(const HostData& d, const std::string& name) {
    buffers.push_back(vk.allocator->allocate(d.stored.size(), gpu::MemoryKind::device, name));
    gpu::upload(vk, buffers.back(), d.stored.data(), d.stored.size());
    return buffers.back();
  }
  const Buffer& device(size_t bytes, const std::string& name) {
    buffers.push_back(vk.allocator->allocate(bytes, gpu::MemoryKind::device, name));
    return buffers.back();
  }
  const Buffer& zeroed(size_t bytes, const std::string& name) {
    const Buffer& b = device(bytes, name);
    const std::vector<std::byte> zeros(bytes);
    gpu::upload(vk, b, zeros.data(), bytes);
    return b;
  }
  // NaN in the first `n` floats, so that a kernel that writes nothing fails its check.
  void poison(const Buffer& b, size_t n) {
    const std::vector<float> nan(n, std::numeric_limits<float>::quiet_NaN());
    gpu::upload(vk, b, nan.data(), n * 4);
  }
  std::vector<float> download(const Buffer& b, size_t n) {
    std::vector<float> v(n);
    gpu::download(vk, b, v.data(), n * 4);
    return v;
  }

  // Runs `record` once for the check, then warm-up and timed repetitions;
  // with the Context's tuning, or `tuning` where given.
  template <class F>
  void time(Case& c, const Options& opt, F&& record, const gpu::Tuning* tuning = nullptr) {
    gpu::Recorder rec(vk, tuning ? *tuning : vk.tuning);
    rec.begin();
    record(rec);
    rec.end();
    rec.submit("benchmark " + c.name);
    warm_up(vk.info, opt.warmup, [&] { rec.submit("benchmark " + c.name); });
    Timer t;
    for (int i = 0; i < std::max(1, opt.reps); ++i) {
      rec.submit("benchmark " + c.name);
      std::vector<std::pair<std::string, double>> run;
      for (const auto& d : rec.timings()) run.emplace_back(d.label, d.microseconds);
      t.add(run);
    }
    t.fill(c);
    c.device_bytes = vk.allocator->bytes_in_use();
  }
};

inline void record_check(Case& c, const std::vector<float>& got, const std::vector<double>& want, const std::string& what) {
  const reference::Diff d = reference::compare(got, want);
  c.nmse = d.nmse;
  c.max_abs = d.max_abs;
  c.check = what;
}

// Rows of a row-major [rows, cols] matrix.
template <class T>
std::vector<T> pick_rows(const std::vector<T>& m, size_t cols, const std::vector<size_t>& rows) {
  std::vector<T> out;
  for (size_t r : rows) out.insert(out.end(), m.begin() + long(r * cols), m.begin() + long((r + 1) * cols));
  return out;
}

inline std::vector<size_t> sample_rows(size_t rows, size_t limit) {
  if (rows <= limit) {
    std::vector<size_t> all(rows);
    for (size_t i = 0; i < rows; ++i) all[i] = i;
    return all;
  }
  std::vector<size_t> s;
  for (size_t i = 0; i < limit; ++i) s.push_back(i * (rows - 1) / (limit - 1));
  return s;
}


// The items of a comma-separated list (--tiles).
inline std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> items;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    items.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  return items;
}

// The products a --tiles sweep of the tensor-core kernels runs on: tensor
// cores, else their emulation on a CPU driver (the tests' way to run them
// there), else off.
inline gpu::Coopmat tile_products(const DeviceInfo& d) {
  const gpu::Coopmat kind = ops::coopmat_usable(d, gpu::Coopmat::tensor);
  return kind != gpu::Coopmat::off ? kind : ops::coopmat_usable(d, gpu::Coopmat::emulated);
}

}  // namespace vkgate::bench::detail

// Context: the Vulkan instance, the chosen device and everything shared by the
// blocks that run on it (memory, pipelines, the queue).
//
// Thread safety: a Context may be shared by objects (GatedAttention, ...) used
// from several threads at once; its memory allocator, pipeline cache, queue
// submissions and message log are internally locked, and every const member
// function may be called from any thread. Creating and destroying a Context is
// not concurrent with its use: destroy every object built on it first.
// list_devices() may be called from any thread. DeviceInfo and ContextOptions
// are plain values.
//
// Faults: every failure is a vkgate::Error (error.hpp). No Vulkan driver or
// device: Error(no_device). Device memory exhausted, or a request beyond the
// device's heap or the options' device_memory_limit: Error(out_of_memory), and
// the Context stays usable. VK_ERROR_DEVICE_LOST: Error(device_lost); after it
// device_lost() is true and every later submission fails the same way at once
// (create a new Context).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace vkgate {

// What one Vulkan device can do, as far as vkgate cares.
struct DeviceInfo {
  int index = -1;
  std::string name;
  std::string type;  // discrete, integrated, virtual, cpu, other
  uint32_t vendor_id = 0, device_id = 0;
  std::string driver;     // driver name and info
  std::string api_version;
  bool fp16_arithmetic = false;  // shaderFloat16
  bool storage16 = false;        // storageBuffer16BitAccess
  // shaderStorageBufferArrayDynamicIndexing, and maxPerStageDescriptorStorageBuffers:
  // a batched step's attention binds every sequence's cache in one dispatch.
  bool storage_buffer_arrays = false;
  uint32_t max_stage_storage_buffers = 0;
  uint32_t subgroup_size = 0, min_subgroup_size = 0, max_subgroup_size = 0;
  // Compute pipelines can ask for any power-of-two subgroup size in [min, max],
  // in full subgroups (subgroupSizeControl and computeFullSubgroups), of at
  // most max_workgroup_subgroups per workgroup.
  bool subgroup_size_control = false;
  uint32_t max_workgroup_subgroups = 0;
  bool subgroup_arithmetic = false, subgroup_shuffle = false;  // in compute
  uint32_t shared_memory_bytes = 0;
  uint32_t max_workgroup_invocations = 0;
  std::array<uint32_t, 3> max_workgroup_size{};
  std::array<uint32_t, 3> max_workgroup_count{};  // maxComputeWorkGroupCount
  uint64_t max_storage_buffer_range = 0;
  uint64_t min_storage_buffer_offset_alignment = 0;
  uint64_t max_texel_buffer_elements = 0, min_texel_buffer_offset_alignment = 0;
  uint64_t max_memory_allocation_size = 0;
  uint64_t device_local_bytes = 0;          // sum of the device-local heaps
  bool coopmat_nv = false, coopmat_khr = false;  // extensions present
  // The tensor-core kernels are usable: the extension advertises a 16×16×16
  // fp16×fp16→fp32 subgroup shape, and the device has subgroups of 32, the
  // Vulkan memory model and fp16 arithmetic. VKGATE_DISABLE_COOPMAT=1 turns
  // both off.
  // coopmat_f16: through VK_NV_cooperative_matrix (the matmul, flash attention
  // and staged matmul kernels).
  // coopmat_f16_khr: through VK_KHR_cooperative_matrix, on Vulkan 1.3 devices,
  // where this build has the KHR shaders (a glslang with
  // GL_KHR_cooperative_matrix; not Debian 12's). Its pipelines ask for
  // subgroups of 32 where the device offers subgroup size control, so devices
  // whose default is 64 (AMD) can take it. The matmul prefers it;
  // VKGATE_DISABLE_COOPMAT_KHR=1 turns it off.
  bool coopmat_f16 = false, coopmat_f16_khr = false;
  // shaderIntegerDotProduct (Vulkan 1.3, or VK_KHR_shader_integer_dot_product):
  // packed 4×int8 dot products in shaders, for the int8-activation product
  // (ModelOptions::int8_activations). VKGATE_DISABLE_INTEGER_DOT=1 turns it off.
  bool integer_dot_product = false;
  // GPU timestamps: the device has them and this Context writes one around
  // every dispatch (ContextOptions::timestamps), so last_timings() is filled.
  bool timestamps = false;
  double timestamp_period_ns = 0;

  // One line: name, type and capabilities (what `vkgate devices` prints).
  std::string summary() const;
};

// Long work under way, reported through ContextOptions::on_progress: a first
// run's pipeline compilation (a CPU driver JIT-compiles each pipeline when it
// first runs: seconds each), a model's tensors going to the device, a long
// prompt's prefill in chunks.
struct Progress {
  enum class Task { pipelines, tensors, prefill };
  Task task = Task::pipelines;
  uint64_t done = 0, total = 0;  // pipelines compiled, tensors uploaded or prompt tokens run, of `total`
  uint64_t bytes = 0;            // tensors: the bytes of those uploaded so far
  double seconds = 0;            // since the task began
};
const char* to_string(Progress::Task task) noexcept;  // "compiling pipelines", "loading tensors", "prefill"

struct ContextOptions {
  // Device index ("1") or case-insensitive name substring ("llvmpipe"). Empty:
  // the VKGATE_DEVICE environment variable, else the best device
  // (discrete > integrated > virtual > CPU).
  std::string device;
  // Enable VK_LAYER_KHRONOS_validation with synchronization validation. Also
  // switched on by VKGATE_VALIDATION=1. Messages are counted (see
  // validation_messages) and printed to stderr.
  bool validation = false;
  // Enable the validation layer with GPU-assisted validation instead of
  // synchronization validation: shaders are instrumented so that an
  // out-of-bounds buffer access is reported as a validation message (naming the
  // shader line when the shaders were built with VKGATE_SHADER_DEBUG_INFO=ON).
  // Much slower; for tests. Also switched on by VKGATE_VALIDATION=gpu.
  bool gpu_assisted_validation = false;
  // Most device memory (bytes, all memory kinds together) this Context may
  // allocate; 0: no limit beyond the device's memory heaps. A request beyond
  // it is Error(out_of_memory) and leaves the Context usable.
  uint64_t device_memory_limit = 0;
  // Called with each validation-layer message (as counted by
  // validation_messages), from the thread that made the Vulkan call — also
  // during the Context's destruction, where the layer reports Vulkan objects
  // that were never destroyed. Must not call back into the Context.
  // Messages are printed to stderr either way.
  std::function<void(const std::string&)> on_message;
  // Called as long work advances (Progress), from the thread doing it, the
  // last call of a task with done == total. Must not call back into the
  // Context. `vkgate` draws it as a line on a terminal's stderr.
  std::function<void(const Progress&)> on_progress;
  // A GPU timestamp around every dispatch, which the blocks' and models'
  // last_timings() read. Unset: the VKGATE_TIMESTAMPS environment variable
  // (0 or 1), else off: they cost 9 % of a 0.6B model's decode step on an
  // H200 and 15 % on lavapipe (~75 µs each). `vkgate bench`, `run` and the
  // demo turn them on.
  std::optional<bool> timestamps;
};

class Context {
 public:
  explicit Context(const ContextOptions& options = {});
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // Every device the Vulkan loader exposes (creates a short-lived instance).
  static std::vector<DeviceInfo> list_devices();

  const DeviceInfo& device() const;
  bool validation_enabled() const;
  bool gpu_assisted_validation_enabled() const;
  // True once a Vulkan call returned VK_ERROR_DEVICE_LOST: nothing more can run.
  bool device_lost() const;
  // Device memory this Context holds (VkDeviceMemory blocks, bytes), and the
  // part of it handed out to live tensors and staging buffers.
  uint64_t device_memory_allocated() const;
  uint64_t device_memory_in_use() const;

  // Warnings and errors reported by the validation layer (or any layer) so far.
  uint64_t validation_messages() const;
  std::vector<std::string> take_validation_messages();

  struct Impl;  // Vulkan state; internal to the library
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace vkgate

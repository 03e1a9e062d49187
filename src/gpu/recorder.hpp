// Internal: records dispatches and copies into one command buffer that can be
// submitted many times. It remembers each buffer's last access and inserts a
// barrier exactly where a hazard exists:
//   read after write   → make the write available and visible to the reader
//   write after read   → execution dependency on the readers
//   write after write  → make the first write available before the second
// Nothing is emitted between independent dispatches.
//
// Each dispatch's parameters and workgroup counts live in a ParamArena slot
// (gpu/param_arena.hpp), not in the command buffer: begin(Mode::update) lets
// the same calls rewrite them for the next submission — a decode step whose
// positions advance is recorded once and replayed. With
// Tuning::direct_dispatch (GPUs) the counts are in the command buffer too, and
// an update that changes one is refused.
//
// Thread safety: a Recorder is used by one thread at a time.
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>
#include <span>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "gpu/memory.hpp"
#include "gpu/param_arena.hpp"
#include "gpu/pipeline.hpp"
#include "gpu/tuning.hpp"
#include "gpu/vk.hpp"

namespace vkgate::gpu {

enum class Access { read, write, read_write };

struct Binding {
  const Buffer* buffer;
  Access access;
  // For a pipeline's uniform texel buffer binding: the format of its texels
  // (the recorder makes a VkBufferView over the whole Buffer).
  VkFormat texel_format = VK_FORMAT_UNDEFINED;
};

struct DispatchTiming {
  std::string label;
  double microseconds;
};

class Recorder {
 public:
  // Records with `tuning` (the plan's copy, decided when the plan was made),
  // or the Context's.
  Recorder(Context::Impl& ctx, const Tuning& tuning);
  explicit Recorder(Context::Impl& ctx);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // record: starts (re)recording; earlier contents and descriptor sets are
  // dropped. update: the calls up to end() must repeat the recorded sequence
  // (the same pipelines, buffers, copies and marks, in order) and only rewrite
  // the dispatches' parameters and workgroup counts, which the next submit
  // runs; the command buffer is not recorded again. A call that differs from
  // the recording is an Error(invalid_argument), after which the recorder must
  // record again before it can submit.
  enum class Mode { record, update };
  void begin(Mode mode = Mode::record);
  // Bindings go to bindings 0..n−1 in order; a binding that the shader
  // declares as an array of N buffers takes the next N. `params` is the host mirror of
  // the shader's parameter block (shaders/params.glsl, std430): it must hold
  // at least the block the pipeline's SPIR-V declares (variants of one op may
  // read a prefix of one host struct), an Error otherwise.
  template <typename Params>
  void dispatch(const Pipeline& p, std::initializer_list<Binding> bindings, const Params& params, uint32_t groups_x,
                uint32_t groups_y = 1, uint32_t groups_z = 1, std::string label = {}) {
    static_assert(std::is_trivially_copyable_v<Params> && !std::is_pointer_v<Params>);
    dispatch_bytes(p, std::span(bindings.begin(), bindings.size()), std::as_bytes(std::span(&params, 1)), groups_x,
                   groups_y, groups_z, std::move(label));
  }
  template <typename Params>
  void dispatch(const Pipeline& p, std::span<const Binding> bindings, const Params& params, uint32_t groups_x,
                uint32_t groups_y = 1, uint32_t groups_z = 1, std::string label = {}) {
    static_assert(std::is_trivially_copyable_v<Params> && !std::is_pointer_v<Params>);
    dispatch_bytes(p, bindings, std::as_bytes(std::span(&params, 1)), groups_x, groups_y, groups_z, std::move(label));
  }
  void dispatch_bytes(const Pipeline& p, std::span<const Binding> bindings, std::span<const std::byte> params,
                      uint32_t groups_x, uint32_t groups_y = 1, uint32_t groups_z = 1, std::string label = {});
  // A dispatch whose workgroup counts an earlier dispatch of this recording
  // wrote into `counts` at byte `offset` (a VkDispatchIndirectCommand: three
  // uint32, each within maxComputeWorkGroupCount: the writer's promise), so
  // that a step launches only the workgroups the device found work for.
  template <typename Params>
  void dispatch_indirect(const Pipeline& p, std::initializer_list<Binding> bindings, const Params& params,
                         const Buffer& counts, VkDeviceSize offset, std::string label = {}) {
    static_assert(std::is_trivially_copyable_v<Params> && !std::is_pointer_v<Params>);
    record_dispatch(p, std::span(bindings.begin(), bindings.size()), std::as_bytes(std::span(&params, 1)), {1, 1, 1},
                    &counts, offset, std::move(label));
  }
  void copy(const Buffer& src, const Buffer& dst, VkDeviceSize bytes);
  // Several regions in one command; offsets are relative to each Buffer's start.
  void copy(const Buffer& src, const Buffer& dst, std::vector<VkBufferCopy> regions);
  void fill(const Buffer& dst, uint32_t word);  // every 32-bit word of dst
  // Closes a timed span named `label` covering the commands since the last
  // dispatch or mark (dispatches close their own spans).
  void mark(std::string label);
  // Ends recording (or updating); writes to host-visible buffers are made
  // visible to the host.
  void end();

  // Submits and waits. May be called many times per recording.
  void submit(const std::string& doing);

  // GPU time of each dispatch of the last submit (empty without timestamp
  // support, or before the recording's first submit).
  std::vector<DispatchTiming> timings() const;

  size_t barrier_count() const { return barriers_; }
  // How often a command buffer was recorded (begin(Mode::record)); updates do not count.
  size_t recordings() const { return recordings_; }
  // The kernel choices the ops recording into this take (gpu/tuning.hpp).
  const Tuning& tuning() const { return tuning_; }

  // Only for the test that proves the validation layer catches a missing barrier.
  void disable_hazard_tracking_for_test() { tracking_ = false; }

 private:
  struct State {
    VkPipelineStageFlags write_stage = 0;  // last write not yet made visible everywhere
    VkAccessFlags write_access = 0;
    VkPipelineStageFlags visible_stages = 0;  // stages/accesses the last write is visible to
    VkAccessFlags visible_access = 0;
    VkPipelineStageFlags read_stages = 0;  // reads since the last write
  };
  struct Use {
    const Buffer* buffer;
    VkPipelineStageFlags stage;
    VkAccessFlags access;
    bool reads, writes;
  };
  // dispatch_bytes, or with `counts` dispatch_indirect's workgroup counts from the device.
  void record_dispatch(const Pipeline& p, std::span<const Binding> bindings, std::span<const std::byte> params,
                       std::array<uint32_t, 3> groups, const Buffer* counts, VkDeviceSize offset, std::string label);
  void release();  // the Vulkan objects, once (destructor, failed constructor)
  void sync(std::initializer_list<Use> uses);
  void sync(const std::vector<Use>& uses);
  VkDescriptorSet allocate_set(VkDescriptorSetLayout layout, uint32_t descriptors);
  void timestamp();
  // In update mode: checks that the next recorded command is `signature`
  // (and returns its index), else throws, naming the command by what() (made
  // only then: a decode step updates ~170 commands per token).
  template <typename What>
  size_t expect(uint64_t signature, What what);
  // Runs each pipeline this recording uses for the first time once, with no
  // workgroups, before the recording runs (end()).
  void warm_up();

  Context::Impl& ctx_;
  Tuning tuning_;
  ParamArena params_;
  // What was recorded, in order: a signature of every command (its pipeline,
  // buffers, regions, label) and, for dispatches, its parameter slot.
  struct Step {
    uint64_t signature;
    ParamArena::Slot slot;
    // Tuning::direct_dispatch: the workgroup counts in the command buffer,
    // which an update cannot change (it throws; the caller records again).
    bool direct = false;
    std::array<uint32_t, 3> groups{};
  };
  std::vector<Step> steps_;
  // Pipelines of this recording not yet run anywhere, with the descriptor sets
  // of their first dispatch (a driver may compile for what is bound).
  struct Cold {
    const Pipeline* pipeline;
    VkDescriptorSet set;
    ParamArena::Slot slot;
  };
  std::vector<Cold> cold_;
  VkCommandBuffer warm_cmd_ = VK_NULL_HANDLE;
  bool updating_ = false;
  size_t next_step_ = 0;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer prologue_ = VK_NULL_HANDLE;  // the parameter upload, submitted first
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  // Timestamp pools of kTimestampsPerPool queries, one more each time a
  // recording fills the last (a step of many sequences writes thousands);
  // each is reset in the command buffer before its first query.
  bool timestamps_ = false;
  std::vector<VkQueryPool> query_pools_;
  uint32_t queries_used_ = 0;
  std::vector<VkDescriptorPool> descriptor_pools_;
  std::vector<VkBufferView> views_;  // texel buffer views of this recording
  size_t pool_index_ = 0;     // descriptor pool sets come from now
  uint32_t sets_in_pool_ = 0, descriptors_in_pool_ = 0;
  std::unordered_map<uint64_t, State> states_;
  std::unordered_map<uint64_t, const Buffer*> host_visible_written_;
  std::vector<std::string> labels_;
  size_t barriers_ = 0;
  size_t recordings_ = 0;
  bool tracking_ = true;
  bool recording_ = false;
  bool recorded_ = false;
  bool submitted_ = false;
  uint64_t last_run_ns_ = 0;  // the last submit's wall time, from submission to the fence (Tuning::fence_spin_us)  // since the last begin(Mode::record): timings() has results to read
};

// Splits a 1-D count of workgroups into an (x, y) grid within the 65535 limit.
struct Grid {
  uint32_t x, y;
};
Grid grid_for(uint64_t groups);

}  // namespace vkgate::gpu

// The environment, read by the Context only: the VKGATE_* switches become one
// gpu::Tuning value when a Context is made (README "Environment").
#include <cstdlib>
#include <cstring>
#include <string>

#include "gpu/context_impl.hpp"
#include "vkgate/error.hpp"

namespace vkgate::gpu {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

namespace {
// Unset: `fallback`; "emulate": emulated; "0" (or empty): off; anything else: tensor cores.
Coopmat coopmat_switch(const char* name, Coopmat fallback) {
  const char* v = std::getenv(name);
  if (!v) return fallback;
  if (std::strcmp(v, "emulate") == 0) return Coopmat::emulated;
  return env_flag(name) ? Coopmat::tensor : Coopmat::off;
}

// Unset or empty: by token count; a value other than the two forms is an error.
RecurrenceMode recurrence_mode_switch(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return RecurrenceMode::automatic;
  if (std::strcmp(v, "recurrent") == 0) return RecurrenceMode::recurrent;
  if (std::strcmp(v, "chunk") == 0) return RecurrenceMode::chunk;
  throw Error(ErrorCode::invalid_argument,
              std::string(name) + "='" + v + "' is not a GLA form: use recurrent or chunk (or leave it unset)");
}

uint64_t number(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}
}  // namespace

Tuning tuning_from_environment() {
  Tuning t;
  t.fused = !env_flag("VKGATE_DISABLE_FUSED");
  t.pass_fusion = !env_flag("VKGATE_DISABLE_PASS_FUSION");
  t.split_kv = !env_flag("VKGATE_DISABLE_SPLIT_KV");
  t.flash_decode = !env_flag("VKGATE_DISABLE_FLASH_DECODE");
  t.direct_io = !env_flag("VKGATE_DISABLE_DIRECT_IO");
  t.split_k = !env_flag("VKGATE_DISABLE_SPLIT_K");
  t.matvec = !env_flag("VKGATE_DISABLE_MATVEC");
  t.cpu_matmul = !env_flag("VKGATE_DISABLE_CPU_MATMUL");
  t.cpu_attention = !env_flag("VKGATE_DISABLE_CPU_ATTENTION");
  t.subgroup_reduce = !env_flag("VKGATE_DISABLE_SUBGROUP_REDUCE");
  t.matmul_splits = uint32_t(number("VKGATE_MATMUL_SPLITS", 0));
  t.flash_splits = uint32_t(number("VKGATE_FLASH_SPLITS", 0));
  t.score_bytes = number("VKGATE_SCORE_BYTES", t.score_bytes);
  t.vocab_chunk_rows = uint32_t(number("VKGATE_VOCAB_CHUNK_ROWS", 0));
  t.moe_shard_experts = uint32_t(number("VKGATE_MOE_SHARD_EXPERTS", 0));
  t.gla_segment_tokens = uint32_t(number("VKGATE_GLA_SEGMENT_TOKENS", 0));
  t.gla_mode = recurrence_mode_switch("VKGATE_GLA_MODE");
  t.gdn_mode = recurrence_mode_switch("VKGATE_GDN_MODE");
  t.coopmat_flash = coopmat_switch("VKGATE_COOPMAT_FLASH", t.coopmat_flash);
  t.coopmat_staged = coopmat_switch("VKGATE_COOPMAT_STAGED", t.coopmat_staged);
  return t;
}

}  // namespace vkgate::gpu

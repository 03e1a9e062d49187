// Model: a whole decoder-only model (Qwen3 with the paper's gate flags, Llama,
// or fla's GLA; model_config.hpp) whose weights live on the device, and
// Sequence: the per-sequence state (one KV cache per layer, or for GLA one
// recurrent state per layer, and the position) that a generation keeps, so
// that several sequences share one copy of the weights.
//
//   vkgate::Model model = vkgate::Model::load(ctx, "checkpoints/1B_gate_elementwise");
//   std::vector<float> logits = model.logits(ids, batch, tokens);      // [B, T, V]
//   vkgate::GenerateResult r = model.generate(prompt_ids, {.max_new_tokens = 32});
//   vkgate::GenerateResult t = model.generate(vkgate::Tokenizer::load(dir), "The capital of France is");
//
// Each step shape (batch, tokens, what is returned) is recorded once into one
// command buffer that holds every layer, and replayed: a decode step is
// recorded once and replayed at every cache length (its positions reach the
// recorded commands as parameters). The plans a Model or a Sequence keeps
// are bounded (the least recently used is dropped), so a long generation
// holds constant memory.
//
// Thread safety: a Model (with its Sequences) is used by one thread at a
// time; several Models may share a Context and run on different threads.
// A Sequence must not outlive the Model that started it.
//
// Faults: every failure is a vkgate::Error naming the file, tensor, key or
// id involved; a failed construction holds no device memory afterwards.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "vkgate/block.hpp"
#include "vkgate/context.hpp"
#include "vkgate/generate.hpp"
#include "vkgate/model_config.hpp"
#include "vkgate/precision.hpp"
#include "vkgate/tokenizer.hpp"
#include "vkgate/weights.hpp"

namespace vkgate {

struct ModelOptions {
  // Device storage of weights and activations; arithmetic is fp32, and so is
  // the residual stream between layers.
  Precision precision = Precision::fp32;
  // Refuse NaN or ±Inf in a weight (and values beyond fp16's range with fp16
  // storage) at construction, naming the tensor.
  bool check_finite = true;
  // Run sequences past config().context_limit() (max_position_embeddings):
  // positions the model was not trained for. Without it such a step is an
  // Error(invalid_argument) naming both lengths, and generate stops there.
  bool ignore_context_limit = false;
  // Quantize on load: the float linear weights (quantizable_weight: the
  // attention, MLP, routed and shared experts' and linear-attention
  // projections and an untied lm_head) go to the device in this block format
  // (vkgate/quant.hpp), quantized by ggml's reference quantizers; `precision`
  // stays the storage of the activations and of every other weight. Rows
  // that are not whole blocks stay float. Weights already in a block format
  // (a GGUF) are kept.
  std::optional<DType> quant;
  // int8 activations: the Q8_0 and Q4_0 projections (attention, MLP, shared
  // expert, linear attention; not the routed experts nor lm_head) quantize
  // their input per 32-element block to int8 (an fp32 scale d = max|x|/127,
  // q = round(x/d)) and multiply with integer dot products, where the device
  // has them (DeviceInfo::integer_dot_product); elsewhere, and for every other
  // format, the fp32 product runs (the option is then a no-op, not an error).
  // Error per output: |Δy| ≤ Σ_blocks max|x_b|/254 · Σ_{i∈b} |w_i| (w the
  // dequantized weights), plus fp32 rounding.
  bool int8_activations = false;
};

// Whether ModelOptions::quant quantizes the tensor of this full name: a
// projection ("...proj.weight", "...proj.0.weight", ...; the routed experts'
// "mlp.experts.{e}.{gate,up,down}_proj.weight" included) or lm_head.weight;
// not embeddings, norms, routers (mlp.gate, shared_expert_gate) nor convolutions.
bool quantizable_weight(const std::string& name);
// `weights` with every quantizable float tensor of `cfg` (rows of whole
// blocks) replaced by its `quant` blocks, held in `storage` (which must
// outlive the returned views).
TensorMap quantize_weights(const ModelConfig& cfg, const TensorMap& weights, DType quant,
                           std::vector<std::vector<std::byte>>& storage);

// The paper's measurements, per layer, from a forward with statistics. The
// attention statistics cover the layers with softmax attention
// (attention_layers: every layer of a qwen3 or llama model, the full-attention
// layers of a hybrid, none of a GLA model); a GLA or Gated DeltaNet layer has
// no attention probabilities and no sigmoid gate scores.
struct ModelStats {
  int layers = 0;
  int heads = 0;  // of first_token_attn's rows; 0 without attention probabilities
  std::vector<int> attention_layers;     // the layers first_token_attn and gate_mean describe
  std::vector<double> first_token_attn;  // [L_attn, H]: attention on key 0, mean over batch and queries
  std::vector<double> max_activation;    // [L]: max |x| of the residual stream after each layer
  std::vector<double> gate_mean;         // [L_attn]: mean sigmoid gate score; empty without a gate
  // The sparse MoE layers (ModelConfig::moe_layers) and, per layer, the share
  // of the tokens routed to each of its `experts` experts (a row sums to k).
  std::vector<int> moe_layers;
  int experts = 0;
  std::vector<double> expert_load;  // [L_moe, E]
};

// Device memory a Model holds, in bytes.
struct MemoryUse {
  uint64_t weights = 0;    // every tensor of the model
  // The weight bytes a decode step of one token reads: every layer's (sparse
  // MoE layers: the routed experts' average share, top-k of E), the lm_head,
  // one row of the embedding table. Weights cross memory once per step, so
  // this over the step's time is its weight bandwidth.
  uint64_t weights_per_token = 0;
  uint64_t kv_cache = 0;   // the caches of its live Sequences (GLA: their fp32 states [B, H, dk, dv] per layer,
                           // and the copies their checkpoints hold)
  uint64_t workspace = 0;  // the buffers of its recorded plans (scratch, inputs, outputs)
};

// Each row's k largest logits (Model::extend_top): ids and logits [n, k],
// most likely first, equal logits the lower id first.
struct TopLogits {
  int k = 0;
  std::vector<int64_t> ids;
  std::vector<float> logits;
  // Where more ids tie with a row's k-th logit than fit in k (transformers'
  // top_k keeps every one), that row's whole logits [V], by row.
  std::map<int, std::vector<float>> full;
};

class Model;

class Sequence {
 public:
  ~Sequence();
  Sequence(Sequence&&) noexcept;
  Sequence& operator=(Sequence&&) noexcept;
  int batch() const;
  int capacity() const;  // positions each row's cache holds (GLA: may run, the state's size is fixed)
  int length() const;    // positions run so far
  // Forgets the positions from `length` on (to roll back or redo steps). A
  // recurrent state (GLA and Gated DeltaNet layers) sums every position so
  // far: such a sequence goes back only to 0 (zeroes the states), to the
  // current length, or to its checkpoint's length (restores the states saved
  // there); anything else is an Error(invalid_argument) saying so. After a
  // step failed, only 0 or the checkpoint's length.
  void truncate(int length);
  // Saves the recurrent states at the current length, for truncate() to
  // return to: one checkpoint, a new one replaces it. The first call
  // allocates a copy of the states (none for KV caches, which keep every
  // position). A server makes one where a later prompt may part from this one.
  void checkpoint();
  // Gives the sequence room for `capacity` (> 0) positions (nothing when it has
  // it): new caches, the positions and states so far (and the checkpoint)
  // copied over, the old ones freed; its recorded steps are recorded again.
  void reserve(int capacity);
  // The checkpoint's length; -1 when there is none (none was made, or the
  // sequence was truncated below it since).
  int checkpoint_length() const;
  // The longest length ≤ at_most (≥ 0; above length() taken as it) that truncate()
  // accepts: at_most itself for KV caches only; with recurrent states the
  // current length, else the checkpoint's, else 0.
  int rollback_length(int at_most) const;

 private:
  friend class Model;
  struct Impl;
  explicit Sequence(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A sequence and the ids its positions hold (ids.size() == sequence.length()):
// what a generation leaves (Generation::release) for a later one to start from.
struct CachedSequence {
  Sequence sequence;
  std::vector<int64_t> ids;
};

class Model {
 public:
  // Reads DIR/config.json (and generation_config.json) and DIR's checkpoint
  // (model.safetensors, or model.safetensors.index.json and its shards),
  // checks every tensor's presence, dtype (F32, F16, BF16) and shape, and
  // uploads them. Errors name the file and the tensor or key. `dir` may also
  // be a GGUF file (a name ending in .gguf, or the GGUF magic): config and
  // tensors from it (vkgate/gguf_model.hpp), all checked before any upload.
  static Model load(Context& ctx, const std::string& dir, const ModelOptions& options = {});
  // From tensors under their full Hugging Face names (expected_model_weights).
  Model(Context& ctx, const ModelConfig& cfg, const TensorMap& weights, const ModelOptions& options = {});
  ~Model();
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;

  // The logits [batch, tokens, V] of every position of ids [batch, tokens]
  // (each row causal from its first token, GLA layers from a zero state; no
  // cache is kept). With `stats`,
  // also the per-layer measurements. Ids outside [0, V) are an
  // Error(invalid_argument) naming the first with its position.
  std::vector<float> logits(std::span<const int64_t> ids, int batch, int tokens, ModelStats* stats = nullptr);

  // A sequence of `batch` rows with room for `capacity` positions each (GLA:
  // zero states).
  Sequence start(int batch, int capacity);
  // Runs ids [batch, tokens] as the next positions of `seq` and returns the
  // logits [batch, V] of the last of them. (GLA: tokens beyond one step's
  // device buffers run as several steps, the states carried between them.)
  std::vector<float> extend(Sequence& seq, std::span<const int64_t> ids, int tokens);
  // Runs ids [n, tokens], row i as the next `tokens` positions of seqs[i],
  // for several sequences of batch 1, each at its own length, in one device
  // step (a server's batched decode, tokens 1, or its new prompts' pieces):
  // the weights are read once for all of them, and each attends to or
  // updates only its own caches. Returns the logits [n, V] of each one's
  // last position, row i seqs[i]'s, equal to what extend(*seqs[i], its ids,
  // tokens) returns within rounding (the products run on n × tokens rows).
  // The sequences must be distinct and of this model. A step is recorded
  // for each set of sequences and tokens and replayed while they stay the
  // same (a plan each, the least recently used dropped beyond four). Tokens
  // beyond one step's buffers run as several steps.
  std::vector<float> extend(std::span<Sequence* const> seqs, std::span<const int64_t> ids, int tokens = 1);
  // The same step, each row's k (1 ≤ k ≤ min(256, V)) largest logits
  // chosen on the device, so that a sampler reads k values per row instead
  // of the vocabulary (one sequence takes its own plan, several their set's).
  TopLogits extend_top(std::span<Sequence* const> seqs, std::span<const int64_t> ids, int k);
  // The same step, each row's most likely next id (the lower id on ties), as
  // greedy generation picks it: on the device where the Context chooses top
  // ids there (VKGATE_DEVICE_TOP_K: GPUs), else from the logits read back.
  std::vector<int64_t> extend_greedy(std::span<Sequence* const> seqs, std::span<const int64_t> ids);

  // Decoding of one prompt (greedy unless options.sampling says otherwise):
  // one step for the prompt, then one replayed step per new token, on a
  // sequence whose room grows as the tokens come (generate.hpp: Generation
  // runs the same loop a step at a time).
  GenerateResult generate(std::span<const int64_t> prompt, const GenerateOptions& options = {});
  // Text in, text out: the prompt encoded by `tokenizer` (with the special
  // tokens its post-processor adds), the new ids decoded as they come. An id
  // the tokenizer does not know (a model may have more embedding rows than
  // tokens) decodes to no text and is listed in GenerateResult::undecoded_ids.
  GenerateResult generate(const Tokenizer& tokenizer, std::string_view prompt, const GenerateOptions& options = {});

  const ModelConfig& config() const;
  // config().context_limit(), or 0 (none) with ModelOptions::ignore_context_limit.
  int context_limit() const;
  Precision precision() const;
  MemoryUse memory() const;
  // How often command buffers were recorded (decode steps replay, recording nothing).
  size_t recordings() const;
  // GPU time of each dispatch of the last step (empty without timestamps:
  // ContextOptions::timestamps).
  std::vector<StageTime> last_timings() const;
  // Fill every intermediate with NaN before each step (tests): an element a
  // shader forgot to write cannot pass a comparison. Records plans again.
  void set_poison(bool on);

 private:
  friend class Sequence;
  friend class Generation;
  Context& context();  // for a Generation's progress reports
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vkgate

// Qwen3.5 GGUF files (general.architecture qwen35 and qwen35moe) that
// llama.cpp's own tools wrote (tests/data/gguf/llama_cpp/README.md). The
// converter reorders the Gated DeltaNet's value heads from grouped by key
// head to tiled (so that ggml broadcasts the key heads); vkgate puts them
// back. qwen35moe-F16.gguf, convert_hf_to_gguf.py's of make_qwen35.py's MoE
// checkpoint with its multi-token-prediction block, reads back as that
// checkpoint bit for bit, with its config and logits. qwen35-Q4_K_M.gguf,
// llama-quantize's of the dense one, matches the reference on its dequantized
// tensors, and each tensor the checkpoint to within Q4_K's error (a value
// head out of place would be 100× that); its Gated DeltaNet projections
// stay Q4_K on the device, out_proj with its value heads tiled as stored
// (GdnConfig::out_proj_tiled). Broken files are errors naming the tensor.
// The way back: gguf_export_model of the Qwen3-Next and Qwen3.5 MoE
// checkpoints writes the converter's tensors and keys, and a Q4_K export of
// the dense one reads back as its blocks and exports again as it was.
#include "doctest.hpp"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "converter_checkpoint.hpp"
#include "gguf_convert.hpp"
#include "harness.hpp"
#include "model_check.hpp"
#include "test_util.hpp"
#include "vkgate/gguf_model.hpp"
#include "vkgate/model.hpp"
#include "vkgate/reference_model.hpp"
#include "vkgate/tokenizer.hpp"

namespace test_gguf_qwen35 {

using namespace vkgate;
using test::llama_cpp_file;

namespace {

std::vector<double> doubles(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

// out_proj [D, nv·dv] values with the value heads' column blocks moved from
// llama.cpp's tiled order (block i·nk + j) to the checkpoint's grouped one
// (head j·r + i).
std::vector<float> grouped_columns(const std::vector<float>& v, const GdnConfig& g) {
  const size_t nk = size_t(g.num_key_heads), r = size_t(g.group_size()), dv = size_t(g.value_head_dim);
  const size_t width = nk * r * dv;
  std::vector<float> out(v.size());
  for (size_t row = 0; row < v.size() / width; ++row)
    for (size_t j = 0; j < nk; ++j)
      for (size_t i = 0; i < r; ++i)
        std::copy_n(v.begin() + ptrdiff_t(row * width + (i * nk + j) * dv), dv,
                    out.begin() + ptrdiff_t(row * width + (j * r + i) * dv));
  return out;
}

}  // namespace

TEST_CASE_FIXTURE(test::GpuTest, "gguf qwen35: qwen35moe F16 of convert_hf_to_gguf.py, its MTP block included, reads back as its checkpoint, value heads grouped again, the same logits") {
  const test::ConverterCheckpoint ckpt(test::qwen35_checkpoint_config(true));
  const std::string path = llama_cpp_file("qwen35moe-F16.gguf");
  const ModelConfig cfg = test::check_converted(*this, path, ckpt);
  CHECK(cfg.model_type == "qwen3_5_moe_text");
  CHECK(cfg.linear_attention->separate_projections);
  const GgufFile file = GgufFile::open(path);
  CHECK(file.integer("qwen35moe.block_count") == 3);
  CHECK(file.integer("qwen35moe.nextn_predict_layers") == 1);
  CHECK(file.find_tensor("blk.2.nextn.eh_proj.weight") != nullptr);

  // The file's attn_gate holds value head g = j·r + i at tiled position
  // i·nk + j: its rows of position 1 are the checkpoint's z rows of head 2
  // (so the readback above found them put back).
  const GdnConfig& g = *cfg.linear_attention;
  const GgufTensor& gate = file.tensor("blk.0.attn_gate.weight");
  const std::vector<std::byte>& z = ckpt.bytes.at("model.layers.0.linear_attn.in_proj_z.weight");
  const size_t head = size_t(g.value_head_dim) * size_t(g.hidden_size) * 2;
  CHECK(std::memcmp(gate.bytes.data() + head, z.data() + 2 * head, head) == 0);
  CHECK(std::memcmp(gate.bytes.data() + head, z.data() + head, head) != 0);
}

TEST_CASE_FIXTURE(test::GpuTest, "gguf qwen35: qwen35 Q4_K_M of llama-quantize matches the reference and its checkpoint to Q4_K's error, the Gated DeltaNet projections Q4_K on the device, out_proj's value heads tiled as stored") {
  const std::string path = llama_cpp_file("qwen35-Q4_K_M.gguf");
  const test::FileWeights w(path);
  const GgufFile& f = w.file;
  CHECK(f.integer("general.file_type") == 15);
  for (const char* name : {"blk.0.attn_qkv.weight", "blk.0.attn_gate.weight", "blk.0.ssm_beta.weight",
                           "blk.0.ssm_alpha.weight", "blk.0.ssm_out.weight", "blk.1.attn_q.weight"})
    CHECK(f.tensor(name).dtype == DType::Q4_K);
  const test::ConverterCheckpoint ckpt(test::qwen35_checkpoint_config(false));
  CHECK(w.cfg.model_type == "qwen3_5_text");
  ModelConfig want_cfg = ckpt.cfg;
  want_cfg.attention.rms_norm_eps = want_cfg.linear_attention->rms_norm_eps = double(float(1e-6));  // the key is f32
  // out_proj's Q4_K blocks span all eight value heads of 32: its columns stay tiled.
  want_cfg.linear_attention->out_proj_tiled = true;
  CHECK(w.cfg.attention == want_cfg.attention);
  REQUIRE(w.cfg.linear_attention);
  const GdnConfig& g = *w.cfg.linear_attention;
  CHECK(g == *want_cfg.linear_attention);
  CHECK(g.separate_projections);
  CHECK(g.out_proj_tiled);
  CHECK(w.cfg.moe_layers().empty());

  // Q4_K of these values is off by an NMSE of about 5e-3 (Q5_0, Q6_K and Q8_0
  // less); a tensor with one value head in another's place would be off by ~2.
  const test::Dequantized expected(ckpt.tensors);
  for (const TensorSpec& spec : expected_model_weights(w.cfg)) {
    CAPTURE(spec.name);
    const std::vector<float>& a = w.data.at(spec.name);
    const std::vector<float>& b = expected.data.at(spec.name);
    REQUIRE(a.size() == b.size());
    const bool tiled = spec.name.ends_with("out_proj.weight");
    CHECK(test::nmse(doubles(tiled ? grouped_columns(a, g) : a), doubles(b)) <= (spec.shape.size() > 1 ? 1e-2 : 1e-12));
    if (tiled) CHECK(test::nmse(doubles(a), doubles(b)) > 0.5);  // as stored, not grouped
  }
  // Every Gated DeltaNet projection keeps the file's blocks, out_proj its very bytes.
  TensorBuffers copies;
  const TensorMap tensors = gguf_model_tensors(f, w.cfg, copies);
  for (const char* p : {"in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"})
    CHECK(tensors.at(std::string("model.layers.0.linear_attn.") + p + ".weight").dtype == DType::Q4_K);
  const std::span<const std::byte> out = tensors.at("model.layers.0.linear_attn.out_proj.weight").bytes;
  const std::span<const std::byte> stored = f.tensor("blk.0.ssm_out.weight").bytes;
  CHECK(std::equal(out.begin(), out.end(), stored.begin(), stored.end()));

  // What out_proj_tiled means, in the reference: the tiled columns with it
  // give the logits of the grouped columns without it.
  {
    ModelConfig grouped_cfg = w.cfg;
    grouped_cfg.linear_attention->out_proj_tiled = false;
    WeightMap grouped = w.map;
    const std::string name = "model.layers.0.linear_attn.out_proj.weight";
    const std::vector<float> columns = grouped_columns(w.data.at(name), g);
    grouped[name] = columns;
    const std::vector<int64_t> ids = test::random_ids(rng, 6, w.cfg.vocab_size);
    const std::vector<double> a = reference::model_forward(w.cfg, w.map, {ids, 1, 6}).logits;
    const std::vector<double> b = reference::model_forward(grouped_cfg, grouped, {ids, 1, 6}).logits;
    CHECK(test::nmse(a, b) <= 1e-20);
    CHECK(test::nmse(a, reference::model_forward(grouped_cfg, w.map, {ids, 1, 6}).logits) > 1e-4);
  }

  const test::FileRun run = test::check_file_model(*this, path, w);

  // On the device: the file's tensor bytes and 48 bytes of padding per block
  // buffer. out_proj in fp32 would add 48 KiB, in_proj_qkv+z+b+a 564 KiB.
  uint64_t file_bytes = 0;
  for (const GgufTensor& t : f.tensors()) file_bytes += t.bytes.size();
  const uint64_t weights = Model::load(ctx, path).memory().weights;
  INFO("weights " << weights << " bytes, file tensors " << file_bytes);
  CHECK(weights <= file_bytes + 16384);

  if (vk.info.storage16) {
    INFO("fp16");
    Model half = Model::load(ctx, path, {Precision::fp16});
    test::check_close(half.logits(run.ids, run.B, run.T), run.want, 1e-4);
  }
}

TEST_CASE_FIXTURE(test::GpuTest, "gguf qwen35: a missing or misshapen ssm_alpha or ssm_beta is an error naming it and what it holds") {
  const GgufFile file = GgufFile::open(llama_cpp_file("qwen35moe-F16.gguf"));
  const GgufDraft good = test::draft_of(file);
  test::TempDir dir("gguf_qwen35");

  GgufDraft g = good;
  g.erase_tensor("blk.0.ssm_alpha.weight");
  g.write(dir / "no_alpha.gguf");
  test::check_load_refused(*this, dir / "no_alpha.gguf", ErrorCode::missing_tensor,
                           {"'blk.0.ssm_alpha.weight'", "model.layers.0.linear_attn.in_proj_a.weight"});

  g = good;
  const GgufTensor& beta = file.tensor("blk.0.ssm_beta.weight");
  g.add_tensor(beta.name, beta.dtype, {2, 128}, std::vector<std::byte>(beta.bytes.begin(), beta.bytes.begin() + 2 * 128 * 2));
  g.write(dir / "beta.gguf");
  test::check_load_refused(*this, dir / "beta.gguf", ErrorCode::shape_mismatch,
                           {"'blk.0.ssm_beta.weight'", "model.layers.0.linear_attn.in_proj_b.weight", "[2, 128]", "[4, 128]"});
}

// gguf_export_model (`vkgate quantize --type f16`) of make_qwen3next.py's and
// make_qwen35.py's checkpoints writes what llama.cpp's converter wrote of
// them: every tensor's type, shape and bytes, and every <arch>.* key (the
// qwen35moe file's MTP block aside: vkgate writes none).
TEST_CASE("gguf qwen35: gguf_export_model writes the tensors and keys convert_hf_to_gguf.py wrote for qwen3next and qwen35moe") {
  auto same = [](const GgufValue& a, const GgufValue& b) {
    return a.type == b.type && a.element == b.element && a.integer == b.integer && a.real == b.real &&
           a.text == b.text && a.integers == b.integers && a.reals == b.reals && a.texts == b.texts;
  };
  for (const auto& [file, cfg] : {std::pair{"qwen3next-F16.gguf", test::qwen3next_checkpoint_config()},
                                  std::pair{"qwen35moe-F16.gguf", test::qwen35_checkpoint_config(true)}}) {
    CAPTURE(file);
    const test::ConverterCheckpoint ckpt(cfg);
    const GgufFile f = GgufFile::open(llama_cpp_file(file));
    const GgufDraft d = gguf_export_model(ckpt.cfg, ckpt.tensors, {.float_type = DType::F16});
    const std::string arch = f.string("general.architecture");
    const bool mtp = f.contains(arch + ".nextn_predict_layers");
    size_t compared = 0;
    for (const GgufTensor& t : f.tensors()) {
      if (mtp && t.name.starts_with("blk.2.")) continue;
      CAPTURE(t.name);
      const GgufDraft::Tensor* w = d.find_tensor(t.name);
      REQUIRE(w);
      CHECK(to_string(w->dtype) == std::string(to_string(t.dtype)));
      CHECK(w->shape == t.shape);
      CHECK(std::equal(w->bytes.begin(), w->bytes.end(), t.bytes.begin(), t.bytes.end()));
      ++compared;
    }
    CHECK(d.tensors.size() == compared);
    // What llama.cpp could not load is refused, naming it: value heads wider
    // than the key heads; out_proj's columns tiled where the architecture
    // holds them grouped.
    auto refused = [&](const ModelConfig& c, const std::string& names) {
      CAPTURE(names);
      try {
        gguf_export_model(c, ckpt.tensors);
        FAIL("exported");
      } catch (const Error& e) {
        CHECK(e.code() == ErrorCode::unsupported);
        CHECK(std::string(e.what()).find(names) != std::string::npos);
      }
    };
    ModelConfig wide = ckpt.cfg;
    wide.linear_attention->value_head_dim *= 2;
    refused(wide, "value heads of " + std::to_string(wide.linear_attention->value_head_dim));
    if (arch == "qwen3next") {
      ModelConfig tiled = ckpt.cfg;
      tiled.linear_attention->out_proj_tiled = true;
      refused(tiled, "out_proj's value heads tiled");
    }
    for (const auto& [key, value] : f.metadata()) {
      if (!(key.starts_with(arch + ".") || key == "general.architecture" || key == "general.file_type")) continue;
      CAPTURE(key);
      const GgufValue* v = d.find(key);
      if (mtp && (key.ends_with(".nextn_predict_layers") || key.ends_with(".block_count"))) continue;
      REQUIRE(v);
      if (mtp && key.ends_with(".attention.recurrent_layers")) {
        CHECK(std::vector<int64_t>(value.integers.begin(), value.integers.end() - 1) == v->integers);
        continue;
      }
      CHECK(same(*v, value));
    }
  }
}

// A Q4_K export of the dense checkpoint reads back as quantize_weights'
// blocks of it (the value heads tiled and put back as whole rows), but
// out_proj: its columns were tiled before its blocks were made, each block
// across all eight heads, so it comes back tiled (out_proj_tiled), within
// Q4_K's error. Exported again, its blocks are written as they are.
TEST_CASE("gguf qwen35: a Q4_K export of a qwen3_5_text checkpoint reads back as its blocks, out_proj tiled, and exports again as it was") {
  const test::ConverterCheckpoint ckpt(test::qwen35_checkpoint_config(false));
  test::TempDir dir("gguf_qwen35");
  gguf_export_model(ckpt.cfg, ckpt.tensors, {.quant = DType::Q4_K}).write(dir / "q4_k.gguf");
  const GgufFile f = GgufFile::open(dir / "q4_k.gguf");
  CHECK(f.string("general.architecture") == "qwen35");
  const ModelConfig cfg = gguf_model_config(f);
  CHECK(cfg.attention.mrope_section == std::vector<int>{2, 1, 1});
  GdnConfig gdn = *ckpt.cfg.linear_attention;
  gdn.rms_norm_eps = double(float(gdn.rms_norm_eps));  // the key is f32
  gdn.out_proj_tiled = true;
  CHECK(*cfg.linear_attention == gdn);
  TensorBuffers copies;
  const TensorMap got = gguf_model_tensors(f, cfg, copies);
  std::vector<std::vector<std::byte>> blocks;
  const TensorMap want = quantize_weights(ckpt.cfg, ckpt.tensors, DType::Q4_K, blocks);
  const test::Dequantized expected(ckpt.tensors);
  for (const TensorSpec& spec : expected_model_weights(cfg)) {
    CAPTURE(spec.name);
    const HostTensor& a = got.at(spec.name);
    const HostTensor& b = want.at(spec.name);
    if (spec.name.ends_with("out_proj.weight")) {
      CHECK(a.dtype == DType::Q4_K);
      CHECK(test::nmse(doubles(grouped_columns(nn::to_f32(a), gdn)), doubles(expected.data.at(spec.name))) <= 1e-2);
    } else if (spec.shape.size() > 1 && !spec.name.ends_with("conv1d.weight")) {
      CHECK(to_string(a.dtype) == std::string(to_string(b.dtype)));
      CHECK(std::equal(a.bytes.begin(), a.bytes.end(), b.bytes.begin(), b.bytes.end()));
    } else {  // norms (1 + w and back), A_log (−exp and back), the conv (F32): to fp32 rounding
      const std::vector<float> x = nn::to_f32(a), y = nn::to_f32(b);
      REQUIRE(x.size() == y.size());
      for (size_t i = 0; i < x.size(); ++i) CHECK(std::abs(double(x[i]) - double(y[i])) <= 1e-6);
    }
  }
  // Exported again (the same format): every block tensor's bytes as they
  // were, ssm_out's columns not tiled a second time.
  gguf_export_model(cfg, got, {.quant = DType::Q4_K}).write(dir / "again.gguf");
  const GgufFile again = GgufFile::open(dir / "again.gguf");
  CHECK(gguf_model_config(again).linear_attention->out_proj_tiled);
  for (const GgufTensor& t : f.tensors()) {
    if (!is_quantized(t.dtype)) continue;
    CAPTURE(t.name);
    const GgufTensor& u = again.tensor(t.name);
    CHECK(u.dtype == t.dtype);
    CHECK(std::equal(u.bytes.begin(), u.bytes.end(), t.bytes.begin(), t.bytes.end()));
  }
}

// Qwen3.5's tokenizer (tokenizer.ggml.pre "qwen35"): Qwen2's split with
// combining marks kept in their word. A tokenizer.json with its Split regex
// (qwen_style.json's vocabulary, a merge across "x" + U+0301, which NFC
// leaves apart) converts to pre "qwen35", and its GGUF encodes as the
// tokenizer.json does; under "qwen2" the mark is a piece of its own.
TEST_CASE("gguf qwen35: tokenizer.ggml.pre qwen35 keeps a combining mark in its word, as Qwen3.5's tokenizer.json") {
  nlohmann::json tok = nlohmann::json::parse(test::read_text(std::string(VKGATE_TOKENIZER_UNIT_DIR) + "/qwen_style.json"));
  tok["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  nlohmann::json& model = tok["model"];
  model["ignore_merges"] = false;
  // U+0301 is the bytes CC 81: byte-level "Ì" and "ģ". The two merged
  // tokens follow the vocabulary (268, 269), the added tokens after them.
  const int64_t xig = 269;
  model["vocab"]["x\u00cc"] = 268;
  model["vocab"]["x\u00cc\u0123"] = xig;
  for (nlohmann::json& added : tok["added_tokens"]) added["id"] = added["id"].get<int64_t>() + 2;
  tok["post_processor"] = nullptr;  // its template names the added tokens' old ids
  model["merges"].push_back({"x", "\u00cc"});
  model["merges"].push_back({"x\u00cc", "\u0123"});
  test::TempDir dir("gguf_qwen35_tok");
  test::write_text(dir / "tokenizer.json", tok.dump());
  const Tokenizer from_json = Tokenizer::load(dir / "tokenizer.json");
  const std::string text = "ax\u0301 x\u0301y";  // pieces "ax\u0301" and " x\u0301y", each merging x\u0301
  const std::vector<int32_t> ids = from_json.encode(text, false);
  CHECK(std::count(ids.begin(), ids.end(), int32_t(xig)) == 2);

  for (const char* pre : {"", "qwen2"}) {  // "": as the tokenizer.json's pre-tokenizer says
    CAPTURE(pre);
    GgufDraft g;
    g.set("general.architecture", GgufValue::of_string("qwen35"));
    test::convert_tokenizer(g, tok, nlohmann::json(), pre, from_json.vocab_size());
    g.write(dir / "t.gguf");
    const Tokenizer from_gguf = Tokenizer::load(dir / "t.gguf");
    if (*pre == 0) {
      CHECK(g.find("tokenizer.ggml.pre")->text == "qwen35");
      CHECK(from_gguf.encode(text, false) == ids);
    } else {
      const std::vector<int32_t> split = from_gguf.encode(text, false);
      CHECK(std::count(split.begin(), split.end(), int32_t(xig)) == 0);
      CHECK(from_gguf.decode(split) == text);
    }
  }
}

}  // namespace test_gguf_qwen35

// The README's linking examples: build a small block and a small model, run
// them, check them against the CPU reference.
#include <vkgate/block.hpp>
#include <vkgate/error.hpp>
#include <vkgate/model.hpp>
#include <vkgate/reference.hpp>
#include <vkgate/reference_model.hpp>
#include <vkgate/tokenizer.hpp>

#include <cstdio>
#include <random>
#include <vector>

int main() try {
  vkgate::Context ctx;  // VKGATE_DEVICE picks the device; VKGATE_VALIDATION=1 validates
  vkgate::BlockConfig cfg;
  cfg.hidden_size = 64;
  cfg.num_heads = 4;
  cfg.num_kv_heads = 2;
  cfg.head_dim = 16;
  cfg.gate_kind = vkgate::GateKind::headwise;

  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 0.2f);
  std::map<std::string, std::vector<float>> storage;
  vkgate::WeightMap weights;
  for (const auto& spec : vkgate::expected_weights(cfg)) {
    auto& v = storage[spec.name];
    v.resize(size_t(spec.numel()));
    for (float& x : v) x = dist(rng);
    weights[spec.name] = v;
  }
  std::vector<float> x(2 * 5 * 64);
  for (float& v : x) v = dist(rng);

  vkgate::GatedAttention block(ctx, cfg, weights);
  const std::vector<float> y = block.forward(x, /*batch=*/2, /*tokens=*/5);

  vkgate::reference::Inputs in;
  in.hidden = x;
  in.batch = 2;
  in.tokens = 5;
  const auto diff = vkgate::reference::compare(y, vkgate::reference::forward(cfg, weights, in).output);
  std::printf("%s: block NMSE %.3e, max abs %.3e\n", ctx.device().name.c_str(), diff.nmse, diff.max_abs);

  // The README's model example: a tiny two-layer Llama from a config.json text
  // and random weights (vkgate::Model::load(ctx, dir) reads a checkpoint directory).
  const vkgate::ModelConfig mcfg = vkgate::parse_model_config_json(
      R"({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
          "num_hidden_layers": 2, "intermediate_size": 96, "vocab_size": 100, "eos_token_id": 2})",
      "consumer.json");
  for (const auto& spec : vkgate::expected_model_weights(mcfg)) {
    auto& v = storage[spec.name];
    v.resize(size_t(spec.numel()));
    for (float& w : v) w = dist(rng) + (spec.name.find("norm") != std::string::npos ? 1.0f : 0.0f);
    weights[spec.name] = v;
  }
  vkgate::Model model(ctx, mcfg, vkgate::as_tensors(weights));
  const std::vector<int64_t> ids{5, 17, 42, 7};
  const std::vector<float> logits = model.logits(ids, /*batch=*/1, /*tokens=*/4);  // [1, 4, 100]
  const auto mdiff = vkgate::reference::compare(logits, vkgate::reference::model_forward(mcfg, weights, {ids, 1, 4}).logits);
  vkgate::GenerateOptions gen;
  gen.max_new_tokens = 5;
  gen.stop_at_eos = false;
  const vkgate::GenerateResult r = model.generate(ids, gen);
  const bool same = r.ids == vkgate::reference::greedy_generate(mcfg, weights, ids, 5, false);
  std::printf("model: logits NMSE %.3e, greedy ids %s the reference's\n", mdiff.nmse, same ? "equal" : "differ from");

  // The tokenizer (Oniguruma and utf8proc come with the library): a two-letter
  // byte-level BPE (vkgate::Tokenizer::load(dir) reads a model's tokenizer.json).
  const vkgate::Tokenizer tok = vkgate::Tokenizer::from_json(
      R"({"model": {"type": "BPE", "vocab": {"h": 0, "i": 1, "hi": 2}, "merges": ["h i"]}, "normalizer": {"type": "NFC"},
          "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false}, "decoder": {"type": "ByteLevel"}})");
  const std::vector<int32_t> text_ids = tok.encode("hihi");
  const bool text_ok = text_ids == std::vector<int32_t>{2, 2} && tok.decode(text_ids) == "hihi";
  std::printf("tokenizer: \"hihi\" -> %zu ids, decoded %s\n", text_ids.size(), text_ok ? "back" : "wrong");
  return diff.nmse <= 1e-9 && mdiff.nmse <= 1e-8 && same && text_ok && ctx.validation_messages() == 0 ? 0 : 1;
} catch (const vkgate::Error& e) {
  std::fprintf(stderr, "consumer: %s\n", e.what());
  return 1;
}

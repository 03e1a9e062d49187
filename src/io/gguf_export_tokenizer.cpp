// A tokenizer.json as llama.cpp's convert_hf_to_gguf.py writes it
// (tokenizer.ggml.*, vkgate/gguf_model.hpp): the way back of tokenizer_gguf.cpp,
// used by `vkgate quantize` beside gguf_export.cpp's model.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "io/json_error.hpp"
#include "tokenizer/tokenizer_impl.hpp"
#include "vkgate/error.hpp"
#include "vkgate/gguf_model.hpp"

namespace vkgate {

namespace {

using nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(ErrorCode::io, path + ": cannot open: " + std::strerror(errno));
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw Error(ErrorCode::io, path + ": not valid JSON: " + json_error_text(e));
  }
}

// The converter's does_token_look_special.
bool looks_special(const std::string& s) {
  if (s == "<pad>" || s == "<mask>" || s == "<2mass>" || s == "[@BOS@]") return true;
  if (s.starts_with("<|") && s.ends_with("|>")) return true;
  if (s.starts_with("<\xEF\xBD\x9C") && s.ends_with("\xEF\xBD\x9C>")) return true;  // <｜...｜>
  return s.starts_with("<unused") && s.ends_with(">");
}

// The pre-tokenizer family of a tokenizer.json, named as tokenizer.ggml.pre.
std::string detect_pre(const json& tok, const std::string& path) {
  auto fail = [&](const std::string& why) -> std::string {
    throw Error(ErrorCode::unsupported, path + ": " + why +
                                            ": none of the pre-tokenizers a GGUF file names (\"qwen2\", \"llama-bpe\", "
                                            "\"gpt-2\") is this one");
  };
  bool nfc = false;
  if (const auto n = tok.find("normalizer"); n != tok.end() && !n->is_null()) {
    const json* step = &*n;
    if (step->value("type", "") == "Sequence" && step->contains("normalizers") && (*step)["normalizers"].size() == 1)
      step = &(*step)["normalizers"][0];
    if (step->value("type", "") != "NFC") fail("key 'normalizer' is " + n->dump());
    nfc = true;
  }
  const auto p = tok.find("pre_tokenizer");
  if (p == tok.end() || !p->is_object()) fail("key 'pre_tokenizer' is absent");
  std::vector<json> steps;
  if (p->value("type", "") == "Sequence" && p->contains("pretokenizers") && (*p)["pretokenizers"].is_array())
    for (const json& s : (*p)["pretokenizers"]) steps.push_back(s);
  else steps.push_back(*p);
  std::string split;
  bool byte_level = false, byte_level_regex = false;
  for (const json& s : steps) {
    const std::string type = s.is_object() ? s.value("type", "") : "";
    if (type == "Split" && split.empty() && !byte_level && s.contains("pattern") && s["pattern"].is_object() &&
        s["pattern"].contains("Regex") && s["pattern"]["Regex"].is_string() && s.value("behavior", "") == "Isolated" &&
        !s.value("invert", false)) {
      split = s["pattern"]["Regex"].get<std::string>();
    } else if (type == "ByteLevel" && !byte_level && !s.value("add_prefix_space", true)) {
      byte_level = true;
      byte_level_regex = s.value("use_regex", true);
    } else {
      fail("key 'pre_tokenizer' holds " + s.dump().substr(0, 200));
    }
  }
  if (!byte_level) fail("key 'pre_tokenizer' has no ByteLevel step");
  const bool ignore_merges = tok.contains("model") && tok["model"].is_object() && tok["model"].value("ignore_merges", false);
  const char* name = tok::gguf_pre_name(split, byte_level_regex, nfc, ignore_merges);
  if (!name) fail("its pre-tokenizer, normalizer and ignore_merges");
  return name;
}

}  // namespace

void gguf_export_tokenizer(GgufDraft& g, const std::string& tokenizer_json, int64_t vocab_size, const std::string& pre) {
  const json tok = read_json(tokenizer_json);
  auto bad = [&](const std::string& key, const std::string& why) {
    throw Error(ErrorCode::io, tokenizer_json + ": key '" + key + "' " + why);
  };
  if (!tok.is_object() || !tok.contains("model") || !tok["model"].is_object()) bad("model", "is required");
  const json& model = tok["model"];
  if (model.value("type", "BPE") != "BPE" || !model.contains("vocab") || !model["vocab"].is_object())
    throw Error(ErrorCode::unsupported, tokenizer_json + ": key 'model' is not a BPE model with a vocab: only byte-level "
                                                         "BPE tokenizers are written to GGUF");
  const std::string pre_name = pre.empty() ? detect_pre(tok, tokenizer_json) : pre;

  std::map<int64_t, std::string> by_id;
  for (const auto& [text, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) bad("model.vocab." + text, "is not a token id");
    by_id[id.get<int64_t>()] = text;
  }
  std::map<int64_t, std::pair<std::string, bool>> added;  // id → (content, special)
  if (tok.contains("added_tokens") && tok["added_tokens"].is_array())
    for (const json& t : tok["added_tokens"]) {
      if (!t.is_object() || !t.contains("id") || !t["id"].is_number_integer() || !t.contains("content") ||
          !t["content"].is_string())
        bad("added_tokens", "holds an entry without an integer id and a string content");
      const int64_t id = t["id"].get<int64_t>();
      by_id[id] = t["content"].get<std::string>();
      added[id] = {by_id[id], t.value("special", false)};
    }
  if (!by_id.empty() && by_id.rbegin()->first >= vocab_size)
    throw Error(ErrorCode::shape_mismatch, tokenizer_json + ": token id " + std::to_string(by_id.rbegin()->first) +
                                               " is not below the model's vocab_size " + std::to_string(vocab_size));
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  for (int64_t i = 0; i < vocab_size; ++i) {
    const auto it = by_id.find(i);
    if (it == by_id.end()) {
      tokens.push_back("[PAD" + std::to_string(i) + "]");
      types.push_back(5);  // UNUSED
    } else if (const auto a = added.find(i); a != added.end()) {
      tokens.push_back(a->second.first);
      types.push_back(a->second.second || looks_special(a->second.first) ? 3 : 4);  // CONTROL, USER_DEFINED
    } else {
      tokens.push_back(it->second);
      types.push_back(1);  // NORMAL
    }
  }
  std::vector<std::string> merges;
  if (model.contains("merges") && model["merges"].is_array())
    for (const json& m : model["merges"]) {
      if (m.is_string()) {
        merges.push_back(m.get<std::string>());
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        // The pair form (transformers ≥ 4.45): a space inside a part as U+0120, as gguf-py writes it.
        auto part = [](std::string s) {
          std::string out;
          for (char c : s) out += c == ' ' ? std::string("\xC4\xA0") : std::string(1, c);
          return out;
        };
        merges.push_back(part(m[0].get<std::string>()) + " " + part(m[1].get<std::string>()));
      } else {
        bad("model.merges", "holds an entry that is neither \"left right\" nor [left, right]");
      }
    }
  g.set("tokenizer.ggml.model", GgufValue::of_string("gpt2"));
  g.set("tokenizer.ggml.pre", GgufValue::of_string(pre_name));
  g.set("tokenizer.ggml.tokens", GgufValue::of_strings(std::move(tokens)));
  g.set("tokenizer.ggml.token_type", GgufValue::of_i32s(std::move(types)));
  g.set("tokenizer.ggml.merges", GgufValue::of_strings(std::move(merges)));

  // tokenizer_config.json beside it: the special tokens' ids and whether they are added.
  const std::filesystem::path config_path = std::filesystem::path(tokenizer_json).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(config_path, ec)) return;
  const json config = read_json(config_path.string());
  if (!config.is_object()) return;
  for (const char* typ : {"bos", "eos", "unk", "sep", "pad"}) {
    const std::string name = std::string(typ) + "_token";
    if (const auto e = config.find(name); e != config.end()) {
      const std::string content = e->is_string() ? e->get<std::string>() : e->is_object() ? e->value("content", "") : "";
      for (const auto& [id, a] : added)
        if (!content.empty() && a.first == content) {
          const std::string t = typ;
          const std::string key = t == "pad" ? "tokenizer.ggml.padding_token_id"
                                  : t == "unk" ? "tokenizer.ggml.unknown_token_id"
                                  : t == "sep" ? "tokenizer.ggml.seperator_token_id"
                                               : "tokenizer.ggml." + t + "_token_id";
          g.set(key, GgufValue::of_u32(uint32_t(id)));
          break;
        }
    }
    const std::string add = "add_" + std::string(typ) + "_token";
    if (const auto e = config.find(add); e != config.end() && e->is_boolean())
      g.set("tokenizer.ggml." + add, GgufValue::of_bool(e->get<bool>()));
  }
}

}  // namespace vkgate

// Reading tokenizer.json: every key this tokenizer builds is checked, every
// other feature is refused by name (ErrorCode::unsupported), and every
// malformed value is an ErrorCode::io naming the file and the key, e.g.
//   "m/tokenizer.json: pre_tokenizer.pretokenizers[1].type: 'Metaspace' is not supported".
#include <algorithm>
#include <cctype>
#include <climits>
#include <nlohmann/json.hpp>

#include "io/json_error.hpp"
#include "tokenizer/json_reader.hpp"
#include "tokenizer/tokenizer_impl.hpp"
#include "vkgate/error.hpp"

namespace vkgate {

namespace {

using json = nlohmann::json;
using tok::AddedToken;
using tok::Captured;
using tok::quoted;
using tok::Reader;
using tok::SaxReader;

class Builder {
 public:
  Builder(Tokenizer::Impl& t, const Reader& r, const Captured& c) : t_(t), r_(r), c_(c) {}

  void model(const json& m) {
    const std::string type = r_.type(m, "model");
    if (type != "BPE") r_.unknown_type("model", type, "only BPE is built");
    if (const json* d = Reader::find(m, "dropout"); d && !(d->is_number() && d->get<double>() == 0.0))
      r_.unsupported("model.dropout", quoted(*d) + " is not supported (BPE dropout is random; null expected)");
    if (r_.flag(m, "model", "byte_fallback", false))
      r_.unsupported("model.byte_fallback", "true is not supported (only byte-level BPE is built)");
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (const json* v = Reader::find(m, key); v && r_.string(*v, Reader::join("model", key)) != "")
        r_.unsupported(Reader::join("model", key), quoted(*v) + " is not supported (null or \"\" expected)");
    std::string unk;
    if (const json* u = Reader::find(m, "unk_token")) unk = " '" + r_.string(*u, "model.unk_token") + "'";
    r_.flag(m, "model", "fuse_unk", false);
    t_.bpe.ignore_merges = r_.flag(m, "model", "ignore_merges", false);
    t_.bpe.missing_byte_message = t_.source + ": the text needs model.unk_token" + unk +
                                  " (not supported): model.vocab has no token for byte ";

    r_.object(r_.require(m, "model", "vocab"), "model.vocab");  // its entries are in c_.vocab
    const auto& vocab = c_.vocab;
    t_.ids.reserve(vocab.size() + 1024);
    if (t_.bpe.ignore_merges) t_.bpe.ids_by_bytes.reserve(vocab.size());
    // The tables are indexed by id: a vocabulary may leave unused ids (Hugging
    // Face allows it), but not so many that one large id in a tiny file asks
    // for gigabytes (found by fuzz_tokenizer). Duplicates are refused below.
    const auto highest = std::max_element(vocab.begin(), vocab.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    const size_t id_limit = 4 * vocab.size() + 65536;
    if (highest != vocab.end() && size_t(highest->second) >= id_limit)
      r_.unsupported("model.vocab['" + highest->first + "']",
                     "id " + std::to_string(highest->second) + " is too far beyond a vocabulary of " +
                         std::to_string(vocab.size()) + " tokens (ids up to " + std::to_string(id_limit - 1) +
                         " are supported)");
    grow(highest == vocab.end() ? -1 : highest->second);
    for (const auto& [token, id] : vocab) {
      if (t_.kind[size_t(id)] != Tokenizer::Impl::absent)
        r_.malformed("model.vocab['" + token + "']",
                     "id " + std::to_string(id) + " is also the id of '" + t_.token_text[size_t(id)] + "'");
      const bool mapped = set_token(id, token, Tokenizer::Impl::model_token);
      t_.ids.emplace(token, id);
      // Only ignore_merges looks whole pieces up.
      if (mapped && t_.bpe.ignore_merges) t_.bpe.ids_by_bytes.emplace(t_.token_bytes[size_t(id)], id);
    }
    model_vocab_entries_ = vocab.size();
    for (int b = 0; b < 256; ++b)
      if (const auto it = t_.ids.find(tok::byte_char(uint8_t(b))); it != t_.ids.end()) t_.bpe.byte_ids[size_t(b)] = it->second;

    r_.array(r_.require(m, "model", "merges"), "model.merges");  // its entries are in c_.merges
    t_.bpe.merges.reserve(c_.merges.size());
    std::string merged;
    for (size_t rank = 0; rank < c_.merges.size(); ++rank) {
      // The key's path is built only for an error: 150,000 of them take time.
      auto path = [rank] { return Reader::at("model.merges", rank); };
      const auto& [left, right] = c_.merges[rank];
      merged.assign(left).append(right);
      const int32_t a = vocab_id(left, path), b = vocab_id(right, path), ab = vocab_id(merged, path);
      // A pair listed twice keeps its last rank, as Hugging Face's map does.
      t_.bpe.merges.insert_or_assign(uint64_t(uint32_t(a)) << 32 | uint32_t(b), tok::Bpe::Merge{uint32_t(rank), ab});
    }
  }

  void normalizer(const json* n, const std::string& path) {
    if (!n) return;
    const std::string type = r_.type(*n, path);
    if (type == "NFC") {
      t_.normalizer.nfc = true;
    } else if (type == "Sequence") {
      const std::string list = Reader::join(path, "normalizers");
      const json& all = r_.array(r_.require(*n, path, "normalizers"), list);
      for (size_t i = 0; i < all.size(); ++i) normalizer(&all[i], Reader::at(list, i));
    } else {
      r_.unknown_type(path, type, "NFC and Sequence are");
    }
  }

  void pre_tokenizer(const json* p) {
    if (!p) r_.unsupported("pre_tokenizer", "null is not supported (a ByteLevel pre-tokenizer is required: only byte-level BPE is built)");
    std::vector<std::pair<const json*, std::string>> steps;
    flatten(*p, "pre_tokenizer", steps);
    for (size_t i = 0; i < steps.size(); ++i) {
      const auto& [step, path] = steps[i];
      const std::string type = r_.type(*step, path);
      if (type == "Split") {
        if (byte_level_seen_) r_.unsupported(path, "a Split after the ByteLevel pre-tokenizer is not supported");
        t_.pre_tokenizer.splits.push_back(split(*step, path));
      } else if (type == "ByteLevel") {
        if (i + 1 != steps.size())
          r_.unsupported(path, "a ByteLevel pre-tokenizer must be the last one (it maps the text to bytes)");
        // Hugging Face's defaults: add_prefix_space and use_regex true.
        t_.pre_tokenizer.add_prefix_space = r_.flag(*step, path, "add_prefix_space", true);
        r_.flag(*step, path, "trim_offsets", true);
        if (r_.flag(*step, path, "use_regex", true))
          t_.pre_tokenizer.byte_level_regex = std::make_unique<tok::Regex>(
              R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)", t_.source + ": " + path);
        byte_level_seen_ = true;
      } else {
        r_.unknown_type(path, type, "Split, ByteLevel and Sequence are");
      }
    }
    if (!byte_level_seen_)
      r_.unsupported("pre_tokenizer", "a ByteLevel pre-tokenizer is required (only byte-level BPE is built)");
  }

  void added_tokens(const json* list) {
    if (!list) return;
    r_.array(*list, "added_tokens");
    // Hugging Face gives an added token its vocabulary id, or the next id after
    // the vocabulary's size, in file order; the file's ids must agree.
    int32_t next_id = int32_t(model_vocab_entries_);
    t_.added.reserve(list->size());
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string path = Reader::at("added_tokens", i);
      const json& e = r_.object((*list)[i], path);
      AddedToken a;
      a.content = r_.string(r_.require(e, path, "content"), path + ".content");
      const int32_t file_id = r_.id(r_.require(e, path, "id"), path + ".id");
      a.special = r_.flag(e, path, "special", false);
      a.single_word = r_.flag(e, path, "single_word", false);
      a.lstrip = r_.flag(e, path, "lstrip", false);
      a.rstrip = r_.flag(e, path, "rstrip", false);
      a.normalized = r_.flag(e, path, "normalized", !a.special);
      if (a.content.empty()) continue;  // ignored by Hugging Face too
      if (tok::invalid_utf8_offset(a.content) != std::string_view::npos)
        r_.malformed(path + ".content", "is not valid UTF-8");
      for (const AddedToken& b : t_.added)
        if (b.content == a.content) r_.malformed(path + ".content", quoted(e["content"]) + " is added twice");
      const auto in_vocab = t_.ids.find(a.content);
      a.id = in_vocab != t_.ids.end() ? in_vocab->second : next_id++;
      if (a.id != file_id)
        r_.malformed(path + ".id", std::to_string(file_id) + " disagrees with the id Hugging Face's tokenizers gives " +
                                       quoted(e["content"]) + ": " + std::to_string(a.id) +
                                       (in_vocab != t_.ids.end() ? " (its model.vocab id)" : " (the next id after the vocabulary)"));
      a.pattern = a.normalized ? t_.normalizer.apply(a.content) : a.content;
      grow(a.id);
      set_token(a.id, a.content, a.special ? Tokenizer::Impl::special_token : Tokenizer::Impl::added_token);
      t_.ids.insert_or_assign(a.content, a.id);
      t_.added.push_back(std::move(a));
    }
  }

  void post_processor(const json* p, const std::string& path) {
    if (!p) return;
    const std::string type = r_.type(*p, path);
    if (type == "ByteLevel") return;  // it only trims offsets, which encode() does not return
    if (type == "Sequence") {
      const std::string list = Reader::join(path, "processors");
      const json& all = r_.array(r_.require(*p, path, "processors"), list);
      for (size_t i = 0; i < all.size(); ++i) post_processor(&all[i], Reader::at(list, i));
      return;
    }
    if (type != "TemplateProcessing") r_.unknown_type(path, type, "ByteLevel, TemplateProcessing and Sequence are");
    if (t_.has_template) r_.unsupported(path, "a second TemplateProcessing is not supported");
    t_.has_template = true;
    const std::string specials_path = Reader::join(path, "special_tokens");
    const json* specials = Reader::find(*p, "special_tokens");
    if (specials) r_.object(*specials, specials_path);
    const std::string single_path = Reader::join(path, "single");
    const json& single = r_.array(r_.require(*p, path, "single"), single_path);
    for (size_t i = 0; i < single.size(); ++i) {
      const std::string piece_path = Reader::at(single_path, i);
      const json& piece = r_.object(single[i], piece_path);
      tok::TemplatePiece out;
      if (const json* seq = Reader::find(piece, "Sequence")) {
        const std::string id = r_.string(r_.require(r_.object(*seq, piece_path + ".Sequence"), piece_path + ".Sequence", "id"),
                                         piece_path + ".Sequence.id");
        if (id != "A") r_.malformed(piece_path + ".Sequence.id", "must be 'A' in the single template, got '" + id + "'");
        out.sequence = true;
      } else if (const json* sp = Reader::find(piece, "SpecialToken")) {
        const std::string name_path = piece_path + ".SpecialToken.id";
        const std::string name = r_.string(r_.require(r_.object(*sp, piece_path + ".SpecialToken"), piece_path + ".SpecialToken", "id"), name_path);
        if (!specials || !specials->contains(name))
          r_.malformed(name_path, "'" + name + "' is not in " + specials_path);
        const std::string entry = specials_path + "['" + name + "']";
        const std::string ids_path = entry + ".ids";
        const json& ids = r_.array(r_.require(r_.object((*specials)[name], entry), entry, "ids"), ids_path);
        for (size_t k = 0; k < ids.size(); ++k) {
          const int32_t id = r_.id(ids[k], Reader::at(ids_path, k));
          if (size_t(id) >= t_.kind.size() || t_.kind[size_t(id)] == Tokenizer::Impl::absent)
            r_.malformed(Reader::at(ids_path, k), std::to_string(id) + " is not in the vocabulary");
          out.ids.push_back(id);
        }
      } else {
        r_.malformed(piece_path, "must hold \"Sequence\" or \"SpecialToken\", got " + quoted(piece));
      }
      t_.single.push_back(std::move(out));
    }
  }

  void decoder(const json* d) {
    if (!d) r_.unsupported("decoder", "null is not supported (ByteLevel is required: only byte-level BPE is built)");
    const std::string type = r_.type(*d, "decoder");
    if (type != "ByteLevel") r_.unknown_type("decoder", type, "only ByteLevel is");
  }

 private:
  void grow(int32_t id) {
    if (size_t(id) >= t_.kind.size()) {
      t_.kind.resize(size_t(id) + 1, Tokenizer::Impl::absent);
      t_.token_text.resize(size_t(id) + 1);
      t_.token_bytes.resize(size_t(id) + 1);
    }
  }
  // Records token `id`; true when its characters are all in the byte-level alphabet.
  bool set_token(int32_t id, const std::string& text, Tokenizer::Impl::Kind kind) {
    t_.kind[size_t(id)] = kind;
    t_.token_text[size_t(id)] = text;
    bool mapped = false;
    t_.token_bytes[size_t(id)] = tok::token_bytes(text, &mapped);
    return mapped;
  }
  template <typename Path>
  int32_t vocab_id(std::string_view token, const Path& path) const {
    const auto it = t_.ids.find(token);
    if (it == t_.ids.end()) r_.malformed(path(), std::string(1, '\'').append(token).append("' is not in model.vocab"));
    return it->second;
  }
  // A Sequence's steps in order (a nested Sequence runs its steps in place).
  void flatten(const json& p, const std::string& path, std::vector<std::pair<const json*, std::string>>& out) const {
    if (r_.type(p, path) != "Sequence") {
      out.emplace_back(&p, path);
      return;
    }
    const std::string list = Reader::join(path, "pretokenizers");
    const json& all = r_.array(r_.require(p, path, "pretokenizers"), list);
    for (size_t i = 0; i < all.size(); ++i) flatten(all[i], Reader::at(list, i), out);
  }
  tok::SplitStep split(const json& s, const std::string& path) const {
    tok::SplitStep step;
    const std::string pattern_path = Reader::join(path, "pattern");
    const json& pattern = r_.object(r_.require(s, path, "pattern"), pattern_path);
    const json* regex = Reader::find(pattern, "Regex");
    const json* literal = Reader::find(pattern, "String");
    if (bool(regex) == bool(literal)) r_.malformed(pattern_path, "must hold one of \"Regex\" and \"String\", got " + quoted(pattern));
    std::string text = r_.string(regex ? *regex : *literal, pattern_path + (regex ? ".Regex" : ".String"));
    if (literal) {
      // Matched as written: every ASCII punctuation character escaped.
      std::string escaped;
      for (char c : text) {
        if (std::ispunct(static_cast<unsigned char>(c))) escaped += '\\';
        escaped += c;
      }
      text = escaped;
    }
    step.regex = std::make_unique<tok::Regex>(text, t_.source + ": " + pattern_path);
    const std::string behavior_path = Reader::join(path, "behavior");
    const std::string behavior = r_.string(r_.require(s, path, "behavior"), behavior_path);
    static const std::pair<const char*, tok::SplitBehavior> kBehaviors[] = {
        {"Removed", tok::SplitBehavior::removed},
        {"Isolated", tok::SplitBehavior::isolated},
        {"MergedWithPrevious", tok::SplitBehavior::merged_with_previous},
        {"MergedWithNext", tok::SplitBehavior::merged_with_next},
        {"Contiguous", tok::SplitBehavior::contiguous}};
    bool known = false;
    for (const auto& [name, value] : kBehaviors)
      if (behavior == name) step.behavior = value, known = true;
    if (!known)
      r_.malformed(behavior_path, "'" + behavior + "' is not a split behavior (Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous)");
    step.invert = r_.flag(s, path, "invert", false);
    return step;
  }

  Tokenizer::Impl& t_;
  const Reader& r_;
  const Captured& c_;
  size_t model_vocab_entries_ = 0;
  bool byte_level_seen_ = false;
};

}  // namespace

std::shared_ptr<const Tokenizer::Impl> parse_tokenizer_json(std::string_view text, const std::string& source) {
  const Reader r(source);
  Captured captured;
  SaxReader sax(r, source, captured);
  try {
    json::sax_parse(text.begin(), text.end(), &sax);
  } catch (const json::exception& e) {
    throw Error(ErrorCode::io, source + ": not valid JSON: " + json_error_text(e));
  }
  const json& root = sax.root;
  if (!root.is_object()) throw Error(ErrorCode::io, source + ": not a tokenizer.json (the top level is not a JSON object)");
  auto t = std::make_shared<Tokenizer::Impl>();
  t->source = source;
  if (const json* v = Reader::find(root, "version"); v && r.string(*v, "version") != "1.0")
    r.unsupported("version", quoted(*v) + " is not supported (1.0 expected)");
  for (const char* key : {"truncation", "padding"})
    if (const json* v = Reader::find(root, key)) r.unsupported(key, quoted(*v) + " is not supported (null expected)");
  Builder b(*t, r, captured);
  // The order matters: added tokens take vocabulary ids and are normalized.
  b.normalizer(Reader::find(root, "normalizer"), "normalizer");
  b.pre_tokenizer(Reader::find(root, "pre_tokenizer"));
  b.model(r.object(r.require(root, "", "model"), "model"));
  b.added_tokens(Reader::find(root, "added_tokens"));
  b.post_processor(Reader::find(root, "post_processor"), "post_processor");
  b.decoder(Reader::find(root, "decoder"));
  t->raw_added.build(t->added, false);
  t->normalized_added.build(t->added, true);
  return t;
}

}  // namespace vkgate

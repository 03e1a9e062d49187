// Added tokens (special tokens like <|im_end|>, and others) are found in the
// text before anything else runs, as Hugging Face's AddedVocabulary finds
// them: leftmost-longest, non-overlapping, then single_word, lstrip and rstrip.
#include <algorithm>

#include "tokenizer/tokenizer_impl.hpp"

namespace vkgate::tok {

void AddedTokenSplitter::build(const std::vector<AddedToken>& all, bool normalized) {
  tokens_.clear();
  for (auto& bucket : by_first_byte_) bucket.clear();
  for (const AddedToken& t : all) {
    if (t.normalized != normalized || t.pattern.empty()) continue;
    tokens_.push_back(&t);
    by_first_byte_[static_cast<unsigned char>(t.pattern[0])].push_back(&t);
  }
  for (auto& bucket : by_first_byte_)
    std::stable_sort(bucket.begin(), bucket.end(),
                     [](const AddedToken* a, const AddedToken* b) { return a->pattern.size() > b->pattern.size(); });
}

bool AddedTokenSplitter::next_match(std::string_view s, size_t from, Match& m) const {
  if (tokens_.empty()) return false;
  for (size_t i = from; i < s.size(); ++i) {
    const auto& bucket = by_first_byte_[static_cast<unsigned char>(s[i])];
    for (const AddedToken* t : bucket) {
      if (s.compare(i, t->pattern.size(), t->pattern) == 0) {
        m = {i, i + t->pattern.size(), t};
        return true;
      }
    }
  }
  return false;
}

bool AddedTokenSplitter::accept(std::string_view s, size_t consumed, Match& m) const {
  size_t len = 0;
  if (m.token->single_word) {
    // Not inside a word: no word character right before or right after.
    const bool start_ok = m.start == 0 || !is_word_char(code_point_at(s, previous_char_start(s, m.start), &len));
    const bool stop_ok = m.stop == s.size() || !is_word_char(code_point_at(s, m.stop, &len));
    if (!start_ok || !stop_ok) return false;
  }
  if (m.token->lstrip) {
    // The whitespace before the token is part of it, unless an earlier token took it.
    size_t start = m.start;
    while (start > 0) {
      const size_t prev = previous_char_start(s, start);
      if (!is_space_char(code_point_at(s, prev, &len))) break;
      start = prev;
    }
    m.start = std::max(start, consumed);
  }
  if (m.token->rstrip) {
    while (m.stop < s.size() && is_space_char(code_point_at(s, m.stop, &len))) m.stop += len;
  }
  return true;
}

}  // namespace vkgate::tok

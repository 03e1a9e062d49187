// BPE by merge rank: Hugging Face's Word::merge_all (a min-heap of candidate
// pairs over a linked list of symbols, stale candidates skipped when popped),
// so ties and the order of merges come out exactly as there. Pieces work on
// raw bytes: the byte-level alphabet is a bijection, so each vocabulary token
// is keyed by the bytes it stands for and the text is never mapped.
#include <algorithm>
#include <cstdio>

#include "tokenizer/tokenizer_impl.hpp"
#include "vkgate/error.hpp"

namespace vkgate::tok {

namespace {

// A text repeats its words: the merges of a piece are remembered for the rest
// of the encode() call, up to this many pieces of up to this many bytes.
constexpr size_t kCachePieces = 1 << 17;
constexpr size_t kCachePieceBytes = 256;

uint64_t pair_key(int32_t left, int32_t right) { return uint64_t(uint32_t(left)) << 32 | uint32_t(right); }

// Min-heap order: lowest rank first, then the leftmost position.
bool later(const Scratch::Candidate& a, const Scratch::Candidate& b) {
  return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
}

}  // namespace

void Bpe::encode(std::string_view piece, std::vector<int32_t>& out, Scratch& s) const {
  if (ignore_merges) {
    // Llama 3: a piece that is a whole token is that token, whatever the merges would make.
    if (const auto it = ids_by_bytes.find(piece); it != ids_by_bytes.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() > 1) {
    if (const auto it = s.cache.find(piece); it != s.cache.end()) {
      const auto [offset, count] = it->second;
      out.insert(out.end(), s.cached_ids.begin() + offset, s.cached_ids.begin() + offset + count);
      return;
    }
  }
  const size_t first = out.size();
  merge(piece, out, s);
  if (piece.size() > 1 && piece.size() <= kCachePieceBytes && s.cache.size() < kCachePieces) {
    s.cache.emplace(piece, std::pair{uint32_t(s.cached_ids.size()), uint32_t(out.size() - first)});
    s.cached_ids.insert(s.cached_ids.end(), out.begin() + first, out.end());
  }
}

void Bpe::merge(std::string_view piece, std::vector<int32_t>& out, Scratch& s) const {
  const int32_t n = int32_t(piece.size());
  if (n == 0) return;
  s.symbols.resize(size_t(n));
  for (int32_t i = 0; i < n; ++i) {
    const auto byte = static_cast<unsigned char>(piece[size_t(i)]);
    const int32_t id = byte_ids[byte];
    if (id < 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", byte);
      throw Error(ErrorCode::unsupported, missing_byte_message + hex);
    }
    s.symbols[size_t(i)] = {id, i - 1, i + 1 < n ? i + 1 : -1, false};
  }
  auto find = [&](int32_t left, int32_t right) -> const Merge* {
    const auto it = merges.find(pair_key(left, right));
    return it == merges.end() ? nullptr : &it->second;
  };
  s.heap.clear();
  for (int32_t i = 0; i + 1 < n; ++i)
    if (const Merge* m = find(s.symbols[size_t(i)].id, s.symbols[size_t(i) + 1].id))
      s.heap.push_back({m->rank, uint32_t(i), m->id});
  std::make_heap(s.heap.begin(), s.heap.end(), later);

  while (!s.heap.empty()) {
    std::pop_heap(s.heap.begin(), s.heap.end(), later);
    const Scratch::Candidate top = s.heap.back();
    s.heap.pop_back();
    Scratch::Symbol& left = s.symbols[top.pos];
    if (left.gone || left.next < 0) continue;
    Scratch::Symbol& right = s.symbols[size_t(left.next)];
    // A candidate is stale once either side has been merged into something else.
    const Merge* now = find(left.id, right.id);
    if (!now || now->id != top.id) continue;
    left.id = top.id;
    right.gone = true;
    left.next = right.next;
    if (left.next >= 0) s.symbols[size_t(left.next)].prev = int32_t(top.pos);
    if (left.prev >= 0)
      if (const Merge* m = find(s.symbols[size_t(left.prev)].id, left.id)) {
        s.heap.push_back({m->rank, uint32_t(left.prev), m->id});
        std::push_heap(s.heap.begin(), s.heap.end(), later);
      }
    if (left.next >= 0)
      if (const Merge* m = find(left.id, s.symbols[size_t(left.next)].id)) {
        s.heap.push_back({m->rank, top.pos, m->id});
        std::push_heap(s.heap.begin(), s.heap.end(), later);
      }
  }
  for (int32_t i = 0; i >= 0; i = s.symbols[size_t(i)].next) out.push_back(s.symbols[size_t(i)].id);
}

}  // namespace vkgate::tok

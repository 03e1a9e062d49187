// The pre-tokenizer's regular expressions (Oniguruma, as in Hugging Face's
// `tokenizers`, so that \p{L}, \s and (?i:...) classify exactly as there) and
// its Split steps.
#include <dlfcn.h>
#include <oniguruma.h>

#include <algorithm>
#include <memory>
#include <type_traits>

#include "tokenizer/tokenizer_impl.hpp"
#include "vkgate/error.hpp"

namespace vkgate::tok {

namespace {

// Oniguruma is loaded with dlopen(RTLD_LOCAL), not linked. Debian's libonig also
// exports the POSIX names regcomp/regexec/regfree/regerror; linked into a
// program, the dynamic linker took them from it instead of the C library for
// the whole process (Mesa's driconf calls them; under AddressSanitizer, whose
// regexec reaches glibc's while regcomp reached Oniguruma's, the mix
// deadlocked). Loaded locally, none of its names enter the process's scope.
// Only decltype names its functions here, so nothing links against them.
struct Onig {
  decltype(&onig_new) compile;
  decltype(&onig_free) free;
  decltype(&onig_search) search;
  decltype(&onig_region_new) region_new;
  decltype(&onig_region_free) region_free;
  decltype(&onig_error_code_to_str) error_text;
  OnigEncoding utf8;
  OnigSyntaxType* syntax;
};

const Onig& onig() {
  // A throw leaves the static uninitialized: the next call tries again.
  static const Onig lib = [] {
    const std::string where = std::string("the tokenizer's regular expressions need Oniguruma (") + VKGATE_ONIG_SONAME +
                              ", Debian package libonig5)";
    void* handle = dlopen(VKGATE_ONIG_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!handle) throw Error(ErrorCode::unsupported, where + ": " + dlerror());
    auto symbol = [&](const char* name) {
      void* p = dlsym(handle, name);
      if (!p) throw Error(ErrorCode::unsupported, where + ": it has no " + name);
      return p;
    };
    Onig o;
    auto load = [&](auto& fn, const char* name) { fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(symbol(name)); };
    load(o.compile, "onig_new");
    load(o.free, "onig_free");
    load(o.search, "onig_search");
    load(o.region_new, "onig_region_new");
    load(o.region_free, "onig_region_free");
    load(o.error_text, "onig_error_code_to_str");
    decltype(&onig_initialize) initialize;
    load(initialize, "onig_initialize");
    o.utf8 = static_cast<OnigEncoding>(symbol("OnigEncodingUTF8"));
    o.syntax = *static_cast<OnigSyntaxType**>(symbol("OnigDefaultSyntax"));
    OnigEncoding encodings[] = {o.utf8};
    initialize(encodings, 1);
    return o;
  }();
  return lib;
}

struct RegionFree {
  void operator()(OnigRegion* r) const { onig().region_free(r, 1); }
};

// One region per thread: searching a compiled regex is thread-safe, its match registers are not.
OnigRegion* thread_region() {
  thread_local std::unique_ptr<OnigRegion, RegionFree> region(onig().region_new());
  return region.get();
}

}  // namespace

Regex::Regex(std::string_view pattern, const std::string& where) : re_(nullptr) {
  OnigErrorInfo info;
  OnigRegex re = nullptr;
  const auto* p = reinterpret_cast<const OnigUChar*>(pattern.data());
  // The default syntax and no options: what the `onig` crate's Regex::new compiles with.
  const Onig& lib = onig();
  const int rc = lib.compile(&re, p, p + pattern.size(), ONIG_OPTION_NONE, lib.utf8, lib.syntax, &info);
  if (rc != ONIG_NORMAL) {
    OnigUChar text[ONIG_MAX_ERROR_MESSAGE_LEN];
    lib.error_text(text, rc, &info);
    throw Error(ErrorCode::io, where + ": the regular expression does not compile: " + reinterpret_cast<char*>(text));
  }
  re_ = re;
}

Regex::~Regex() {
  if (re_) onig().free(static_cast<OnigRegex>(re_));
}

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  const auto* begin = reinterpret_cast<const OnigUChar*>(text.data());
  const auto* end = begin + text.size();
  OnigRegion* region = thread_region();
  // The `onig` crate's find_iter: each search sees the whole text (look-behind
  // and look-ahead reach outside [from, end)); an empty match right where the
  // previous match ended is skipped by one character.
  size_t from = 0;
  bool after_match = false;
  size_t last_end = 0;
  while (from <= text.size()) {
    const int at = onig().search(static_cast<OnigRegex>(re_), begin, end, begin + from, end, region, ONIG_OPTION_NONE);
    if (at == ONIG_MISMATCH) return;
    if (at < 0) {
      OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
      onig().error_text(msg, at);
      throw Error(ErrorCode::out_of_memory, std::string("regular expression search failed: ") + reinterpret_cast<char*>(msg));
    }
    const size_t s = size_t(region->beg[0]), e = size_t(region->end[0]);
    if (s == e && after_match && last_end == e) {
      if (from >= text.size()) return;
      size_t len;
      code_point_at(text, from, &len);
      from += len;
      continue;
    }
    out.emplace_back(s, e);
    from = last_end = e;
    after_match = true;
  }
}

bool is_word_char(uint32_t cp) { return ONIGENC_IS_CODE_CTYPE(onig().utf8, cp, ONIGENC_CTYPE_WORD); }
bool is_space_char(uint32_t cp) { return ONIGENC_IS_CODE_CTYPE(onig().utf8, cp, ONIGENC_CTYPE_SPACE); }

// Hugging Face's NormalizedString::split: the pieces of `text` (offsets and
// whether each matched) become pre-tokens according to the behavior.
void PreTokenizer::split(std::string_view text, Scratch& s) const {
  s.pieces.assign(1, text);
  struct Part {
    size_t start, end;
    bool match;
  };
  std::vector<Part> parts;
  for (const SplitStep& step : splits) {
    s.next_pieces.clear();
    for (std::string_view piece : s.pieces) {
      s.matches.clear();
      step.regex->find_all(piece, s.matches);
      parts.clear();
      size_t prev = 0;
      for (auto [start, end] : s.matches) {
        if (prev != start) parts.push_back({prev, start, step.invert});
        parts.push_back({start, end, !step.invert});
        prev = end;
      }
      if (prev != piece.size()) parts.push_back({prev, piece.size(), step.invert});

      // Merge according to the behavior; `removed` parts are dropped.
      std::vector<std::pair<Part, bool>> out;  // part, removed
      bool previous_match = false;
      switch (step.behavior) {
        case SplitBehavior::isolated:
          for (const Part& p : parts) out.push_back({p, false});
          break;
        case SplitBehavior::removed:
          for (const Part& p : parts) out.push_back({p, p.match});
          break;
        case SplitBehavior::contiguous:
          for (const Part& p : parts) {
            if (p.match == previous_match && !out.empty()) out.back().first.end = p.end;
            else out.push_back({p, false});
            previous_match = p.match;
          }
          break;
        case SplitBehavior::merged_with_previous:
          for (const Part& p : parts) {
            if (p.match && !previous_match && !out.empty()) out.back().first.end = p.end;
            else out.push_back({p, false});
            previous_match = p.match;
          }
          break;
        case SplitBehavior::merged_with_next:
          for (size_t k = parts.size(); k-- > 0;) {
            const Part& p = parts[k];
            if (p.match && !previous_match && !out.empty()) out.back().first.start = p.start;
            else out.push_back({p, false});
            previous_match = p.match;
          }
          std::reverse(out.begin(), out.end());
          break;
      }
      for (const auto& [p, removed] : out)
        if (!removed && p.end > p.start) s.next_pieces.push_back(piece.substr(p.start, p.end - p.start));
    }
    std::swap(s.pieces, s.next_pieces);
  }
  if (!s.pieces.empty() && s.pieces.front().empty()) s.pieces.clear();
}

}  // namespace vkgate::tok

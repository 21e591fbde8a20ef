#include "hf/unicode.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <vector>

#include "util/error.h"

namespace blocklab::hf::unicode {

namespace {

struct CodeRange {
  char32_t first, last;
};

#include "hf/unicode_data.inc"

template <class Range, std::size_t N>
const Range* find_range(const Range (&table)[N], char32_t cp) {
  const Range* it = std::upper_bound(std::begin(table), std::end(table), cp,
                                     [](char32_t c, const Range& r) { return c < r.first; });
  if (it == std::begin(table)) return nullptr;
  --it;
  return cp <= it->last ? it : nullptr;
}

// Hangul syllables compose and decompose algorithmically (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

const Decomposition* find_decomposition(char32_t cp) {
  const Decomposition* it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), cp,
                                             [](const Decomposition& d, char32_t c) { return d.cp < c; });
  return it != std::end(kDecompositions) && it->cp == cp ? it : nullptr;
}

void decompose(char32_t cp, std::u32string& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const int s = static_cast<int>(cp - kSBase);
    out += static_cast<char32_t>(kLBase + s / kNCount);
    out += static_cast<char32_t>(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out += static_cast<char32_t>(kTBase + s % kTCount);
    return;
  }
  const Decomposition* d = find_decomposition(cp);
  if (d == nullptr) {
    out += cp;
    return;
  }
  decompose(d->first, out);
  if (d->second != 0) decompose(d->second, out);
}

// Primary composite of (a, b), or 0.
struct Pair {
  char32_t first, second, composite;
};
const std::vector<Pair>& composition_pairs() {
  static const std::vector<Pair> pairs = [] {
    std::vector<Pair> p;
    for (const Decomposition& d : kDecompositions)
      if (d.composes) p.push_back({d.first, d.second, d.cp});
    std::sort(p.begin(), p.end(), [](const Pair& x, const Pair& y) {
      return x.first != y.first ? x.first < y.first : x.second < y.second;
    });
    return p;
  }();
  return pairs;
}

char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto& pairs = composition_pairs();
  auto it = std::lower_bound(pairs.begin(), pairs.end(), Pair{a, b, 0}, [](const Pair& x, const Pair& y) {
    return x.first != y.first ? x.first < y.first : x.second < y.second;
  });
  return it != pairs.end() && it->first == a && it->second == b ? it->composite : 0;
}

}  // namespace

bool is_letter(char32_t cp) { return find_range(kLetterRanges, cp) != nullptr; }
bool is_number(char32_t cp) { return find_range(kNumberRanges, cp) != nullptr; }

bool is_whitespace(char32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

int combining_class(char32_t cp) {
  if (cp < 0x300) return 0;
  const CombiningRun* r = find_range(kCombiningClasses, cp);
  return r ? r->ccc : 0;
}

const char* unicode_version() {
  return kUnicodeVersion;
}

std::u32string decode_utf8(std::string_view s, const std::string& what) {
  std::u32string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  auto bad = [&](std::size_t at) -> Error {
    return Error(what + ": invalid UTF-8 at byte " + std::to_string(at));
  };
  while (i < n) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      out += c;
      ++i;
      continue;
    }
    std::size_t len;
    char32_t cp;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, cp = c & 0x0F;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, cp = c & 0x07;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      throw bad(i);
    }
    if (n - i < len) throw bad(i);
    if (p[i + 1] < lo || p[i + 1] > hi) throw bad(i);
    for (std::size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) throw bad(i);
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    out += cp;
    i += len;
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::string encode_utf8(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) append_utf8(out, cp);
  return out;
}

std::string nfc(std::string_view utf8) {
  // Every code point below U+0300 is a starter that neither decomposes into nor composes with
  // anything else below U+0300, so such text is already in NFC.
  bool simple = true;
  for (unsigned char c : utf8)
    if (c >= 0xCC) {  // lead bytes of U+0300 and above
      simple = false;
      break;
    }
  if (simple) return std::string(utf8);

  // 1. Full canonical decomposition.
  const std::u32string in = decode_utf8(utf8, "nfc");
  std::u32string d;
  d.reserve(in.size() + 8);
  for (char32_t cp : in) decompose(cp, d);
  // 2. Canonical ordering: stable sort of each run of non-starters by combining class.
  for (std::size_t i = 0; i < d.size();) {
    if (combining_class(d[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < d.size() && combining_class(d[j]) != 0) ++j;
    std::stable_sort(d.begin() + static_cast<long>(i), d.begin() + static_cast<long>(j),
                     [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  // 3. Canonical composition (the algorithm of UAX #15): a character combines with the last
  // starter unless a character between them blocks it (same or higher class, or a starter).
  if (d.empty()) return {};
  std::size_t starter = 0, out = 1;
  int last_class = combining_class(d[0]);
  if (last_class != 0) last_class = 256;  // no starter yet: nothing may combine
  for (std::size_t i = 1; i < d.size(); ++i) {
    const char32_t ch = d[i];
    const int cls = combining_class(ch);
    const char32_t composite = last_class == 256 ? 0 : compose(d[starter], ch);
    if (composite != 0 && (last_class < cls || last_class == 0)) {
      d[starter] = composite;
      continue;
    }
    if (cls == 0) starter = out;
    last_class = cls;
    d[out++] = ch;
  }
  d.resize(out);
  return encode_utf8(d);
}

}  // namespace blocklab::hf::unicode

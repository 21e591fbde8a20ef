#include "text/unicode.h"

#if BLOCKLAB_HAVE_TEXT
#include <utf8proc.h>
#endif

#include <cstdlib>
#include <memory>

#include "util/error.h"

namespace blocklab::text {

#if BLOCKLAB_HAVE_TEXT
bool have_text() { return true; }

namespace {

const auto* bytes_of(std::string_view s) { return reinterpret_cast<const utf8proc_uint8_t*>(s.data()); }

// Calls f(code point) for each code point of s; throws at the first invalid sequence.
template <class F>
void for_each_code_point(std::string_view s, const std::string& what, F&& f) {
  const utf8proc_uint8_t* p = bytes_of(s);
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {
      f(static_cast<char32_t>(p[i]));
      ++i;
      continue;
    }
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t len = utf8proc_iterate(p + i, static_cast<utf8proc_ssize_t>(n - i), &cp);
    if (len <= 0) throw Error(what + ": invalid UTF-8 at byte " + std::to_string(i));
    f(static_cast<char32_t>(cp));
    i += static_cast<std::size_t>(len);
  }
}

utf8proc_category_t category(char32_t cp) { return utf8proc_category(static_cast<utf8proc_int32_t>(cp)); }

}  // namespace

bool is_letter(char32_t cp) {
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: return true;
    default: return false;
  }
}

bool is_number(char32_t cp) {
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO: return true;
    default: return false;
  }
}

bool is_whitespace(char32_t cp) {
  // PropList.txt's White_Space: utf8proc has no property lookup for it, and the list has been stable
  // since Unicode 6.3 (U+180E left it then).
  switch (cp) {
    case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000: return true;
    default: return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x2000 && cp <= 0x200A);
  }
}

int combining_class(char32_t cp) {
  return utf8proc_get_property(static_cast<utf8proc_int32_t>(cp))->combining_class;
}

const char* unicode_version() { return utf8proc_unicode_version(); }

void check_utf8(std::string_view s, const std::string& what) {
  for_each_code_point(s, what, [](char32_t) {});
}

std::u32string decode_utf8(std::string_view s, const std::string& what) {
  std::u32string out;
  out.reserve(s.size());
  for_each_code_point(s, what, [&](char32_t cp) { out += cp; });
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
}

std::string encode_utf8(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (char32_t cp : cps) append_utf8(out, cp);
  return out;
}

std::string nfc(std::string_view utf8) {
  // Below U+0300 nothing composes or decomposes: ASCII and Latin-1 text is already NFC.
  bool plain = true;
  for (unsigned char c : utf8)
    if (c >= 0xCC) {  // lead bytes of U+0300 and above
      plain = false;
      break;
    }
  if (plain) return std::string(utf8);
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(bytes_of(utf8), static_cast<utf8proc_ssize_t>(utf8.size()), &out,
                                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  if (n < 0) throw Error(std::string("nfc: ") + utf8proc_errmsg(n));
  return std::string(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
}

#else
bool have_text() { return false; }

[[noreturn]] void text_not_in_build() {
  throw Error("the text task and the tokenizers are not in this build of blocklab (it was built without utf8proc "
              "and PCRE2: apt-get install libutf8proc-dev libpcre2-dev and rebuild)");
}
bool is_letter(char32_t) { text_not_in_build(); }
bool is_number(char32_t) { text_not_in_build(); }
bool is_whitespace(char32_t) { text_not_in_build(); }
int combining_class(char32_t) { text_not_in_build(); }
void check_utf8(std::string_view, const std::string&) { text_not_in_build(); }
std::u32string decode_utf8(std::string_view, const std::string&) { text_not_in_build(); }
void append_utf8(std::string&, char32_t) { text_not_in_build(); }
std::string encode_utf8(std::u32string_view) { text_not_in_build(); }
std::string nfc(std::string_view) { text_not_in_build(); }
const char* unicode_version() { return "none"; }
#endif  // BLOCKLAB_HAVE_TEXT

}  // namespace blocklab::text

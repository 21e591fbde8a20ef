#pragma once
// The pieces of Unicode the byte-level BPE tokenizer needs: strict UTF-8, the general categories behind
// the pre-tokenizer regexes' \p{L} and \p{N}, White_Space, and NFC normalisation. Character data and
// normalisation come from utf8proc (Debian: libutf8proc-dev).
#include <string>
#include <string_view>

namespace blocklab::text {

// Whether this build has the text task (utf8proc and PCRE2 are optional parts). Without them every function
// here and in pretokenizer.h throws Error saying so; unicode_version() returns "none".
bool have_text();
[[noreturn]] void text_not_in_build();

bool is_letter(char32_t cp);      // general category L*
bool is_number(char32_t cp);      // general category N*
bool is_whitespace(char32_t cp);  // the White_Space property (what \s matches in Oniguruma)
int combining_class(char32_t cp); // canonical combining class, 0 for starters

// Strict UTF-8 (no overlongs, surrogates or code points above U+10FFFF). Throws Error with
// "<what>: invalid UTF-8 at byte N" on bad input.
void check_utf8(std::string_view utf8, const std::string& what);
std::u32string decode_utf8(std::string_view utf8, const std::string& what);
void append_utf8(std::string& out, char32_t cp);
std::string encode_utf8(std::u32string_view cps);

// Canonical composition (Unicode Normalization Form C). Input must be valid UTF-8.
std::string nfc(std::string_view utf8);

const char* unicode_version();  // of utf8proc's tables, e.g. "15.0.0"

}  // namespace blocklab::text

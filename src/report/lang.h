#pragma once
// The language of a report and of its figures: English, or Korean (the language of the source text).
//
// Every sentence is written once in the code, in English, with numbered placeholders {1}, {2}, ... for the
// values the code fills in: tr(lang, "{1} blocks, seed {2}", {layers, seed}). Its Korean wording lives in
// the message catalogue po/ko.po (gettext's PO format: msgid the English pattern, msgstr the Korean one, in
// which the placeholders may move), so a translator edits that file, not C++; it is compiled into the
// library, so a Korean report needs no installed locale. Korean follows the source's own terms: 층 정규화
// (LayerNorm), 뒤 정규화 / 앞 정규화 (Post-LN / Pre-LN), 잔차 줄기 (residual stream), 워밍업 (warm-up),
// 베끼기 태스크 (copy task), 그래디언트 크기 (gradient norm), 블록 N벌 (N blocks). Identifiers a reader types
// or greps (outcome labels such as `learned`, config keys, file names) stay as they are in both languages.
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>

namespace blocklab::report {

enum class Lang { En, Ko };

// "en" or "ko"; anything else throws Error naming the choices.
Lang parse_lang(const std::string& text);
std::string to_string(Lang lang);

// The sentence `msgid` in `lang` with its placeholders filled: {n} becomes args[n-1]. A sentence the Korean
// catalogue lacks (or marks fuzzy) stays English, as with gettext; the ctest `po_complete` keeps the
// catalogue complete.
std::string tr(Lang lang, std::string_view msgid, std::initializer_list<std::string> args = {});

// tr for a word whose translation depends on where it stands: `context` is the PO entry's msgctxt.
std::string trc(Lang lang, std::string_view context, std::string_view msgid, std::initializer_list<std::string> args = {});

// {n} (n = 1, 2, ...) in `pattern` replaced by args[n-1], in one pass (a value that contains "{2}" stays as
// it is). Any other brace is text. A placeholder without a value throws Error naming the pattern.
std::string format_message(std::string_view pattern, std::initializer_list<std::string> args);

// A PO file's translated messages, msgid -> msgstr (with msgctxt: context "\x04" msgid, as gettext keys them).
// The header, untranslated and fuzzy entries are left out; plural forms and malformed lines throw Error with
// the file name and line.
std::map<std::string, std::string, std::less<>> parse_po(std::string_view text, const std::string& name);

// po/ko.po as compiled into the library.
const std::map<std::string, std::string, std::less<>>& korean_catalog();

}  // namespace blocklab::report

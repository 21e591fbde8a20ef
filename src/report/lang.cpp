#include "report/lang.h"

#include <vector>

#include "util/error.h"

namespace blocklab::report {

extern const char* const kKoreanCatalogPo;  // po/ko.po, compiled into the library by CMake (generated source)

Lang parse_lang(const std::string& text) {
  if (text == "en") return Lang::En;
  if (text == "ko") return Lang::Ko;
  throw Error("lang must be en or ko (got '" + text + "')");
}

std::string to_string(Lang lang) { return lang == Lang::Ko ? "ko" : "en"; }

std::string format_message(std::string_view pattern, std::initializer_list<std::string> args) {
  std::string out;
  out.reserve(pattern.size() + 16 * args.size());
  for (size_t i = 0; i < pattern.size();) {
    size_t j = i + 1;
    if (pattern[i] == '{')
      while (j < pattern.size() && pattern[j] >= '0' && pattern[j] <= '9') ++j;
    if (pattern[i] != '{' || j == i + 1 || j == pattern.size() || pattern[j] != '}') {
      out += pattern[i++];
      continue;
    }
    const size_t n = std::stoul(std::string(pattern.substr(i + 1, j - i - 1)));
    if (n == 0 || n > args.size())
      throw Error("message '" + std::string(pattern) + "' has placeholder {" + std::to_string(n) + "} but " +
                  std::to_string(args.size()) + " value(s)");
    out += *(args.begin() + (n - 1));
    i = j + 1;
  }
  return out;
}

namespace {

// The catalogue entry `key` (msgid, or msgctxt "\x04" msgid) in `lang` with its placeholders filled; without one,
// the English `msgid`.
std::string translate(Lang lang, std::string_view key, std::string_view msgid, std::initializer_list<std::string> args) {
  if (lang == Lang::Ko) {
    const auto& catalog = korean_catalog();
    if (const auto it = catalog.find(key); it != catalog.end()) return format_message(it->second, args);
  }
  return format_message(msgid, args);
}

}  // namespace

std::string tr(Lang lang, std::string_view msgid, std::initializer_list<std::string> args) {
  return translate(lang, msgid, msgid, args);
}

std::string trc(Lang lang, std::string_view context, std::string_view msgid, std::initializer_list<std::string> args) {
  return translate(lang, std::string(context) + '\x04' + std::string(msgid), msgid, args);
}

namespace {

// The contents of one PO string literal ("..." with C escapes).
std::string po_string(std::string_view line, const std::string& where) {
  const size_t open = line.find('"'), close = line.rfind('"');
  if (open == std::string_view::npos || close == open) throw Error(where + ": expected a quoted string");
  std::string out;
  for (size_t i = open + 1; i < close; ++i) {
    if (line[i] != '\\') {
      out += line[i];
      continue;
    }
    if (++i == close) throw Error(where + ": a backslash ends the string");
    switch (line[i]) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case '"':
        out += '"';
        break;
      case '\\':
        out += '\\';
        break;
      default:
        throw Error(where + ": unknown escape \\" + std::string(1, line[i]));
    }
  }
  return out;
}

}  // namespace

std::map<std::string, std::string, std::less<>> parse_po(std::string_view text, const std::string& name) {
  std::map<std::string, std::string, std::less<>> out;
  struct Entry {
    bool fuzzy = false, has_ctxt = false, has_id = false, has_str = false;
    std::string ctxt, id, str;
  } e;
  std::string* field = nullptr;  // the string a continuation line ("...") extends
  const auto flush = [&] {
    if (e.has_id && e.has_str && !e.id.empty() && !e.str.empty() && !e.fuzzy)
      out[e.has_ctxt ? e.ctxt + '\x04' + e.id : e.id] = e.str;
    e = Entry{};
    field = nullptr;
  };
  int line_no = 0;
  for (size_t pos = 0; pos <= text.size();) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    const std::string where = name + ":" + std::to_string(line_no);
    const auto keyword = [&line](std::string_view k) {
      return line.substr(0, k.size()) == k && line.size() > k.size() &&
             (line[k.size()] == ' ' || line[k.size()] == '"');
    };
    if (line.empty()) {
      flush();
    } else if (line[0] == '#') {
      if (e.has_str) flush();
      if (line.substr(0, 2) == "#," && line.find("fuzzy") != std::string_view::npos) e.fuzzy = true;
    } else if (line[0] == '"') {
      if (field == nullptr) throw Error(where + ": a string continues no msgid, msgstr or msgctxt");
      *field += po_string(line, where);
    } else if (keyword("msgctxt")) {
      if (e.has_str) flush();
      e.has_ctxt = true;
      e.ctxt = po_string(line, where);
      field = &e.ctxt;
    } else if (keyword("msgid")) {
      if (e.has_str) flush();
      e.has_id = true;
      e.id = po_string(line, where);
      field = &e.id;
    } else if (keyword("msgstr")) {
      if (!e.has_id) throw Error(where + ": msgstr without msgid");
      e.has_str = true;
      e.str = po_string(line, where);
      field = &e.str;
    } else if (line.substr(0, 12) == "msgid_plural" || line.substr(0, 7) == "msgstr[") {
      throw Error(where + ": plural forms are not used by blocklab's catalogues");
    } else {
      throw Error(where + ": not a PO line: " + std::string(line.substr(0, 40)));
    }
  }
  flush();
  return out;
}

const std::map<std::string, std::string, std::less<>>& korean_catalog() {
  static const auto catalog = parse_po(kKoreanCatalogPo, "po/ko.po");
  return catalog;
}

}  // namespace blocklab::report

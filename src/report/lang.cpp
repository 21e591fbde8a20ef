#include "report/lang.h"

#include "util/error.h"

namespace blocklab::io {

Lang parse_lang(const std::string& text) {
  if (text == "en") return Lang::En;
  if (text == "ko") return Lang::Ko;
  throw Error("lang must be en or ko (got '" + text + "')");
}

std::string to_string(Lang lang) { return lang == Lang::Ko ? "ko" : "en"; }

}  // namespace blocklab::io

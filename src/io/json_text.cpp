#include "io/json_text.h"

#include "util/error.h"

namespace blocklab::io {

nlohmann::json parse_json_object(std::string_view text, const std::string& where) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(where + ": not a JSON object");
  return j;
}

}  // namespace blocklab::io

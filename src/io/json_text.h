#pragma once
// Parsing a JSON document that must be an object, with one error message for every reader in the project.
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace blocklab::io {

// `text` parsed as JSON. Throws Error "<where>: not valid JSON: <parser's reason>" or "<where>: not a JSON
// object" (an array, a number, ... at the top level).
nlohmann::json parse_json_object(std::string_view text, const std::string& where);

}  // namespace blocklab::io

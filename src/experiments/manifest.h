#pragma once
// DIR/experiment.json says what an output directory holds: {"experiment": NAME, "settings": {...}}.
// A re-run of the same experiment may reuse the directory (a sweep then skips its finished runs); a
// different experiment, or a directory that already holds other files, is refused.
#include <nlohmann/json.hpp>
#include <string>

namespace blocklab::experiments {

inline constexpr const char* kManifestName = "experiment.json";

// Creates dir when needed and writes its manifest. Throws Error when dir holds a different experiment,
// when settings_must_match and its settings differ (naming the first differing setting), or when dir
// holds files but no manifest.
void claim_output_dir(const std::string& dir, const std::string& experiment, const nlohmann::json& settings,
                      bool settings_must_match);

// The first key (dotted path) whose value differs between two JSON objects; "" when equal.
std::string first_difference(const nlohmann::json& a, const nlohmann::json& b, const std::string& prefix = "");

}  // namespace blocklab::experiments

#include "experiments/manifest.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "io/atomic_file.h"
#include "util/error.h"

namespace blocklab::experiments {

namespace fs = std::filesystem;

std::string first_difference(const nlohmann::json& a, const nlohmann::json& b, const std::string& prefix) {
  if (a.is_object() && b.is_object()) {
    for (const auto& [key, value] : a.items()) {
      const std::string path = prefix.empty() ? key : prefix + "." + key;
      if (!b.contains(key)) return path;
      const std::string d = first_difference(value, b.at(key), path);
      if (!d.empty()) return d;
    }
    for (const auto& [key, value] : b.items())
      if (!a.contains(key)) return prefix.empty() ? key : prefix + "." + key;
    return "";
  }
  return a == b ? "" : (prefix.empty() ? "(value)" : prefix);
}

void claim_output_dir(const std::string& dir, const std::string& experiment, const nlohmann::json& settings,
                      bool settings_must_match) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) throw Error(dir + ": exists and is not a directory");
  fs::create_directories(dir, ec);
  if (ec) throw Error(dir + ": cannot create directory: " + ec.message());
  if (::access(dir.c_str(), W_OK | X_OK) != 0) throw Error(dir + ": directory is not writable");
  const fs::path manifest = fs::path(dir) / kManifestName;
  if (fs::exists(manifest)) {
    nlohmann::json old;
    try {
      std::ifstream in(manifest);
      old = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw Error(manifest.string() + ": not valid JSON (" + e.what() + "); choose another output directory");
    }
    const std::string held = old.value("experiment", std::string("?"));
    if (held != experiment)
      throw Error(dir + ": holds a different experiment (" + held + ", not " + experiment +
                  "); choose another output directory");
    if (settings_must_match) {
      const std::string diff = first_difference(old.value("settings", nlohmann::json::object()), settings);
      if (!diff.empty())
        throw Error(dir + ": holds a different " + experiment + " (setting '" + diff +
                    "' differs); choose another output directory or use the same settings to continue it");
    }
  } else {
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      (void)entry;
      throw Error(dir + ": is not empty and holds no " + kManifestName + " (not a blocklab " + experiment +
                  " directory); choose another output directory");
    }
  }
  io::write_file_atomic(manifest.string(), nlohmann::json{{"experiment", experiment}, {"settings", settings}}.dump(2) + "\n");
}

}  // namespace blocklab::experiments

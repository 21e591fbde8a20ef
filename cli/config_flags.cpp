#include <algorithm>

#include "commands.h"

namespace blocklab::cli {

std::string flag_name(const std::string& key) {
  std::string flag = "--" + key;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

std::string negated_flag_name(const std::string& key) { return "--no-" + flag_name(key).substr(2); }

void add_config_flags(CLI::App* app, ConfigFlags& flags) {
  app->add_option("--config", flags.config_file, "TOML file of config keys (flags override it)")->type_name("FILE");
  const RunConfig defaults;
  for (const ConfigKey& key : config_keys()) {
    const std::string shown = key.get(defaults).dump();
    CLI::Option* option =
        app->add_option(flag_name(key.name), flags.values[key.name], key.help + " [" + shown + "]")
            ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
            ->type_name(key.type == KeyType::Int     ? "INT"
                       : key.type == KeyType::Float ? "FLOAT"
                       : key.type == KeyType::Bool  ? "BOOL"
                                                    : "TEXT");  // a later flag overrides an earlier one
    if (key.type == KeyType::Bool)  // --no-KEY: the same as --KEY false
      app->add_flag(negated_flag_name(key.name), flags.negated[key.name], "the same as " + flag_name(key.name) + " false")
          ->excludes(option);
  }
}

RunConfig build_config(const CLI::App* app, const ConfigFlags& flags, RunConfig base) {
  if (!flags.config_file.empty()) apply_toml_file(base, flags.config_file);
  std::vector<std::pair<std::string, std::string>> given;  // the flags on the command line, as text
  for (const ConfigKey& key : config_keys()) {
    if (app->count(flag_name(key.name)) > 0) given.emplace_back(key.name, flags.values.at(key.name));
    if (key.type == KeyType::Bool && app->count(negated_flag_name(key.name)) > 0) given.emplace_back(key.name, "false");
  }
  set_config_values(base, given);
  return base;
}

}  // namespace blocklab::cli

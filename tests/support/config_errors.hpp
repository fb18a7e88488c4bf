#pragma once
// What the configuration parser says about a document, for tables of bad values.

#include <string>

#include <nlohmann/json.hpp>

#include "oncely/config.hpp"
#include "oncely/errors.hpp"

namespace oncely::test {

/// What Config::parse says about `json_text`, or "(no error)".
inline std::string parse_error(const std::string& json_text) {
  try {
    Config::parse(nlohmann::json::parse(json_text));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace oncely::test

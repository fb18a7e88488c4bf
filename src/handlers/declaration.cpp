#include "handlers/declaration.hpp"

#include <algorithm>
#include <cstdlib>

#include "oncely/errors.hpp"
#include "support/duration.hpp"

namespace oncely::detail {
namespace {

bool is_env_name(std::string_view name) {
  if (name.empty() || (name.front() >= '0' && name.front() <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

}  // namespace

void check_keys(const nlohmann::json& declaration, const std::string& path,
                std::initializer_list<std::string_view> allowed) {
  for (const auto& [key, value] : declaration.items()) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      throw ConfigError(child_path(path, key), "unknown key");
    }
  }
}

const std::string& string_at(const nlohmann::json& value, const std::string& path, bool non_empty) {
  if (!value.is_string() || (non_empty && value.get_ref<const std::string&>().empty())) {
    throw ConfigError(path, non_empty ? "must be a non-empty string" : "must be a string");
  }
  return value.get_ref<const std::string&>();
}

const nlohmann::json& required(const nlohmann::json& declaration, const std::string& path, std::string_view key,
                               std::string_view what) {
  const auto it = declaration.find(key);
  if (it == declaration.end()) throw ConfigError(child_path(path, key), "is required (" + std::string(what) + ")");
  return *it;
}

std::chrono::milliseconds positive_duration_at(const nlohmann::json& value, const std::string& path) {
  if (!value.is_string()) throw ConfigError(path, "must be a duration string such as \"5s\"");
  std::chrono::milliseconds d{};
  try {
    d = parse_duration(value.get_ref<const std::string&>());
  } catch (const ConfigError& e) {
    throw ConfigError(path, printable(e.reason()));
  }
  if (d <= std::chrono::milliseconds::zero()) throw ConfigError(path, "must be longer than 0ms");
  return d;
}

std::string substitute_env(std::string_view text, const std::string& path, std::vector<std::string>* substituted) {
  std::string out;
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t open = text.find("${", i);
    if (open == std::string_view::npos) break;
    out.append(text.substr(i, open - i));
    const std::size_t close = text.find('}', open + 2);
    if (close == std::string_view::npos) {
      throw ConfigError(path, "unterminated \"${\" (write ${NAME} for the environment variable NAME)");
    }
    const std::string name(text.substr(open + 2, close - open - 2));
    if (!is_env_name(name)) {
      throw ConfigError(path, "\"${" + printable(name) + "}\" is not a valid environment variable name");
    }
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) throw ConfigError(path, "environment variable " + name + " is not set");
    out += value;
    if (substituted != nullptr && *value != '\0') substituted->emplace_back(value);
    i = close + 1;
  }
  out.append(text.substr(std::min(i, text.size())));
  return out;
}

std::chrono::milliseconds time_left(const std::optional<std::chrono::milliseconds>& limit,
                                    std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return limit ? std::min(*limit, left) : left;
}

}  // namespace oncely::detail

#include "support/cron_config.hpp"

#include <cstdint>

#include "oncely/errors.hpp"
#include "support/config_fields.hpp"
#include "support/cron_expression.hpp"
#include "support/text.hpp"

namespace oncely::detail {
namespace {

constexpr std::size_t kMaxQueueNameLength = 128;  // as the queues' (schema version 5)
constexpr std::size_t kMaxKindLength = 255;       // as a job's (store/jobs.hpp)

std::string string_at(const nlohmann::json& value, const std::string& path) {
  if (!value.is_string()) throw ConfigError(path, "must be a string");
  return value.get<std::string>();
}

CronEntry::CatchUp catch_up_at(const nlohmann::json& value, const std::string& path) {
  if (value == "none") return CronEntry::CatchUp::none;
  if (value == "latest") return CronEntry::CatchUp::latest;
  if (value == "all") return CronEntry::CatchUp::all;
  throw ConfigError(path, R"(must be "none", "latest" or "all" (got )" + value.dump() + ")");
}

// Text that reaches SQL parameters, job keys and log lines.
void check_text(const std::string& text, std::size_t max_length, const std::string& what, const std::string& path) {
  if (text.empty()) throw ConfigError(path, what + " must not be empty");
  if (text.size() > max_length)
    throw ConfigError(path, what + " is longer than " + std::to_string(max_length) + " bytes");
  if (has_control_character(text)) throw ConfigError(path, what + " must not contain control characters");
  if (sanitize_utf8(text) != text) throw ConfigError(path, what + " must be valid UTF-8");
}

CronEntry parse_entry(const nlohmann::json& object, const std::string& path) {
  if (!object.is_object()) throw ConfigError(path, "must be an object");
  CronEntry entry;
  for (const auto& [key, value] : object.items()) {
    const std::string at = child_path(path, key);
    if (key == "schedule")
      entry.schedule = string_at(value, at);
    else if (key == "time_zone")
      entry.time_zone = string_at(value, at);
    else if (key == "kind")
      entry.kind = string_at(value, at);
    else if (key == "queue")
      entry.queue = string_at(value, at);
    else if (key == "payload") {
      if (!value.is_object()) throw ConfigError(at, "must be an object");
      entry.payload = value;
    } else if (key == "priority")
      entry.priority = integer_in(value, at, -32768, 32767);
    else if (key == "max_attempts")
      entry.max_attempts = integer_in(value, at, 1, 1000);
    else if (key == "catch_up")
      entry.catch_up = catch_up_at(value, at);
    else
      throw ConfigError(at, "unknown key");
  }
  if (!object.contains("schedule")) throw ConfigError(child_path(path, "schedule"), "is required");
  if (!object.contains("kind")) throw ConfigError(child_path(path, "kind"), "is required");
  return entry;
}

}  // namespace

std::map<std::string, CronEntry> parse_cron_section(const nlohmann::json& object, const std::string& path) {
  if (!object.is_object()) throw ConfigError(path, "must be an object");
  std::map<std::string, CronEntry> entries;
  for (const auto& [name, value] : object.items()) entries.emplace(name, parse_entry(value, child_path(path, name)));
  validate_cron_section(entries, path);
  return entries;
}

void validate_cron_section(const std::map<std::string, CronEntry>& entries, const std::string& path) {
  for (const auto& [name, entry] : entries) {
    const std::string at = child_path(path, name);
    check_text(name, kMaxCronNameLength, "the entry's name", at);
    try {
      cron::parse(entry.schedule);
    } catch (const ConfigError& e) {
      throw ConfigError(child_path(at, "schedule"), e.reason());
    }
    try {
      cron::locate_zone(entry.time_zone);
    } catch (const ConfigError& e) {
      throw ConfigError(child_path(at, "time_zone"), e.reason());
    }
    check_text(entry.kind, kMaxKindLength, "kind", child_path(at, "kind"));
    check_text(entry.queue, kMaxQueueNameLength, "queue name", child_path(at, "queue"));
    if (entry.queue.find(',') != std::string::npos)
      throw ConfigError(child_path(at, "queue"), "queue name must not contain ','");
    if (entry.priority < -32768 || entry.priority > 32767) {
      throw ConfigError(child_path(at, "priority"), "must be between -32768 and 32767");
    }
    if (entry.max_attempts && (*entry.max_attempts < 1 || *entry.max_attempts > 1000)) {
      throw ConfigError(child_path(at, "max_attempts"), "must be between 1 and 1000");
    }
    if (!entry.payload.is_object()) throw ConfigError(child_path(at, "payload"), "must be an object");
  }
}

}  // namespace oncely::detail

#pragma once
// The "cron" object of the worker configuration: periodic jobs by name, parsed strictly
// (unknown keys, wrong types) and validated (the schedule parses, the time zone exists)
// with errors naming the JSON path, e.g. "/cron/nightly/schedule: hour field ...".

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "oncely/config.hpp"

namespace oncely::detail {

/// Parses the "cron" object at `path`; calls validate_cron_section(). Throws ConfigError.
std::map<std::string, CronEntry> parse_cron_section(const nlohmann::json& object, const std::string& path);

/// Checks every entry (a Config built in code too): name, schedule, time zone, kind,
/// queue, priority, max_attempts. Throws ConfigError naming the entry's key.
void validate_cron_section(const std::map<std::string, CronEntry>& entries, const std::string& path);

/// The longest entry name (its key, "cron:<name>:<slot>", stays short).
inline constexpr std::size_t kMaxCronNameLength = 100;

}  // namespace oncely::detail

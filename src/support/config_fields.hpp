#pragma once
// Readers of single configuration values shared by the sections of the worker file
// (config.cpp, cron_config.cpp): one wording for every error.

#include <string>

#include <nlohmann/json.hpp>

namespace oncely::detail {

/// An integer in [min, max]; ConfigError at `path` otherwise ("must be an integer", "must
/// be between 1 and 256 (got 300)"). Booleans, 2.5 and 2.0 are not integers here.
int integer_in(const nlohmann::json& value, const std::string& path, int min, int max);

}  // namespace oncely::detail

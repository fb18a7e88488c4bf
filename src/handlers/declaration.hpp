#pragma once
// Strict reading of handler declarations (the config's "/handlers/<kind>" objects): every
// problem becomes a one-line ConfigError naming its JSON path. Shared by the three built-in
// handler types, which each own their keys.

#include <chrono>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "execution/registered_handler.hpp"
#include "oncely/values.hpp"
#include "support/text.hpp"

namespace oncely::detail {

/// The factories of the built-in types. `declaration` is the object at `path`
/// ("/handlers/<kind>"), already known to be an object with a valid "type". They validate
/// everything else and throw ConfigError naming the path of the first problem.
/// `prepared`: run the sql statement as a named prepared statement (Config::prepared_statements),
/// unless ONCELY_PREPARED_STATEMENTS=0.
/// The sql handler comes with its start-up check (the server must accept its statement).
RegisteredHandler make_sql_handler(const nlohmann::json& declaration, const std::string& path, bool prepared);
Handler make_exec_handler(const nlohmann::json& declaration, const std::string& path);
Handler make_http_handler(const nlohmann::json& declaration, const std::string& path);

/// Throws ConfigError("<path>/<key>", "unknown key") for the first key not in `allowed`.
void check_keys(const nlohmann::json& declaration, const std::string& path,
                std::initializer_list<std::string_view> allowed);

/// The string at `path`; ConfigError "must be a string" (or "must be a non-empty string").
const std::string& string_at(const nlohmann::json& value, const std::string& path, bool non_empty = false);

/// The required member `key` of `declaration`, or ConfigError "<path>/<key>: is required".
const nlohmann::json& required(const nlohmann::json& declaration, const std::string& path, std::string_view key,
                               std::string_view what);

/// A duration string ("20s", "1500ms") greater than zero; ConfigError naming `path` otherwise.
std::chrono::milliseconds positive_duration_at(const nlohmann::json& value, const std::string& path);

/// Replaces each "${NAME}" in `text` by the value of the environment variable NAME.
/// Throws ConfigError(path, ...) for an unset variable, a malformed name or an unterminated
/// "${". Text without "${" is returned unchanged (a lone '$' is literal).
/// Each value substituted is appended to `substituted` when given: the secrets a handler
/// must keep out of what it stores (mask_secrets in support/text.hpp: for what a handler
/// stores or logs of a response, a stderr tail or an error message, which a server or a
/// program may echo).
std::string substitute_env(std::string_view text, const std::string& path,
                           std::vector<std::string>* substituted = nullptr);

/// How much of an attempt's time budget is left: min(limit, deadline - now); `limit` absent
/// means the deadline alone. Zero or negative: the attempt is already out of time.
std::chrono::milliseconds time_left(const std::optional<std::chrono::milliseconds>& limit,
                                    std::chrono::steady_clock::time_point deadline);

}  // namespace oncely::detail

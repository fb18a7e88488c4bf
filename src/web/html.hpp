#pragma once
// The console's one place for turning values into HTML: every value that reaches a page
// (database text above all: error texts and payloads are whatever a producer or a handler
// wrote) goes through escape() or one of the helpers built on it.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace oncely::web {

/// Text for an HTML element's content or a quoted attribute value: & < > " ' escaped.
[[nodiscard]] std::string escape(std::string_view text);

/// A query string ("?a=1&b=x%20y") from the pairs whose value is set, each percent-encoded.
using QueryPairs = std::vector<std::pair<std::string, std::optional<std::string>>>;
[[nodiscard]] std::string query_string(const QueryPairs& pairs);

/// A hidden form field, escaped.
[[nodiscard]] std::string hidden(std::string_view name, std::string_view value);

/// "2025-03-01T09:30:00.123456Z" -> "2025-03-01 09:30:00" (what a table row needs).
[[nodiscard]] std::string short_time(std::string_view iso);

/// 0.0123 -> "1.2 %".
[[nodiscard]] std::string percent(double fraction);

/// Seconds as "42 s", "5 min", "3 h", "2 d".
[[nodiscard]] std::string age(double seconds);

/// Links to the job pages of `ids`, comma-separated (empty for none).
[[nodiscard]] std::string job_links(const std::vector<std::int64_t>& ids);

/// A number with two decimals at most ("0.25", "12").
[[nodiscard]] std::string rate(double value);

}  // namespace oncely::web

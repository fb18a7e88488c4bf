#pragma once
// Log output for the command line: readable text (default) or one JSON object per line.
//
// Library code logs "event key=value key=value ... error=free text", e.g.
//   job retry queue=critical kind=charge id=42 attempt=2 delay=10s class=retryable error=upstream said no
// The JSON formatter turns that into
//   {"ts":"...","level":"warning","msg":"job retry","queue":"critical","kind":"charge","id":42,
//    "attempt":2,"delay":"10s","class":"retryable","error":"upstream said no"}
// so every job line carries its id, queue, kind and attempt as fields. `error` (and
// anything after it) is the rest of the line, spaces included.

#include <memory>
#include <string>
#include <string_view>

#include <spdlog/formatter.h>
#include <spdlog/logger.h>
#include <nlohmann/json.hpp>

namespace oncely::detail {

enum class LogFormat { text, json };

/// Parses --log-format; throws ConfigError for anything but "text" or "json".
LogFormat parse_log_format(std::string_view text);

/// The fields of one message in the convention above ("msg" holds the event words).
nlohmann::json log_fields(std::string_view message);

/// A formatter for spdlog sinks that writes one JSON object per line.
class JsonLogFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override;
  [[nodiscard]] std::unique_ptr<spdlog::formatter> clone() const override;
};

/// The logger the CLI uses: stderr, level from SPDLOG_LEVEL (default info), in `format`.
std::shared_ptr<spdlog::logger> make_cli_logger(LogFormat format);

}  // namespace oncely::detail

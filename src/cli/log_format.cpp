#include "cli/log_format.hpp"

#include <cctype>
#include <chrono>
#include <ctime>

#include <spdlog/cfg/env.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "oncely/errors.hpp"

namespace oncely::detail {
namespace {

bool is_key(std::string_view word) {
  if (word.empty()) return false;
  for (const char c : word) {
    if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_')) {
      return false;
    }
  }
  return true;
}

// Integers become JSON numbers (ids, attempts); everything else stays a string.
nlohmann::json value_of(std::string_view text) {
  if (!text.empty() && text.size() < 19) {
    std::size_t i = text[0] == '-' ? 1 : 0;
    bool digits = i < text.size();
    for (; i < text.size(); ++i) digits = digits && std::isdigit(static_cast<unsigned char>(text[i]));
    if (digits) return std::stoll(std::string(text));
  }
  return std::string(text);
}

std::string iso_utc(std::chrono::system_clock::time_point t) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&seconds, &tm);
  char buffer[40];
  const std::size_t n = std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buffer + n, sizeof buffer - n, ".%03lldZ", static_cast<long long>(ms % 1000));
  return buffer;
}

}  // namespace

LogFormat parse_log_format(std::string_view text) {
  if (text == "text") return LogFormat::text;
  if (text == "json") return LogFormat::json;
  throw ConfigError("--log-format", "must be text or json, not '" + std::string(text) + "'");
}

nlohmann::json log_fields(std::string_view message) {
  nlohmann::json fields = nlohmann::json::object();
  std::string event;
  std::size_t pos = 0;
  while (pos < message.size()) {
    const std::size_t end = std::min(message.find(' ', pos), message.size());
    const std::string_view word = message.substr(pos, end - pos);
    const std::size_t eq = word.find('=');
    if (eq != std::string_view::npos && is_key(word.substr(0, eq))) {
      const std::string key(word.substr(0, eq));
      if (key == "error") {  // free text: the rest of the line
        fields[key] = std::string(message.substr(pos + eq + 1));
        break;
      }
      fields[key] = value_of(word.substr(eq + 1));
    } else if (fields.empty()) {
      event += (event.empty() ? "" : " ") + std::string(word);
    } else {  // a word after the fields began that is not a field: keep it in msg
      event += " " + std::string(word);
    }
    pos = end + 1;
  }
  fields["msg"] = event;
  return fields;
}

void JsonLogFormatter::format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) {
  nlohmann::json line = {{"ts", iso_utc(msg.time)},
                         {"level", std::string(spdlog::level::to_string_view(msg.level).data(),
                                               spdlog::level::to_string_view(msg.level).size())}};
  const nlohmann::json fields = log_fields(std::string_view(msg.payload.data(), msg.payload.size()));
  line.update(fields);
  // Invalid UTF-8 (a server message in another encoding) must not throw from a logger.
  const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  dest.append(text.data(), text.data() + text.size());
  dest.push_back('\n');
}

std::unique_ptr<spdlog::formatter> JsonLogFormatter::clone() const { return std::make_unique<JsonLogFormatter>(); }

std::shared_ptr<spdlog::logger> make_cli_logger(LogFormat format) {
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  if (format == LogFormat::json) sink->set_formatter(std::make_unique<JsonLogFormatter>());
  auto log = std::make_shared<spdlog::logger>("oncely", sink);
  spdlog::cfg::load_env_levels();  // SPDLOG_LEVEL=debug shows every job
  log->set_level(spdlog::get_level());
  return log;
}

}  // namespace oncely::detail

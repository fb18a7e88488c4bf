#include "oncely/config.hpp"

#include <cerrno>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>
#include <system_error>

#include "duration.hpp"
#include "oncely/admin.hpp"
#include "oncely/errors.hpp"
#include "text.hpp"

namespace oncely {
namespace {

using detail::child_path;
using detail::printable;

using std::chrono::milliseconds;
using namespace std::chrono_literals;

constexpr std::size_t kMaxQueueNameLength = 200;

// A ConfigError's message without its "path: " prefix, to raise it again at another path.
std::string reason(const ConfigError& e) {
  std::string_view what = e.what();
  if (!e.path().empty()) what.remove_prefix(e.path().size() + 2);
  return printable(what);
}


const nlohmann::json& require_object(const nlohmann::json& value, const std::string& path) {
  if (!value.is_object()) throw ConfigError(path, "must be an object");
  return value;
}

int integer_in(const nlohmann::json& value, const std::string& path, int min, int max) {
  // is_number_integer() is false for booleans and for 2.5 (and for 2.0: the file must say 2).
  if (!value.is_number_integer()) throw ConfigError(path, "must be an integer");
  // A huge unsigned value would wrap when read as int64, so it is caught first.
  const bool too_large = value.is_number_unsigned() && value.get<std::uint64_t>() > static_cast<std::uint64_t>(max);
  if (too_large || value.get<std::int64_t>() < min || value.get<std::int64_t>() > max) {
    throw ConfigError(path, "must be between " + std::to_string(min) + " and " + std::to_string(max) + " (got " +
                                value.dump() + ")");
  }
  return value.get<int>();
}

milliseconds duration_at_least(const nlohmann::json& value, const std::string& path, milliseconds min) {
  if (!value.is_string()) throw ConfigError(path, "must be a duration string such as \"5s\"");
  const auto& text = value.get_ref<const std::string&>();
  milliseconds d{};
  try {
    d = detail::parse_duration(text);
  } catch (const ConfigError& e) {
    throw ConfigError(path, reason(e));
  }
  if (d < min) {
    throw ConfigError(path, "must be at least " + detail::format_duration(min) + " (got \"" + printable(text) + "\")");
  }
  return d;
}

milliseconds duration_at(const nlohmann::json& value, const std::string& path) {
  return duration_at_least(value, path, 0ms);
}

BackoffConfig::Jitter parse_jitter(const nlohmann::json& value, const std::string& path) {
  if (value == "full") return BackoffConfig::Jitter::full;
  if (value == "equal") return BackoffConfig::Jitter::equal;
  if (value == "none") return BackoffConfig::Jitter::none;
  throw ConfigError(path, R"(must be "full", "equal" or "none" (got )" + value.dump() + ")");
}

std::vector<milliseconds> parse_schedule(const nlohmann::json& array, const std::string& path) {
  if (!array.is_array() || array.empty()) throw ConfigError(path, "must be a non-empty array of durations");
  std::vector<milliseconds> schedule;
  for (std::size_t i = 0; i < array.size(); ++i) {
    schedule.push_back(duration_at(array[i], path + "/" + std::to_string(i)));
  }
  return schedule;
}

BackoffConfig parse_backoff(const nlohmann::json& object, const std::string& path) {
  BackoffConfig backoff;
  for (const auto& [key, value] : require_object(object, path).items()) {
    const std::string at = child_path(path, key);
    if (key == "base") backoff.base = duration_at(value, at);
    else if (key == "cap") backoff.cap = duration_at(value, at);
    else if (key == "jitter") backoff.jitter = parse_jitter(value, at);
    else if (key == "schedule") backoff.schedule = parse_schedule(value, at);
    else throw ConfigError(at, "unknown key");
  }
  // A schedule replaces base, cap and jitter; ignoring them silently would hide which
  // policy the user meant.
  if (!backoff.schedule.empty() && (object.contains("base") || object.contains("cap") || object.contains("jitter"))) {
    throw ConfigError(child_path(path, "schedule"), "cannot be combined with base, cap or jitter");
  }
  return backoff;
}

QueueConfig parse_queue(const nlohmann::json& object, const std::string& path) {
  QueueConfig queue;
  for (const auto& [key, value] : require_object(object, path).items()) {
    const std::string at = child_path(path, key);
    if (key == "concurrency") {
      queue.concurrency = integer_in(value, at, 1, 256);
    } else if (key == "batch_size") {
      queue.batch_size = integer_in(value, at, 1, 1000);
    } else if (key == "max_attempts") {
      queue.max_attempts = integer_in(value, at, 1, 1000);
    } else if (key == "backoff") {
      queue.backoff = parse_backoff(value, at);
    } else if (key == "rate_limit_per_sec") {
      if (!value.is_number()) throw ConfigError(at, "must be a number");
      queue.rate_limit_per_sec = value.get<double>();
      if (!(queue.rate_limit_per_sec >= 0)) throw ConfigError(at, "must be at least 0 (0 = unlimited)");
    } else if (key == "job_timeout") {
      queue.job_timeout = duration_at_least(value, at, 1s);
    } else if (key == "poll_interval") {
      queue.poll_interval = duration_at_least(value, at, 10ms);
    } else {
      throw ConfigError(at, "unknown key");
    }
  }
  return queue;
}

std::map<std::string, QueueConfig> parse_queues(const nlohmann::json& object, const std::string& path) {
  if (require_object(object, path).empty()) throw ConfigError(path, "at least one queue is required");
  std::map<std::string, QueueConfig> queues;
  for (const auto& [name, value] : object.items()) {
    const std::string at = child_path(path, name);
    if (name.empty()) throw ConfigError(at, "queue name must not be empty");
    // The insert trigger's NOTIFY lists queue names separated by commas.
    if (name.find(',') != std::string::npos) throw ConfigError(at, "queue name must not contain ','");
    if (name.size() > kMaxQueueNameLength) {
      throw ConfigError(at, "queue name is longer than " + std::to_string(kMaxQueueNameLength) + " bytes");
    }
    queues.emplace(name, parse_queue(value, at));
  }
  return queues;
}

// Handler declarations are validated by the handler factory, which knows the types;
// here only the shape every type shares.
const nlohmann::json& check_handlers(const nlohmann::json& object, const std::string& path) {
  for (const auto& [kind, value] : require_object(object, path).items()) require_object(value, child_path(path, kind));
  return object;
}

struct FileCloser {
  void operator()(std::FILE* file) const noexcept { std::fclose(file); }
};

std::string read_file(const std::string& path) {
  const auto fail = [&](int error) {
    throw ConfigError(path, "cannot read: " + std::generic_category().message(error));
  };
  const std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (!file) fail(errno);
  std::string text;
  char buffer[1 << 14];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, file.get())) > 0) text.append(buffer, n);
  if (std::ferror(file.get())) fail(errno);  // e.g. EISDIR: fopen accepts a directory
  return text;
}

// An environment variable that is set to the empty string counts as unset, as it does
// for the CLI's --database-url / --schema options.
const char* non_empty_env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

}  // namespace

Config Config::parse(const nlohmann::json& document) {
  if (!document.is_object()) throw ConfigError("", "the configuration must be a JSON object");
  Config config;
  for (const auto& [key, value] : document.items()) {
    const std::string at = child_path("", key);
    if (key == "shutdown_grace") {
      config.shutdown_grace = duration_at(value, at);
    } else if (key == "dedup_window") {
      config.dedup_window = duration_at(value, at);
    } else if (key == "queues") {
      config.queues = parse_queues(value, at);
    } else if (key == "handlers") {
      config.handlers = check_handlers(value, at);
    } else if (key == "prepared_statements") {
      if (!value.is_boolean()) throw ConfigError(at, "must be true or false");
      config.prepared_statements = value.get<bool>();
    } else {
      throw ConfigError(at, "unknown key");
    }
  }
  return config;
}

Config Config::load(const std::string& path) {
  nlohmann::json document;
  try {
    document = nlohmann::json::parse(read_file(path));
  } catch (const nlohmann::json::parse_error& e) {
    throw ConfigError(path, std::string("invalid JSON: ") + e.what());
  }
  Config config = parse(document);
  if (const char* url = non_empty_env("DATABASE_URL")) config.database_url = url;
  if (const char* url = non_empty_env("ONCELY_LISTEN_DATABASE_URL")) config.listen_database_url = url;
  if (const char* schema = non_empty_env("ONCELY_SCHEMA")) {
    try {
      validate_schema_name(schema);
    } catch (const ConfigError& e) {
      throw ConfigError("ONCELY_SCHEMA", reason(e));
    }
    config.schema = schema;
  }
  return config;
}

}  // namespace oncely

#include "support/otel_settings.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "oncely/errors.hpp"
#include "support/curl_handles.hpp"
#include "support/text.hpp"

namespace oncely::detail {
namespace {

std::string trimmed(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t");
  return std::string(s.substr(first, last - first + 1));
}

std::string lower(std::string s) {
  std::ranges::transform(s, s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The values of OTEL_EXPORTER_OTLP_HEADERS and OTEL_RESOURCE_ATTRIBUTES are percent-encoded
// (the W3C Baggage format): "api-key=a%3Db" is the value "a=b".
std::string percent_decoded(std::string_view s, const char* variable) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    const int hi = i + 2 < s.size() ? hex_value(s[i + 1]) : -1, lo = i + 2 < s.size() ? hex_value(s[i + 2]) : -1;
    if (hi < 0 || lo < 0) throw ConfigError(variable, "a '%' that starts no percent-encoded byte");
    out += static_cast<char>(hi * 16 + lo);
    i += 2;
  }
  return out;
}

// "k1=v1,k2=v2": the pairs, keys trimmed, values trimmed and percent-decoded. The message
// never quotes a value: a header's may be an API key.
std::vector<std::pair<std::string, std::string>> key_values(std::string_view list, const char* variable) {
  std::vector<std::pair<std::string, std::string>> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t end = std::min(list.find(',', start), list.size());
    const std::string_view item = list.substr(start, end - start);
    start = end + 1;
    if (trimmed(item).empty()) continue;
    const auto eq = item.find('=');
    const std::string key = eq == std::string_view::npos ? std::string() : trimmed(item.substr(0, eq));
    if (key.empty()) throw ConfigError(variable, "each entry must be key=value (an entry has no key or no '=')");
    const std::string value = percent_decoded(trimmed(item.substr(eq + 1)), variable);
    if (has_control_character(key) || has_control_character(value, true)) {
      throw ConfigError(variable, "the entry '" + printable(key) + "' holds a control character");
    }
    out.emplace_back(key, value);
  }
  return out;
}

std::optional<std::string> env(const std::function<const char*(const char*)>& getenv, const char* name) {
  const char* value = getenv(name);
  if (value == nullptr) return std::nullopt;
  std::string text = trimmed(value);
  if (text.empty()) return std::nullopt;  // set but empty: unset, as the specification says
  return text;
}

// The first of `names` that is set (the signal's own variable before the general one).
std::optional<std::string> first_of(const std::function<const char*(const char*)>& getenv,
                                    std::initializer_list<const char*> names, const char** which = nullptr) {
  for (const char* name : names) {
    if (auto value = env(getenv, name)) {
      if (which != nullptr) *which = name;
      return value;
    }
  }
  return std::nullopt;
}

template <class Number>
Number number(const std::string& text, const char* variable, Number least) {
  Number n{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || n < least) {
    throw ConfigError(variable, "'" + printable(text) + "' is not a whole number of at least " + std::to_string(least));
  }
  return n;
}

std::chrono::milliseconds milliseconds(const std::function<const char*(const char*)>& getenv,
                                       std::initializer_list<const char*> names, std::chrono::milliseconds fallback) {
  const char* which = nullptr;
  const auto text = first_of(getenv, names, &which);
  if (!text) return fallback;
  const long long ms = number<long long>(*text, which, 1);
  constexpr long long kDay = 24LL * 3600 * 1000;  // a longer wait overflows the clocks' arithmetic
  if (ms > kDay) throw ConfigError(which, "'" + printable(*text) + "' is more than a day (86400000 ms)");
  return std::chrono::milliseconds(ms);
}

bool http_url(const std::string& url) {
  const std::string l = lower(url.substr(0, 8));
  return l.starts_with("http://") || l.starts_with("https://");
}

// One signal's URL, headers, timeout and protocol: its own variable (OTEL_EXPORTER_OTLP_
// <SIGNAL>_*) first, then the general one; a signal's own endpoint is used as it is, the
// general one gets `path` appended.
OtlpTarget target(const std::function<const char*(const char*)>& getenv, const std::string& signal, const char* path,
                  const std::optional<std::string>& own, const std::optional<std::string>& base,
                  std::vector<std::string>& warnings) {
  OtlpTarget t;
  const std::string own_variable = "OTEL_EXPORTER_OTLP_" + signal + "_ENDPOINT";
  const char* endpoint_variable = own ? own_variable.c_str() : "OTEL_EXPORTER_OTLP_ENDPOINT";
  if (own) {
    t.url = *own;
  } else {
    t.url = *base;
    if (!t.url.ends_with('/')) t.url += '/';
    t.url += path;
  }
  if (!http_url(t.url)) {
    throw ConfigError(endpoint_variable, "'" + printable(display_url(t.url)) + "' is not an http(s) URL");
  }
  const std::string protocol_own = "OTEL_EXPORTER_OTLP_" + signal + "_PROTOCOL";
  const char* protocol_variable = nullptr;
  const std::string protocol =
      lower(first_of(getenv, {protocol_own.c_str(), "OTEL_EXPORTER_OTLP_PROTOCOL"}, &protocol_variable)
                .value_or("http/json"));
  if (protocol == "http/protobuf") {
    // Every OTLP/HTTP receiver takes JSON on the same path (the Content-Type tells them).
    const std::string warning =
        std::string(protocol_variable) +
        "=http/protobuf: oncely sends OTLP over HTTP as JSON, which OTLP/HTTP receivers accept too";
    if (std::ranges::find(warnings, warning) == warnings.end()) warnings.push_back(warning);
  } else if (protocol != "http/json") {
    throw ConfigError(protocol_variable, "'" + printable(protocol) +
                                             "' is not a protocol oncely speaks: it sends OTLP over HTTP as JSON "
                                             "(http/json; point the endpoint at the receiver's HTTP port, 4318)");
  }
  const std::string headers_own = "OTEL_EXPORTER_OTLP_" + signal + "_HEADERS";
  for (const char* variable : {"OTEL_EXPORTER_OTLP_HEADERS", headers_own.c_str()}) {
    if (const auto list = env(getenv, variable)) {
      for (auto& [key, value] : key_values(*list, variable)) {
        // A name libcurl would read otherwise (not an HTTP token), one that would change what
        // the body is, or an empty value (libcurl removes such a header) is no header to send.
        const bool token = std::ranges::all_of(key, [](unsigned char c) {
          return std::isalnum(c) != 0 ||
                 std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
        });
        if (!token || lower(key) == "content-type" || lower(key) == "content-length" || value.empty()) {
          throw ConfigError(variable, "the header '" + printable(key) +
                                          "' is not one to send (a name that is no HTTP token, Content-Type, "
                                          "Content-Length, or an empty value)");
        }
        std::erase_if(t.headers, [&](const auto& h) { return lower(h.first) == lower(key); });  // the signal's wins
        t.headers.emplace_back(std::move(key), std::move(value));
      }
    }
  }
  const std::string timeout_own = "OTEL_EXPORTER_OTLP_" + signal + "_TIMEOUT";
  t.timeout = milliseconds(getenv, {timeout_own.c_str(), "OTEL_EXPORTER_OTLP_TIMEOUT"}, t.timeout);
  return t;
}

}  // namespace

std::string display_url(const std::string& url) {
  // Parsed as libcurl will parse it: the scheme, host, port and path alone (no user,
  // password, query or fragment), or nothing of it when it does not parse.
  const std::unique_ptr<CURLU, CurlUrlDeleter> parsed(curl_url());
  if (!parsed || curl_url_set(parsed.get(), CURLUPART_URL, url.c_str(), CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK) {
    return "(an unreadable URL)";
  }
  for (const CURLUPart part :
       {CURLUPART_USER, CURLUPART_PASSWORD, CURLUPART_OPTIONS, CURLUPART_QUERY, CURLUPART_FRAGMENT}) {
    curl_url_set(parsed.get(), part, nullptr, 0);
  }
  char* text = nullptr;
  if (curl_url_get(parsed.get(), CURLUPART_URL, &text, 0) != CURLUE_OK || text == nullptr) return "(an unreadable URL)";
  const std::unique_ptr<char, CurlStringDeleter> owned(text);
  return printable(text);
}

OtelSettings read_otel_settings(const std::function<const char*(const char*)>& getenv, const std::string& program) {
  OtelSettings s;
  // Nothing is checked before oncely knows it exports: the same variables configure the
  // application's own OpenTelemetry SDK (OTEL_TRACES_EXPORTER=console, a gRPC protocol),
  // which is none of oncely's business while it has no endpoint, or when disabled.
  const bool disabled = lower(env(getenv, "OTEL_SDK_DISABLED").value_or("false")) == "true";
  const auto base = env(getenv, "OTEL_EXPORTER_OTLP_ENDPOINT");
  const auto traces_endpoint = env(getenv, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
  const auto metrics_endpoint = env(getenv, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT");
  // Exporter lists ("otlp,console"): oncely's part is "otlp"; the rest are other SDKs'.
  const auto lists_otlp = [&](const char* variable, const char* fallback) {
    const std::string list = "," + lower(env(getenv, variable).value_or(fallback)) + ",";
    std::string squeezed;
    for (const char c : list) {
      if (c != ' ' && c != '\t') squeezed += c;
    }
    return squeezed.find(",otlp,") != std::string::npos;
  };
  // The worker's metrics are Prometheus's (--metrics-addr) unless OTLP is asked for.
  s.traces_enabled = !disabled && (traces_endpoint || base) && lists_otlp("OTEL_TRACES_EXPORTER", "otlp");
  s.metrics_enabled = !disabled && (metrics_endpoint || base) && lists_otlp("OTEL_METRICS_EXPORTER", "none");
  if (!s.traces_enabled && !s.metrics_enabled) return s;

  if (s.traces_enabled) s.traces = target(getenv, "TRACES", "v1/traces", traces_endpoint, base, s.warnings);
  if (s.metrics_enabled) s.metrics = target(getenv, "METRICS", "v1/metrics", metrics_endpoint, base, s.warnings);
  s.schedule_delay = milliseconds(getenv, {"OTEL_BSP_SCHEDULE_DELAY"}, s.schedule_delay);
  s.metric_interval = milliseconds(getenv, {"OTEL_METRIC_EXPORT_INTERVAL"}, s.metric_interval);
  if (const auto v = env(getenv, "OTEL_BSP_MAX_QUEUE_SIZE"))
    s.max_queue_size = number<std::size_t>(*v, "OTEL_BSP_MAX_QUEUE_SIZE", 1);
  if (const auto v = env(getenv, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"))
    s.max_batch_size = number<std::size_t>(*v, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 1);
  s.max_batch_size = std::min(s.max_batch_size, s.max_queue_size);

  const std::string sampler = lower(env(getenv, "OTEL_TRACES_SAMPLER").value_or("parentbased_always_on"));
  static const std::pair<const char*, Sampler> kSamplers[] = {
      {"always_on", Sampler::always_on},
      {"always_off", Sampler::always_off},
      {"traceidratio", Sampler::trace_id_ratio},
      {"parentbased_always_on", Sampler::parent_based_always_on},
      {"parentbased_always_off", Sampler::parent_based_always_off},
      {"parentbased_traceidratio", Sampler::parent_based_trace_id_ratio}};
  const auto known = std::ranges::find(kSamplers, sampler, [](const auto& p) { return std::string(p.first); });
  if (known == std::end(kSamplers)) {
    throw ConfigError("OTEL_TRACES_SAMPLER", "'" + printable(sampler) +
                                                 "' is not a sampler oncely has: always_on, always_off, traceidratio, "
                                                 "parentbased_always_on, parentbased_always_off, "
                                                 "parentbased_traceidratio");
  }
  s.sampler = known->second;
  if (const auto arg = env(getenv, "OTEL_TRACES_SAMPLER_ARG");
      arg && (s.sampler == Sampler::trace_id_ratio || s.sampler == Sampler::parent_based_trace_id_ratio)) {
    char* end = nullptr;
    const double ratio = std::strtod(arg->c_str(), &end);
    if (end != arg->c_str() + arg->size() || !(ratio >= 0.0 && ratio <= 1.0)) {
      throw ConfigError("OTEL_TRACES_SAMPLER_ARG", "'" + printable(*arg) + "' is not a ratio from 0 to 1");
    }
    s.ratio = ratio;
  }

  if (const auto list = env(getenv, "OTEL_RESOURCE_ATTRIBUTES")) {
    s.resource = key_values(*list, "OTEL_RESOURCE_ATTRIBUTES");
  }
  std::string service = "unknown_service:" + program;
  for (const auto& [key, value] : s.resource) {
    if (key == "service.name") service = value;  // the last one, as a map would keep it
  }
  std::erase_if(s.resource, [](const auto& kv) { return kv.first == "service.name"; });
  if (const auto name = env(getenv, "OTEL_SERVICE_NAME")) service = *name;  // wins over the attributes
  s.resource.insert(s.resource.begin(), {"service.name", service});
  return s;
}

}  // namespace oncely::detail

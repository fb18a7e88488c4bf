#include "support/otlp_spans.hpp"

#include <nlohmann/json.hpp>

#include "support/text.hpp"

namespace oncely::detail {
namespace {

using nlohmann::json;

// OTLP/JSON: an int64 is a decimal string (JSON numbers lose digits past 2^53).
json any_value(const AttributeValue& value) {
  return std::visit(
      [](const auto& v) -> json {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) return {{"stringValue", sanitize_utf8(v)}};
        if constexpr (std::is_same_v<T, std::int64_t>) return {{"intValue", std::to_string(v)}};
        if constexpr (std::is_same_v<T, bool>) return {{"boolValue", v}};
        if constexpr (std::is_same_v<T, double>) return {{"doubleValue", v}};
      },
      value);
}

json key_values(const Attributes& attributes) {
  json out = json::array();
  for (const auto& [key, value] : attributes) out.push_back({{"key", key}, {"value", any_value(value)}});
  return out;
}

json span_json(const SpanRecord& s) {
  json span = {{"traceId", s.trace_id},
               {"spanId", s.span_id},
               {"name", sanitize_utf8(s.name)},
               {"kind", static_cast<int>(s.kind)},
               {"startTimeUnixNano", std::to_string(s.start_unix_ns)},
               {"endTimeUnixNano", std::to_string(s.end_unix_ns)},
               {"attributes", key_values(s.attributes)}};
  if (!s.parent_span_id.empty()) span["parentSpanId"] = s.parent_span_id;
  if (!s.events.empty()) {
    json events = json::array();
    for (const SpanEvent& e : s.events) {
      events.push_back({{"timeUnixNano", std::to_string(e.time_unix_ns)},
                        {"name", e.name},
                        {"attributes", key_values(e.attributes)}});
    }
    span["events"] = std::move(events);
  }
  if (s.status != SpanStatus::unset) {
    json status = {{"code", static_cast<int>(s.status)}};
    if (!s.status_message.empty()) status["message"] = sanitize_utf8(s.status_message);
    span["status"] = std::move(status);
  }
  return span;
}

}  // namespace

std::string otlp_json(const std::vector<std::pair<std::string, std::string>>& resource, const std::string& version,
                      const std::vector<SpanRecord>& spans) {
  Attributes resource_attributes;
  for (const auto& [key, value] : resource) resource_attributes.emplace_back(key, value);
  json encoded = json::array();
  for (const SpanRecord& s : spans) encoded.push_back(span_json(s));
  const json request = {
      {"resourceSpans",
       json::array({{{"resource", {{"attributes", key_values(resource_attributes)}}},
                     {"scopeSpans",
                      json::array({{{"scope", {{"name", "oncely"}, {"version", version}}}, {"spans", encoded}}})}}})}};
  return request.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace oncely::detail

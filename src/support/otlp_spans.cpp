#include "support/otlp_spans.hpp"

#include <charconv>
#include <cstdio>

#include "support/text.hpp"

namespace oncely::detail {
namespace {

// The encoding is written by hand, not built as a JSON tree: a busy worker exports a hundred
// thousand spans a second, and a tree of small objects per span cost several times the
// appends (bench/otel_cost.sh).

bool plain(std::string_view s) {
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f || c == '"' || c == '\\') return false;
  }
  return true;
}

void append_escaped(std::string& out, std::string_view s) {
  out += '"';
  if (plain(s)) {
    out += s;
  } else {
    const std::string valid = sanitize_utf8(s);  // jsonb and every JSON parser want UTF-8
    for (const char c : valid) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
            out += buf;
          } else {
            out += c;
          }
      }
    }
  }
  out += '"';
}

template <class Integer>
void append_number(std::string& out, Integer n) {
  char buf[24];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, n);
  out.append(buf, end);
}

// OTLP/JSON: an int64 (and a fixed64 time) is a decimal string: JSON numbers lose digits past 2^53.
void append_quoted_number(std::string& out, std::int64_t n) {
  out += '"';
  append_number(out, n);
  out += '"';
}

void append_value(std::string& out, const AttributeValue& value) {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          out += "{\"stringValue\":";
          append_escaped(out, v);
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          out += "{\"intValue\":";
          append_quoted_number(out, v);
        } else if constexpr (std::is_same_v<T, bool>) {
          out += v ? "{\"boolValue\":true" : "{\"boolValue\":false";
        } else {
          char buf[32];
          const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);  // shortest round trip
          out += "{\"doubleValue\":";
          out.append(buf, end);
        }
        out += '}';
      },
      value);
}

void append_members(std::string& out, const Attributes& attributes, bool first = true) {
  for (const auto& [key, value] : attributes) {
    if (!first) out += ',';
    first = false;
    out += "{\"key\":";
    append_escaped(out, key);
    out += ",\"value\":";
    append_value(out, value);
    out += '}';
  }
}

void append_attributes(std::string& out, const Attributes& attributes, std::string_view fixed = {}) {
  out += '[';
  out += fixed;
  append_members(out, attributes, fixed.empty());
  out += ']';
}

void append_span(std::string& out, const SpanRecord& s) {
  out += "{\"traceId\":\"";
  out += s.trace_id.view();
  out += "\",\"spanId\":\"";
  out += s.span_id.view();
  out += '"';
  if (!s.parent_span_id.empty()) {
    out += ",\"parentSpanId\":\"";
    out += s.parent_span_id.view();
    out += '"';
  }
  out += ",\"name\":";
  append_escaped(out, s.name);
  out += ",\"kind\":";
  append_number(out, static_cast<int>(s.kind));
  out += ",\"startTimeUnixNano\":";
  append_quoted_number(out, s.start_unix_ns);
  out += ",\"endTimeUnixNano\":";
  append_quoted_number(out, s.end_unix_ns);
  out += ",\"attributes\":";
  append_attributes(out, s.attributes, s.fixed_attributes);
  if (!s.events.empty()) {
    out += ",\"events\":[";
    bool first = true;
    for (const SpanEvent& e : s.events) {
      if (!first) out += ',';
      first = false;
      out += "{\"timeUnixNano\":";
      append_quoted_number(out, e.time_unix_ns);
      out += ",\"name\":";
      append_escaped(out, e.name);
      out += ",\"attributes\":";
      append_attributes(out, e.attributes);
      out += '}';
    }
    out += ']';
  }
  if (s.status != SpanStatus::unset) {
    out += ",\"status\":{\"code\":";
    append_number(out, static_cast<int>(s.status));
    if (!s.status_message.empty()) {
      out += ",\"message\":";
      append_escaped(out, s.status_message);
    }
    out += '}';
  }
  out += '}';
}

}  // namespace

std::string encoded_attributes(const Attributes& attributes) {
  std::string out;
  append_members(out, attributes);
  return out;
}

std::string otlp_json(const std::vector<std::pair<std::string, std::string>>& resource, const std::string& version,
                      const std::vector<SpanRecord>& spans) {
  return otlp_json(resource, version, spans, 0, spans.size());
}

std::string otlp_json(const std::vector<std::pair<std::string, std::string>>& resource, const std::string& version,
                      const std::vector<SpanRecord>& spans, std::size_t from, std::size_t to) {
  Attributes resource_attributes;
  for (const auto& [key, value] : resource) resource_attributes.emplace_back(key, value);
  std::string out;
  out.reserve(256 + (to - from) * 900);
  out += "{\"resourceSpans\":[{\"resource\":{\"attributes\":";
  append_attributes(out, resource_attributes);
  out += "},\"scopeSpans\":[{\"scope\":{\"name\":\"oncely\",\"version\":";
  append_escaped(out, version);
  out += "},\"spans\":[";
  bool first = true;
  for (std::size_t i = from; i < to; ++i) {
    if (!first) out += ',';
    first = false;
    append_span(out, spans[i]);
  }
  out += "]}]}]}";
  return out;
}

}  // namespace oncely::detail

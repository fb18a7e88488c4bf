#pragma once
// Spans as OTLP carries them, and their encoding as OTLP/JSON: the body of one
// POST /v1/traces (an ExportTraceServiceRequest). Pure; tests/unit/otlp_spans_test.cpp
// reads the encoding back by the protocol's JSON mapping (hex ids, 64-bit integers as
// strings, enums as numbers, lowerCamelCase field names).

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace oncely::detail {

/// An attribute's value: OTLP's AnyValue for the kinds oncely writes.
using AttributeValue = std::variant<std::string, std::int64_t, bool, double>;
using Attributes = std::vector<std::pair<std::string, AttributeValue>>;

enum class SpanKind { internal = 1, server = 2, client = 3, producer = 4, consumer = 5 };
enum class SpanStatus { unset = 0, ok = 1, error = 2 };

struct SpanEvent {
  std::string name;
  std::int64_t time_unix_ns = 0;
  Attributes attributes;
};

struct SpanRecord {
  std::string trace_id;        // 32 lower-case hex
  std::string span_id;         // 16 lower-case hex
  std::string parent_span_id;  // 16 hex, or empty for a root
  std::string name;
  SpanKind kind = SpanKind::internal;
  std::int64_t start_unix_ns = 0;
  std::int64_t end_unix_ns = 0;
  Attributes attributes;
  std::vector<SpanEvent> events;
  SpanStatus status = SpanStatus::unset;
  std::string status_message;
};

/// The ExportTraceServiceRequest of `spans`, all under one resource (`resource`: its
/// attributes, service.name among them) and the instrumentation scope "oncely" at `version`.
[[nodiscard]] std::string otlp_json(const std::vector<std::pair<std::string, std::string>>& resource,
                                    const std::string& version, const std::vector<SpanRecord>& spans);

}  // namespace oncely::detail

#pragma once
// Spans as OTLP carries them, and their encoding as OTLP/JSON: the body of one
// POST /v1/traces (an ExportTraceServiceRequest). Pure; tests/unit/otlp_spans_test.cpp
// reads the encoding back by the protocol's JSON mapping (hex ids, 64-bit integers as
// strings, enums as numbers, lowerCamelCase field names).

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace oncely::detail {

/// An attribute's value: OTLP's AnyValue for the kinds oncely writes.
using AttributeValue = std::variant<std::string, std::int64_t, bool, double>;
/// Keys are the conventions' names, string literals: a span is made for every attempt, and a
/// std::string of "messaging.destination.name" is a heap allocation each time.
using Attributes = std::vector<std::pair<std::string_view, AttributeValue>>;

/// A trace id (32 hex digits) or a span id (16), held inline for the same reason; empty (all
/// NUL) for none.
template <std::size_t N>
struct HexId {
  std::array<char, N> hex{};
  HexId() = default;
  // Implicit: ids are written and compared as text.
  HexId(std::string_view text) { std::copy_n(text.begin(), std::min(N, text.size()), hex.begin()); }
  HexId(const char* text) : HexId(std::string_view(text)) {}
  HexId(const std::string& text) : HexId(std::string_view(text)) {}
  [[nodiscard]] std::string_view view() const { return {hex.data(), N}; }
  [[nodiscard]] bool empty() const { return hex[0] == 0; }
  bool operator==(const HexId&) const = default;
};
using TraceId = HexId<32>;
using SpanId = HexId<16>;

enum class SpanKind { internal = 1, server = 2, client = 3, producer = 4, consumer = 5 };
enum class SpanStatus { unset = 0, ok = 1, error = 2 };

struct SpanEvent {
  std::string name;
  std::int64_t time_unix_ns = 0;
  Attributes attributes;
};

struct SpanRecord {
  TraceId trace_id;
  SpanId span_id;
  SpanId parent_span_id;  // empty for a root
  std::string name;
  SpanKind kind = SpanKind::internal;
  std::int64_t start_unix_ns = 0;
  std::int64_t end_unix_ns = 0;
  /// Attributes every span of its kind carries, already encoded (encoded_attributes()), with
  /// a lifetime of their own: written before `attributes`, never built per span.
  std::string_view fixed_attributes;
  Attributes attributes;
  std::vector<SpanEvent> events;
  SpanStatus status = SpanStatus::unset;
  std::string status_message;
};

/// `attributes` as the members of an OTLP/JSON KeyValue array (without its brackets), for a
/// SpanRecord's fixed_attributes.
[[nodiscard]] std::string encoded_attributes(const Attributes& attributes);

/// The ExportTraceServiceRequest of `spans`, all under one resource (`resource`: its
/// attributes, service.name among them) and the instrumentation scope "oncely" at `version`.
[[nodiscard]] std::string otlp_json(const std::vector<std::pair<std::string, std::string>>& resource,
                                    const std::string& version, const std::vector<SpanRecord>& spans);
/// The same for spans[from, to).
[[nodiscard]] std::string otlp_json(const std::vector<std::pair<std::string, std::string>>& resource,
                                    const std::string& version, const std::vector<SpanRecord>& spans, std::size_t from,
                                    std::size_t to);

}  // namespace oncely::detail

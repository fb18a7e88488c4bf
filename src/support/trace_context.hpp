#pragma once
// W3C Trace Context (https://www.w3.org/TR/trace-context/): the `traceparent` a producer
// stores with a job (jobs.trace_context), and the child of it each attempt runs under.
// Pure functions: the span id's randomness is passed in.

#include <optional>
#include <random>
#include <string>
#include <string_view>

namespace oncely::detail {

/// Whether `text` is a traceparent migration 0008's CHECK accepts: "vv-<32 hex>-<16 hex>-ff",
/// lower-case hex, version not ff, version 00 exactly 55 characters, trace and span ids
/// not all zero, at most 512 characters.
[[nodiscard]] bool is_traceparent(std::string_view text) noexcept;

/// The traceparent of one attempt: `parent`'s trace id and flags (as version 00) with a new,
/// non-zero span id from `rng`. None when `parent` is not a traceparent.
[[nodiscard]] std::optional<std::string> child_traceparent(std::string_view parent, std::mt19937_64& rng);

/// The 32-hex trace id of a traceparent (empty when it is not one).
[[nodiscard]] std::string_view trace_id_of(std::string_view traceparent) noexcept;

/// " trace_id=<32 hex>" for a job's log line (a field of the JSON log), or "" without one.
[[nodiscard]] std::string trace_field(const std::optional<std::string>& trace_context);

}  // namespace oncely::detail

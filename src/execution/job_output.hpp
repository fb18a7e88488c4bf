#pragma once
// A job's output (JobContext::set_output, schema 27): the JSON a handler returns, kept with
// the job's completed record. Pure checks, the C++ side of the schema's output_refusal().

#include <cstddef>
#include <string>

namespace oncely::detail {

/// The most JSON text a job's output may be: 64 KiB.
inline constexpr std::size_t kMaxOutputBytes = 65536;

/// Throws oncely::PermanentError, the output's refusal, when `bytes` of JSON are more than
/// the limit.
void check_output_size(std::size_t bytes);

/// `text` as a job's output, or oncely::PermanentError saying why it cannot be kept: too
/// large, not JSON, or not storable as jsonb (a NUL character, a number beyond a double's
/// range, which jsonb's numeric may not hold).
[[nodiscard]] std::string checked_output(std::string text);

/// A number for a one-line message: a long one (jsonb writes 1e400 as 401 digits) cut.
[[nodiscard]] std::string abbreviated_number(const std::string& number);

}  // namespace oncely::detail

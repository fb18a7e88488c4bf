#pragma once
// How the built-in handlers classify what went wrong: pure tables, unit-tested on their own.
// Each is defined next to the handler that uses it.

#include <chrono>
#include <ctime>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "execution/retry_policy.hpp"

namespace oncely::detail {

/// sql: SQLSTATE classes 22 (data), 23 (constraint) and 42 (syntax, access) are
/// permanent; 57014 (query_canceled: statement_timeout) is a timeout; 25006
/// (read_only_sql_transaction: the server is a standby or a demoted primary) is a lost
/// connection (the worker reconnects, to the writable server); everything else,
/// including 40001 serialization_failure, 40P01 deadlock_detected, 55P03
/// lock_not_available and 08xxx connection exceptions, is retryable.
FailureClass sql_failure_class(std::string_view sqlstate);

/// exec: a non-zero exit status. 64 (EX_USAGE) and 65 (EX_DATAERR) are permanent, the
/// rest retryable.
FailureClass exit_failure_class(int exit_status);

/// http: a response status that is not 2xx. 408, 429 and 5xx are retryable; the rest
/// (other 4xx, 3xx since redirects are not followed, 1xx) permanent.
FailureClass http_failure_class(long status);

/// http: the delay a Retry-After header value asks for, in delta-seconds ("120") or as an
/// HTTP date ("Wed, 21 Oct 2015 07:28:00 GMT", relative to `now`; a past date is 0).
/// Capped at kMaxRetryAfter. Empty for a value that is neither.
std::optional<std::chrono::milliseconds> parse_retry_after(std::string_view value, std::time_t now);

/// A server cannot park a job for longer than this with Retry-After.
inline constexpr std::chrono::hours kMaxRetryAfter{24};

/// http: what of a failed response's body the handler keeps, scrubbed of `secrets` (see
/// mask_secrets): `message`, one line of at most kResponseMessageBytes for the error
/// message, and `detail`, the first kResponseDetailBytes for the error detail.
struct ResponseExcerpt {
  std::string message;
  std::string detail;
};
inline constexpr std::size_t kResponseMessageBytes = 200;
inline constexpr std::size_t kResponseDetailBytes = 2048;

/// How much of a body to read for response_excerpt(): the detail's bytes and the longest
/// secret's, so that a secret the detail's cut goes through is still whole when scrubbed
/// (and none of it is kept).
std::size_t response_bytes_to_keep(const std::vector<std::string>& secrets);

/// `body_head`: the first response_bytes_to_keep(secrets) bytes of the body (or all of it).
ResponseExcerpt response_excerpt(std::string_view body_head, const std::vector<std::string>& secrets);

}  // namespace oncely::detail

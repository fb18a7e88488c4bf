// The `http` handler type: POSTs each job's payload to a declared URL (libcurl).
//
//   {"type": "http", "url": "http://127.0.0.1:8080/hooks/crm", "timeout": "10s",
//    "headers": {"Authorization": "Bearer ${CRM_TOKEN}"}}
//
// The URL comes only from the configuration. Each request carries the job's idempotency
// key as `Idempotency-Key`, so the receiver can deduplicate the redeliveries that
// at-least-once delivery implies. 2xx completes the job; 408, 429, 5xx, timeouts and
// connection errors retry it (Retry-After honoured); anything else dead-letters it.
#include <curl/curl.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <ctime>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "execution/job_output.hpp"
#include "execution/retry_policy.hpp"
#include "handlers/classification.hpp"
#include "handlers/declaration.hpp"
#include "oncely/errors.hpp"
#include "oncely/job_context.hpp"
#include "support/curl_handles.hpp"
#include "support/duration.hpp"
#include "support/exact_json.hpp"
#include "support/text.hpp"

namespace oncely::detail {
namespace {

struct HttpHandler {
  std::string url;
  std::string display_url;  // without user info, query and fragment: safe for logs and messages
  std::optional<std::chrono::milliseconds> timeout;  // absent: the job's deadline alone
  std::vector<std::string> headers;                  // "Name: value" lines, ${NAME} already substituted
  bool own_content_type = false;                     // the declaration sets Content-Type (e.g. a vendor JSON type)
  bool keep_output = false;                          // "output": "json": a 2xx response's body is the job's output
  // What a server may echo back and must not be stored: the values substituted into the
  // headers, and the URL's password and query.
  std::vector<std::string> secrets;

  void operator()(JobContext& job) const;
};

// An easy handle is not thread-safe and keeps its connections alive between requests, so
// each worker thread has its own, reused for every http job the thread runs.
CURL* thread_handle() {
  thread_local std::unique_ptr<CURL, EasyDeleter> handle;
  if (!handle) handle.reset(curl_easy_init());
  if (!handle) throw HandlerError(FailureClass::retryable, "curl_easy_init failed");
  return handle.get();
}

std::optional<std::string> url_part(CURLU* url, CURLUPart part) {
  char* text = nullptr;
  if (curl_url_get(url, part, &text, 0) != CURLUE_OK || text == nullptr) return std::nullopt;
  const std::unique_ptr<char, CurlStringDeleter> owned(text);
  return std::string(text);
}

// Checks the URL and returns its printable form (credentials and query removed).
std::string check_url(const std::string& url, const std::string& at) {
  const std::unique_ptr<CURLU, CurlUrlDeleter> parsed(curl_url());
  if (!parsed) throw Error("curl_url failed");
  if (curl_url_set(parsed.get(), CURLUPART_URL, url.c_str(), 0) != CURLUE_OK) {
    throw ConfigError(at, "'" + printable(url) + "' is not a valid URL");
  }
  std::string scheme = url_part(parsed.get(), CURLUPART_SCHEME).value_or("");
  std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](unsigned char c) { return std::tolower(c); });
  if (scheme != "http" && scheme != "https") throw ConfigError(at, "must be an http:// or https:// URL");
  if (url_part(parsed.get(), CURLUPART_HOST).value_or("").empty()) throw ConfigError(at, "must name a host");
  for (const CURLUPart part :
       {CURLUPART_USER, CURLUPART_PASSWORD, CURLUPART_OPTIONS, CURLUPART_QUERY, CURLUPART_FRAGMENT}) {
    curl_url_set(parsed.get(), part, nullptr, 0);
  }
  return url_part(parsed.get(), CURLUPART_URL).value_or("(url)");
}

// The URL's password and query string (API keys live there), for mask_secrets.
std::vector<std::string> url_secrets(const std::string& url) {
  std::vector<std::string> secrets;
  const std::unique_ptr<CURLU, CurlUrlDeleter> parsed(curl_url());
  if (!parsed || curl_url_set(parsed.get(), CURLUPART_URL, url.c_str(), 0) != CURLUE_OK) return secrets;
  for (const CURLUPart part : {CURLUPART_PASSWORD, CURLUPART_QUERY}) {
    if (auto value = url_part(parsed.get(), part); value && !value->empty()) secrets.push_back(std::move(*value));
  }
  return secrets;
}

bool is_token(std::string_view name) {
  constexpr std::string_view kSpecials = "!#$%&'*+-.^_`|~";
  return !name.empty() && std::all_of(name.begin(), name.end(), [&](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || kSpecials.find(c) != std::string_view::npos;
  });
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::vector<std::string> check_headers(const nlohmann::json& headers, const std::string& at,
                                       std::vector<std::string>& secrets) {
  if (!headers.is_object()) throw ConfigError(at, "must be an object of header names to strings");
  std::vector<std::string> lines;
  for (const auto& [name, value] : headers.items()) {
    const std::string header_path = child_path(at, name);
    if (!is_token(name)) throw ConfigError(header_path, "is not a valid HTTP header name");
    if (iequals(name, "Idempotency-Key"))
      throw ConfigError(header_path, "is set by oncely to the job's idempotency key");
    if (iequals(name, "traceparent")) throw ConfigError(header_path, "is set by oncely to the attempt's trace context");
    if (iequals(name, "Oncely-Job-Id") || iequals(name, "Oncely-Lease-Token")) {
      throw ConfigError(header_path, "is set by oncely on a lease queue, for handler-side completion");
    }
    if (iequals(name, "Content-Length") || iequals(name, "Transfer-Encoding")) {
      throw ConfigError(header_path, "is set by libcurl");
    }
    const std::string text = substitute_env(string_at(value, header_path), header_path, &secrets);
    // CR or LF would end the header early: a value with a control character (but a tab) is never sent.
    if (has_control_character(text, /*tab_allowed=*/true)) {
      throw ConfigError(header_path, "must not contain control characters");
    }
    // "Name:" with nothing after it would make libcurl remove the header; "Name;" sends it empty.
    lines.push_back(text.empty() ? name + ";" : name + ": " + text);
  }
  return lines;
}

// The first `limit` bytes of a response body (response_bytes_to_keep), and its size.
struct BodyHead {
  std::string bytes;
  std::size_t limit = 0;
  std::size_t size = 0;
};

std::size_t keep_body_head(char* data, std::size_t size, std::size_t count, void* user) {
  auto* head = static_cast<BodyHead*>(user);
  const std::size_t n = size * count;
  head->size += n;
  if (head->bytes.size() < head->limit) head->bytes.append(data, std::min(n, head->limit - head->bytes.size()));
  return n;  // the rest is read and dropped
}

std::optional<std::chrono::milliseconds> retry_after_of(CURL* easy) {
  curl_header* header = nullptr;
  if (curl_easy_header(easy, "Retry-After", 0, CURLH_HEADER, -1, &header) != CURLHE_OK || header == nullptr) {
    return std::nullopt;
  }
  return parse_retry_after(header->value, std::time(nullptr));
}

// Options are reset when the call ends, so no pointer to this call's locals outlives it;
// connections and caches stay with the handle.
class ResetOnExit {
 public:
  explicit ResetOnExit(CURL* easy) : easy_(easy) {}
  ResetOnExit(const ResetOnExit&) = delete;
  ResetOnExit& operator=(const ResetOnExit&) = delete;
  ~ResetOnExit() { curl_easy_reset(easy_); }

 private:
  CURL* easy_;
};

void HttpHandler::operator()(JobContext& job) const {
  const auto limit = time_left(timeout, job.deadline());
  if (limit <= std::chrono::milliseconds::zero()) {
    throw HandlerError(FailureClass::timeout, "no time left before the job's deadline to POST " + display_url,
                       {{"url", display_url}});
  }
  const std::string& key = job.idempotency_key();
  if (has_control_character(key, /*tab_allowed=*/true)) {
    throw HandlerError(FailureClass::permanent,
                       "the idempotency key contains a control character and cannot be sent as an HTTP header",
                       {{"url", display_url}});
  }

  std::unique_ptr<curl_slist, SlistDeleter> header_list;
  const auto add_header = [&](const std::string& line) {
    curl_slist* grown = curl_slist_append(header_list.get(), line.c_str());
    if (grown == nullptr) throw HandlerError(FailureClass::retryable, "out of memory building HTTP headers");
    static_cast<void>(header_list.release());
    header_list.reset(grown);
  };
  if (!own_content_type) add_header("Content-Type: application/json");
  add_header("Idempotency-Key: " + key);
  if (job.traceparent()) add_header("traceparent: " + *job.traceparent());  // the attempt's span (W3C Trace Context)
  // On a lease queue the receiver may complete the job itself, in its own transaction beside
  // its own writes (docs/protocol.md, "Handler-side completion").
  if (const auto token = job.lease_token()) {
    add_header("Oncely-Job-Id: " + std::to_string(job.id()));
    add_header("Oncely-Lease-Token: " + std::to_string(*token));
  }
  add_header("Expect:");  // no 100-continue round trip for larger bodies
  for (const std::string& line : headers) add_header(line);

  // From the payload's text: every number is posted exactly as the job holds it.
  const std::string body = exact_json::compact(job.payload_text());
  BodyHead response_head{{}, std::max(response_bytes_to_keep(secrets), keep_output ? kMaxOutputBytes : 0)};
  std::array<char, CURL_ERROR_SIZE> error{};

  CURL* easy = thread_handle();
  const ResetOnExit reset(easy);
  set_post(easy, url, body, header_list.get(), limit, "oncely", keep_body_head, &response_head, error.data(),
           abort_when_stopped, const_cast<std::stop_token*>(&job.stop_token()));

  const CURLcode rc = curl_easy_perform(easy);
  if (rc == CURLE_ABORTED_BY_CALLBACK) {
    throw HandlerError(FailureClass::retryable,
                       "POST " + display_url +
                           " aborted: the attempt was stopped (its lease was lost, or the worker is "
                           "shutting down)",
                       {{"url", display_url}, {"curl_code", static_cast<int>(rc)}});
  }
  if (rc != CURLE_OK) {
    const std::string reason = error[0] != '\0' ? std::string(error.data()) : curl_easy_strerror(rc);
    const FailureClass cls = rc == CURLE_OPERATION_TIMEDOUT ? FailureClass::timeout : FailureClass::retryable;
    std::string message = "POST " + display_url + " failed: " + mask_secrets(summary_line(reason), secrets);
    if (rc == CURLE_OPERATION_TIMEDOUT) message += " (limit " + format_duration(limit) + ")";
    throw HandlerError(cls, message,
                       {{"url", display_url},
                        {"curl_code", static_cast<int>(rc)},
                        {"curl_error", mask_secrets(sanitize_utf8(reason), secrets)}});
  }

  long status = 0;
  curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
  if (status >= 200 && status <= 299) {
    // Scrubbed as an error's excerpt is: a receiver that echoes its headers keeps no token.
    if (keep_output && response_head.size > 0) {
      check_output_size(response_head.size);
      job.set_output_text(mask_secrets(response_head.bytes, secrets));
    }
    return;
  }

  const FailureClass cls = http_failure_class(status);
  const auto retry_after = cls == FailureClass::retryable ? retry_after_of(easy) : std::nullopt;
  // A server that echoes the request (a 400 with its headers) must not put the token into
  // dead_letters or the log: what is kept of the response is scrubbed first.
  const ResponseExcerpt excerpt = response_excerpt(response_head.bytes, secrets);
  std::string message = "POST " + display_url + " returned HTTP " + std::to_string(status);
  if (!excerpt.message.empty()) message += ": " + excerpt.message;
  nlohmann::json detail = {{"url", display_url}, {"http_status", status}, {"body", excerpt.detail}};
  if (retry_after) detail["retry_after_ms"] = retry_after->count();
  throw HandlerError(cls, message, std::move(detail), retry_after);
}

}  // namespace

Handler make_http_handler(const nlohmann::json& declaration, const std::string& path) {
  check_keys(declaration, path, {"type", "url", "timeout", "headers", "output"});
  init_curl_once();
  HttpHandler handler;
  const std::string url_path = path + "/url";
  handler.url = string_at(required(declaration, path, "url", "where to POST the payload"), url_path, true);
  if (has_control_character(handler.url, /*tab_allowed=*/true)) {
    throw ConfigError(url_path, "must not contain control characters");
  }
  handler.display_url = check_url(handler.url, url_path);
  handler.secrets = url_secrets(handler.url);
  if (const auto it = declaration.find("timeout"); it != declaration.end()) {
    handler.timeout = positive_duration_at(*it, path + "/timeout");
  }
  if (const auto it = declaration.find("headers"); it != declaration.end()) {
    handler.headers = check_headers(*it, path + "/headers", handler.secrets);
    for (const auto& [name, value] : it->items()) handler.own_content_type |= iequals(name, "Content-Type");
  }
  if (const auto it = declaration.find("output"); it != declaration.end()) {
    if (string_at(*it, path + "/output") != "json") {
      throw ConfigError(path + "/output", "must be \"json\" (a 2xx response's JSON body is the job's output)");
    }
    handler.keep_output = true;
  }
  auto shared = std::make_shared<const HttpHandler>(std::move(handler));
  return [shared](JobContext& job) { (*shared)(job); };
}

}  // namespace oncely::detail

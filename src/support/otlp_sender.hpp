#pragma once
// One OTLP/HTTP POST (JSON) at a time, on a libcurl handle kept, with its connection,
// between POSTs: what the span and the metric exporters send with. Not thread-safe: each
// exporter thread has its own.

#include <chrono>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

namespace oncely::detail {

class OtlpSender {
 public:
  /// `url`: where to POST; `headers`: sent with each (may hold API keys: never in a message).
  OtlpSender(std::string url, const std::vector<std::pair<std::string, std::string>>& headers,
             std::chrono::milliseconds timeout);
  ~OtlpSender();
  OtlpSender(const OtlpSender&) = delete;
  OtlpSender& operator=(const OtlpSender&) = delete;

  /// POSTs `body`; none when the receiver took it (2xx), else why not, one line without the
  /// URL's secrets. Abandoned when `stop` is requested.
  [[nodiscard]] std::optional<std::string> post(const std::string& body, std::stop_token stop);
  [[nodiscard]] const std::string& url() const noexcept { return url_; }

 private:
  struct Handles;
  std::string url_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Handles> handles_;
};

}  // namespace oncely::detail

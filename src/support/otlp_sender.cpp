#include "support/otlp_sender.hpp"

#include <algorithm>
#include <array>

#include "support/curl_handles.hpp"
#include "support/otel_settings.hpp"
#include "support/text.hpp"

namespace oncely::detail {
namespace {

std::size_t keep_head(char* data, std::size_t size, std::size_t count, void* out) {
  auto* head = static_cast<std::string*>(out);
  const std::size_t n = size * count;
  if (head->size() < 200) head->append(data, std::min(n, 200 - head->size()));
  return n;
}

}  // namespace

struct OtlpSender::Handles {
  std::unique_ptr<CURL, EasyDeleter> easy;
  std::unique_ptr<curl_slist, SlistDeleter> headers;
};

OtlpSender::OtlpSender(std::string url, const std::vector<std::pair<std::string, std::string>>& headers,
                       std::chrono::milliseconds timeout)
    : url_(std::move(url)), timeout_(timeout), handles_(std::make_unique<Handles>()) {
  init_curl_once();
  handles_->easy.reset(curl_easy_init());
  if (!handles_->easy) throw Error("curl_easy_init failed");
  const auto add = [&](const std::string& line) {
    curl_slist* grown = curl_slist_append(handles_->headers.get(), line.c_str());
    if (grown == nullptr) throw Error("curl_slist_append failed");
    static_cast<void>(handles_->headers.release());  // grown is the same list, one longer
    handles_->headers.reset(grown);
  };
  add("Content-Type: application/json");
  // No "Expect: 100-continue" (libcurl's default for a large POST): a receiver that does not
  // answer it (HTTP/1.0, many small collectors) costs a second of waiting per export.
  add("Expect:");
  for (const auto& [name, value] : headers) add(name + ": " + value);
}

OtlpSender::~OtlpSender() = default;

std::optional<std::string> OtlpSender::post(const std::string& body, std::stop_token stop) {
  CURL* e = handles_->easy.get();
  std::string response_head;
  std::array<char, CURL_ERROR_SIZE> error{};
  curl_easy_reset(e);
  set_post(e, url_, body, handles_->headers.get(), timeout_, "oncely/" ONCELY_VERSION, keep_head, &response_head,
           error.data(), abort_when_stopped, &stop);
  const CURLcode rc = curl_easy_perform(e);
  if (rc != CURLE_OK) {
    // curl's message may name the URL: the part without user info and query only.
    std::string why = error[0] != 0 ? error.data() : curl_easy_strerror(rc);
    replace_all(why, url_, display_url(url_));
    return summary_line(why, 200);
  }
  long status = 0;
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
  if (status >= 200 && status < 300) return std::nullopt;
  return "HTTP " + std::to_string(status) + (response_head.empty() ? "" : ": " + summary_line(response_head, 120));
}

}  // namespace oncely::detail

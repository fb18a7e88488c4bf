#pragma once
// libcurl's handles as unique_ptrs, and its one global initialisation: shared by the http
// handler and the OTLP exporter.

#include <curl/curl.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <string_view>

#include "oncely/errors.hpp"

namespace oncely::detail {

struct CurlUrlDeleter {
  void operator()(CURLU* url) const noexcept { curl_url_cleanup(url); }
};
struct CurlStringDeleter {
  void operator()(char* text) const noexcept { curl_free(text); }
};
struct EasyDeleter {
  void operator()(CURL* easy) const noexcept { curl_easy_cleanup(easy); }
};
struct SlistDeleter {
  void operator()(curl_slist* list) const noexcept { curl_slist_free_all(list); }
};

/// A transfer-progress callback whose data is a std::stop_token: libcurl asks it at least once
/// a second, and a stopped request (an attempt whose lease was lost, a shutdown) aborts then.
inline int abort_when_stopped(void* stop, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  return static_cast<const std::stop_token*>(stop)->stop_requested() ? 1 : 0;
}

/// Sets up `easy` (freshly reset) for one POST of `body` to `url` with `headers`, within
/// `timeout` (to connect, and in all), no redirects, no signals (threads), its response
/// written to `write(…, write_data)`, curl's message into `error` (CURL_ERROR_SIZE bytes),
/// and `progress(progress_data, …)` asked at least once a second whether to abort.
inline void set_post(CURL* easy, const std::string& url, std::string_view body, curl_slist* headers,
                     std::chrono::milliseconds timeout, const char* user_agent, curl_write_callback write,
                     void* write_data, char* error, curl_xferinfo_callback progress, void* progress_data) {
  curl_easy_setopt(easy, CURLOPT_URL, url.c_str());
  curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(easy, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM for DNS timeouts: we have threads
  curl_easy_setopt(easy, CURLOPT_POST, 1L);
  curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(easy, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(easy, CURLOPT_USERAGENT, user_agent);
  curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, write);
  curl_easy_setopt(easy, CURLOPT_WRITEDATA, write_data);
  curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(easy, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(easy, CURLOPT_XFERINFOFUNCTION, progress);
  curl_easy_setopt(easy, CURLOPT_XFERINFODATA, progress_data);
}

inline void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Never cleaned up: handles live in worker threads until the process ends.
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw Error("libcurl could not be initialised");
  });
}

}  // namespace oncely::detail

#pragma once
// libcurl's handles as unique_ptrs, and its one global initialisation: shared by the http
// handler and the OTLP exporter.

#include <curl/curl.h>

#include <memory>
#include <mutex>

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

inline void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Never cleaned up: handles live in worker threads until the process ends.
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) throw Error("libcurl could not be initialised");
  });
}

}  // namespace oncely::detail

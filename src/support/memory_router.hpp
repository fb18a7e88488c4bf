#pragma once
// MemoryRouter: httplib's request parsing, routing and response writing, without its
// sockets and threads. bounded_http_server.cpp reads each request whole from its socket
// and hands it over as bytes; the response comes back as bytes, for it to send.

#include <httplib.h>

#include <string>
#include <string_view>

namespace oncely::detail {

class MemoryRouter final : public httplib::Server {
 public:
  /// The whole response (always with "Connection: close") to one complete request;
  /// httplib's own answers for a malformed one (400, 413, ...). A handler's exception
  /// goes to the exception handler set; should that throw too, the answer is a bare 500.
  /// Thread-safe once the routes are set, as httplib's own pool runs its handlers.
  [[nodiscard]] std::string respond(std::string_view request) noexcept;
};

}  // namespace oncely::detail

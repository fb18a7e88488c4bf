#pragma once
// Where an HTTP/1.1 request read so far ends, for the endpoints that read requests
// themselves before httplib parses them from memory (bounded_http_server.hpp). Pure
// (tests/unit/http_framing_test.cpp).
//
// A request is complete when its header (the blank line) has come and then as many body
// bytes as its Content-Length says. A body without a Content-Length (chunked) or beyond
// the endpoint's limit is not waited for: the request is handed over at its header's end
// and httplib answers it (400, 413), so no client holds a connection by promising a body.

#include <cstddef>
#include <string_view>

namespace oncely::detail {

struct RequestExtent {
  enum class Kind {
    incomplete,        // wait for more bytes
    complete,          // the first `size` bytes are the request: answer it
    header_too_large,  // no header's end within the limit: close the connection
  };
  Kind kind = Kind::incomplete;
  std::size_t size = 0;
};

/// How much of `in` (the bytes a connection sent so far) is its request. A header longer
/// than `max_header` bytes (the blank line included) is too large; a body is waited for
/// only when its Content-Length is at most `max_body`.
[[nodiscard]] RequestExtent request_extent(std::string_view in, std::size_t max_header, std::size_t max_body) noexcept;

}  // namespace oncely::detail

#include <doctest/doctest.h>

#include <string>

#include "support/http_framing.hpp"

using oncely::detail::request_extent;
using Kind = oncely::detail::RequestExtent::Kind;

TEST_CASE("http_framing: a request ends at its header's blank line, or after its Content-Length body") {
  const std::string get = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
  CHECK(request_extent(get, 8192, 0).kind == Kind::complete);
  CHECK(request_extent(get, 8192, 0).size == get.size());
  CHECK(request_extent(get.substr(0, get.size() - 1), 8192, 0).kind == Kind::incomplete);
  CHECK(request_extent("GET / HTTP/1.0\n\n", 8192, 0).size == 16);  // bare LFs

  const std::string post = "POST /login HTTP/1.1\r\ncontent-LENGTH:  11 \r\n\r\n";
  CHECK(request_extent(post + "token=abcd", 8192, 1024).kind == Kind::incomplete);
  CHECK(request_extent(post + "token=abcde", 8192, 1024).size == post.size() + 11);
  // What follows the body (a second, pipelined request) is not part of it.
  CHECK(request_extent(post + "token=abcdeGET / HTTP/1.1\r\n\r\n", 8192, 1024).size == post.size() + 11);
}

TEST_CASE("http_framing: a body that cannot be waited for is not: the header alone goes to httplib") {
  const std::string big = "POST /x HTTP/1.1\r\nContent-Length: 1025\r\n\r\n";
  CHECK(request_extent(big, 8192, 1024).kind == Kind::complete);  // httplib answers 413
  CHECK(request_extent(big, 8192, 1024).size == big.size());
  const std::string chunked = "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n";
  CHECK(request_extent(chunked, 8192, 1024).size == chunked.size() - 3);
  for (const std::string length : {"12a", "-1", "", "99999999999999999999", "1, 1"}) {
    CAPTURE(length);
    const std::string odd = "POST /x HTTP/1.1\r\nContent-Length: " + length + "\r\n\r\n";
    CHECK(request_extent(odd, 8192, 1024).size == odd.size());
  }
  const std::string twice = "POST /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n";
  CHECK(request_extent(twice, 8192, 1024).size == twice.size());
}

TEST_CASE("http_framing: no header's end within the limit is too large; a trickle below it is incomplete") {
  const std::string start = "GET / HTTP/1.1\r\nX-Slow: ";
  CHECK(request_extent(start + std::string(100, 'a'), 8192, 0).kind == Kind::incomplete);
  CHECK(request_extent(start + std::string(8192, 'a'), 8192, 0).kind == Kind::header_too_large);
  // The blank line just past the limit is past it.
  const std::string just_over = start + std::string(8192 - start.size() - 3, 'a') + "\r\n\r\n";
  CHECK(request_extent(just_over, 8192, 0).kind == Kind::header_too_large);
  const std::string just_in = start + std::string(8192 - start.size() - 4, 'a') + "\r\n\r\n";
  CHECK(request_extent(just_in, 8192, 0).kind == Kind::complete);
}

#include "support/memory_router.hpp"

#include <algorithm>
#include <cstring>

namespace oncely::detail {
namespace {

constexpr std::string_view kFailed =
    "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

// A request already read, and the response httplib writes, in memory.
class MemoryStream final : public httplib::Stream {
 public:
  explicit MemoryStream(std::string_view request) : request_(request) {}
  bool is_readable() const override { return true; }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    const std::size_t n = std::min(size, request_.size() - position_);
    std::memcpy(ptr, request_.data() + position_, n);
    position_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    response_.append(ptr, size);
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string&, int&) const override {}
  void get_local_ip_and_port(std::string&, int&) const override {}
  // No socket: httplib must not select() on one (it refuses fds >= FD_SETSIZE anyway).
  socket_t socket() const override { return INVALID_SOCKET; }
  std::string take_response() { return std::move(response_); }

 private:
  std::string_view request_;
  std::size_t position_ = 0;
  std::string response_;
};

}  // namespace

std::string MemoryRouter::respond(std::string_view request) noexcept {
  try {
    MemoryStream stream(request);
    bool closed = false;
    process_request(stream, /*close_connection=*/true, closed, {});
    return stream.take_response();
  } catch (...) {  // out of memory, or an exception handler that threw
    return std::string(kFailed);
  }
}

}  // namespace oncely::detail

// LineReader: the lines of `oncely enqueue -` as they arrive (support/stdin_lines.hpp).
#include "support/stdin_lines.hpp"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "oncely/errors.hpp"

namespace oncely::detail {

LineReader::LineReader(int fd) : fd_(fd), buffer_(kChunk, '\0') {}

bool LineReader::ready() {
  if (eof_ || has_line()) return true;
  pollfd p{fd_, POLLIN, 0};
  while (true) {
    const int n = ::poll(&p, 1, 0);
    if (n >= 0) return n > 0;
    if (errno != EINTR) throw Error(std::string("reading the input failed: ") + std::strerror(errno));
  }
}

bool LineReader::next(std::string_view& line) {
  while (true) {
    if (has_line()) {
      line = std::string_view(buffer_.data() + begin_, scanned_ - begin_);
      begin_ = scanned_ + 1;
      scanned_ = begin_;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      return true;
    }
    if (eof_) {
      if (begin_ >= end_) return false;
      line = std::string_view(buffer_.data() + begin_, end_ - begin_);
      begin_ = scanned_ = end_;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      return true;
    }
    fill();
  }
}

/// Whether [begin_, end_) holds a newline; leaves scanned_ on it (or at end_), so a long
/// line arriving in pieces is scanned once.
bool LineReader::has_line() {
  const void* nl = scanned_ < end_ ? std::memchr(buffer_.data() + scanned_, '\n', end_ - scanned_) : nullptr;
  scanned_ = nl ? static_cast<std::size_t>(static_cast<const char*>(nl) - buffer_.data()) : end_;
  return nl != nullptr;
}

/// One read(2): blocks until the producer writes something or closes its end.
void LineReader::fill() {
  if (begin_ > 0 && buffer_.size() - end_ < kChunk / 2) {  // make room: drop consumed lines
    std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    scanned_ -= begin_;
    begin_ = 0;
  }
  if (buffer_.size() - end_ < kChunk / 2) buffer_.resize(buffer_.size() * 2);  // one very long line
  while (true) {
    const ssize_t got = ::read(fd_, buffer_.data() + end_, buffer_.size() - end_);
    if (got > 0) {
      end_ += static_cast<std::size_t>(got);
      return;
    }
    if (got == 0) {
      eof_ = true;
      return;
    }
    if (errno != EINTR) throw Error(std::string("reading the input failed: ") + std::strerror(errno));
  }
}

}  // namespace oncely::detail

#pragma once
// The lines of `oncely enqueue -`, read from a file descriptor as they arrive. In support/
// because the library reads the descriptor (detail::bulk_enqueue takes an fd), and reading
// lines needs nothing above the C library.

#include <cstddef>
#include <string>
#include <string_view>

namespace oncely::detail {

/// Reads lines from a file descriptor with read(2), which returns what has arrived (a pipe
/// gives what its writer has written so far), and copies nothing per line. A returned view
/// is valid until the next call of next(). A line ends at '\n'; a '\r' before it is
/// dropped, and so is the newline of the last line (which may have none). Throws Error
/// ("reading the input failed: ...") when read(2) or poll(2) fails.
class LineReader {
 public:
  /// Reads `fd`, which stays the caller's (it is not closed).
  explicit LineReader(int fd);

  /// Whether next() can return without waiting for the producer: a whole line is buffered,
  /// the input has ended, or the descriptor has data (or its end) ready (poll(2), no wait).
  bool ready();

  /// The next line into `line`; false at the end of the input.
  bool next(std::string_view& line);

 private:
  static constexpr std::size_t kChunk = 1 << 20;

  bool has_line();
  void fill();

  int fd_;
  std::string buffer_;  // [begin_, end_) is unread input
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
  std::size_t scanned_ = 0;  // no newline in [begin_, scanned_)
  bool eof_ = false;
};

}  // namespace oncely::detail

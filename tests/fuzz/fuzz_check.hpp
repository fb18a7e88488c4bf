#pragma once
// What every fuzz target shares: an invariant that fails prints what it expected and the
// input (escaped) and aborts, so libFuzzer saves the input as a crash artifact.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace oncely::fuzz {

/// `text` with every byte outside printable ASCII as \xNN: an input on one line of stderr.
inline std::string escaped(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f && c != '\\') {
      out += c;
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", u);
      out += hex;
    }
  }
  return out;
}

[[noreturn]] inline void fail(const char* invariant, std::string_view input, std::string_view got, const char* file,
                              int line) {
  std::fprintf(stderr, "%s:%d: invariant failed: %s\n  input: \"%s\"\n  got:   \"%s\"\n", file, line, invariant,
               escaped(input).c_str(), escaped(got).c_str());
  std::abort();
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace oncely::fuzz

/// FUZZ_CHECK(condition, input, got): aborts naming the condition, the input and what came out.
#define FUZZ_CHECK(cond, input, got)                                              \
  do {                                                                            \
    if (!(cond)) ::oncely::fuzz::fail(#cond, (input), (got), __FILE__, __LINE__); \
  } while (0)

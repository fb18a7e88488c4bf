// Database URLs and key=value strings: redacted() must never contain the password libpq
// would send, and scrub() must take it out of any message.
//
// The password is known exactly through libpq itself. An input may hold the placeholder
// byte \x01 (once); the target builds the string twice, with the placeholder replaced by two
// different secrets, and parses both with PQconninfoParse. When the two differ in their
// password only (the placeholder sits in the password and nowhere else that matters),
// the redacted forms must be identical (nothing of the secret shows) and free of the
// secret, and scrub() must remove the password libpq found from a message around it.
#include <libpq-fe.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "fuzz_check.hpp"
#include "oncely/database_url.hpp"

namespace {

constexpr char kPlaceholder = '\x01';
constexpr std::string_view kSecretA = "Zq9SecretA";
constexpr std::string_view kSecretB = "Xw4HiddenB";

struct OptionsDeleter {
  void operator()(PQconninfoOption* options) const noexcept { PQconninfoFree(options); }
};

/// libpq's reading of a connection string: keyword -> value (set ones only); none when
/// libpq refuses it.
std::optional<std::map<std::string, std::string>> libpq_options(const std::string& conninfo) {
  char* error = nullptr;
  const std::unique_ptr<PQconninfoOption, OptionsDeleter> options(PQconninfoParse(conninfo.c_str(), &error));
  if (error != nullptr) PQfreemem(error);
  if (!options) return std::nullopt;
  std::map<std::string, std::string> out;
  for (const PQconninfoOption* o = options.get(); o->keyword != nullptr; ++o) {
    if (o->val != nullptr) out[o->keyword] = o->val;
  }
  return out;
}

std::string with_secret(std::string_view text, std::string_view secret) {
  std::string out;
  for (const char c : text) {
    if (c == kPlaceholder)
      out += secret;
    else
      out += c;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input = oncely::fuzz::as_text(data, size);
  {
    // Whatever the bytes: no crash, no exception.
    const oncely::DatabaseUrl url{std::string(input)};
    const std::string redacted = url.redacted();
    static_cast<void>(url.scrub(std::string(input)));
    static_cast<void>(url.scrub(redacted));
  }
  // libpq reads a C string: a NUL ends it there, and so the connection string.
  // One placeholder: were there two, one could sit in a value a later one overrides
  // (port=..\x01.. port=5432), which is not a secret, nor compared below.
  const std::size_t placeholder = input.find(kPlaceholder);
  if (input.find('\0') != std::string_view::npos || placeholder == std::string_view::npos ||
      input.find(kPlaceholder, placeholder + 1) != std::string_view::npos) {
    return 0;
  }
  // The secrets' text written out (libFuzzer learns it from the comparisons) is not a secret.
  if (input.find(kSecretA) != std::string_view::npos || input.find(kSecretB) != std::string_view::npos) return 0;

  const std::string a = with_secret(input, kSecretA), b = with_secret(input, kSecretB);
  auto options_a = libpq_options(a), options_b = libpq_options(b);
  if (!options_a || !options_b) return 0;
  const std::string password_a = (*options_a)["password"], password_b = (*options_b)["password"];
  if (password_a == password_b) return 0;  // the placeholder is not (only) in the effective password
  options_a->erase("password");
  options_b->erase("password");
  if (*options_a != *options_b) return 0;  // it is elsewhere too (the user name, say)

  const oncely::DatabaseUrl url_a(a), url_b(b);
  const std::string redacted_a = url_a.redacted(), redacted_b = url_b.redacted();
  FUZZ_CHECK(redacted_a.find(kSecretA) == std::string::npos, a, redacted_a);
  FUZZ_CHECK(redacted_a == redacted_b, a, redacted_a + " vs " + redacted_b);
  const std::string message = "FATAL: password " + password_a + " refused for " + a + " (" + password_a + ")";
  const std::string scrubbed = url_a.scrub(message);
  FUZZ_CHECK(scrubbed.find(kSecretA) == std::string::npos, a, scrubbed);
  return 0;
}

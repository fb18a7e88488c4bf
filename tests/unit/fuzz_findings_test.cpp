// Regression tests for what the fuzz targets (tests/fuzz) found: each input as it was
// found (or reduced), at the unit that was wrong.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "handlers/classification.hpp"
#include "oncely/database_url.hpp"

using oncely::DatabaseUrl;

TEST_CASE("fuzz findings: a query parameter whose name is percent-encoded is a password to libpq, and is masked") {
  // libpq decodes the names of URL parameters: ?%70assword= sets the password.
  CHECK(DatabaseUrl("postgresql://h/db?%70assword=Zq9SecretA").redacted() == "postgresql://h/db?%70assword=***");
  CHECK(DatabaseUrl("postgresql://u@h/db?sslmode=require&pass%77ord=Zq9SecretA&application_name=x").redacted() ==
        "postgresql://u@h/db?sslmode=require&pass%77ord=***&application_name=x");
  CHECK(DatabaseUrl("postgresql://h/db?%70assword=Zq9SecretA").scrub("password Zq9SecretA refused") ==
        "password *** refused");
}

TEST_CASE("fuzz findings: scrub removes every password a string gives, decoded, not only the first") {
  // libpq sends the last one (the query's over the user info's, the last key=value).
  CHECK(DatabaseUrl("postgresql://u:first@h/db?password=%41Zq9SecretA").scrub("password AZq9SecretA refused") ==
        "password *** refused");
  CHECK(DatabaseUrl("host=h password=first password='Zq9 SecretA'").scrub("password Zq9 SecretA refused") ==
        "password *** refused");
  CHECK(DatabaseUrl("host=h password=first password='Zq9 SecretA'").scrub("first") == "***");
}

TEST_CASE("fuzz findings: scrub removes the password libpq reads when the masked user info runs on to a later '@'") {
  // libpq ends the user info at the first '@'; the mask runs to the last one.
  const DatabaseUrl url("postgresql://app:Zq9SecretA@db1,db2 port=5(32,db.example:5@432/jobs");
  CHECK(url.redacted() == "postgresql://app:***@432/jobs");
  CHECK(url.scrub("FATAL: password Zq9SecretA refused") == "FATAL: password *** refused");
  CHECK(DatabaseUrl("postgresql://u:Zq9SecretA@h/db?application_name=a@b").scrub("(Zq9SecretA)") == "(***)");
}

TEST_CASE("fuzz findings: scrub masks a password that holds a shorter one whole") {
  // Masking "h" first left the rest of the second password visible around "***".
  const DatabaseUrl url("host=h password = h password = ssZq9SecretAsnihuire");
  CHECK(url.scrub("FATAL: password ssZq9SecretAsnihuire refused") == "FATAL: password *** refused");
}

TEST_CASE(
    "fuzz findings: what the http handler keeps of a body holds nothing of a secret the 2048-byte cut goes through") {
  using namespace oncely::detail;
  const std::vector<std::string> secrets{"CrmT0kenAcrossTheCut", "short"};
  const std::string body = std::string(2040, '.') + "CrmT0kenAcrossTheCut and the rest of the page";
  CHECK(response_bytes_to_keep(secrets) == 2048 + 20);
  const auto excerpt = response_excerpt(std::string_view(body).substr(0, response_bytes_to_keep(secrets)), secrets);
  CHECK(excerpt.detail.size() == 2048);
  CHECK(
      excerpt.detail.ends_with("***"
                               " and "));
  CHECK(excerpt.detail.find("CrmT0ken") == std::string::npos);
  CHECK(excerpt.message.size() == 203);  // 200 bytes and "…"
  CHECK(response_excerpt("a short body", secrets).message == "a *** body");
}

TEST_CASE("fuzz findings: a key=value password ending in a backslash is the one libpq reads, and is scrubbed") {
  // libpq drops a last backslash; the password was read with it, and its text stayed.
  const DatabaseUrl url("password=Zq9SecretA'dbne=e\\");
  CHECK(url.scrub("FATAL: password Zq9SecretA'dbne=e refused") == "FATAL: password *** refused");
  CHECK(url.redacted() == "password=***");
}

TEST_CASE("fuzz findings: a Retry-After date millions of years ahead waits the cap, not an overflowed delay") {
  // Capped after the conversion to milliseconds, the seconds overflowed (a negative delay).
  using namespace oncely::detail;
  constexpr std::time_t kNow = 1'790'000'000;
  // The fuzzer's input (UBSan saw its overflow), and one whose overflow ends negative.
  for (const char* date : {"Sun Nov  699999999 08:49:37 14", "Sun Nov  300000000 08:49:37 14"}) {
    CAPTURE(date);
    const auto delay = parse_retry_after(date, kNow);
    REQUIRE(delay.has_value());
    CHECK(*delay == std::chrono::milliseconds(kMaxRetryAfter));
  }
  CHECK(parse_retry_after("99999999999999999999999", kNow) == std::chrono::milliseconds(kMaxRetryAfter));
}

TEST_CASE("fuzz findings: the mark at the end of a cut message never completes a secret") {
  // The message was cut with "...": a secret of dots, or one ending in dots whose start the
  // cut left visible, then stood in the message whole though the body never held it.
  using namespace oncely::detail;
  for (const std::vector<std::string>& secrets : {std::vector<std::string>{"."}, std::vector<std::string>{"ab..."}}) {
    CAPTURE(secrets.front());
    const std::string body = std::string(198, 'x') + "ab" + std::string(300, 'y');
    const auto excerpt = response_excerpt(std::string_view(body).substr(0, response_bytes_to_keep(secrets)), secrets);
    CHECK(excerpt.message.size() == 203);  // 200 bytes and a 3-byte mark
    CHECK(excerpt.message.find(secrets.front()) == std::string::npos);
  }
}

// Regression tests for what the fuzz targets (tests/fuzz) found: each input as it was
// found (or reduced), at the unit that was wrong.
#include <doctest/doctest.h>

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

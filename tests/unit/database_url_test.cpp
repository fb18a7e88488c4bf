#include <doctest/doctest.h>

#include "db.hpp"
#include "oncely/database_url.hpp"

using oncely::DatabaseUrl;

TEST_CASE("database_url: redacted masks the password of a URL") {
  CHECK(DatabaseUrl("postgresql://app:s3cret@db.example:5432/jobs").redacted() ==
        "postgresql://app:***@db.example:5432/jobs");
  CHECK(DatabaseUrl("postgres://app:p%40ss@host/db?sslmode=require").redacted() ==
        "postgres://app:***@host/db?sslmode=require");
  SUBCASE("a password containing an unencoded @ is masked whole") {
    CHECK(DatabaseUrl("postgresql://app:p@ss@host/db").redacted() == "postgresql://app:***@host/db");
  }
  SUBCASE("a password in the query string") {
    CHECK(DatabaseUrl("postgresql://app@host/db?sslmode=disable&password=hunter2").redacted() ==
          "postgresql://app@host/db?sslmode=disable&password=***");
  }
  SUBCASE("nothing to mask") {
    CHECK(DatabaseUrl("postgresql://app@host:5432/db").redacted() == "postgresql://app@host:5432/db");
    CHECK(DatabaseUrl("postgresql:///db?host=/tmp").redacted() == "postgresql:///db?host=/tmp");
  }
}

TEST_CASE("database_url: redacted masks the password of a key=value string") {
  CHECK(DatabaseUrl("host=h user=u password=s3cret dbname=d").redacted() == "host=h user=u password=*** dbname=d");
  CHECK(DatabaseUrl("host=h password = 'with space' dbname=d").redacted() == "host=h password = *** dbname=d");
  CHECK(DatabaseUrl("host=h dbname=d").redacted() == "host=h dbname=d");
}

TEST_CASE("database_url: scrub removes the password from messages libpq or the server built") {
  const DatabaseUrl url("postgresql://app:p%40ss@host/db");
  CHECK(url.scrub("FATAL: password p@ss rejected for postgresql://app:p%40ss@host/db") ==
        "FATAL: password *** rejected for postgresql://app:***@host/db");
  const DatabaseUrl keyword("host=h password='a b'");
  CHECK(keyword.scrub("bad password a b") == "bad password ***");
}

TEST_CASE("database_url: one_line folds a multi-line message and scrubs it") {
  const DatabaseUrl url("postgresql://u:topsecret@127.0.0.1:1/db");
  const std::string folded = oncely::detail::one_line(
      url, "connection to server failed: Connection refused\n\tIs the server running (topsecret)?\n");
  CHECK(folded == "connection to server failed: Connection refused Is the server running (***)?");
}

#include <doctest/doctest.h>

#include "oncely/errors.hpp"
#include "support/pooler.hpp"
#include "support/scoped_env.hpp"

using oncely::detail::kPreparedStatementHint;
using oncely::detail::prepared_statements_allowed;
using oncely::detail::with_pooler_hint;
using oncely::test::ScopedEnv;

TEST_CASE("pooler: a prepared statement a pooler lost or kept gets the hint, once; other messages none") {
  const std::string exists = R"(ERROR:  prepared statement "oncely_enqueue" already exists)";
  const std::string hinted = with_pooler_hint(exists);
  CHECK(hinted == exists + " (" + std::string(kPreparedStatementHint) + ")");
  CHECK(with_pooler_hint(hinted) == hinted);
  CHECK(with_pooler_hint(R"(prepared statement "oncely_claim" does not exist)").find(kPreparedStatementHint) !=
        std::string::npos);
  CHECK(with_pooler_hint(R"(relation "oncely.jobs" does not exist)") == R"(relation "oncely.jobs" does not exist)");
  CHECK(kPreparedStatementHint.find("behind a transaction-mode pooler set prepared_statements: false") !=
        std::string::npos);
  CHECK(oncely::detail::is_prepared_statement_clash("42P05"));
  CHECK(oncely::detail::is_prepared_statement_clash("26000"));
  CHECK_FALSE(oncely::detail::is_prepared_statement_clash("42P01"));
}

TEST_CASE("pooler: ONCELY_PREPARED_STATEMENTS can only turn prepared statements off, and refuses other values") {
  {
    ScopedEnv unset("ONCELY_PREPARED_STATEMENTS", nullptr);
    CHECK(prepared_statements_allowed(true));
    CHECK_FALSE(prepared_statements_allowed(false));
  }
  for (const char* off : {"0", "false", "OFF", "no"}) {
    ScopedEnv env("ONCELY_PREPARED_STATEMENTS", off);
    CHECK_FALSE(prepared_statements_allowed(true));
  }
  for (const char* on : {"1", "true", "on", "YES", ""}) {
    ScopedEnv env("ONCELY_PREPARED_STATEMENTS", on);
    CHECK(prepared_statements_allowed(true));
    CHECK_FALSE(prepared_statements_allowed(false));
  }
  ScopedEnv bad("ONCELY_PREPARED_STATEMENTS", "maybe");
  CHECK_THROWS_WITH_AS(prepared_statements_allowed(true),
                       "ONCELY_PREPARED_STATEMENTS: must be 0 (no prepared statements) or 1, got 'maybe'",
                       oncely::ConfigError);
}

TEST_CASE("pooler: the pool is named as a pooler knows it, without the password") {
  CHECK(oncely::detail::pool_name(oncely::DatabaseUrl("postgresql://app:s3cret@bouncer:6432/shop")) ==
        "app@bouncer:6432/shop");
  CHECK(oncely::detail::pool_name(oncely::DatabaseUrl("host=db port=5433 dbname=x user=u password=p")) ==
        "u@db:5433/x");
}

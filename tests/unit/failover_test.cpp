// A read-only server (SQLSTATE 25006: a standby, or the old primary after a failover) and a
// closed connection are connection loss, never a job's failure: the worker drops the
// connection and reconnects (tests/failover.sh runs the real failover).
#include <doctest/doctest.h>

#include <stdexcept>

#include <pqxx/except>

#include "execution/retry_policy.hpp"
#include "handlers/classification.hpp"
#include "oncely/database_url.hpp"

using oncely::detail::classify;
using oncely::detail::FailureClass;
using oncely::detail::is_connection_loss;

TEST_CASE("failover: SQLSTATE 25006 is a lost connection, in every classification") {
  const pqxx::sql_error read_only("ERROR:  cannot execute INSERT in a read-only transaction\n", "INSERT ...", "25006");
  CHECK(is_connection_loss(read_only));
  CHECK(classify(std::make_exception_ptr(read_only)).cls == FailureClass::connection);
  CHECK(classify(std::make_exception_ptr(read_only)).detail.at("sqlstate") == "25006");
  CHECK(oncely::detail::sql_failure_class("25006") == FailureClass::connection);

  const pqxx::broken_connection closed("server closed the connection unexpectedly\n");
  CHECK(is_connection_loss(closed));
  CHECK(classify(std::make_exception_ptr(closed)).cls == FailureClass::connection);

  // Other server errors on a working connection are not.
  CHECK_FALSE(is_connection_loss(pqxx::sql_error("ERROR:  deadlock\n", "", "40P01")));
  CHECK_FALSE(is_connection_loss(pqxx::sql_error("ERROR:  not null\n", "", "23502")));
  CHECK_FALSE(is_connection_loss(std::runtime_error("handler failed")));
  CHECK(oncely::detail::sql_failure_class("25P02") == FailureClass::retryable);  // in_failed_sql_transaction
}

TEST_CASE("failover: a multi-host URL keeps its hosts and loses only its password") {
  const oncely::DatabaseUrl url(
      "postgresql://app:s3cr%40t@127.0.0.1:5432,127.0.0.1:5433/db?target_session_attrs=read-write&connect_timeout=3");
  CHECK(url.redacted() ==
        "postgresql://app:***@127.0.0.1:5432,127.0.0.1:5433/db?target_session_attrs=read-write&connect_timeout=3");
  CHECK(url.scrub("password authentication failed: s3cr@t") == "password authentication failed: ***");
  const oncely::DatabaseUrl bare("postgresql://127.0.0.1:5432,127.0.0.1:5433/db?target_session_attrs=read-write");
  CHECK(bare.redacted() == bare.expose());
  const oncely::DatabaseUrl keywords(
      "host=127.0.0.1,127.0.0.1 port=5432,5433 password='p w' target_session_attrs=read-write");
  CHECK(keywords.redacted() == "host=127.0.0.1,127.0.0.1 port=5432,5433 password=*** target_session_attrs=read-write");
}

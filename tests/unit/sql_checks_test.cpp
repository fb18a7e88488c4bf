// How `sql` handler errors are classified (issue 10, defect 6): every SQLSTATE of classes
// 22, 23 and 42 is permanent, however libpqxx 6.4 reports it.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <pqxx/except>

#include "handlers/classification.hpp"
#include "oncely/errors.hpp"
#include "retry_policy.hpp"

using oncely::detail::FailureClass;

TEST_SUITE("sql_checks") {

TEST_CASE("sql_checks: the SQLSTATE of every libpqxx 6.4 sql_error, including 42501 which it drops") {
  using oncely::detail::sqlstate_of;
  // As pqxx::result::ThrowSQLError (6.4.5) builds them: insufficient_privilege without its code.
  CHECK(sqlstate_of(pqxx::insufficient_privilege{"ERROR:  permission denied for table balances\n", "SELECT 1"}) ==
        "42501");
  CHECK(sqlstate_of(pqxx::syntax_error{"ERROR:  syntax error", "q", "42601"}) == "42601");
  CHECK(sqlstate_of(pqxx::undefined_table{"ERROR:  relation", "q", "42P01"}) == "42P01");
  CHECK(sqlstate_of(pqxx::unique_violation{"ERROR:  duplicate key", "q", "23505"}) == "23505");
  CHECK(sqlstate_of(pqxx::data_exception{"ERROR:  division by zero", "q", "22012"}) == "22012");
  CHECK(sqlstate_of(pqxx::sql_error{"ERROR:  other", "q", "42804"}) == "42804");
  CHECK(sqlstate_of(pqxx::sql_error{"no code", "q"}).empty());
  // A C++ handler's SQL error carries it in its detail too.
  const auto failure = oncely::detail::classify(
      std::make_exception_ptr(pqxx::insufficient_privilege{"ERROR:  permission denied for table balances\n", "q"}));
  CHECK(failure.detail["sqlstate"] == "42501");
}

TEST_CASE("sql_checks: classification by SQLSTATE class") {
  using oncely::detail::sql_failure_class;
  struct Row {
    const char* sqlstate;
    FailureClass cls;
  };
  for (const Row row : std::vector<Row>{
           // 22 data exception
           {"22000", FailureClass::permanent}, {"22001", FailureClass::permanent}, {"22003", FailureClass::permanent},
           {"22012", FailureClass::permanent}, {"22P02", FailureClass::permanent}, {"22023", FailureClass::permanent},
           // 23 integrity constraint violation
           {"23000", FailureClass::permanent}, {"23502", FailureClass::permanent}, {"23503", FailureClass::permanent},
           {"23505", FailureClass::permanent}, {"23514", FailureClass::permanent}, {"23P01", FailureClass::permanent},
           // 42 syntax error or access rule violation
           {"42000", FailureClass::permanent}, {"42501", FailureClass::permanent}, {"42601", FailureClass::permanent},
           {"42703", FailureClass::permanent}, {"42804", FailureClass::permanent}, {"42883", FailureClass::permanent},
           {"42P01", FailureClass::permanent}, {"42P18", FailureClass::permanent},
           // the statement timeout
           {"57014", FailureClass::timeout},
           // everything else may succeed later
           {"08006", FailureClass::retryable}, {"0A000", FailureClass::retryable}, {"25P02", FailureClass::retryable},
           {"2D000", FailureClass::retryable}, {"40001", FailureClass::retryable}, {"40P01", FailureClass::retryable},
           {"53100", FailureClass::retryable}, {"53300", FailureClass::retryable}, {"55P03", FailureClass::retryable},
           {"57P01", FailureClass::retryable}, {"58030", FailureClass::retryable}, {"P0001", FailureClass::retryable},
           {"XX000", FailureClass::retryable}, {"", FailureClass::retryable}}) {
    CAPTURE(row.sqlstate);
    CHECK(sql_failure_class(row.sqlstate) == row.cls);
  }
}

}  // TEST_SUITE

// What an `sql` handler's declaration may say: transaction
// control is refused at load, the protocol's parameter limit holds, expect_rows has one
// documented form, and every SQLSTATE of classes 22, 23 and 42 is permanent, however
// libpqxx 6.4 reports it.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <pqxx/except>

#include "execution/retry_policy.hpp"
#include "handlers/builtin_handlers.hpp"
#include "handlers/classification.hpp"
#include "handlers/sql_statement.hpp"
#include "oncely/errors.hpp"

using oncely::detail::FailureClass;

namespace {

// What build_builtin_handlers says about one sql handler "pay", or "(no error)".
std::string sql_error(const std::string& statement, nlohmann::json extra = nlohmann::json::object()) {
  nlohmann::json declaration = {{"type", "sql"}, {"statement", statement}};
  declaration.update(extra);
  try {
    oncely::detail::build_builtin_handlers({{"pay", declaration}}, true, nullptr);
  } catch (const oncely::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

nlohmann::json params(int n) {
  nlohmann::json list = nlohmann::json::array();
  for (int i = 1; i <= n; ++i) list.push_back("/p" + std::to_string(i));
  return list;
}

}  // namespace

TEST_SUITE("sql_checks") {
  TEST_CASE("sql_checks: transaction control in a handler's statement is refused at load, naming the handler") {
    struct Case {
      const char* statement;
      const char* command;
    };
    for (const Case c : std::vector<Case>{{"COMMIT", "COMMIT"},
                                          {"commit", "COMMIT"},
                                          {"Commit;", "COMMIT"},
                                          {"COMMIT AND CHAIN", "COMMIT"},
                                          {"  -- the batch is done\n  COMMIT", "COMMIT"},
                                          {"/* a /* nested */ comment */ commit work", "COMMIT"},
                                          {"END", "END"},
                                          {"end transaction", "END"},
                                          {"BEGIN", "BEGIN"},
                                          {"begin isolation level serializable", "BEGIN"},
                                          {"START TRANSACTION", "START"},
                                          {"ROLLBACK", "ROLLBACK"},
                                          {"rollback to savepoint a", "ROLLBACK"},
                                          {"ABORT", "ABORT"},
                                          {"SAVEPOINT a", "SAVEPOINT"},
                                          {"RELEASE SAVEPOINT a", "RELEASE"},
                                          {"release a", "RELEASE"},
                                          {"PREPARE TRANSACTION 'x'", "PREPARE TRANSACTION"},
                                          {"prepare\ttransaction 'x'", "PREPARE TRANSACTION"},
                                          {"COMMIT PREPARED 'x'", "COMMIT PREPARED"},
                                          {"rollback prepared 'x'", "ROLLBACK PREPARED"}}) {
      CAPTURE(c.statement);
      CHECK(sql_error(c.statement) == std::string("/handlers/pay/statement: must not control the transaction (") +
                                          c.command +
                                          "): it runs inside the batch's transaction, which only oncely ends");
    }
    // A second statement is refused as such, whatever it is.
    CHECK(sql_error("UPDATE t SET n = 1; COMMIT") ==
          "/handlers/pay/statement: must be a single SQL statement (parameters bind to one statement)");
  }

  TEST_CASE("sql_checks: the words commit, begin or end in literals, identifiers and comments are fine") {
    for (const char* statement :
         {"INSERT INTO t (note) VALUES ('commit')", "UPDATE commits SET n = 1",
          "UPDATE t SET committed_at = now(), state = 'END'", "SELECT \"commit\" FROM t", "SELECT 1 AS rollback",
          "-- COMMIT\nSELECT 1", "/* BEGIN */ SELECT 1", "SELECT $$COMMIT$$", "SELECT E'\\'COMMIT'",
          "DO $$BEGIN PERFORM 1; END$$", "WITH begin_rows AS (SELECT 1) SELECT * FROM begin_rows", "(SELECT 1)"}) {
      CAPTURE(statement);
      CHECK(sql_error(statement) == "(no error)");
    }
  }

  TEST_CASE("sql_checks: the statement scan names its first two words") {
    using oncely::detail::scan_statement;
    CHECK(scan_statement("  -- x\n /* y */ Update t SET a = 1").first_word == "UPDATE");
    CHECK(scan_statement("commit prepared 'x'").second_word == "PREPARED");
    CHECK(scan_statement("E'x'").first_word.empty());
    CHECK(scan_statement("$1").first_word.empty());
    CHECK(scan_statement("SELECT 'COMMIT'").second_word.empty());
  }

  TEST_CASE("sql_checks: more parameters than the protocol allows are refused at load") {
    CHECK(sql_error("SELECT $65536", {{"params", params(65536)}}) ==
          "/handlers/pay/statement: uses $65536, more than the 65535 parameters the protocol allows");
    CHECK(sql_error("SELECT $1000000") ==
          "/handlers/pay/statement: uses $1000000, more than the 65535 parameters the protocol allows");
    CHECK(sql_error("SELECT $65535", {{"params", params(65535)}}) == "(no error)");
  }

  TEST_CASE("sql_checks: expect_rows is a count or \"N+\"") {
    for (const nlohmann::json& good : {nlohmann::json(0), nlohmann::json(1), nlohmann::json(250), nlohmann::json("1+"),
                                       nlohmann::json("0+"), nlohmann::json("1000000000+")}) {
      CAPTURE(good.dump());
      CHECK(sql_error("UPDATE t SET n = 1", {{"expect_rows", good}}) == "(no error)");
    }
    const std::string bad_message =
        "/handlers/pay/expect_rows: must be a row count such as 1 (exactly one) or a string such as \"1+\" (at least "
        "one)";
    for (const nlohmann::json& bad :
         {nlohmann::json(-1), nlohmann::json(1.5), nlohmann::json("1"), nlohmann::json("+"), nlohmann::json("x+"),
          nlohmann::json(">=1"), nlohmann::json(true), nlohmann::json(nullptr), nlohmann::json("99999999999+"),
          nlohmann::json(1000000000000LL)}) {
      CAPTURE(bad.dump());
      CHECK(sql_error("UPDATE t SET n = 1", {{"expect_rows", bad}}) == bad_message);
    }
  }

  TEST_CASE("sql_checks: an sql handler comes with a start-up check") {
    const auto handlers =
        oncely::detail::build_builtin_handlers({{"pay", {{"type", "sql"}, {"statement", "SELECT 1"}}}}, true, nullptr);
    CHECK(static_cast<bool>(handlers.at("pay").options.startup_check));
    CHECK(handlers.at("pay").options.transaction_only);
  }

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
    for (const Row row : std::vector<Row>{// 22 data exception
                                          {"22000", FailureClass::permanent},
                                          {"22001", FailureClass::permanent},
                                          {"22003", FailureClass::permanent},
                                          {"22012", FailureClass::permanent},
                                          {"22P02", FailureClass::permanent},
                                          {"22023", FailureClass::permanent},
                                          // 23 integrity constraint violation
                                          {"23000", FailureClass::permanent},
                                          {"23502", FailureClass::permanent},
                                          {"23503", FailureClass::permanent},
                                          {"23505", FailureClass::permanent},
                                          {"23514", FailureClass::permanent},
                                          {"23P01", FailureClass::permanent},
                                          // 42 syntax error or access rule violation
                                          {"42000", FailureClass::permanent},
                                          {"42501", FailureClass::permanent},
                                          {"42601", FailureClass::permanent},
                                          {"42703", FailureClass::permanent},
                                          {"42804", FailureClass::permanent},
                                          {"42883", FailureClass::permanent},
                                          {"42P01", FailureClass::permanent},
                                          {"42P18", FailureClass::permanent},
                                          // the statement timeout
                                          {"57014", FailureClass::timeout},
                                          // everything else may succeed later
                                          {"08006", FailureClass::retryable},
                                          {"0A000", FailureClass::retryable},
                                          {"25P02", FailureClass::retryable},
                                          {"2D000", FailureClass::retryable},
                                          {"40001", FailureClass::retryable},
                                          {"40P01", FailureClass::retryable},
                                          {"53100", FailureClass::retryable},
                                          {"53300", FailureClass::retryable},
                                          {"55P03", FailureClass::retryable},
                                          {"57P01", FailureClass::retryable},
                                          {"58030", FailureClass::retryable},
                                          {"P0001", FailureClass::retryable},
                                          {"XX000", FailureClass::retryable},
                                          {"", FailureClass::retryable}}) {
      CAPTURE(row.sqlstate);
      CHECK(sql_failure_class(row.sqlstate) == row.cls);
    }
  }

}  // TEST_SUITE

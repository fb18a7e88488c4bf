// The built-in handler types without a database: strict validation of their declarations
// (every error names its JSON path), ${ENV} substitution, the classification tables, the
// statement scan, text sanitising, and the child-process runner.
#include <doctest/doctest.h>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <system_error>

#include "../support/temp_dir.hpp"
#include "handlers/builtin_handlers.hpp"
#include "handlers/classification.hpp"
#include "handlers/declaration.hpp"
#include "handlers/sql_statement.hpp"
#include "handlers/subprocess.hpp"
#include "oncely/errors.hpp"
#include "support/scoped_env.hpp"
#include "support/text.hpp"

using namespace std::chrono_literals;
using oncely::detail::FailureClass;
using oncely::test::TempDir;

namespace {

struct Problem {
  std::string path;
  std::string message;
};

// What build_builtin_handlers says about `handlers` (the config's "handlers" value).
Problem problem_with(const nlohmann::json& handlers) {
  try {
    oncely::detail::build_builtin_handlers(handlers, true, nullptr);
  } catch (const oncely::ConfigError& e) {
    return {e.path(), e.what()};
  }
  return {"(no error)", "(no error)"};
}

// The problem with one declaration, as kind "k".
Problem problem_with_handler(const nlohmann::json& declaration) { return problem_with({{"k", declaration}}); }

Problem problem_with_handler(const char* declaration_json) {
  return problem_with_handler(nlohmann::json::parse(declaration_json));
}

using oncely::test::ScopedEnv;

}  // namespace

TEST_SUITE("builtin_handlers") {
  TEST_CASE("builtin_handlers: valid declarations of each type build one handler per kind") {
    ScopedEnv token("ONCELY_UNIT_TOKEN", "t0ken");
    const auto handlers = oncely::detail::build_builtin_handlers(nlohmann::json::parse(R"json({
        "update_balance": {"type": "sql", "statement": "INSERT INTO b VALUES ($1, $2)", "params": ["/user_id", "/cents"]},
        "whole_payload": {"type": "sql", "statement": "SELECT $1::jsonb", "params": [""]},
        "no_params": {"type": "sql", "statement": "SELECT 1"},
        "remote": {"type": "sql", "statement": "SELECT dblink_exec('x', 'y')", "transaction_only": false},
        "send_email": {"type": "exec", "command": ["/bin/sh", "-c", "exit 0"], "timeout": "20s", "env": {"A": "b"}},
        "from_path": {"type": "exec", "command": ["sh"]},
        "notify_crm": {"type": "http", "url": "http://127.0.0.1:8080/hooks/crm", "timeout": "10s",
                       "headers": {"Authorization": "Bearer ${ONCELY_UNIT_TOKEN}", "X-Empty": ""}}
      })json"),
                                                                 true, nullptr);
    CHECK(handlers.size() == 7);
    for (const auto& [kind, handler] : handlers) {
      CHECK_MESSAGE(static_cast<bool>(handler.run), kind);
      // Only the sql type's effects are all inside the job's transaction.
      const bool sql = kind == "update_balance" || kind == "whole_payload" || kind == "no_params";
      CHECK_MESSAGE(handler.options.transaction_only == sql, kind);
    }
    CHECK(oncely::detail::build_builtin_handlers(nlohmann::json::object(), true, nullptr).empty());
    CHECK(oncely::detail::build_builtin_handlers(nullptr, true, nullptr).empty());
  }

  TEST_CASE("builtin_handlers: the shape of the handlers object and the type are checked") {
    CHECK(problem_with(nlohmann::json::array()).path == "/handlers");
    CHECK(problem_with({{"k", "sql"}}).message == "/handlers/k: must be an object");
    CHECK(problem_with_handler(R"({"statement": "SELECT 1"})").message ==
          "/handlers/k/type: is required (sql, exec or http)");
    CHECK(problem_with_handler(R"({"type": 5})").message == "/handlers/k/type: must be a string");
    const Problem unknown = problem_with_handler(R"({"type": "x"})");
    CHECK(unknown.path == "/handlers/k/type");
    CHECK(unknown.message == "/handlers/k/type: unknown handler type 'x' (expected sql, exec or http)");
    // Kinds are escaped as JSON pointer tokens.
    CHECK(problem_with({{"a/b~c", {{"type", "smtp"}}}}).path == "/handlers/a~1b~0c/type");
  }

  TEST_CASE("builtin_handlers: unknown keys are named, per type") {
    CHECK(problem_with_handler(R"({"type": "sql", "statment": "SELECT 1"})").message ==
          "/handlers/k/statment: unknown key");
    CHECK(problem_with_handler(R"({"type": "exec", "command": ["/bin/sh"], "cmd": []})").message ==
          "/handlers/k/cmd: unknown key");
    CHECK(problem_with_handler(R"({"type": "http", "url": "http://h/", "header": {}})").message ==
          "/handlers/k/header: unknown key");
    // A key of another type is unknown too.
    CHECK(problem_with_handler(R"({"type": "sql", "statement": "SELECT 1", "timeout": "5s"})").path ==
          "/handlers/k/timeout");
  }

  TEST_CASE("builtin_handlers: sql declarations") {
    CHECK(problem_with_handler(R"({"type": "sql"})").message ==
          "/handlers/k/statement: is required (the SQL statement to run)");
    CHECK(problem_with_handler(R"({"type": "sql", "statement": ""})").message ==
          "/handlers/k/statement: must be a non-empty string");
    CHECK(problem_with_handler(R"({"type": "sql", "statement": 42})").path == "/handlers/k/statement");
    CHECK(problem_with_handler(R"({"type": "sql", "statement": "SELECT $1", "params": "/a"})").path ==
          "/handlers/k/params");
    CHECK(problem_with_handler(R"({"type": "sql", "statement": "SELECT $1, $2", "params": ["/a", 2]})").message ==
          "/handlers/k/params/1: must be a string");
    const Problem bad_pointer =
        problem_with_handler(R"({"type": "sql", "statement": "SELECT $1, $2", "params": ["/a", "user_id"]})");
    CHECK(bad_pointer.path == "/handlers/k/params/1");
    CHECK(bad_pointer.message == "/handlers/k/params/1: 'user_id' is not a JSON pointer (write e.g. \"/user_id\")");
    CHECK(problem_with_handler(R"({"type": "sql", "statement": "SELECT $1", "params": ["/a~2"]})").path ==
          "/handlers/k/params/0");
    // The statement's placeholders and the params must agree.
    CHECK(problem_with_handler(R"({"type": "sql", "statement": "SELECT $1, $2", "params": ["/a"]})").message ==
          "/handlers/k/params: has 1 entry but the statement uses placeholders up to $2");
    CHECK(problem_with_handler(R"({"type": "sql", "statement": "SELECT '$1'", "params": ["/a"]})").message ==
          "/handlers/k/params: has 1 entry but the statement uses no placeholder");
    CHECK(problem_with_handler(R"({"type": "sql", "statement": "SELECT $1"})").path == "/handlers/k/params");
    CHECK(problem_with_handler(R"({"type": "sql", "statement": "UPDATE a SET x = 1; DELETE FROM a"})").path ==
          "/handlers/k/statement");
    CHECK(problem_with_handler(R"({"type": "sql", "statement": "UPDATE a SET x = 1; -- done\n"})").path ==
          "(no error)");
    CHECK(problem_with_handler(R"({"type": "sql", "statement": "SELECT 1", "transaction_only": "no"})").message ==
          "/handlers/k/transaction_only: must be true or false");
  }

  TEST_CASE("builtin_handlers: exec declarations") {
    TempDir dir;
    const std::string not_executable = dir.write("data.txt", "#!/bin/sh\nexit 0\n", 0644);
    const std::string script = dir.write("ok.sh", "#!/bin/sh\nexit 0\n");

    CHECK(problem_with_handler(R"({"type": "exec"})").path == "/handlers/k/command");
    CHECK(problem_with_handler(R"({"type": "exec", "command": []})").message ==
          "/handlers/k/command: must be a non-empty array of strings (the program and its arguments)");
    CHECK(problem_with_handler(R"({"type": "exec", "command": "/bin/sh"})").path == "/handlers/k/command");
    CHECK(problem_with_handler(R"({"type": "exec", "command": ["/bin/sh", 1]})").message ==
          "/handlers/k/command/1: must be a string");
    CHECK(problem_with_handler(R"({"type": "exec", "command": [""]})").path == "/handlers/k/command/0");

    const Problem plain_file = problem_with_handler({{"type", "exec"}, {"command", {not_executable}}});
    CHECK(plain_file.path == "/handlers/k/command/0");
    CHECK(plain_file.message == "/handlers/k/command/0: '" + not_executable + "' is not an executable file");
    CHECK(problem_with_handler({{"type", "exec"}, {"command", {dir.file("missing")}}}).path == "/handlers/k/command/0");
    CHECK(problem_with_handler({{"type", "exec"}, {"command", {dir.path().string()}}}).path == "/handlers/k/command/0");
    CHECK(problem_with_handler(R"({"type": "exec", "command": ["no-such-program-oncely"]})").message ==
          "/handlers/k/command/0: 'no-such-program-oncely' was not found in PATH (or write its absolute path)");
    CHECK(problem_with_handler({{"type", "exec"}, {"command", {script, "--flag"}}}).path == "(no error)");

    const Problem bad_duration = problem_with_handler({{"type", "exec"}, {"command", {script}}, {"timeout", "5 sex"}});
    CHECK(bad_duration.path == "/handlers/k/timeout");
    CHECK(bad_duration.message.starts_with("/handlers/k/timeout: bad duration '5 sex'"));
    CHECK(problem_with_handler({{"type", "exec"}, {"command", {script}}, {"timeout", 20}}).path ==
          "/handlers/k/timeout");
    CHECK(problem_with_handler({{"type", "exec"}, {"command", {script}}, {"timeout", "0s"}}).message ==
          "/handlers/k/timeout: must be longer than 0ms");

    CHECK(problem_with_handler({{"type", "exec"}, {"command", {script}}, {"env", {"A", "b"}}}).path ==
          "/handlers/k/env");
    CHECK(problem_with_handler({{"type", "exec"}, {"command", {script}}, {"env", {{"A", 1}}}}).message ==
          "/handlers/k/env/A: must be a string");
    CHECK(problem_with_handler({{"type", "exec"}, {"command", {script}}, {"env", {{"A=B", "c"}}}}).path ==
          "/handlers/k/env/A=B");
    CHECK(problem_with_handler({{"type", "exec"}, {"command", {script}}, {"env", {{"ONCELY_JOB_ID", "1"}}}}).message ==
          "/handlers/k/env/ONCELY_JOB_ID: is set by oncely for each job");
  }

  TEST_CASE("builtin_handlers: http declarations") {
    ScopedEnv unset("ONCELY_UNIT_UNSET_TOKEN", nullptr);
    CHECK(problem_with_handler(R"({"type": "http"})").message ==
          "/handlers/k/url: is required (where to POST the payload)");
    CHECK(problem_with_handler(R"({"type": "http", "url": ""})").path == "/handlers/k/url");
    CHECK(problem_with_handler(R"({"type": "http", "url": "not a url"})").path == "/handlers/k/url");
    CHECK(problem_with_handler(R"({"type": "http", "url": "ftp://example.com/x"})").message ==
          "/handlers/k/url: must be an http:// or https:// URL");
    CHECK(problem_with_handler(R"({"type": "http", "url": "file:///etc/passwd"})").path == "/handlers/k/url");
    CHECK(problem_with_handler(R"({"type": "http", "url": "http://h/", "timeout": "5 sex"})")
              .message.starts_with("/handlers/k/timeout: bad duration '5 sex'"));

    const Problem unset_env = problem_with_handler(
        R"({"type": "http", "url": "http://h/", "headers": {"Authorization": "Bearer ${ONCELY_UNIT_UNSET_TOKEN}"}})");
    CHECK(unset_env.path == "/handlers/k/headers/Authorization");
    CHECK(unset_env.message ==
          "/handlers/k/headers/Authorization: environment variable ONCELY_UNIT_UNSET_TOKEN is not set");
    CHECK(problem_with_handler(R"({"type": "http", "url": "http://h/", "headers": []})").path == "/handlers/k/headers");
    CHECK(problem_with_handler(R"({"type": "http", "url": "http://h/", "headers": {"X-A": 1}})").message ==
          "/handlers/k/headers/X-A: must be a string");
    CHECK(problem_with_handler(R"({"type": "http", "url": "http://h/", "headers": {"Bad Name": "x"}})").message ==
          "/handlers/k/headers/Bad Name: is not a valid HTTP header name");
    CHECK(problem_with_handler(R"({"type": "http", "url": "http://h/", "headers": {"X-A": "a\r\nX-Injected: 1"}})")
              .path == "/handlers/k/headers/X-A");
    CHECK(
        problem_with_handler(R"({"type": "http", "url": "http://h/", "headers": {"idempotency-key": "x"}})").message ==
        "/handlers/k/headers/idempotency-key: is set by oncely to the job's idempotency key");
    CHECK(problem_with_handler(R"({"type": "http", "url": "http://h/", "headers": {"X-A": "${1BAD}"}})").path ==
          "/handlers/k/headers/X-A");
  }

  TEST_CASE("builtin_handlers: ${ENV} substitution") {
    using oncely::detail::substitute_env;
    ScopedEnv token("ONCELY_UNIT_TOKEN", "s3cret");
    ScopedEnv empty("ONCELY_UNIT_EMPTY", "");
    ScopedEnv unset("ONCELY_UNIT_UNSET", nullptr);
    CHECK(substitute_env("Bearer ${ONCELY_UNIT_TOKEN}", "/p") == "Bearer s3cret");
    CHECK(substitute_env("${ONCELY_UNIT_TOKEN}:${ONCELY_UNIT_TOKEN}", "/p") == "s3cret:s3cret");
    CHECK(substitute_env("a${ONCELY_UNIT_EMPTY}b", "/p") == "ab");
    CHECK(substitute_env("costs $5 or $ {x} or $NAME", "/p") == "costs $5 or $ {x} or $NAME");
    CHECK(substitute_env("", "/p").empty());
    const auto error_of = [](const std::string& text) {
      try {
        substitute_env(text, "/handlers/k/headers/X");
      } catch (const oncely::ConfigError& e) {
        CHECK(e.path() == "/handlers/k/headers/X");
        return std::string(e.what());
      }
      return std::string("(no error)");
    };
    CHECK(error_of("${ONCELY_UNIT_UNSET}") ==
          "/handlers/k/headers/X: environment variable ONCELY_UNIT_UNSET is not set");
    CHECK(error_of("x ${ONCELY_UNIT_TOKEN") ==
          "/handlers/k/headers/X: unterminated \"${\" (write ${NAME} for the environment variable NAME)");
    CHECK(error_of("${}") == "/handlers/k/headers/X: \"${}\" is not a valid environment variable name");
    CHECK(error_of("${A-B}") == "/handlers/k/headers/X: \"${A-B}\" is not a valid environment variable name");
  }

  TEST_CASE("builtin_handlers: SQLSTATE classification") {
    using oncely::detail::sql_failure_class;
    CHECK(sql_failure_class("22P02") == FailureClass::permanent);  // invalid_text_representation
    CHECK(sql_failure_class("23505") == FailureClass::permanent);  // unique_violation
    CHECK(sql_failure_class("23502") == FailureClass::permanent);  // not_null_violation
    CHECK(sql_failure_class("42P01") == FailureClass::permanent);  // undefined_table
    CHECK(sql_failure_class("42501") == FailureClass::permanent);  // insufficient_privilege
    CHECK(sql_failure_class("57014") == FailureClass::timeout);    // query_canceled
    CHECK(sql_failure_class("40001") == FailureClass::retryable);
    CHECK(sql_failure_class("40P01") == FailureClass::retryable);
    CHECK(sql_failure_class("55P03") == FailureClass::retryable);
    CHECK(sql_failure_class("08006") == FailureClass::retryable);
    CHECK(sql_failure_class("P0001") == FailureClass::retryable);
    CHECK(sql_failure_class("") == FailureClass::retryable);
  }

  TEST_CASE("builtin_handlers: exit status and HTTP status classification") {
    using oncely::detail::exit_failure_class;
    using oncely::detail::http_failure_class;
    CHECK(exit_failure_class(64) == FailureClass::permanent);
    CHECK(exit_failure_class(65) == FailureClass::permanent);
    CHECK(exit_failure_class(1) == FailureClass::retryable);
    CHECK(exit_failure_class(3) == FailureClass::retryable);
    CHECK(exit_failure_class(66) == FailureClass::retryable);
    for (const long status : {408L, 429L, 500L, 502L, 503L, 504L, 599L}) {
      CHECK_MESSAGE(http_failure_class(status) == FailureClass::retryable, status);
    }
    for (const long status : {301L, 302L, 304L, 400L, 401L, 403L, 404L, 409L, 410L, 422L}) {
      CHECK_MESSAGE(http_failure_class(status) == FailureClass::permanent, status);
    }
  }

  TEST_CASE("builtin_handlers: Retry-After as seconds or as an HTTP date") {
    using oncely::detail::parse_retry_after;
    const std::time_t now = 1445412480;  // Wed, 21 Oct 2015 07:28:00 GMT
    CHECK(parse_retry_after("2", now) == 2000ms);
    CHECK(parse_retry_after(" 120 ", now) == 120s);
    CHECK(parse_retry_after("0", now) == 0ms);
    CHECK(parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now) == 30s);
    CHECK(parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now) == 0ms);  // in the past: now
    CHECK(parse_retry_after("99999999999999999999999", now) == oncely::detail::kMaxRetryAfter);
    CHECK_FALSE(parse_retry_after("", now).has_value());
    CHECK_FALSE(parse_retry_after("soon", now).has_value());
    CHECK_FALSE(parse_retry_after("-5", now).has_value());
  }

  TEST_CASE("builtin_handlers: the statement scan finds placeholders only where Postgres would") {
    using oncely::detail::scan_statement;
    CHECK(scan_statement("SELECT 1").highest_placeholder == 0);
    CHECK(scan_statement("INSERT INTO t VALUES ($1, $2::int, $10)").highest_placeholder == 10);
    CHECK(scan_statement("SELECT '$3', \"$4\", E'it\\'s $5', $1").highest_placeholder == 1);
    CHECK(scan_statement("SELECT $$ $7 $$, $tag$ $8 $tag$, $2").highest_placeholder == 2);
    CHECK(scan_statement("SELECT a$1 FROM t -- $9\n WHERE x = $1 /* $5 /* $6 */ */").highest_placeholder == 1);
    CHECK(scan_statement("SELECT 'it''s $4'").highest_placeholder == 0);
    CHECK_FALSE(scan_statement("SELECT 1;").multiple_statements);
    CHECK_FALSE(scan_statement("SELECT ';'; ; -- x\n /* y */ ").multiple_statements);
    CHECK(scan_statement("SELECT 1; SELECT 2").multiple_statements);
  }

  TEST_CASE("builtin_handlers: text from outside becomes valid UTF-8 without NUL") {
    using namespace oncely::detail;
    CHECK(sanitize_utf8("plain ascii\n") == "plain ascii\n");
    CHECK(sanitize_utf8("caf\xC3\xA9") == "caf\xC3\xA9");
    CHECK(sanitize_utf8(std::string("a\0b", 3)) ==
          "a\xEF\xBF\xBD"
          "b");
    CHECK(sanitize_utf8("bad \xFF byte") == "bad \xEF\xBF\xBD byte");
    CHECK(sanitize_utf8("\xED\xA0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
    // Cuts never split a character.
    CHECK(utf8_head("ab\xC3\xA9", 3) == "ab");
    CHECK(utf8_tail("\xC3\xA9xy", 3) == "xy");
    CHECK(utf8_tail("abcdef", 3) == "def");
    CHECK(last_line("first\nsecond line \n\n  ") == "second line");
    CHECK(last_line("").empty());
    CHECK(summary_line("ERROR:  a\n\tDETAIL:  b\n") == "ERROR: a DETAIL: b");
    CHECK(summary_line(std::string(500, 'x'), 10) == std::string(10, 'x') + "\u2026");
  }

  TEST_CASE("builtin_handlers: a child that ignores a large stdin neither blocks nor kills the worker with SIGPIPE") {
    const std::string input(4 << 20, 'x');  // far more than a pipe buffer
    const auto start = std::chrono::steady_clock::now();
    const auto result = oncely::detail::run_process({"/bin/sh", "-c", "echo bye >&2; exit 3"}, {}, input, 10s);
    CHECK(std::chrono::steady_clock::now() - start < 5s);
    CHECK(result.end == oncely::detail::ProcessResult::End::exited);
    CHECK(result.code == 3);
    CHECK(result.stderr_tail == "bye\n");
    // No SIGPIPE is left pending or blocked in this thread.
    sigset_t pending;
    sigpending(&pending);
    CHECK(sigismember(&pending, SIGPIPE) == 0);
    sigset_t mask;
    pthread_sigmask(SIG_BLOCK, nullptr, &mask);
    CHECK(sigismember(&mask, SIGPIPE) == 0);
  }

  TEST_CASE("builtin_handlers: a child reads all of its stdin, its environment is exactly the one given") {
    TempDir dir;
    const std::string input(1 << 20, 'y');
    const auto result = oncely::detail::run_process(
        {"/bin/sh", "-c", "wc -c > \"$OUT\"; env | sort > \"$OUT.env\"; head -c 100000 /dev/zero"},
        {"OUT=" + dir.file("count"), "PATH=/usr/bin:/bin"}, input, 10s);
    CHECK(result.end == oncely::detail::ProcessResult::End::exited);
    CHECK(result.code == 0);
    CHECK(dir.read("count") == std::to_string(input.size()) + "\n");
    const std::string env = dir.read("count.env");
    CHECK(env.find("OUT=") != std::string::npos);
    CHECK(env.find("HOME=") == std::string::npos);
  }

  TEST_CASE("builtin_handlers: the stderr tail keeps the last bytes, and a timeout kills the process group") {
    const auto chatty = oncely::detail::run_process(
        {"/bin/sh", "-c", "head -c 100000 /dev/zero | tr '\\0' a >&2; echo END >&2; exit 1"}, {}, "", 10s, 64);
    CHECK(chatty.stderr_tail.size() == 64);
    CHECK(chatty.stderr_tail.ends_with("aaaEND\n"));

    const auto start = std::chrono::steady_clock::now();
    const auto slow = oncely::detail::run_process({"/bin/sh", "-c", "sleep 30 & sleep 30"}, {}, "", 300ms);
    CHECK(slow.end == oncely::detail::ProcessResult::End::timed_out);
    CHECK(std::chrono::steady_clock::now() - start < 5s);

    const auto killed = oncely::detail::run_process({"/bin/sh", "-c", "kill -TERM $$"}, {}, "", 10s);
    CHECK(killed.end == oncely::detail::ProcessResult::End::signaled);
    CHECK(killed.code == SIGTERM);

    CHECK_THROWS_AS(oncely::detail::run_process({"/nonexistent/program"}, {}, "", 1s), std::system_error);
  }

}  // TEST_SUITE

TEST_CASE("builtin_handlers: mask_secrets masks every byte of every secret once, and leaves the rest") {
  using oncely::detail::mask_secrets;
  CHECK(mask_secrets("Authorization: Bearer t0k and t0k again", {"t0k"}) == "Authorization: Bearer *** and *** again");
  CHECK(mask_secrets("key=abcdef", {"abc", "abcdef"}) == "key=***");  // not "***def"
  CHECK(mask_secrets("nothing here", {"secret", ""}) == "nothing here");
  CHECK(mask_secrets("a*b", {"*", "*"}) == "a***b");  // a mask is not masked again
  CHECK(mask_secrets("***secret***", {"secret"}) == "*********");
}

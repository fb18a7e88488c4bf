// The `sql` handler type: one statement from the configuration, run in the job's
// transaction with parameters taken from the payload by JSON pointer.
//
//   {"type": "sql", "statement": "INSERT ... VALUES ($1, $2) ...", "params": ["/user_id", "/cents"],
//    "expect_rows": 1, "output": "row"}
//
// "output": "row" keeps the first row the statement returns (its RETURNING row, or a
// SELECT's) as the job's output, a JSON object; "rows" keeps them all, an array. The
// statement then runs as WITH oncely_output AS (<statement>) SELECT row_to_json(...), so it
// must return rows (a RETURNING clause); the start-up check says so if it does not.
//
// The payload only ever supplies parameter values, never SQL text. The statement goes
// through exec_params: an error raised through a plain exec() would end the whole batch
// transaction in libpqxx 6, whereas after exec_params the executor can roll back to the
// job's savepoint (JobContext::tx) and carry on with the rest of the batch.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <pqxx/pqxx>

#include "execution/retry_policy.hpp"
#include "handlers/classification.hpp"
#include "handlers/declaration.hpp"
#include "handlers/sql_statement.hpp"
#include "oncely/errors.hpp"
#include "oncely/job_context.hpp"
#include "support/exact_json.hpp"
#include "support/pooler.hpp"
#include "support/sqlstate.hpp"
#include "support/text.hpp"

namespace oncely::detail {
namespace {

// The protocol's Bind message counts parameters in a 16-bit field.
constexpr int kMaxParameters = 65535;

// "expect_rows": how many rows the statement must affect (or return); otherwise the job
// fails permanently instead of succeeding without its effect.
struct ExpectRows {
  long long count = 0;
  bool at_least = false;  // "N+"

  [[nodiscard]] bool met_by(long long affected) const { return at_least ? affected >= count : affected == count; }
  [[nodiscard]] std::string spelled() const { return std::to_string(count) + (at_least ? "+" : ""); }
  [[nodiscard]] std::string describe() const {
    return (at_least ? "at least " : "") + std::to_string(count) + (count == 1 ? " row" : " rows");
  }
};

// "output": which of the rows the statement returns become the job's output.
enum class OutputRows { none, first, all };

struct SqlHandler {
  std::string statement;      // as run: wrapped when output is kept
  std::string prepared_name;  // empty: unnamed statements (a transaction-mode pooler)
  std::vector<exact_json::Pointer> params;
  std::vector<std::string> param_names;  // the pointers as written, for messages
  std::optional<ExpectRows> expect_rows;
  OutputRows output = OutputRows::none;

  void operator()(JobContext& job) const;
  /// Runs the statement with its parameters in `tx`.
  /// Runs the statement; returns the job's output, if it keeps one.
  std::optional<std::string> apply(pqxx::work& tx, const std::vector<std::optional<std::string>>& values) const;
};

/// `statement` run so that it returns each row as JSON text (row_to_json), for "output".
std::string returning_json(std::string_view statement) {
  while (!statement.empty() &&
         (statement.back() == ';' || std::isspace(static_cast<unsigned char>(statement.back())))) {
    statement.remove_suffix(1);
  }
  return "WITH oncely_output AS (\n" + std::string(statement) +
         "\n) SELECT row_to_json(oncely_output)::text FROM oncely_output";
}

/// The job's output from the rows of a statement run as returning_json() wrote it.
std::optional<std::string> output_of(const pqxx::result& rows, OutputRows output) {
  if (output == OutputRows::none || (output == OutputRows::first && rows.empty())) return std::nullopt;
  if (output == OutputRows::first) return rows[0][0].as<std::string>();
  std::string all = "[";
  for (const auto& row : rows) {
    if (all.size() > 1) all += ',';
    all += row[0].as<std::string>();
  }
  return all + "]";
}

// The server's message without libpq's "ERROR:  " prefix, on one line.
std::string server_message(const pqxx::failure& e) {
  std::string_view text = e.what();
  if (text.starts_with("ERROR:")) text.remove_prefix(6);
  return summary_line(text, 1000);
}

// The server's message for a statement it would not parse: the first line and any DETAIL
// or HINT, without the "LINE 1: ..." excerpt and its caret (the statement is in the file).
std::string parse_error_message(const pqxx::failure& e) {
  std::string_view text = e.what();
  if (text.starts_with("ERROR:")) text.remove_prefix(6);
  std::string kept;
  bool first = true;
  while (!text.empty()) {
    const std::size_t end = std::min(text.find('\n'), text.size());
    const std::string_view line = text.substr(0, end);
    text.remove_prefix(std::min(end + 1, text.size()));
    if (first || line.starts_with("DETAIL:") || line.starts_with("HINT:")) {
      kept += std::string(line) + "\n";
      first = false;
    }
  }
  return summary_line(kept, 1000);
}

[[noreturn]] void fail_with_sqlstate(const pqxx::failure& e, const std::string& sqlstate) {
  const FailureClass cls = sql_failure_class(sqlstate);
  std::string message = sqlstate.empty() ? "SQL error: " : "SQLSTATE " + sqlstate + ": ";
  if (sqlstate == kQueryCanceled) message = "statement exceeded the job timeout (SQLSTATE 57014): ";
  nlohmann::json detail = nlohmann::json::object();
  detail["sqlstate"] = sqlstate;
  throw HandlerError(cls, message + server_message(e), std::move(detail));
}

void SqlHandler::operator()(JobContext& job) const {
  std::vector<std::optional<std::string>> values;
  values.reserve(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    // From the payload's text, not payload(): a number reaches Postgres as the digits the
    // job holds (12345678901234567.89, 1e400), never through a double. Strings go as their
    // characters, true/false and numbers as written, objects and arrays as JSON text
    // (which a json/jsonb parameter accepts), null as SQL NULL.
    const std::optional<exact_json::Value> value = exact_json::find(job.payload_text(), params[i]);
    if (!value) {
      // A missing member, an array index out of range or not an index, or a scalar in the way.
      const std::string parameter = "$" + std::to_string(i + 1);
      throw HandlerError(FailureClass::permanent,
                         "payload has no " + printable(param_names[i]) + " (parameter " + parameter + ")",
                         {{"pointer", param_names[i]}, {"parameter", parameter}});
    }
    values.push_back(value->parameter());
  }

  // In the job's transaction (transaction mode: at once) or in the fenced transaction that
  // completes it (lease mode): either way it commits with the job's marker, or not at all.
  job.on_complete_output([this, values = std::move(values)](pqxx::work& tx) { return apply(tx, values); });
}

std::optional<std::string> SqlHandler::apply(pqxx::work& tx,
                                             const std::vector<std::optional<std::string>>& values) const {
  pqxx::result result;
  try {
    if (prepared_name.empty()) {
      result = tx.exec_params(statement, pqxx::prepare::make_dynamic_params(values));
    } else {
      // Parsed and planned once per connection (libpqxx prepares it on first use there).
      tx.conn().prepare(prepared_name, statement);
      result = tx.exec_prepared(prepared_name, pqxx::prepare::make_dynamic_params(values));
    }
  } catch (const pqxx::broken_connection& e) {
    // A connection that really broke is the executor's business (it reconnects and
    // redelivers): pass it on unchanged. But libpqxx 6.4 also throws broken_connection for
    // an SQLSTATE of class 08 that the server reports on a working connection (08P01 when
    // the parameter count does not match the statement, which make_sql_handler rules out;
    // 08001 from dblink or postgres_fdw when a remote server is down). libpqxx keeps the
    // exact code to itself; the class is retryable.
    if (!tx.conn().is_open()) throw;
    throw HandlerError(FailureClass::retryable,
                       "connection exception reported by the server (SQLSTATE class 08): " + server_message(e),
                       {{"sqlstate_class", "08"}});
  } catch (const pqxx::sql_error& e) {
    fail_with_sqlstate(e, sqlstate_of(e));
  } catch (const pqxx::serialization_failure& e) {
    // libpqxx 6.4 maps SQLSTATE class 40 to transaction_rollback and its subclasses, which
    // are not sql_errors and carry no sqlstate(): the class tells which code it was.
    fail_with_sqlstate(e, "40001");
  } catch (const pqxx::deadlock_detected& e) {
    fail_with_sqlstate(e, "40P01");
  } catch (const pqxx::statement_completion_unknown& e) {
    fail_with_sqlstate(e, "40003");
  } catch (const pqxx::transaction_rollback& e) {
    // 40000 or 40002: libpqxx does not say which; both are worth retrying.
    throw HandlerError(FailureClass::retryable, "transaction rollback (SQLSTATE class 40): " + server_message(e),
                       {{"sqlstate_class", "40"}});
  }
  if (expect_rows) {
    // affected_rows(): the command tag's count (UPDATE n, DELETE n, INSERT 0 n, SELECT n).
    const auto affected = static_cast<long long>(result.affected_rows());
    if (!expect_rows->met_by(affected)) {
      throw HandlerError(FailureClass::permanent,
                         "expected " + expect_rows->describe() + ", the statement affected " + std::to_string(affected),
                         {{"expect_rows", expect_rows->spelled()}, {"affected_rows", affected}});
    }
  }
  return output_of(result, output);
}

// "expect_rows": a count (exactly that many) or "N+" (at least N).
ExpectRows parse_expect_rows(const nlohmann::json& value, const std::string& path) {
  const auto fail = [&]() -> ExpectRows {
    throw ConfigError(path, "must be a row count such as 1 (exactly one) or a string such as \"1+\" (at least one)");
  };
  if (value.is_number_integer()) {
    // A huge unsigned value would wrap when read as int64, so it is caught first.
    if (value.is_number_unsigned() && value.get<std::uint64_t>() > 1'000'000'000ULL) return fail();
    const auto count = value.get<std::int64_t>();
    if (count < 0 || count > 1'000'000'000) return fail();
    return {count, false};
  }
  if (value.is_string()) {
    const auto& text = value.get_ref<const std::string&>();
    if (text.size() < 2 || text.size() > 11 || text.back() != '+') return fail();
    long long count = 0;
    for (std::size_t i = 0; i + 1 < text.size(); ++i) {
      if (text[i] < '0' || text[i] > '9') return fail();
      count = count * 10 + (text[i] - '0');
    }
    return {count, true};
  }
  return fail();
}

// At start-up: the server parses and analyses the statement (tables, columns, functions,
// parameter types) without running it, so that a typo stops the worker instead of
// dead-lettering every job. The unnamed statement is used, whatever `prepared_statements`
// says: the next unnamed statement replaces it, so nothing is left behind on the
// connection (or on a pooler's server connection) to collide with the named statements
// the workers prepare later. Privileges are checked only when a statement runs.
void describe_statement(pqxx::connection_base& conn, const std::string& statement, const std::string& path) {
  conn.prepare(statement);  // libpqxx's nameless definition; sent by prepare_now("")
  struct Forget {
    pqxx::connection_base& conn;
    ~Forget() { conn.unprepare(""); }  // never registered, so no DEALLOCATE is sent
  } forget{conn};
  try {
    conn.prepare_now("");
  } catch (const pqxx::sql_error& e) {
    const std::string sqlstate = sqlstate_of(e);
    throw ConfigError(path + "/statement", "the database rejects the statement: " + parse_error_message(e) +
                                               (sqlstate.empty() ? "" : " (SQLSTATE " + sqlstate + ")"));
  }
}

}  // namespace

FailureClass sql_failure_class(std::string_view sqlstate) {
  if (sqlstate == kQueryCanceled) return FailureClass::timeout;
  if (sqlstate == kReadOnlySqlstate) return FailureClass::connection;  // a standby or demoted primary
  if (sqlstate.starts_with("22") || sqlstate.starts_with("23") || sqlstate.starts_with("42")) {
    return FailureClass::permanent;
  }
  return FailureClass::retryable;
}

RegisteredHandler make_sql_handler(const nlohmann::json& declaration, const std::string& path, bool prepared) {
  check_keys(declaration, path, {"type", "statement", "params", "transaction_only", "expect_rows", "output"});
  SqlHandler handler;
  handler.statement =
      string_at(required(declaration, path, "statement", "the SQL statement to run"), path + "/statement", true);
  if (const auto it = declaration.find("params"); it != declaration.end()) {
    const std::string params_path = path + "/params";
    if (!it->is_array()) throw ConfigError(params_path, "must be an array of JSON pointers such as \"/user_id\"");
    for (std::size_t i = 0; i < it->size(); ++i) {
      const std::string at = params_path + "/" + std::to_string(i);
      const std::string& pointer = string_at((*it)[i], at);
      try {
        handler.params.emplace_back(pointer);
      } catch (const nlohmann::json::exception&) {
        throw ConfigError(at, "'" + printable(pointer) + "' is not a JSON pointer (write e.g. \"/user_id\")");
      }
      handler.param_names.push_back(pointer);
    }
  }
  const StatementShape shape = scan_statement(handler.statement);
  if (shape.multiple_statements) {
    throw ConfigError(path + "/statement", "must be a single SQL statement (parameters bind to one statement)");
  }
  if (const std::string command = transaction_control(shape); !command.empty()) {
    throw ConfigError(path + "/statement", "must not control the transaction (" + command +
                                               "): it runs inside the batch's transaction, which only oncely ends");
  }
  if (shape.highest_placeholder > kMaxParameters) {
    throw ConfigError(path + "/statement", "uses $" + std::to_string(shape.highest_placeholder) + ", more than the " +
                                               std::to_string(kMaxParameters) + " parameters the protocol allows");
  }
  if (static_cast<std::size_t>(shape.highest_placeholder) != handler.params.size()) {
    const std::string uses = shape.highest_placeholder == 0
                                 ? "no placeholder"
                                 : "placeholders up to $" + std::to_string(shape.highest_placeholder);
    const std::size_t n = handler.params.size();
    throw ConfigError(path + "/params", "has " + std::to_string(n) + (n == 1 ? " entry" : " entries") +
                                            " but the statement uses " + uses);
  }
  if (const auto it = declaration.find("expect_rows"); it != declaration.end()) {
    handler.expect_rows = parse_expect_rows(*it, path + "/expect_rows");
  }
  if (const auto it = declaration.find("output"); it != declaration.end()) {
    const std::string& output = string_at(*it, path + "/output");
    if (output != "row" && output != "rows") {
      throw ConfigError(path + "/output",
                        "must be \"row\" (the first row the statement returns) or \"rows\" (all of them)");
    }
    handler.output = output == "row" ? OutputRows::first : OutputRows::all;
    handler.statement = returning_json(handler.statement);
  }
  // ONCELY_PREPARED_STATEMENTS=0 turns them off here too, however the handler was built:
  // behind a transaction-mode pooler a named statement stays on one server connection.
  if (prepared_statements_allowed(prepared)) {
    // Unique per handler in this process: connections are shared by all kinds of a queue.
    static std::atomic<unsigned> handlers_prepared{0};
    handler.prepared_name = "oncely_sql_" + std::to_string(++handlers_prepared);
  }
  // std::function copies its target: share the (possibly large) declaration instead.
  auto shared = std::make_shared<const SqlHandler>(std::move(handler));
  RegisteredHandler registered;
  registered.run = [shared](JobContext& job) { (*shared)(job); };
  registered.options.startup_check = [shared, path](pqxx::connection_base& conn) {
    describe_statement(conn, shared->statement, path);
  };
  return registered;
}

}  // namespace oncely::detail

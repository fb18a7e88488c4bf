// Least-privilege roles (`oncely migrate --roles`, migration 0011): each role's privileges
// against the intended matrix, hostile producers and viewers, and every CLI command run as
// a login role granted the group role meant for it (and refused as one not meant for it).
#include <doctest/doctest.h>

#include <signal.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>
#include <pqxx/pqxx>

#include "oncely/admin.hpp"
#include "oncely/errors.hpp"
#include "support/pg_fixture.hpp"
#include "support/process.hpp"
#include "support/roles.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;

namespace {

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

/// Runs `sql` as the connection's role in a transaction rolled back afterwards: "" when it
/// ran, else the SQLSTATE it failed with (42501: insufficient privilege).
std::string attempt(pqxx::connection& conn, const std::string& sql) {
  try {
    pqxx::work tx{conn};
    tx.exec(sql);
    tx.abort();
    return "";
  } catch (const pqxx::insufficient_privilege&) {
    return "42501";  // libpqxx 6.4 leaves this subclass's sqlstate() empty
  } catch (const pqxx::sql_error& e) {
    return e.sqlstate().empty() ? std::string("?") : e.sqlstate();
  }
}

const std::string kDenied = "42501";

// The intended privileges, as the documentation states them. Per table: the privileges each
// role holds; a privilege on some columns only lists them; "*" is every column, "-payload"
// every column but payload ("-output": but output). Anything not listed must be absent.
using ColumnSet = std::set<std::string>;
using TableGrants = std::map<std::string, ColumnSet>;   // privilege -> columns
using RoleGrants = std::map<std::string, TableGrants>;  // table -> grants

const ColumnSet kAll{"*"};
const ColumnSet kNoPayload{"-payload"};
const ColumnSet kEnqueueColumns{
    "id",           "queue",      "kind",          "payload",         "idempotency_key", "priority", "run_at",
    "max_attempts", "unique_key", "trace_context", "concurrency_key", "depends_on",      "batch_id"};
const std::vector<std::string> kTables{"jobs",
                                       "processed_jobs",
                                       "dead_letters",
                                       "workers",
                                       "attempts_in_flight",
                                       "job_stats",
                                       "commit_guards",
                                       "queue_pauses",
                                       "cron_slots",
                                       "schema_migrations",
                                       "leaders",
                                       "queue_policies",
                                       "lease_completions",
                                       "queue_limits",
                                       "queue_rate_windows",
                                       "key_rate_windows",
                                       "job_parents",
                                       "batches",
                                       "batch_members",
                                       "transaction_completions"};

std::map<std::string, RoleGrants> intended() {
  std::map<std::string, RoleGrants> m;
  m["producer"]["jobs"] = {{"INSERT", kEnqueueColumns}, {"SELECT", {"id"}}};

  RoleGrants& w = m["worker"];
  w["jobs"] = {
      {"SELECT", kAll},
      {"DELETE", kAll},
      {"INSERT", kEnqueueColumns},
      {"UPDATE",
       {"attempts", "last_error", "errors", "run_at", "lease_token", "leased_by", "lease_holder", "leased_at"}}};
  w["processed_jobs"] = {{"SELECT", kAll}, {"INSERT", kAll}, {"DELETE", kAll}};
  // A transaction-mode batch's completion row: the rest of its jobs' records (version 27).
  w["transaction_completions"] = {{"SELECT", kAll}, {"INSERT", kAll}, {"DELETE", kAll}};
  w["dead_letters"] = {{"INSERT",
                        {"job_id", "queue", "kind", "payload", "idempotency_key", "priority", "attempts",
                         "max_attempts", "last_error", "error_class", "errors", "error_detail", "created_at",
                         "origin_job_id", "failed_at", "trace_context", "depends_on", "batch_id"}},
                       {"SELECT", {"queue", "failed_at", "replayed_at"}}};
  for (const char* t : {"workers", "attempts_in_flight", "job_stats", "leaders"}) {
    w[t] = {{"SELECT", kAll}, {"INSERT", kAll}, {"UPDATE", kAll}, {"DELETE", kAll}};
  }
  w["commit_guards"] = {{"SELECT", kAll}, {"INSERT", kAll}, {"DELETE", kAll}};
  w["cron_slots"] = {{"SELECT", kAll}, {"INSERT", kAll}, {"UPDATE", kAll}};
  w["queue_pauses"] = {{"SELECT", kAll}};
  w["schema_migrations"] = {{"SELECT", kAll}};
  w["queue_policies"] = {{"SELECT", kAll}, {"INSERT", kAll}, {"UPDATE", kAll}};
  w["lease_completions"] = {{"SELECT", kAll}, {"INSERT", kAll}, {"DELETE", kAll}};
  w["queue_limits"] = {{"SELECT", kAll}};  // written through set_queue_limits()
  // The lease claim records its starts (migration 23); maintenance prunes idle keys' windows.
  w["queue_rate_windows"] = {{"SELECT", kAll}, {"INSERT", kAll}, {"UPDATE", kAll}};
  w["key_rate_windows"] = {{"SELECT", kAll}, {"INSERT", kAll}, {"UPDATE", kAll}, {"DELETE", kAll}};

  RoleGrants& o = m["operator"];
  for (const auto& t : kTables) o[t] = {{"SELECT", kAll}};
  o["jobs"]["INSERT"] = {"id",       "queue",        "kind",          "payload",       "idempotency_key",
                         "priority", "max_attempts", "origin_job_id", "trace_context", "depends_on"};
  o["jobs"]["UPDATE"] = {"run_at"};
  o["jobs"]["DELETE"] = kAll;
  o["processed_jobs"]["DELETE"] = kAll;
  o["dead_letters"]["UPDATE"] = {"replayed_at", "replayed_job_id"};
  o["dead_letters"]["DELETE"] = kAll;
  o["dead_letters"]["INSERT"] = {"job_id",        "queue",        "kind",         "payload",       "idempotency_key",
                                 "priority",      "attempts",     "max_attempts", "last_error",    "error_class",
                                 "errors",        "error_detail", "created_at",   "origin_job_id", "failed_at",
                                 "trace_context", "depends_on",   "batch_id"};
  o["queue_pauses"]["INSERT"] = {"queue", "reason", "paused_by"};
  o["queue_pauses"]["DELETE"] = kAll;
  o["queue_policies"]["INSERT"] = kAll;
  o["queue_policies"]["UPDATE"] = kAll;

  RoleGrants& v = m["viewer"];
  for (const auto& t : kTables) v[t] = {{"SELECT", kAll}};
  v["jobs"]["SELECT"] = kNoPayload;
  v["dead_letters"]["SELECT"] = kNoPayload;
  v["processed_jobs"]["SELECT"] = {"-output"};  // completed jobs' outputs are data, as payloads
  v["transaction_completions"]["SELECT"] = {"-outputs"};
  v["batches"]["SELECT"] = {"id",         "completed", "dead",        "created_at",
                            "created_by", "closed_at", "finished_at", "callback_job_ids"};  // no callbacks: payloads
  return m;
}

bool covers(const ColumnSet& set, const std::string& column) {
  if (set.contains("*")) return true;
  for (const std::string& entry : set) {
    if (entry.starts_with("-")) return column != entry.substr(1);
  }
  return set.contains(column);
}

/// Every difference between what `role` holds on the schema's tables and `grants`.
std::vector<std::string> table_differences(PgFixture& db, const std::string& role, const RoleGrants& grants) {
  // One row per (table, column, column privilege) and per (table, table-only privilege).
  const pqxx::result rows =
      db.exec("SELECT c.relname, a.attname, p.priv, has_column_privilege(" + db.conn->quote(role) +
              ", c.oid, a.attnum, p.priv) "
              "FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
              "CROSS JOIN (VALUES ('SELECT'), ('INSERT'), ('UPDATE'), ('REFERENCES')) AS p(priv) "
              "WHERE c.relnamespace = " +
              db.conn->quote(db.schema) +
              "::regnamespace AND c.relkind = 'r' "
              "UNION ALL "
              "SELECT c.relname, NULL, p.priv, has_table_privilege(" +
              db.conn->quote(role) +
              ", c.oid, p.priv) "
              "FROM pg_class c CROSS JOIN (VALUES ('DELETE'), ('TRUNCATE'), ('TRIGGER')) AS p(priv) "
              "WHERE c.relnamespace = " +
              db.conn->quote(db.schema) +
              "::regnamespace AND c.relkind = 'r' "
              "ORDER BY 1, 3, 2");
  std::vector<std::string> differences;
  std::set<std::string> tables;
  for (const auto& row : rows) {
    const std::string table = row[0].as<std::string>();
    tables.insert(table);
    const std::string column = row[1].is_null() ? "" : row[1].as<std::string>();
    const std::string priv = row[2].as<std::string>();
    const bool held = row[3].as<bool>();
    bool wanted = false;
    if (const auto t = grants.find(table); t != grants.end()) {
      if (const auto p = t->second.find(priv); p != t->second.end())
        wanted = column.empty() || covers(p->second, column);
    }
    if (held != wanted) {
      differences.push_back(role + (held ? " holds " : " lacks ") + priv + " on " + table +
                            (column.empty() ? "" : "(" + column + ")"));
    }
  }
  // The matrix names every table the schema has: a new table needs a decision.
  for (const auto& t : tables) {
    if (std::find(kTables.begin(), kTables.end(), t) == kTables.end()) differences.push_back("unknown table " + t);
  }
  return differences;
}

}  // namespace

TEST_SUITE("roles") {
  TEST_CASE("roles: migrate --roles creates four NOLOGIN roles, runs again, and converges their privileges") {
    PgFixture db;
    Roles roles(db);
    CAPTURE(roles.migrated.err);
    REQUIRE(roles.migrated.exit_code == 0);
    CHECK(roles.migrated.out.find("created " + roles.group.producer + " " + roles.group.worker + " " +
                                  roles.group.operator_ + " " + roles.group.viewer) != std::string::npos);
    for (const auto& [what, name] : roles.groups()) {
      CAPTURE(name);
      CHECK(
          db.scalar<bool>("SELECT NOT rolcanlogin AND NOT rolsuper AND NOT rolcreaterole AND NOT rolcreatedb "
                          "FROM pg_roles WHERE rolname = " +
                          db.conn->quote(name)));
    }

    // A privilege added by hand, and one taken away, are put back as documented.
    db.exec("GRANT SELECT (payload) ON " + db.table("jobs") + " TO " + Roles::quoted(roles.group.viewer));
    db.exec("GRANT CREATE ON SCHEMA " + Roles::quoted(db.schema) + " TO " + Roles::quoted(roles.group.worker));
    db.exec("REVOKE INSERT ON " + db.table("jobs") + " FROM " + Roles::quoted(roles.group.producer));
    const ProcessResult again = run_process(oncely_cli({"migrate", "--roles"}),
                                            EnvChanges{{"DATABASE_URL", db.url}, {"ONCELY_SCHEMA", db.schema}});
    CAPTURE(again.err);
    REQUIRE(again.exit_code == 0);
    CHECK(again.out.find("privileges applied (all existed)") != std::string::npos);
    CHECK_FALSE(db.scalar<bool>("SELECT has_column_privilege(" + db.conn->quote(roles.group.viewer) + ", " +
                                db.conn->quote(db.table("jobs")) + ", 'payload', 'SELECT')"));
    CHECK_FALSE(db.scalar<bool>("SELECT has_schema_privilege(" + db.conn->quote(roles.group.worker) + ", " +
                                db.conn->quote(db.schema) + ", 'CREATE')"));
    CHECK(db.scalar<bool>("SELECT has_column_privilege(" + db.conn->quote(roles.group.producer) + ", " +
                          db.conn->quote(db.table("jobs")) + ", 'kind', 'INSERT')"));
  }

  TEST_CASE("roles: each role holds exactly its privileges on every table, column, sequence, function and the schema") {
    PgFixture db;
    Roles roles(db);
    CAPTURE(roles.migrated.err);
    REQUIRE(roles.migrated.exit_code == 0);
    const auto matrix = intended();
    for (const auto& [what, name] : roles.groups()) {
      for (const auto& difference : table_differences(db, name, matrix.at(what))) {
        FAIL_CHECK(difference);
      }
    }

    // Sequences: USAGE (nextval) only where documented; SELECT/UPDATE (setval) nowhere.
    const std::map<std::string, std::set<std::string>> sequence_users{
        {"jobs_id_seq", {"producer", "worker", "operator"}},
        {"lease_tokens", {"worker"}},
        {"attempt_slots", {"worker"}}};
    const pqxx::result sequences =
        db.exec("SELECT relname FROM pg_class WHERE relkind = 'S' AND relnamespace = " + db.conn->quote(db.schema) +
                "::regnamespace");
    CHECK(sequences.size() >= 5);
    for (const auto& row : sequences) {
      const std::string seq = row[0].as<std::string>();
      for (const auto& [what, name] : roles.groups()) {
        CAPTURE(seq);
        CAPTURE(what);
        const std::string of = db.conn->quote(name) + ", " + db.conn->quote(db.table(seq));
        const auto users = sequence_users.find(seq);
        CHECK(db.scalar<bool>("SELECT has_sequence_privilege(" + of + ", 'USAGE')") ==
              (users != sequence_users.end() && users->second.contains(what)));
        CHECK_FALSE(db.scalar<bool>("SELECT has_sequence_privilege(" + of + ", 'SELECT')"));
        CHECK_FALSE(db.scalar<bool>("SELECT has_sequence_privilege(" + of + ", 'UPDATE')"));
      }
    }

    // Functions: enqueue() and enqueue_unique() for producers and workers, wakeup_received()
    // for workers (their listener's acknowledgement); none for PUBLIC (before migration 0011
    // every function was PUBLIC's) but error_entry(), backoff_delay() and failure_outcome(),
    // which read and write nothing (versions 17 and 19), and what the runtime's statements call
    // with their caller's privileges. Every function pins search_path.
    const pqxx::result functions = db.exec(
        "SELECT p.oid::regprocedure::text, p.proname, "
        "       EXISTS (SELECT FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) x WHERE x.grantee = "
        "0), "
        "       coalesce('search_path=pg_catalog, pg_temp' = ANY (p.proconfig), false) "
        "  FROM pg_proc p WHERE p.pronamespace = " +
        db.conn->quote(db.schema) + "::regnamespace ORDER BY 1");
    CHECK(functions.size() == 47);
    for (const auto& row : functions) {
      const std::string signature = row[0].as<std::string>();
      const std::string name = row[1].as<std::string>();
      CAPTURE(signature);
      // PUBLIC may not execute it, but the functions that run with their caller's privileges
      // and that the runtime's own statements call (a role granted the tables by hand).
      // The retry decision's functions (version 19) read and write nothing; the fenced
      // completion (version 19) is the C++ lease settlement's statement; the limits' functions
      // (version 23) lock or read what their caller may; settle_dependents() (version 24) acts on
      // jobs that have left the queue, once; output_refusal() (version 27) reads nothing.
      static const std::set<std::string> everyone{
          "error_entry",       "dead_letter_job",    "lease_lock_ready", "lease_locked",      "lease_lock_in_order",
          "backoff_delay",     "failure_outcome",    "complete_leases",  "rate_window",       "limits_retry_in",
          "ready_by_key",      "lock_ready_limited", "queue_keys",       "queue_limits_held", "lock_key_slot",
          "settle_dependents", "output_refusal"};
      CHECK(row[2].as<bool>() == everyone.contains(name));
      CHECK(row[3].as<bool>());  // search_path pinned
      for (const auto& [what, role] : roles.groups()) {
        CAPTURE(what);
        // The SQL worker protocol (migrations 18 and 20) and what it calls: workers;
        // queue_policy() operators too (queue set, queue show).
        static const std::set<std::string> protocol{"lease_jobs",      "complete_job",           "complete_jobs",
                                                    "fail_job",        "renew_leases",           "release_jobs",
                                                    "retry_delay",     "lease_lock_ready",       "lease_locked",
                                                    "dead_letter_job", "count_protocol_outcome", "lease_lock_in_order"};
        const bool wanted =
            ((name == "enqueue" || name == "enqueue_unique") && (what == "producer" || what == "worker")) ||
            (name == "wakeup_received" && what == "worker") || everyone.contains(name) ||
            (protocol.contains(name) && what == "worker") ||
            ((name == "queue_policy" || name == "dead_letter_job" || name == "set_queue_limits") &&
             (what == "worker" || what == "operator")) ||
            // Batches (migration 24): opened and closed by producers, workers (handlers) and operators.
            ((name == "open_batch" || name == "close_batch") && what != "viewer");
        CHECK(db.scalar<bool>("SELECT has_function_privilege(" + db.conn->quote(role) + ", " +
                              db.conn->quote(signature) + ", 'EXECUTE')") == wanted);
      }
    }

    // The schema: every role may name its objects, none may create any.
    for (const auto& [what, name] : roles.groups()) {
      CAPTURE(what);
      const std::string of = db.conn->quote(name) + ", " + db.conn->quote(db.schema);
      CHECK(db.scalar<bool>("SELECT has_schema_privilege(" + of + ", 'USAGE')"));
      CHECK_FALSE(db.scalar<bool>("SELECT has_schema_privilege(" + of + ", 'CREATE')"));
    }
  }

  TEST_CASE("roles: a producer enqueues and can do nothing else, and cannot fool the schema's functions") {
    PgFixture db;
    Roles roles(db);
    CAPTURE(roles.migrated.err);
    REQUIRE(roles.migrated.exit_code == 0);
    pqxx::connection producer(roles.url.at("producer"));
    const std::string jobs = db.table("jobs");
    const std::string fn = Roles::quoted(db.schema) + ".enqueue";

    // What it is for.
    CHECK(attempt(producer, "INSERT INTO " + jobs + " (kind, payload) VALUES ('k', '{}') RETURNING id") == "");
    CHECK(attempt(producer, "SELECT " + fn + "('k', '{\"a\": 1}')") == "");
    CHECK(attempt(producer, "SELECT " + fn + "('k', unique_key => 'u', on_conflict => 'replace')") == "");
    CHECK(attempt(producer, "SELECT nextval(pg_get_serial_sequence(" + producer.quote(jobs) + ", 'id'))") == "");

    // What it is not for.
    CHECK(attempt(producer, "INSERT INTO " + jobs + " (kind, attempts) VALUES ('k', 99)") == kDenied);
    CHECK(attempt(producer, "INSERT INTO " + jobs + " (kind, errors) VALUES ('k', '[{}]')") == kDenied);
    CHECK(attempt(producer, "INSERT INTO " + jobs + " (kind, lease_token, leased_by) VALUES ('k', 1, 1)") == kDenied);
    // An id it may write, but only one the sequence handed out: the check trigger holds for it.
    CHECK(attempt(producer, "INSERT INTO " + jobs + " (id, kind) OVERRIDING SYSTEM VALUE VALUES (100000000, 'k')") ==
          "23514");
    CHECK(attempt(producer, "SELECT payload FROM " + jobs) == kDenied);
    CHECK(attempt(producer, "SELECT kind FROM " + jobs) == kDenied);
    CHECK(attempt(producer, "INSERT INTO " + jobs + " (kind) VALUES ('k') RETURNING payload") == kDenied);
    CHECK(attempt(producer, "DELETE FROM " + jobs) == kDenied);
    CHECK(attempt(producer, "UPDATE " + jobs + " SET run_at = now()") == kDenied);
    CHECK(attempt(producer, "TRUNCATE " + jobs) == kDenied);
    CHECK(attempt(producer, "SELECT * FROM " + db.table("dead_letters")) == kDenied);
    CHECK(attempt(producer, "SELECT * FROM " + db.table("processed_jobs")) == kDenied);
    CHECK(attempt(producer, "SELECT setval(pg_get_serial_sequence(" + producer.quote(jobs) + ", 'id'), 1)") == kDenied);
    CHECK(attempt(producer, "CREATE TABLE " + db.table("mine") + " (x int)") == kDenied);

    // A schema of its own, ahead of pg_catalog on its search_path, with a now(), a text = text
    // and a jobs table of its own: each logs its use. None of the schema's functions may use
    // them, whether it runs as the producer (enqueue) or as the owner (enqueue_unique, the check
    // trigger). Before migration 0011, enqueue() took this now() for the job's run_at.
    db.exec("CREATE SCHEMA " + Roles::quoted(db.schema + "_evil") + " AUTHORIZATION " +
            Roles::quoted(roles.login.at("producer")));
    const std::string evil = Roles::quoted(db.schema + "_evil");
    {
      pqxx::work tx{producer};
      tx.exec("CREATE TABLE " + evil + ".calls (what text, by_role text)");
      tx.exec("GRANT INSERT ON " + evil + ".calls TO PUBLIC");
      tx.exec("CREATE TABLE " + evil + ".jobs (id bigint, kind text, payload jsonb, run_at timestamptz)");
      tx.exec("CREATE FUNCTION " + evil + ".now() RETURNS timestamptz LANGUAGE plpgsql AS $$ BEGIN INSERT INTO " +
              evil + ".calls VALUES ('now', current_user); IF current_user <> " +
              producer.quote(roles.login.at("producer")) +
              " THEN RAISE EXCEPTION 'shadow now() ran as %', current_user; END IF; RETURN '2000-01-01'; END $$");
      tx.exec("CREATE FUNCTION " + evil +
              ".texteq_logged(a text, b text) RETURNS boolean LANGUAGE plpgsql AS $$ BEGIN "
              "INSERT INTO " +
              evil + ".calls VALUES ('=', current_user); IF current_user <> " +
              producer.quote(roles.login.at("producer")) +
              " THEN RAISE EXCEPTION 'shadow = ran as %', current_user; "
              "END IF; RETURN pg_catalog.texteq(a, b); END $$");
      tx.exec("CREATE OPERATOR " + evil + ".= (LEFTARG = text, RIGHTARG = text, FUNCTION = " + evil +
              ".texteq_logged)");
      tx.exec("GRANT USAGE ON SCHEMA " + evil + " TO PUBLIC");
      tx.commit();
    }
    {
      pqxx::work tx{producer};
      tx.exec("SET LOCAL search_path = " + evil + ", pg_catalog, pg_temp");
      // The shadows are live for a statement of the producer's own:
      CHECK(tx.exec1("SELECT now() = '2000-01-01'::timestamptz")[0].as<bool>());
      tx.exec("DELETE FROM " + evil + ".calls");
      const auto plain = tx.exec1("SELECT " + fn + "('shadowed')")[0].as<long>();
      const auto unique_id = tx.exec1("SELECT " + fn + "('shadowed', '{\"v\": 1}', unique_key => 'u1')")[0].as<long>();
      const auto replaced =
          tx.exec1("SELECT " + fn + "('shadowed', '{\"v\": 2}', unique_key => 'u1', on_conflict => 'replace')")[0]
              .as<long>();
      CHECK(replaced == unique_id);
      CHECK(plain != unique_id);
      CHECK(tx.exec1("SELECT count(*) FROM " + evil + ".calls")[0].as<long>() == 0);
      tx.commit();
    }
    // Forging still fails under the shadows, with the check trigger's own error: a shadow run
    // by the trigger (as the owner) would have raised instead.
    CHECK(attempt(producer, "SET LOCAL search_path = " + evil + ", pg_catalog, pg_temp; INSERT INTO " + jobs +
                                " (id, kind) OVERRIDING SYSTEM VALUE VALUES (100000001, 'k')") == "23514");
    CHECK(db.scalar<long>("SELECT count(*) FROM " + evil + ".jobs") == 0);
    CHECK(db.scalar<long>("SELECT count(*) FROM " + jobs +
                          " WHERE kind = 'shadowed' AND run_at > now() - interval '1 hour'") == 2);
    CHECK(db.scalar<std::string>("SELECT payload->>'v' FROM " + jobs + " WHERE unique_key = 'u1'") == "2");
    CHECK(db.scalar<long>("SELECT count(*) FROM " + evil + ".calls") == 0);
  }

  TEST_CASE("roles: a viewer reads everything but payloads and changes nothing") {
    PgFixture db;
    Roles roles(db);
    CAPTURE(roles.migrated.err);
    REQUIRE(roles.migrated.exit_code == 0);
    db.exec("INSERT INTO " + db.table("jobs") + " (kind, payload) VALUES ('k', '{\"secret\": 1}')");
    pqxx::connection viewer(roles.url.at("viewer"));
    CHECK(attempt(viewer, "SELECT " + Roles::quoted(db.schema) + ".enqueue('k')") == kDenied);
    CHECK(attempt(viewer, "SELECT * FROM " + Roles::quoted(db.schema) +
                              ".enqueue_unique('k', '{}', 'default', NULL, NULL, 0, NULL, 'u', 'skip')") == kDenied);
    CHECK(attempt(viewer, "SELECT payload FROM " + db.table("jobs")) == kDenied);
    CHECK(attempt(viewer, "SELECT * FROM " + db.table("jobs")) == kDenied);
    CHECK(attempt(viewer, "SELECT payload FROM " + db.table("dead_letters")) == kDenied);
    CHECK(attempt(viewer, "SELECT on_success FROM " + db.table("batches")) == kDenied);  // a callback's payload
    CHECK(attempt(viewer, "SELECT id, completed, dead FROM " + db.table("batches")) == "");
    CHECK(attempt(viewer, "SELECT " + Roles::quoted(db.schema) + ".open_batch()") == kDenied);
    CHECK(attempt(viewer, "SELECT id, kind, queue, attempts, errors, last_error, run_at, lease_token FROM " +
                              db.table("jobs")) == "");
    CHECK(attempt(viewer, "SELECT id, job_id, kind, last_error, error_detail FROM " + db.table("dead_letters")) == "");
    CHECK(attempt(viewer, "INSERT INTO " + db.table("jobs") + " (kind) VALUES ('k')") == kDenied);
    CHECK(attempt(viewer, "DELETE FROM " + db.table("dead_letters")) == kDenied);
    CHECK(attempt(viewer, "INSERT INTO " + db.table("queue_pauses") + " (queue, paused_by) VALUES ('q', 'me')") ==
          kDenied);
  }

  TEST_CASE("roles: every CLI command runs as the role meant for it and fails clearly as one not meant for it") {
    PgFixture db;
    Roles roles(db);
    CAPTURE(roles.migrated.err);
    REQUIRE(roles.migrated.exit_code == 0);
    const auto ok = [](const ProcessResult& r) {
      CAPTURE(r.out);
      CAPTURE(r.err);
      CHECK(r.exit_code == 0);
      return r;
    };
    const auto refused = [](const ProcessResult& r) {
      CAPTURE(r.out);
      CAPTURE(r.err);
      CHECK(r.exit_code != 0);
      CHECK(lines(r.err) == 1);
      CHECK(r.err.starts_with("oncely: error: "));
      CHECK(r.err.find("permission denied") != std::string::npos);
    };

    // Producer: enqueue, one job, a batch (ids reserved with nextval) and a unique job.
    ok(roles.cli("producer", {"enqueue", "calc", R"({"n": 1})"}));
    ok(roles.cli("producer", {"enqueue", "calc", R"({"n": 0})", "--max-attempts", "1"}));
    ok(roles.cli("producer", {"enqueue", "-", "--queue", "leased"},
                 "{\"kind\": \"calc\", \"payload\": {\"n\": 2}}\n{\"kind\": \"calc\", \"payload\": {\"n\": 3}}\n"));
    ok(roles.cli("producer", {"enqueue", "calc", R"({"n": 4})", "--unique-key", "once", "--on-conflict", "replace"}));
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("jobs")) == 5);
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"dlq", "list"}, {"jobs", "list"}, {"stats"}, {"queue", "pause", "default"}, {"cron", "list"}}) {
      CAPTURE(args[0]);
      refused(roles.cli("producer", args));
    }
    CHECK(roles.cli("producer", {"check"}).exit_code == 3);  // unknown: it cannot read the stats

    // Worker: runs the jobs to completion, one of them to a dead letter, a transaction queue
    // and a lease queue, with a cron entry, heartbeats and maintenance.
    const std::string config = "/tmp/oncely_roles_" + db.schema + ".json";
    {
      std::ofstream file(config);
      file << R"({"queues": {"default": {"concurrency": 2}, "leased": {"mode": "lease", "concurrency": 2}},
               "handlers": {"calc": {"type": "sql", "statement": "SELECT 10 / $1::int", "params": ["/n"]}},
               "cron": {"tick": {"schedule": "@every 1s", "kind": "tick", "queue": "cron_out"}}})";
    }
    {
      Process worker(oncely_cli({"worker", "--config", config}),
                     EnvChanges{{"DATABASE_URL", roles.url.at("worker")}, {"ONCELY_SCHEMA", db.schema}});
      const bool finished = wait_until(
          [&] {
            return db.scalar<long>("SELECT count(*) FROM " + db.table("jobs") + " WHERE queue <> 'cron_out'") == 0 &&
                   db.scalar<long>("SELECT count(*) FROM " + db.table("dead_letters")) == 1 &&
                   db.scalar<long>("SELECT count(*) FROM " + db.table("jobs") + " WHERE queue = 'cron_out'") > 0;
          },
          30s);
      worker.signal(SIGTERM);
      const ProcessResult r = worker.wait();
      CAPTURE(r.err);
      CHECK(finished);
      CHECK(r.exit_code == 0);
      CHECK(r.err.find("permission denied") == std::string::npos);
    }
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("processed_jobs")) == 4);
    CHECK(db.scalar<long>("SELECT coalesce(sum(completed), 0) FROM " + db.table("job_stats")) == 4);
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("cron_slots")) == 1);
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"dlq", "purge", "--all"}, {"dlq", "replay", "--all"}, {"queue", "pause", "default"}, {"dlq", "list"}}) {
      CAPTURE(args[1]);
      refused(roles.cli("worker", args));
    }

    // Operator: the daily controls.
    ok(roles.cli("operator", {"dlq", "list"}));
    ok(roles.cli("operator", {"dlq", "list", "--group-by", "error"}));
    ok(roles.cli("operator", {"dlq", "show", "--all"}));
    ok(roles.cli("operator", {"dlq", "replay", "--all", "--dry-run"}));
    ok(roles.cli("operator", {"dlq", "replay", "--all"}));
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("jobs") + " WHERE kind = 'calc'") == 1);
    ok(roles.cli("operator", {"dlq", "purge", "--all"}));
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("dead_letters")) == 0);
    ok(roles.cli("operator", {"jobs", "list"}));
    ok(roles.cli("operator", {"jobs", "list", "--group-by", "error"}));
    const std::string job_id =
        db.scalar<std::string>("SELECT id::text FROM " + db.table("jobs") + " WHERE kind = 'calc'");
    ok(roles.cli("operator", {"jobs", "show", job_id}));
    ok(roles.cli("operator", {"jobs", "cancel", "--id", job_id, "--dry-run"}));
    ok(roles.cli("operator", {"jobs", "cancel", "--id", job_id}));
    CHECK(db.scalar<long>("SELECT count(*) FROM " + db.table("dead_letters") + " WHERE error_class = 'cancelled'") ==
          1);
    ok(roles.cli("operator", {"queue", "pause", "default", "--reason", "incident"}));
    ok(roles.cli("operator", {"queue", "list"}));
    ok(roles.cli("operator", {"queue", "resume", "default"}));
    ok(roles.cli("operator", {"stats"}));
    ok(roles.cli("operator", {"stats", "--json"}));
    CHECK(roles.cli("operator", {"check", "--dead-letters-critical", "5"}).exit_code == 0);
    ok(roles.cli("operator", {"cron", "list", "--config", config}));
    refused(roles.cli("operator", {"enqueue", "calc"}));
    {
      const ProcessResult r =
          run_process(oncely_cli({"worker", "--config", config}),
                      EnvChanges{{"DATABASE_URL", roles.url.at("operator")}, {"ONCELY_SCHEMA", db.schema}});
      CAPTURE(r.err);
      CHECK(r.exit_code != 0);
      CHECK(r.err.find("permission denied") != std::string::npos);
    }

    // Viewer: stats and check, without payloads; nothing else.
    ok(roles.cli("viewer", {"stats"}));
    ok(roles.cli("viewer", {"stats", "--json"}));
    ok(roles.cli("viewer", {"queue", "list"}));
    ok(roles.cli("viewer", {"queue", "show", "no_row_here"}));  // the defaults, without queue_policy()
    ok(roles.cli("viewer", {"cron", "list"}));
    CHECK(roles.cli("viewer", {"check", "--dead-letters-critical", "5"}).exit_code == 0);
    for (const auto& args : std::vector<std::vector<std::string>>{{"dlq", "show", "--all"},
                                                                  {"dlq", "replay", "--all"},
                                                                  {"jobs", "cancel", "--all"},
                                                                  {"queue", "pause", "default"},
                                                                  {"enqueue", "calc"}}) {
      CAPTURE(args[0]);
      refused(roles.cli("viewer", args));
    }
    std::remove(config.c_str());
  }

  TEST_CASE("roles: migrate --roles without CREATEROLE says so in one line; with the roles there it needs none") {
    PgFixture db;
    const std::string who = db.schema + "_no_createrole";
    db.exec("CREATE ROLE " + Roles::quoted(who) + " LOGIN PASSWORD 'pw'");
    db.exec("GRANT USAGE ON SCHEMA " + Roles::quoted(db.schema) + " TO " + Roles::quoted(who));
    db.exec("GRANT SELECT ON " + db.table("schema_migrations") + " TO " + Roles::quoted(who));
    try {
      oncely::migrate_roles(oncely::DatabaseUrl(url_as(who, "pw")), db.schema);
      FAIL("migrate_roles without CREATEROLE succeeded");
    } catch (const oncely::DatabaseError& e) {
      const std::string what = e.what();
      CAPTURE(what);
      CHECK(what.find("creating roles needs CREATEROLE") != std::string::npos);
      CHECK(what.find(db.schema + "_producer") != std::string::npos);
      CHECK(what.find('\n') == std::string::npos);
    }
    // Roles made by someone else; a role that does not own the tables cannot grant on them.
    db.exec("ALTER ROLE " + Roles::quoted(who) + " CREATEROLE");
    try {
      oncely::migrate_roles(oncely::DatabaseUrl(url_as(who, "pw")), db.schema);
      FAIL("migrate_roles by a role that does not own the tables succeeded");
    } catch (const oncely::DatabaseError& e) {
      const std::string what = e.what();
      CAPTURE(what);
      CHECK(what.find("needs its owner") != std::string::npos);
    }
    db.exec("DROP OWNED BY " + Roles::quoted(who));
    db.exec("DROP ROLE " + Roles::quoted(who));
    CHECK(db.scalar<long>("SELECT count(*) FROM pg_roles WHERE rolname LIKE " + db.conn->quote(db.schema + "\\_%")) ==
          0);
  }

  TEST_CASE("roles: a migration applied later keeps functions from PUBLIC and grants the roles what is new") {
    PgFixture db;
    Roles roles(db);
    CAPTURE(roles.migrated.err);
    REQUIRE(roles.migrated.exit_code == 0);
    // As a later migration would: a function (executable by PUBLIC when created) and a column.
    db.exec("CREATE FUNCTION " + Roles::quoted(db.schema) + ".later() RETURNS int LANGUAGE sql AS 'SELECT 1'");
    db.exec("ALTER TABLE " + db.table("dead_letters") + " ADD COLUMN note text");
    // Migration 14 is one whose statements can run again (IF EXISTS, OR REPLACE).
    db.exec("DELETE FROM " + db.table("schema_migrations") + " WHERE version = 14");
    const oncely::MigrationResult result = oncely::migrate(oncely::DatabaseUrl(db.url), db.schema);
    CHECK(result.applied == std::vector<int>{14});
    CHECK_FALSE(db.scalar<bool>("SELECT has_function_privilege('public', " +
                                db.conn->quote(Roles::quoted(db.schema) + ".later()") + ", 'EXECUTE')"));
    CHECK(db.scalar<bool>("SELECT has_column_privilege(" + db.conn->quote(roles.group.viewer) + ", " +
                          db.conn->quote(db.table("dead_letters")) + ", 'note', 'SELECT')"));
    CHECK_FALSE(db.scalar<bool>("SELECT has_column_privilege(" + db.conn->quote(roles.group.viewer) + ", " +
                                db.conn->quote(db.table("dead_letters")) + ", 'payload', 'SELECT')"));
  }

}  // TEST_SUITE

// C++ embedders get the built-in handlers of a Config as `oncely worker` does, so that the
// CLI stays thin: oncely::add_builtin_handlers. A Runtime alone ignored Config::handlers,
// and the factory that reads them was internal (detail::build_builtin_handlers).
#include <doctest/doctest.h>

#include <chrono>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "oncely/oncely.hpp"
#include "support/builtin_runtime.hpp"
#include "support/event_recorder.hpp"
#include "support/pg_fixture.hpp"
#include "support/runtime_helpers.hpp"

using namespace oncely::test;
using namespace std::chrono_literals;
using Outcome = oncely::JobEvent::Outcome;

TEST_CASE("embedder: add_builtin_handlers registers the Config's declared kinds on a Runtime") {
  PgFixture db;
  create_balances(db);
  oncely::Config config = config_for(db, {});
  config.handlers = {{"credit",
                      {{"type", "sql"},
                       {"statement", "INSERT INTO " + db.table("balances") + " VALUES ($1, $2)"},
                       {"params", {"/account", "/cents"}}}}};
  EventRecorder events;
  oncely::RuntimeOptions options{quiet_logger(), events.callback(), false};
  oncely::Runtime runtime(config, options);
  CHECK(oncely::add_builtin_handlers(runtime, config) == std::vector<std::string>{"credit"});
  enqueue(db, "credit", {{"account", 7}, {"cents", 250}});
  RunningRuntime running(runtime);
  REQUIRE(events.wait_for(Outcome::completed, 1, 15s));
  running.stop();
  CHECK(db.scalar<long>("SELECT cents FROM " + db.table("balances") + " WHERE account = 7") == 250);
}

TEST_CASE("embedder: a bad declaration is a ConfigError naming its path, before anything runs") {
  PgFixture db;
  oncely::Config config = config_for(db, {});
  config.handlers = {{"ok", {{"type", "sql"}, {"statement", "SELECT 1"}}}, {"typo", {{"type", "sqll"}}}};
  oncely::Runtime runtime(
      config, oncely::RuntimeOptions{.logger = quiet_logger(), .on_event = nullptr, .handle_signals = false});
  CHECK_THROWS_WITH_AS(oncely::add_builtin_handlers(runtime, config),
                       "/handlers/typo/type: unknown handler type 'sqll' (expected sql, exec or http)",
                       oncely::ConfigError);
}

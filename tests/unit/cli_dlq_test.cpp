#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "cli/app.hpp"
#include "support/parsed_cli.hpp"

using oncely::cli::DlqAction;

namespace {

// An address where nothing listens: commands that must refuse before connecting are
// tested against it, so a test that did connect would fail loudly instead.
constexpr const char* kNowhere = "postgresql://app:Sup3rS3cret@127.0.0.1:1/none";

struct Parsed : oncely::test::ParsedCli {
  using ParsedCli::ParsedCli;
  const oncely::cli::DlqOptions& dlq() const { return cli->dlq; }
};

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

TEST_CASE("cli: dlq list binds every filter") {
  unsetenv("DATABASE_URL");
  Parsed p({"dlq",
            "list",
            "--id",
            "3",
            "--id",
            "5,8",
            "--queue",
            "mail",
            "--kind",
            "send_email",
            "--class",
            "exhausted",
            "--error",
            "Timeout",
            "--older-than",
            "7d",
            "--newer-than",
            "30d",
            "--include-replayed",
            "--json",
            "--limit",
            "10",
            "--database-url",
            "postgresql://x@h/db"});
  REQUIRE_FALSE(p.exit);
  const auto& o = p.dlq();
  CHECK(o.action == DlqAction::list);
  CHECK(o.ids == std::vector<std::int64_t>{3, 5, 8});
  CHECK(o.queue == "mail");
  CHECK(o.kind == "send_email");
  CHECK(o.error_class == "exhausted");
  CHECK(o.error == "Timeout");
  CHECK(o.older_than == "7d");
  CHECK(o.newer_than == "30d");
  CHECK(o.include_replayed);
  CHECK(o.json);
  CHECK(o.limit == 10);
  CHECK_FALSE(o.all);
  CHECK(p.cli->globals.database_url == "postgresql://x@h/db");
}

TEST_CASE("cli: dlq list defaults and --group-by") {
  Parsed p({"dlq", "list", "--group-by", "error"});
  REQUIRE_FALSE(p.exit);
  CHECK(p.dlq().action == DlqAction::list);
  CHECK(p.dlq().group_by == "error");
  CHECK(p.dlq().limit == 50);
  CHECK_FALSE(p.dlq().include_replayed);
  CHECK_FALSE(p.dlq().json);
  for (const char* by : {"class", "kind", "queue"}) {
    Parsed q({"dlq", "list", "--group-by", by});
    REQUIRE_FALSE(q.exit);
    CHECK(q.dlq().group_by == by);
  }
}

TEST_CASE("cli: dlq show, replay and purge bind their own options") {
  Parsed show({"dlq", "show", "--id", "4"});
  REQUIRE_FALSE(show.exit);
  CHECK(show.dlq().action == DlqAction::show);
  CHECK(show.dlq().ids == std::vector<std::int64_t>{4});

  Parsed replay({"dlq", "replay", "--queue", "mail", "--to-queue", "mail_retry", "--dry-run"});
  REQUIRE_FALSE(replay.exit);
  CHECK(replay.dlq().action == DlqAction::replay);
  CHECK(replay.dlq().to_queue == "mail_retry");
  CHECK(replay.dlq().dry_run);

  Parsed purge({"dlq", "purge", "--all"});
  REQUIRE_FALSE(purge.exit);
  CHECK(purge.dlq().action == DlqAction::purge);
  CHECK(purge.dlq().all);
  CHECK_FALSE(purge.dlq().dry_run);
}

TEST_CASE("cli: dlq usage errors print one line and exit 2") {
  for (const auto& args : std::vector<std::vector<const char*>>{
           {"dlq"},
           {"dlq", "frobnicate"},
           {"dlq", "list", "--group-by", "colour"},
           {"dlq", "list", "--id", "abc"},
           {"dlq", "list", "--id", "0"},
           {"dlq", "list", "--limit", "-1"},
           {"dlq", "list", "--to-queue", "x"},  // replay's option
           {"dlq", "show", "--dry-run"},        // replay's and purge's
           {"dlq", "purge", "--json"},
       }) {
    Parsed p(args);
    CAPTURE(args.back());
    CAPTURE(p.err.str());
    REQUIRE(p.exit);
    CHECK(*p.exit == oncely::cli::kExitUsage);
    CHECK(p.err.str().starts_with("oncely: error: "));
    CHECK(lines(p.err.str()) == 1);
  }
}

TEST_CASE("cli: dlq replay and purge refuse to run without a filter, before connecting") {
  for (const char* verb : {"replay", "purge"}) {
    for (const bool dry_run : {false, true}) {
      std::vector<const char*> args{"dlq", verb, "--database-url", kNowhere};
      if (dry_run) args.push_back("--dry-run");
      Parsed p(args);
      CAPTURE(verb);
      REQUIRE_FALSE(p.exit);
      CHECK(p.dispatch() == oncely::cli::kExitUsage);
      CHECK(p.err.str() ==
            std::string("oncely: error: refusing to ") + verb + " every dead letter: give a filter or --all\n");
      CHECK(p.out.str().empty());
    }
  }
}

TEST_CASE("cli: dlq bad filter values are refused with one line, exit 2, before connecting") {
  for (const auto& args : std::vector<std::vector<const char*>>{
           {"dlq", "list", "--older-than", "7 days"},
           {"dlq", "list", "--newer-than", "5x"},
           {"dlq", "list", "--queue", ""},
           {"dlq", "replay", "--error", ""},
           {"dlq", "replay", "--all", "--to-queue", ""},
       }) {
    std::vector<const char*> with_url = args;
    with_url.push_back("--database-url");
    with_url.push_back(kNowhere);
    Parsed p(with_url);
    CAPTURE(args.back());
    REQUIRE_FALSE(p.exit);
    CHECK(p.dispatch() == oncely::cli::kExitUsage);
    CAPTURE(p.err.str());
    CHECK(p.err.str().starts_with("oncely: error: --"));
    CHECK(lines(p.err.str()) == 1);
    CHECK(p.err.str().find("Sup3rS3cret") == std::string::npos);
  }
}

TEST_CASE("cli: dlq --help lists the subcommands and the filters") {
  Parsed p({"dlq", "--help"});
  REQUIRE(p.exit);
  CHECK(*p.exit == 0);
  for (const char* word : {"list", "show", "replay", "purge", "--older-than"}) {
    CAPTURE(word);
    CHECK(p.out.str().find(word) != std::string::npos);
  }
  Parsed replay({"dlq", "replay", "--help"});
  REQUIRE(replay.exit);
  CHECK(replay.out.str().find("--to-queue") != std::string::npos);
  CHECK(replay.out.str().find("--dry-run") != std::string::npos);
}

TEST_CASE("cli: enqueue - binds --batch-size") {
  Parsed p({"enqueue", "-", "--batch-size", "100", "--queue", "bulk"});
  REQUIRE_FALSE(p.exit);
  CHECK(p.cli->enqueue.kind == "-");
  CHECK(p.cli->enqueue.batch_size == 100);
  Parsed zero({"enqueue", "-", "--batch-size", "0"});
  REQUIRE(zero.exit);
  CHECK(*zero.exit == oncely::cli::kExitUsage);
}

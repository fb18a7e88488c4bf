// Every number the command line takes, mistyped: one line that names the option, says what
// it expects and the range, and quotes what was given. CLI11's own checks answered
// `oncely jobs show abc` with "Value abc not in range 0.000000 to 1797693134862315708145..."
// (DBL_MAX's 309 digits).
//
// kNumbers lists every numeric option and argument of every command. It was found by
// reading each add_option in src/cli/ (`grep -n add_option src/cli/*.cpp`) and the type of
// the field it binds; "every numeric option has a row" keeps it whole by walking the
// commands make_app() builds for each option CLI11 reads as a number (INT, UINT, FLOAT).
// Durations (--older-than, --run-at, --max-age-*, --statement-timeout...) are text, read by
// parse_duration at dispatch, with tests of their own; the ports in --addr and
// --metrics-addr are in a HOST:PORT text: --addr's is at the end of this file, and
// --metrics-addr's is the library's metrics server's to read.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "cli/app.hpp"
#include "cli/cli_numbers.hpp"
#include "oncely/errors.hpp"
#include "support/parsed_cli.hpp"
#include "support/text.hpp"

using oncely::test::ParsedCli;

namespace {

struct NumericInput {
  std::vector<const char*> command;  // the commands and the option, e.g. {"dlq", "list", "--id"}
  std::string expects;               // what the error says it wants, e.g. "a dead-letter id"
  std::string range;                 // the range in words, e.g. "an integer from 1 to 10000"
  const char* min;                   // the least it takes, and just below it
  const char* below;
  const char* max;  // the most, and just above it
  const char* above;
  std::vector<const char*> operands = {};  // after the value: what the command needs besides
};

constexpr const char* kMaxId = "9223372036854775807";
constexpr const char* kBeyondId = "9223372036854775808";

const std::vector<NumericInput> kNumbers = {
    // enqueue
    {{"enqueue", "--priority"},
     "a priority",
     "an integer from -32768 to 32767",
     "-32768",
     "-32769",
     "32767",
     "32768",
     {"k"}},
    {{"enqueue", "--max-attempts"},
     "a number of attempts",
     "an integer from 1 to 2147483647",
     "1",
     "0",
     "2147483647",
     "2147483648",
     {"k"}},
    {{"enqueue", "--batch-size"},
     "a number of jobs per transaction",
     "an integer from 1 to 1000000",
     "1",
     "0",
     "1000000",
     "1000001",
     {"-"}},
    {{"enqueue", "--depends-on"}, "a job id", "a positive integer", "1", "0", kMaxId, kBeyondId, {"k"}},
    {{"enqueue", "--batch"}, "a batch id", "a positive integer", "1", "0", kMaxId, kBeyondId, {"k"}},
    // batches
    {{"batches", "close", "ID"}, "a batch id", "a positive integer", "1", "0", kMaxId, kBeyondId},
    {{"batches", "show", "ID"}, "a batch id", "a positive integer", "1", "0", kMaxId, kBeyondId},
    {{"batches", "list", "--limit"}, "a number of batches", "an integer from 1 to 1000", "1", "0", "1000", "1001"},
    {{"batches", "list", "--before"}, "a batch id", "a positive integer", "1", "0", kMaxId, kBeyondId},
    // dlq: the filters and --limit of each subcommand
    {{"dlq", "list", "--id"}, "a dead-letter id", "a positive integer", "1", "0", kMaxId, kBeyondId},
    {{"dlq", "list", "--job-id"}, "a job id", "a positive integer", "1", "0", kMaxId, kBeyondId},
    {{"dlq", "list", "--limit"}, "a number of rows, 0 for all", "a non-negative integer", "0", "-1", kMaxId, kBeyondId},
    {{"dlq", "show", "--id"}, "a dead-letter id", "a positive integer", "1", "0", kMaxId, kBeyondId},
    {{"dlq", "show", "--job-id"}, "a job id", "a positive integer", "1", "0", kMaxId, kBeyondId},
    {{"dlq", "show", "--limit"}, "a number of rows, 0 for all", "a non-negative integer", "0", "-1", kMaxId, kBeyondId},
    {{"dlq", "replay", "--id"}, "a dead-letter id", "a positive integer", "1", "0", kMaxId, kBeyondId},
    {{"dlq", "replay", "--job-id"}, "a job id", "a positive integer", "1", "0", kMaxId, kBeyondId},
    {{"dlq", "replay", "--limit"},
     "a number of rows, 0 for all",
     "a non-negative integer",
     "0",
     "-1",
     kMaxId,
     kBeyondId},
    {{"dlq", "purge", "--id"}, "a dead-letter id", "a positive integer", "1", "0", kMaxId, kBeyondId},
    {{"dlq", "purge", "--job-id"}, "a job id", "a positive integer", "1", "0", kMaxId, kBeyondId},
    {{"dlq", "purge", "--limit"},
     "a number of rows, 0 for all",
     "a non-negative integer",
     "0",
     "-1",
     kMaxId,
     kBeyondId},
    // jobs
    {{"jobs", "list", "--limit"}, "a number of jobs", "an integer from 1 to 10000", "1", "0", "10000", "10001"},
    {{"jobs", "list", "--after"}, "a job id", "a non-negative integer", "0", "-1", kMaxId, kBeyondId},
    {{"jobs", "list", "--batch"}, "a batch id", "a positive integer", "1", "0", kMaxId, kBeyondId},
    {{"jobs", "list", "--before"}, "a job id", "a non-negative integer", "0", "-1", kMaxId, kBeyondId},
    {{"jobs", "show", "ID"}, "a job id", "a positive integer", "1", "0", kMaxId, kBeyondId},
    {{"jobs", "show", "--id"}, "a job id", "a positive integer", "1", "0", kMaxId, kBeyondId},
    {{"jobs", "cancel", "--id"}, "a job id", "a positive integer", "1", "0", kMaxId, kBeyondId},
    {{"jobs", "cancel", "--batch"}, "a batch id", "a positive integer", "1", "0", kMaxId, kBeyondId},
    // check: the ranges of the worker file's "alarms"
    {{"check", "--dead-letters-warning"},
     "a number of dead letters",
     "an integer from 0 to 1000000000",
     "0",
     "-1",
     "1000000000",
     "1000000001"},
    {{"check", "--dead-letters-critical"},
     "a number of dead letters",
     "an integer from 0 to 1000000000",
     "0",
     "-1",
     "1000000000",
     "1000000001"},
    {{"check", "--failure-rate-min-attempts"},
     "a number of attempts",
     "an integer from 0 to 1000000000",
     "0",
     "-1",
     "1000000000",
     "1000000001"},
    {{"check", "--failure-rate-warning"}, "a percentage", "a number from 0 to 100", "0", "-0.5", "100", "100.5"},
    {{"check", "--failure-rate-critical"}, "a percentage", "a number from 0 to 100", "0", "-0.5", "100", "100.5"},
    {{"check", "--dead-letter-growth-warning"},
     "dead letters per minute",
     "a number from 0 to 60000",
     "0",
     "-0.5",
     "60000",
     "60000.5"},
    {{"check", "--dead-letter-growth-critical"},
     "dead letters per minute",
     "a number from 0 to 60000",
     "0",
     "-0.5",
     "60000",
     "60000.5"},
};

// Wrong for every row: not numbers, numbers spelled otherwise, and beyond every range.
const std::vector<std::string> kNeverNumbers = {
    "xyz",
    "12abc",
    "1e3",
    "",
    "0x10",
    " 7",
    "7 ",
    "1/2",
    "nan",
    "inf",
    "\x1b[31m7",
    "-99999",                   // below every range (the least is the priority's -32768)
    "99999999999999999999999",  // beyond 64 bits
    std::string(400, '9'),      // beyond a double
};

std::string joined(const std::vector<const char*>& words) {
  std::string text;
  for (const char* w : words) text += (text.empty() ? "" : " ") + std::string(w);
  return text;
}

const char* option_of(const NumericInput& input) { return input.command.back(); }

// A positional argument is named in capitals (ID) and not typed.
bool is_positional(const NumericInput& input) { return std::isupper(static_cast<unsigned char>(option_of(input)[0])); }

ParsedCli parsed_with(const NumericInput& input, const std::string& value) {
  std::vector<const char*> args = input.command;
  if (is_positional(input)) args.pop_back();
  args.push_back(value.c_str());
  args.insert(args.end(), input.operands.begin(), input.operands.end());
  return ParsedCli(args);
}

// `check` speaks the Nagios convention: its usage errors are UNKNOWN (3).
int usage_code(const NumericInput& input) {
  return std::string(input.command.front()) == "check" ? 3 : oncely::cli::kExitUsage;
}

bool has_long_number(const std::string& text) { return std::regex_search(text, std::regex("[0-9]{100}")); }

void check_refused(const NumericInput& input, const std::string& value, bool beyond_max) {
  ParsedCli p = parsed_with(input, value);
  const std::string err = p.err.str();
  CAPTURE(joined(input.command));
  CAPTURE(value);
  CAPTURE(err);
  REQUIRE(p.exit);
  CHECK(*p.exit == usage_code(input));
  CHECK(err.starts_with("oncely: error: "));
  CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  CHECK(err.ends_with("\n"));
  CHECK(err.find(std::string(option_of(input)) + ": expected " + input.expects + " (") != std::string::npos);
  // The range: for a number beyond an open-ended one, its end is spelled out.
  CHECK(err.find(beyond_max ? std::string(" to ") + input.max + ")" : "(" + input.range + ")") != std::string::npos);
  // What was given, quoted as printable() shows it; a long one only by its head.
  const std::string shown = value.size() > 40 ? value.substr(0, 40) : oncely::detail::printable(value);
  CHECK(err.find("got \"" + shown) != std::string::npos);
  CHECK_FALSE(has_long_number(err));
  CHECK(err.find("not in range") == std::string::npos);
  CHECK(err.find("Could not convert") == std::string::npos);
}

bool is_numeric_type(const std::string& type_name) {
  return type_name.starts_with("INT") || type_name.starts_with("UINT") || type_name.starts_with("FLOAT");
}

// "dlq list --id" for every option of every command that CLI11 reads as a number.
void collect_numeric(const CLI::App& app, const std::string& path, std::set<std::string>& found) {
  for (const CLI::Option* option : app.get_options()) {
    if (is_numeric_type(option->get_type_name())) found.insert(path + option->get_name());
  }
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    collect_numeric(*sub, path + sub->get_name() + " ", found);
  }
}

}  // namespace

TEST_CASE("cli numbers: every numeric option has a row") {
  ParsedCli p({"--help"});
  std::set<std::string> found;
  collect_numeric(p.cli->app, "", found);
  std::set<std::string> listed;
  for (const NumericInput& input : kNumbers) listed.insert(joined(input.command));
  CHECK(found == listed);
  CHECK(found.size() >= 20);  // the walk itself works
}

TEST_CASE("cli numbers: a mistyped number is one line naming the option, what it expects and the value") {
  for (const NumericInput& input : kNumbers) {
    for (const std::string& value : kNeverNumbers) {
      check_refused(input, value, !value.empty() && value.find_first_not_of("9") == std::string::npos);
    }
    check_refused(input, input.below, false);
    check_refused(input, input.above, true);
  }
}

TEST_CASE("cli numbers: each range's ends are accepted, and a leading 0") {
  for (const NumericInput& input : kNumbers) {
    // "09": CLI11 alone converts with strtoll(base 0), as octal, where 9 is no digit.
    for (const char* value : {input.min, input.max, "09"}) {
      ParsedCli p = parsed_with(input, value);
      CAPTURE(joined(input.command));
      CAPTURE(value);
      CAPTURE(p.err.str());
      CHECK_FALSE(p.exit);
    }
  }
}

TEST_CASE("cli numbers: an integer is read as the decimal it spells") {
  // CLI11 alone reads with strtoll(base 0): "010" was 8.
  ParsedCli p({"jobs", "list", "--limit", "010", "--after", "+7"});
  REQUIRE_FALSE(p.exit);
  CHECK(p.cli->jobs.limit == 10);
  CHECK(p.cli->jobs.after == 7);
  ParsedCli ids({"dlq", "list", "--id", "0012,5", "--job-id", "9223372036854775807"});
  REQUIRE_FALSE(ids.exit);
  CHECK(ids.cli->dlq.ids == std::vector<std::int64_t>{12, 5});
  CHECK(ids.cli->dlq.job_ids == std::vector<std::int64_t>{9223372036854775807});
  ParsedCli rate({"check", "--failure-rate-warning", "2.5", "--dead-letter-growth-critical", ".5"});
  REQUIRE_FALSE(rate.exit);
  CHECK(rate.cli->check.failure_rate_warning_pct == doctest::Approx(2.5));
  CHECK(rate.cli->check.growth_critical == doctest::Approx(0.5));
}

TEST_CASE("cli numbers: one bad id among several is named") {
  ParsedCli p({"jobs", "cancel", "--id", "3,x7,5"});
  REQUIRE(p.exit);
  CHECK(p.err.str() == "oncely: error: --id: expected a job id (a positive integer), got \"x7\" (see oncely --help)\n");
}

TEST_CASE("cli numbers: the examples of the report") {
  ParsedCli show({"jobs", "show", "abc"});
  CHECK(show.err.str() ==
        "oncely: error: ID: expected a job id (a positive integer), got \"abc\" (see oncely --help)\n");
  ParsedCli dlq({"dlq", "show", "--id", "xyz"});
  CHECK(dlq.err.str() ==
        "oncely: error: --id: expected a dead-letter id (a positive integer), got \"xyz\" (see oncely --help)\n");
  ParsedCli huge({"jobs", "list", "--limit", "99999999999999999999999"});
  CHECK(huge.err.str() ==
        "oncely: error: --limit: expected a number of jobs (an integer from 1 to 10000), got "
        "\"99999999999999999999999\" (see oncely --help)\n");
}

TEST_CASE("cli numbers: web --addr's port") {
  using oncely::cli::parse_web_address;
  for (const char* port : {"99999", "-1", "x", "1e3", "99999999999999999999999", "8080 "}) {
    const std::string address = std::string("127.0.0.1:") + port;
    CAPTURE(address);
    try {
      parse_web_address(address);
      FAIL("accepted");
    } catch (const oncely::ConfigError& e) {
      CHECK(std::string(e.what()) ==
            std::string("--addr: expected a port (an integer from 0 to 65535), got \"") + port + "\"");
    }
  }
  CHECK(parse_web_address("127.0.0.1:65535").second == 65535);
  CHECK(parse_web_address("127.0.0.1:0").second == 0);
}

TEST_CASE("cli numbers: integer_refusal and decimal_refusal") {
  using oncely::cli::decimal_refusal;
  using oncely::cli::integer_refusal;
  const oncely::cli::IntegerRule ids{"an id", 1, oncely::cli::kMaxId};
  CHECK_FALSE(integer_refusal("1", ids));
  CHECK_FALSE(integer_refusal("+1", ids));
  CHECK(integer_refusal("-9223372036854775809", ids) ==
        "expected an id (a positive integer), got \"-9223372036854775809\"");
  CHECK(integer_refusal(std::string(50, '7'), ids) ==
        "expected an id (an integer from 1 to 9223372036854775807), got \"" + std::string(40, '7') +
            "...\" (50 characters)");
  const oncely::cli::DecimalRule percent{"a percentage", 0, 100};
  CHECK_FALSE(decimal_refusal("99.5", percent));
  CHECK_FALSE(decimal_refusal("-0", percent));
  CHECK(decimal_refusal("5.", percent) == std::nullopt);
  CHECK(decimal_refusal("1.2.3", percent) == "expected a percentage (a number from 0 to 100), got \"1.2.3\"");
  CHECK(decimal_refusal(".", percent) == "expected a percentage (a number from 0 to 100), got \".\"");
}

TEST_CASE("cli lists: an empty item of a comma-separated list is refused, naming the option") {
  // CLI11 alone would drop it: "--depends-on $A,$B" with B empty would lose a parent unsaid.
  for (const std::vector<const char*>& args : {std::vector<const char*>{"enqueue", "k", "--depends-on", "1,,2"},
                                               {"enqueue", "k", "--depends-on=1,"},
                                               {"jobs", "cancel", "--id", ",3"},
                                               {"dlq", "replay", "--id", "4,,5"}}) {
    ParsedCli p(args);
    CAPTURE(p.err.str());
    REQUIRE(p.exit);
    CHECK(*p.exit == 2);
    CHECK(p.err.str().find(": an empty item in \"") != std::string::npos);
  }
  ParsedCli fine({"enqueue", "k", "--depends-on", "1,2"});
  CHECK_FALSE(fine.exit);
  ParsedCli not_a_list({"jobs", "list", "--error", "a,,b"});  // text, not a list
  CHECK_FALSE(not_a_list.exit);
}

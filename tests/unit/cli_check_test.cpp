// `oncely check`'s defaults are the library's (written once, in CheckThresholds), and
// --help shows them. --help showed none but --failure-rate-min-attempts's.
#include <doctest/doctest.h>

#include <string>

#include "cli/app.hpp"
#include "oncely/stats.hpp"

#include "support/parsed_cli.hpp"

using oncely::test::ParsedCli;

namespace {

/// The --help line (with its wrapped description) of `option`.
std::string help_of(const std::string& help, const std::string& option) {
  const std::size_t at = help.find("  " + option + " ");
  REQUIRE_MESSAGE(at != std::string::npos, option << " not in:\n" << help);
  const std::size_t end = help.find("\n  -", at + 1);
  return help.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

}  // namespace

TEST_CASE("cli check: --help shows each threshold's default, from CheckThresholds") {
  ParsedCli p({"check", "--help"});
  REQUIRE(p.exit);
  CHECK(*p.exit == 0);
  const std::string help = p.out.str();
  CHECK(help_of(help, "--dead-letters-warning").find("(default: not checked)") != std::string::npos);
  CHECK(help_of(help, "--dead-letters-critical").find("(default: 10)") != std::string::npos);
  CHECK(help_of(help, "--failure-rate-warning").find("(default: 1)") != std::string::npos);
  CHECK(help_of(help, "--failure-rate-critical").find("(default: not checked)") != std::string::npos);
  CHECK(help_of(help, "--failure-rate-min-attempts").find("(default: 10)") != std::string::npos);
  CHECK(help_of(help, "--max-age-warning").find("(default: 5m)") != std::string::npos);
  CHECK(help_of(help, "--max-age-critical").find("(default: not checked)") != std::string::npos);
  CHECK(help_of(help, "--dead-letter-growth-warning").find("(default: not checked)") != std::string::npos);
}

TEST_CASE("cli check: options not given keep the library's thresholds; given ones replace them") {
  ParsedCli none({"check"});
  const oncely::CheckThresholds library;
  const oncely::CheckThresholds t = oncely::cli::check_thresholds(none.cli->check);
  CHECK(t.dead_letters_warning == library.dead_letters_warning);
  CHECK(t.dead_letters_critical == library.dead_letters_critical);
  CHECK(t.failure_rate_warning == library.failure_rate_warning);
  CHECK(t.failure_rate_critical == library.failure_rate_critical);
  CHECK(t.failure_rate_min_attempts == library.failure_rate_min_attempts);
  CHECK(t.max_age_warning_s == library.max_age_warning_s);
  CHECK(t.max_age_critical_s == library.max_age_critical_s);
  CHECK(t.dead_letter_growth_warning == library.dead_letter_growth_warning);

  ParsedCli given({"check", "--dead-letters-critical", "3", "--failure-rate-warning", "5", "--max-age-warning", "90s",
                   "--failure-rate-min-attempts", "2"});
  const oncely::CheckThresholds g = oncely::cli::check_thresholds(given.cli->check);
  CHECK(g.dead_letters_critical == 3);
  CHECK(g.failure_rate_warning == doctest::Approx(0.05));
  CHECK(g.max_age_warning_s == 90);
  CHECK(g.failure_rate_min_attempts == 2);
}

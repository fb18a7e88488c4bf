// Nesting is bounded where user JSON comes in: a worker configuration
// 100,000 deep under "handlers" crashed (SIGSEGV) while it was copied, and payloads of any
// depth went on to PostgreSQL, which fails them with "stack depth limit exceeded" (exit 1)
// from about 10,000 levels on.
#include <doctest/doctest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "oncely/config.hpp"
#include "oncely/errors.hpp"
#include "support/exact_json.hpp"

#include "support/config_errors.hpp"
#include "support/temp_dir.hpp"

namespace json = oncely::detail::exact_json;
using oncely::Config;

namespace {

std::string arrays(std::size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }
std::string objects(std::size_t depth) {
  std::string text;
  for (std::size_t i = 0; i < depth; ++i) text += R"({"a":)";
  text += "1";
  return text + std::string(depth, '}');
}

/// The SyntaxError of validate(`text`) as describe() words it, or "" when it is accepted.
std::string validate_error(const std::string& text) {
  try {
    json::validate(text);
  } catch (const json::SyntaxError& e) {
    return json::describe(e);
  }
  return "";
}

std::string members_error(const std::string& text) {
  try {
    (void)json::object_members(text);
  } catch (const json::SyntaxError& e) {
    return json::describe(e, "column");
  }
  return "";
}

std::string config_with_handler(const std::string& handler) {
  return R"({"queues": {"q": {}}, "handlers": {"deep": )" + handler + "}}";
}

}  // namespace

TEST_CASE("deep input: a payload nests at most kMaxNesting (1000) deep, from the first bracket too many") {
  CHECK(json::kMaxNesting == 1000);
  CHECK(validate_error(arrays(1000)) == "");
  CHECK(validate_error(objects(1000)) == "");
  CHECK(validate_error(arrays(1001)) == "not valid JSON at byte 1001: arrays and objects nested more than 1000 deep");
  CHECK(validate_error(objects(100'000)) ==
        "not valid JSON at byte 5001: arrays and objects nested more than 1000 deep");
}

TEST_CASE("deep input: an NDJSON line's payload is bounded as a payload is (the line's object not counted)") {
  const std::string prefix = R"({"kind":"k","payload":)";
  CHECK(members_error(prefix + arrays(1000) + "}") == "");
  CHECK(members_error(prefix + arrays(1001) + "}") == "not valid JSON at column " +
                                                          std::to_string(prefix.size() + 1001) +
                                                          ": arrays and objects nested more than 1000 deep");
  CHECK(members_error(prefix + arrays(100'000) + "}").ends_with("nested more than 1000 deep"));
}

TEST_CASE("deep input: text read back from jsonb is not bounded (PostgreSQL bounded it when it stored it)") {
  CHECK(json::compact(arrays(5000)) == arrays(5000));
}

TEST_CASE("deep input: a configuration nested too deep is refused with the handler's path, not a crash") {
  using oncely::test::parse_error;
  // The document, "handlers", the handler and 997 arrays: 1000 levels.
  CHECK(parse_error(config_with_handler(R"({"x": )" + arrays(997) + "}")) == "(no error)");
  CHECK(parse_error(config_with_handler(R"({"x": )" + arrays(998) + "}")) ==
        "/handlers/deep: arrays and objects nested more than 1000 deep");
  CHECK(parse_error(config_with_handler(objects(100'000))) ==
        "/handlers/deep: arrays and objects nested more than 1000 deep");
  CHECK(parse_error(R"({"queues": {"q": {"backoff": )" + arrays(100'000) + "}}}") ==
        "/queues/q: arrays and objects nested more than 1000 deep");
}

TEST_CASE("deep input: Config::load of a 100,000-deep file names the file's JSON path; 1e400 names the file") {
  const oncely::test::TempDir dir;
  const std::string deep = dir.write("deep.json", config_with_handler(objects(100'000)), 0644);
  CHECK_THROWS_WITH_AS(Config::load(deep), "/handlers/deep: arrays and objects nested more than 1000 deep",
                       oncely::ConfigError);
  // nlohmann refuses 1e400 with out_of_range, not parse_error: it escaped as exit 1.
  const std::string huge = dir.write("huge.json", R"({"queues": {"q": {"rate_limit_per_sec": 1e400}}})", 0644);
  CHECK_THROWS_WITH_AS(
      Config::load(huge),
      (huge + ": invalid JSON: [json.exception.out_of_range.406] number overflow parsing '1e400'").c_str(),
      oncely::ConfigError);
}

#include <doctest/doctest.h>

#include <sstream>

#include <spdlog/sinks/ostream_sink.h>

#include "cli/log_format.hpp"
#include "oncely/errors.hpp"

using oncely::detail::log_fields;

TEST_CASE("log_format: a job line becomes fields, the error keeps its spaces") {
  const auto f = log_fields(
      "job retry queue=critical kind=charge id=42 attempt=2 delay=10s class=retryable "
      "error=upstream said no: 503 a=b");
  CHECK(f["msg"] == "job retry");
  CHECK(f["queue"] == "critical");
  CHECK(f["kind"] == "charge");
  CHECK(f["id"] == 42);
  CHECK(f["attempt"] == 2);
  CHECK(f["delay"] == "10s");
  CHECK(f["error"] == "upstream said no: 503 a=b");
}

TEST_CASE("log_format: a plain sentence is all message") {
  const auto f = log_fields("received SIGTERM, draining (grace 30s)");
  CHECK(f["msg"] == "received SIGTERM, draining (grace 30s)");
  CHECK(f.size() == 1);
}

TEST_CASE("log_format: the JSON formatter writes one parseable object per line") {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  sink->set_formatter(std::make_unique<oncely::detail::JsonLogFormatter>());
  spdlog::logger log("t", sink);
  log.warn("job retry queue=q kind=k id=7 attempt=1 error=bad \"quote\"\nnext line");
  const auto line = nlohmann::json::parse(out.str());
  CHECK(line["level"] == "warning");
  CHECK(line["id"] == 7);
  CHECK(line["error"] == "bad \"quote\"\nnext line");
  CHECK(line["ts"].get<std::string>().ends_with("Z"));
  CHECK(out.str().find('\n') == out.str().size() - 1);
}

TEST_CASE("log_format: only text and json are formats") {
  CHECK(oncely::detail::parse_log_format("json") == oncely::detail::LogFormat::json);
  CHECK_THROWS_AS(oncely::detail::parse_log_format("yaml"), oncely::ConfigError);
}

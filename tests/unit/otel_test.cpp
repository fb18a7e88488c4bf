// OpenTelemetry's pure parts: the OTEL_* variables read as a table, the samplers, the
// OTLP/JSON encoding read back by the protocol's JSON mapping, and the spans of an attempt.
#include <doctest/doctest.h>

#include <map>

#include <nlohmann/json.hpp>

#include "execution/attempt_spans.hpp"
#include "oncely/errors.hpp"
#include "support/otel_settings.hpp"
#include "support/otlp_spans.hpp"
#include "support/tracer.hpp"

using namespace oncely::detail;
using nlohmann::json;

namespace {

OtelSettings read(const std::map<std::string, std::string>& env) {
  return read_otel_settings(
      [&](const char* name) -> const char* {
        const auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      "oncely");
}

std::string error_of(const std::map<std::string, std::string>& env) {
  try {
    (void)read(env);
  } catch (const oncely::ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("otel settings: off unless an endpoint is set, and the ways to turn it off again") {
  struct Row {
    std::map<std::string, std::string> env;
    bool enabled;
    std::string url;
  };
  const Row rows[] = {
      {{}, false, ""},
      {{{"OTEL_SERVICE_NAME", "billing"}}, false, ""},
      {{{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"}}, true, "http://collector:4318/v1/traces"},
      {{{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/"}}, true, "http://collector:4318/v1/traces"},
      {{{"OTEL_EXPORTER_OTLP_ENDPOINT", "https://api.example/otlp"}}, true, "https://api.example/otlp/v1/traces"},
      // The signal's own endpoint is used as it is, and wins.
      {{{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"}, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://b:9/t"}},
       true,
       "http://b:9/t"},
      {{{"OTEL_EXPORTER_OTLP_ENDPOINT", "  "}}, false, ""},  // empty counts as unset
      {{{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}, {"OTEL_SDK_DISABLED", "TRUE"}}, false, ""},
      {{{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}, {"OTEL_TRACES_EXPORTER", "none"}}, false, ""},
      // Exporter lists: oncely's part is otlp; the others are the application's SDK's.
      {{{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}, {"OTEL_TRACES_EXPORTER", "console, otlp"}},
       true,
       "http://c:4318/v1/traces"},
      {{{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}, {"OTEL_TRACES_EXPORTER", "jaeger"}}, false, ""},
      // Without an endpoint, another SDK's settings are not oncely's to judge.
      {{{"OTEL_TRACES_EXPORTER", "zipkin"}, {"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}, {"OTEL_TRACES_SAMPLER", "x"}},
       false,
       ""},
      {{{"OTEL_SDK_DISABLED", "true"},
        {"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"},
        {"OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}},
       false,
       ""},
  };
  for (const Row& row : rows) {
    const OtelSettings s = read(row.env);
    CHECK(s.traces_enabled == row.enabled);
    if (row.enabled) CHECK(s.traces.url == row.url);
  }
}

TEST_CASE("otel settings: headers, resource, service name, sampler, batch sizes") {
  const OtelSettings s = read({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"},
                               {"OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=a%3Db%2Cc, tenant = t1"},
                               {"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "X-API-KEY=traces-only"},
                               {"OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attrs,deployment.environment=prod"},
                               {"OTEL_SERVICE_NAME", "billing-worker"},
                               {"OTEL_TRACES_SAMPLER", "parentbased_traceidratio"},
                               {"OTEL_TRACES_SAMPLER_ARG", "0.25"},
                               {"OTEL_BSP_MAX_QUEUE_SIZE", "100"},
                               {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "500"},
                               {"OTEL_EXPORTER_OTLP_TIMEOUT", "2500"}});
  // Percent-decoded; the traces variable's header replaces the general one of that name.
  REQUIRE(s.traces.headers.size() == 2);
  CHECK(s.traces.headers[0] == std::pair<std::string, std::string>{"tenant", "t1"});
  CHECK(s.traces.headers[1] == std::pair<std::string, std::string>{"X-API-KEY", "traces-only"});
  REQUIRE(s.resource.size() == 2);
  CHECK(s.resource[0] == std::pair<std::string, std::string>{"service.name", "billing-worker"});
  CHECK(s.resource[1] == std::pair<std::string, std::string>{"deployment.environment", "prod"});
  CHECK(s.sampler == Sampler::parent_based_trace_id_ratio);
  CHECK(s.ratio == doctest::Approx(0.25));
  CHECK(s.max_queue_size == 100);
  CHECK(s.max_batch_size == 100);  // never more than the queue holds
  CHECK(s.traces.timeout == std::chrono::milliseconds(2500));

  const OtelSettings plain = read({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}});
  CHECK(plain.resource.front().second == "unknown_service:oncely");
  CHECK(plain.sampler == Sampler::parent_based_always_on);
  CHECK(plain.max_queue_size == 2048);
  CHECK(plain.max_batch_size == 512);
  CHECK(plain.warnings.empty());
  CHECK(read({{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}, {"OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"}})
            .warnings.size() == 1);
}

TEST_CASE("otel settings: what cannot be meant is a one-line error naming the variable, never quoting a header") {
  struct Row {
    std::map<std::string, std::string> env;
    std::string error;
  };
  const std::map<std::string, std::string> on = {{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"}};
  const auto with = [&](std::string k, std::string v) {
    auto e = on;
    e[std::move(k)] = std::move(v);
    return e;
  };
  const Row rows[] = {
      {[&] {
         auto e = with("OTEL_TRACES_SAMPLER_ARG", "2");
         e["OTEL_TRACES_SAMPLER"] = "traceidratio";  // read only for the ratio samplers
         return e;
       }(),
       "OTEL_TRACES_SAMPLER_ARG: '2' is not a ratio from 0 to 1"},
      {with("OTEL_TRACES_SAMPLER", "sometimes"), "OTEL_TRACES_SAMPLER: 'sometimes' is not a sampler oncely has"},
      {with("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"), "OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' is not a protocol"},
      {with("OTEL_BSP_MAX_QUEUE_SIZE", "many"), "OTEL_BSP_MAX_QUEUE_SIZE: 'many' is not a whole number of at least 1"},
      {with("OTEL_BSP_MAX_QUEUE_SIZE", "0"), "OTEL_BSP_MAX_QUEUE_SIZE: '0' is not a whole number of at least 1"},
      {with("OTEL_EXPORTER_OTLP_TIMEOUT", "-5"), "OTEL_EXPORTER_OTLP_TIMEOUT: '-5' is not a whole number"},
      {with("OTEL_EXPORTER_OTLP_HEADERS", "secret-value-only"), "OTEL_EXPORTER_OTLP_HEADERS: each entry must be"},
      {with("OTEL_EXPORTER_OTLP_HEADERS", "k=abc%zz"), "OTEL_EXPORTER_OTLP_HEADERS: a '%' that starts no"},
      {with("OTEL_EXPORTER_OTLP_HEADERS", "Content-Type=text/plain"),
       "OTEL_EXPORTER_OTLP_HEADERS: the header 'Content-Type' is not one to send"},
      {with("OTEL_EXPORTER_OTLP_HEADERS", "x-key="), "OTEL_EXPORTER_OTLP_HEADERS: the header 'x-key' is not one"},
      {with("OTEL_EXPORTER_OTLP_HEADERS", "bad name=v"), "OTEL_EXPORTER_OTLP_HEADERS: the header 'bad name' is not"},
      {with("OTEL_BSP_SCHEDULE_DELAY", "99999999999999"),
       "OTEL_BSP_SCHEDULE_DELAY: '99999999999999' is more than a day"},
      {{{"OTEL_EXPORTER_OTLP_ENDPOINT", "ftp://u:pw@c/x?token=1"}},
       "OTEL_EXPORTER_OTLP_ENDPOINT: 'ftp://c/x' is not an http(s) URL"},
  };
  for (const Row& row : rows) {
    const std::string error = error_of(row.env);
    CAPTURE(error);
    CHECK(error.rfind(row.error, 0) == 0);
    CHECK(error.find('\n') == std::string::npos);
    CHECK(error.find("secret-value-only") == std::string::npos);
    CHECK(error.find("pw") == std::string::npos);
  }
}

TEST_CASE("samplers: parent-based ones follow the producer's flag; the ratio splits by trace id") {
  const auto parent = [](bool sampled) {
    return std::optional<SpanContext>(SpanContext{"4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", sampled});
  };
  const std::string low =
                        "0000000000000000"
                        "0000000000000001",
                    high =
                        "0000000000000000"
                        "ffffffffffffff00";
  CHECK(sample(Sampler::parent_based_always_on, 1, parent(false), low) == false);
  CHECK(sample(Sampler::parent_based_always_off, 1, parent(true), low) == true);
  CHECK(sample(Sampler::parent_based_always_off, 1, std::nullopt, low) == false);
  CHECK(sample(Sampler::always_on, 1, parent(false), low) == true);
  CHECK(sample(Sampler::always_off, 1, parent(true), low) == false);
  CHECK(sample(Sampler::trace_id_ratio, 0.5, std::nullopt, low) == true);
  CHECK(sample(Sampler::trace_id_ratio, 0.5, std::nullopt, high) == false);
  CHECK(sample(Sampler::trace_id_ratio, 0.0, std::nullopt, low) == false);
  CHECK(sample(Sampler::parent_based_trace_id_ratio, 0.0, parent(true), low) == true);
}

TEST_CASE("span context: to and from a traceparent") {
  const auto c = SpanContext::of("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  REQUIRE(c);
  CHECK(c->trace_id == "4bf92f3577b34da6a3ce929d0e0e4736");
  CHECK(c->span_id == "00f067aa0ba902b7");
  CHECK(c->sampled);
  CHECK(c->traceparent() == "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  CHECK_FALSE(SpanContext::of("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00")->sampled);
  CHECK_FALSE(SpanContext::of("not one"));
  const SpanId id = Tracer::new_span_id();
  CHECK(id.view().find_first_not_of("0123456789abcdef") == std::string_view::npos);
  CHECK(id != std::string(16, '0'));
}

TEST_CASE("otlp/json: the request reads back by the protocol's JSON mapping") {
  SpanRecord s;
  s.trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  s.span_id = "00f067aa0ba902b7";
  s.parent_span_id = "1111111111111111";
  s.name = "process payments";
  s.kind = SpanKind::consumer;
  s.start_unix_ns = 1765000000123456789;
  s.end_unix_ns = 1765000000223456789;
  s.attributes = {{"messaging.system", std::string("oncely")},
                  {"oncely.job.attempt", std::int64_t{9007199254740993}},  // beyond a double's 2^53
                  {"retry", true},
                  {"ratio", 0.5},
                  {"bad.utf8", std::string("a\xff"
                                           "b")}};
  s.events = {{"oncely.lease.lost", 1765000000200000000, {{"why", std::string("renewal")}}}};
  s.status = SpanStatus::error;
  s.status_message = "upstream said no";
  SpanRecord root;
  root.trace_id = s.trace_id;
  root.span_id = "2222222222222222";
  root.name = "send payments";
  root.kind = SpanKind::producer;

  const json request = json::parse(otlp_json({{"service.name", "billing"}}, "1.2.3", {s, root}));
  const json& rs = request.at("resourceSpans").at(0);
  CHECK(rs.at("resource").at("attributes").at(0) ==
        json{{"key", "service.name"}, {"value", {{"stringValue", "billing"}}}});
  const json& scope = rs.at("scopeSpans").at(0);
  CHECK(scope.at("scope") == json{{"name", "oncely"}, {"version", "1.2.3"}});
  const json& span = scope.at("spans").at(0);
  CHECK(span.at("traceId") == std::string(s.trace_id.view()));
  CHECK(span.at("spanId") == std::string(s.span_id.view()));
  CHECK(span.at("parentSpanId") == "1111111111111111");
  CHECK(span.at("kind") == 5);
  CHECK(span.at("startTimeUnixNano") == "1765000000123456789");  // 64-bit integers as strings
  CHECK(span.at("endTimeUnixNano") == "1765000000223456789");
  const json& attributes = span.at("attributes");
  CHECK(attributes.at(0).at("value") == json{{"stringValue", "oncely"}});
  CHECK(attributes.at(1).at("value") == json{{"intValue", "9007199254740993"}});
  CHECK(attributes.at(2).at("value") == json{{"boolValue", true}});
  CHECK(attributes.at(3).at("value") == json{{"doubleValue", 0.5}});
  CHECK(attributes.at(4).at("value").at("stringValue") ==
        "a\xef\xbf\xbd"
        "b");
  CHECK(span.at("events").at(0).at("name") == "oncely.lease.lost");
  CHECK(span.at("events").at(0).at("timeUnixNano") == "1765000000200000000");
  CHECK(span.at("status") == json{{"code", 2}, {"message", "upstream said no"}});
  const json& second = scope.at("spans").at(1);
  CHECK_FALSE(second.contains("parentSpanId"));  // a root
  CHECK_FALSE(second.contains("status"));        // unset
  CHECK_FALSE(second.contains("events"));
  CHECK(second.at("kind") == 4);
}

TEST_CASE("attempt spans: process under the producer's span, settle under process, as the outcome says") {
  using namespace std::chrono;
  const system_clock::time_point started = system_clock::time_point(seconds(1765000000));
  oncely::JobEvent e;
  e.id = 42;
  e.queue = "payments";
  e.kind = "charge";
  e.attempt = 2;
  e.key = "payment-1001";
  e.trace_context = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  e.started_at = started;
  e.run_time = milliseconds(30);
  e.wait = milliseconds(5);
  const SpanContext process{"4bf92f3577b34da6a3ce929d0e0e4736", "aaaaaaaaaaaaaaaa", true};
  const auto settled = started + milliseconds(32);

  SUBCASE("completed") {
    e.outcome = oncely::JobEvent::Outcome::completed;
    const auto spans = attempt_spans(e, process, "bbbbbbbbbbbbbbbb", settled);
    REQUIRE(spans.size() == 2);
    const SpanRecord& p = spans[0];
    CHECK(p.name == "process payments");
    CHECK(p.kind == SpanKind::consumer);
    CHECK(p.parent_span_id == "00f067aa0ba902b7");
    CHECK(p.end_unix_ns - p.start_unix_ns == 30'000'000);
    CHECK(p.status == SpanStatus::unset);
    const SpanRecord& s = spans[1];
    CHECK(s.name == "settle payments");
    CHECK(s.kind == SpanKind::client);
    CHECK(s.parent_span_id == "aaaaaaaaaaaaaaaa");
    CHECK(s.start_unix_ns == p.end_unix_ns);
    CHECK(s.end_unix_ns - s.start_unix_ns == 2'000'000);
    // As exported: the fixed attributes and the span's own, read back from the encoding.
    const auto exported = [](const SpanRecord& r) {
      const json span =
          json::parse(otlp_json({}, "t", {r})).at("resourceSpans").at(0).at("scopeSpans").at(0).at("spans").at(0);
      std::map<std::string, json> out;
      for (const json& kv : span.at("attributes")) CHECK(out.emplace(kv.at("key"), kv.at("value")).second);
      return out;
    };
    const auto text = [](const char* t) { return json{{"stringValue", t}}; };
    const auto pa = exported(p), sa = exported(s);
    for (const auto* a : {&pa, &sa}) {
      CHECK(a->at("messaging.system") == text("oncely"));
      CHECK(a->at("messaging.destination.name") == text("payments"));
      CHECK(a->at("messaging.message.id") == text("42"));
      CHECK(a->at("oncely.job.outcome") == text("completed"));
    }
    CHECK(pa.at("messaging.operation.name") == text("process"));
    CHECK(pa.at("messaging.operation.type") == text("process"));
    CHECK(pa.at("oncely.job.kind") == text("charge"));
    CHECK(pa.at("oncely.job.attempt") == json{{"intValue", "2"}});
    CHECK(pa.at("oncely.job.key") == text("payment-1001"));
    CHECK(pa.at("oncely.job.wait_ms") == json{{"intValue", "5"}});
    CHECK(sa.at("messaging.operation.name") == text("settle"));
    CHECK(sa.at("messaging.operation.type") == text("settle"));
    CHECK(sa.size() == 6);  // the job's kind, attempt and key are its parent's
  }
  SUBCASE("a dead letter: error status and class on process, the class on settle") {
    e.outcome = oncely::JobEvent::Outcome::dead_lettered;
    e.error_class = "permanent";
    e.error = "card declined";
    const auto spans = attempt_spans(e, process, "bbbbbbbbbbbbbbbb", settled);
    REQUIRE(spans.size() == 2);
    CHECK(spans[0].status == SpanStatus::error);
    CHECK(spans[0].status_message == "card declined");
    const std::pair<std::string_view, AttributeValue> permanent{"error.type", std::string("permanent")};
    CHECK(std::ranges::count(spans[0].attributes, permanent) == 1);
    CHECK(std::ranges::count(spans[1].attributes, permanent) == 1);
  }
  SUBCASE("a lost lease: events on both") {
    e.outcome = oncely::JobEvent::Outcome::lease_stale;
    e.lease_lost_at = started + milliseconds(10);
    const auto spans = attempt_spans(e, process, "bbbbbbbbbbbbbbbb", settled);
    REQUIRE(spans.size() == 2);
    CHECK(spans[0].status == SpanStatus::error);  // its outcome was thrown away
    REQUIRE(spans[0].events.size() == 1);
    CHECK(spans[0].events[0].name == "oncely.lease.lost");
    CHECK(spans[0].events[0].time_unix_ns == spans[0].start_unix_ns + 10'000'000);
    REQUIRE(spans[1].events.size() == 1);
    CHECK(spans[1].events[0].name == "oncely.completion.stale");
  }
  SUBCASE("unsampled, or a crash report: nothing") {
    e.outcome = oncely::JobEvent::Outcome::completed;
    CHECK(attempt_spans(e, {process.trace_id, process.span_id, false}, "b", settled).empty());
    e.outcome = oncely::JobEvent::Outcome::crashed;
    CHECK(attempt_spans(e, process, "b", settled).empty());
  }
}

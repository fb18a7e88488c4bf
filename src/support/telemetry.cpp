#include "support/telemetry.hpp"

#include <cstdlib>
#include <optional>

#include <spdlog/spdlog.h>

#include "oncely/errors.hpp"

namespace oncely::detail {
namespace {

struct Telemetry {
  Tracer* tracer = nullptr;
  Meter* meter = nullptr;
  std::optional<ConfigError> error;
};

const Telemetry& telemetry() {
  static const Telemetry made = [] {
    Telemetry t;
    try {
      OtelSettings s = read_otel_settings([](const char* name) { return std::getenv(name); }, "oncely");
      auto log = spdlog::default_logger();
      for (const std::string& warning : s.warnings) log->warn("{}", warning);
      // Never destroyed: see the header.
      if (s.traces_enabled) t.tracer = new Tracer(s, log);
      if (s.metrics_enabled) t.meter = new Meter(s, log);
    } catch (const ConfigError& e) {
      t.error = e;
    }
    return t;
  }();
  return made;
}

}  // namespace

Tracer* process_tracer() {
  const Telemetry& t = telemetry();
  if (t.error) throw *t.error;
  return t.tracer;
}

Meter* process_meter() {
  const Telemetry& t = telemetry();
  if (t.error) throw *t.error;
  return t.meter;
}

bool flush_telemetry(std::chrono::steady_clock::time_point deadline) {
  const Telemetry& t = telemetry();
  const bool spans = t.tracer == nullptr || t.tracer->flush(deadline);
  const bool metrics = t.meter == nullptr || t.meter->flush(deadline);
  return spans && metrics;
}

}  // namespace oncely::detail

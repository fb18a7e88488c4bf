#pragma once
// CapturedLog: a logger whose lines a test can read (an ostream sink; spdlog 1.10 has no
// callback sink).

#include <memory>
#include <sstream>
#include <string>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

namespace oncely::test {

struct CapturedLog {
  std::ostringstream lines;
  std::shared_ptr<spdlog::logger> logger =
      std::make_shared<spdlog::logger>("test", std::make_shared<spdlog::sinks::ostream_sink_mt>(lines));
  explicit CapturedLog(spdlog::level::level_enum level = spdlog::level::debug) { logger->set_level(level); }

  /// Everything logged so far.
  std::string text() {
    logger->flush();
    return lines.str();
  }
  /// How many times `needle` occurs in the log.
  int count(const std::string& needle) {
    const std::string all = text();
    int n = 0;
    for (auto at = all.find(needle); at != std::string::npos; at = all.find(needle, at + 1)) ++n;
    return n;
  }
};

}  // namespace oncely::test

// The __cxa_throw hook and the symboliser, without a database: the frames of a throw are
// found by its exception object, rethrows keep them, and the text names functions with
// file and line. Also the setting's parse and which failures record a stack.
#include <doctest/doctest.h>

#include <unistd.h>

#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "execution/failure_trace.hpp"
#include "execution/retry_policy.hpp"
#include "oncely/config.hpp"
#include "oncely/errors.hpp"
#include "support/config_errors.hpp"
#include "support/stack_trace.hpp"

using oncely::StackTraces;
using namespace oncely::detail;

namespace {

[[gnu::noinline]] void unit_thrower() { throw std::runtime_error("boom"); }
[[gnu::noinline]] void unit_vector_at() {
  std::vector<int> v;
  (void)v.at(1);
}

std::string text_of(const std::exception_ptr& error) {
  const auto trace = trace_of(error);
  if (!trace) return "(no trace)";
  std::string text;
  for (const auto& line : symbolise(*trace)) text += line.get<std::string>() + "\n";
  return text;
}

template <typename F>
std::exception_ptr caught(F f) {
  try {
    f();
  } catch (...) {
    return std::current_exception();
  }
  return nullptr;
}

/// The process's resident set, in MiB (/proc/self/statm's second field, in pages).
double resident_mib() {
  std::ifstream statm("/proc/self/statm");
  long size = 0, resident = 0;
  statm >> size >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1024.0 * 1024.0);
}

struct CaptureOn {
  CaptureOn() { enable_stack_traces(StackTraces::dead_letters); }
  ~CaptureOn() { enable_stack_traces(StackTraces::dead_letters); }
};

}  // namespace

TEST_CASE("stack trace: the frames of a throw name the thrower, with file and line") {
  const CaptureOn on;
  const std::string text = text_of(caught(unit_thrower));
  INFO(text);
  CHECK(text.find("unit_thrower") != std::string::npos);
  CHECK(text.find("stack_trace_test.cpp:") != std::string::npos);
}

TEST_CASE("stack trace: a throw inside libstdc++ (std::vector::at) is hooked too") {
  const CaptureOn on;
  const std::string text = text_of(caught(unit_vector_at));
  INFO(text);
  CHECK(text.find("unit_vector_at") != std::string::npos);
}

TEST_CASE("stack trace: std::rethrow_exception keeps the original frames") {
  const CaptureOn on;
  const std::exception_ptr first = caught(unit_thrower);
  (void)caught([] { throw std::logic_error("another"); });
  const std::string text = text_of(caught([&] { std::rethrow_exception(first); }));
  CHECK(text.find("unit_thrower") != std::string::npos);
}

TEST_CASE("stack trace: nothing with capture off, nor for an exception thrown on another thread") {
  enable_stack_traces(StackTraces::off);
  CHECK(trace_of(caught(unit_thrower)) == nullptr);
  enable_stack_traces(StackTraces::dead_letters);
  std::exception_ptr elsewhere;
  std::thread([&] { elsewhere = caught(unit_thrower); }).join();
  CHECK(trace_of(elsewhere) == nullptr);
  CHECK(trace_of(nullptr) == nullptr);
}

TEST_CASE("stack trace: a failure's record gets the stack its exception kept, never a HandlerError's") {
  const CaptureOn on;
  FailureRecord record;
  CHECK(trace_to_keep(caught([] { throw HandlerError(FailureClass::permanent, "exit status 3"); })) == nullptr);
  add_stack(record, true, nullptr);
  CHECK_FALSE(record.detail.contains("stack"));
  const auto kept = trace_to_keep(caught([] { throw oncely::PermanentError("bad input"); }));
  REQUIRE(kept != nullptr);
  add_stack(record, true, kept.get());
  CHECK(record.detail.contains("stack"));
  // A retry under dead_letters: none.
  FailureRecord retried;
  add_stack(retried, false, trace_to_keep(caught(unit_thrower)).get());
  CHECK_FALSE(retried.detail.contains("stack"));
}

TEST_CASE("stack trace: which failures record their stack") {
  CHECK(records_stack(StackTraces::dead_letters, true));
  CHECK_FALSE(records_stack(StackTraces::dead_letters, false));
  CHECK(records_stack(StackTraces::all_failures, true));
  CHECK(records_stack(StackTraces::all_failures, false));
  CHECK_FALSE(records_stack(StackTraces::off, true));
  CHECK_FALSE(records_stack(StackTraces::off, false));
}

TEST_CASE("stack trace: the stack_traces setting") {
  CHECK(oncely::Config::parse(nlohmann::json::object()).stack_traces == StackTraces::dead_letters);
  CHECK(oncely::Config::parse({{"stack_traces", "all_failures"}}).stack_traces == StackTraces::all_failures);
  CHECK(oncely::Config::parse({{"stack_traces", "off"}}).stack_traces == StackTraces::off);
  CHECK_THROWS_WITH_AS(oncely::Config::parse({{"stack_traces", "always"}}),
                       R"(/stack_traces: must be "dead_letters", "all_failures" or "off" (got "always"))",
                       oncely::ConfigError);
}

TEST_CASE("stack trace: threads that symbolise share one symboliser, not one copy of the debug information each") {
  // Boost.Stacktrace's libbacktrace state is per thread: each handler thread that recorded a
  // stack read the binary's DWARF again (about 45 MB each in a Release build; 16 threads of
  // a worker held 730 MB).
  CaptureOn on;
  const auto error = caught(unit_thrower);
  REQUIRE(text_of(error).find("unit_thrower") != std::string::npos);  // warm, in whichever thread
  const double before = resident_mib();
  constexpr int kThreads = 8;
  std::vector<std::string> texts(kThreads);
  {
    std::vector<std::jthread> threads;
    for (int i = 0; i < kThreads; ++i) threads.emplace_back([&texts, i] { texts[i] = text_of(caught(unit_thrower)); });
  }
  const double grown = resident_mib() - before;
  for (const std::string& text : texts) CHECK(text.find("unit_thrower") != std::string::npos);
  MESSAGE(kThreads << " threads symbolising grew the resident set by " << grown << " MiB");
  CHECK(grown < 40.0);
}

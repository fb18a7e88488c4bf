// The traceparent format (W3C Trace Context) and the child span of an attempt.
#include <doctest/doctest.h>

#include <random>

#include "support/trace_context.hpp"

using namespace oncely::detail;

TEST_CASE("trace context: what counts as a traceparent") {
  CHECK(is_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
  CHECK(is_traceparent("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-later"));
  CHECK_FALSE(is_traceparent(""));
  CHECK_FALSE(is_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x"));  // 00 is 55 long
  CHECK_FALSE(is_traceparent("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
  CHECK_FALSE(is_traceparent("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"));
  CHECK_FALSE(is_traceparent("00-00000000000000000000000000000000-00f067aa0ba902b7-01"));
  CHECK_FALSE(is_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"));
  CHECK_FALSE(is_traceparent("00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
}

TEST_CASE("trace context: an attempt's span keeps the trace id and flags, with a span id of its own") {
  std::mt19937_64 rng(42);
  const auto child = child_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", rng);
  REQUIRE(child);
  CHECK(is_traceparent(*child));
  CHECK(child->substr(3, 32) == "4bf92f3577b34da6a3ce929d0e0e4736");
  CHECK(child->substr(36, 16) != "00f067aa0ba902b7");
  CHECK(child->substr(53) == "01");
  CHECK(*child != *child_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", rng));
  CHECK_FALSE(child_traceparent("garbage", rng));
  CHECK(trace_field(std::string("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")) ==
        " trace_id=4bf92f3577b34da6a3ce929d0e0e4736");
  CHECK(trace_field(std::nullopt).empty());
}

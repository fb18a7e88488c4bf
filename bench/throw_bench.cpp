// The cost of one throw-and-catch with the __cxa_throw hook capturing (stack_traces
// dead_letters or all_failures) and not (off), at several depths between the catch and the
// throw; and the cost of symbolising one captured stack (paid only when a failure is
// recorded). Usage: oncely_throw_bench [iterations]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "support/stack_trace.hpp"

namespace {

[[gnu::noinline]] void dive(int depth) {
  if (depth == 0) throw std::runtime_error("x");
  dive(depth - 1);
  asm volatile("" ::: "memory");  // no tail call: each level keeps its frame
}

double ns_per_throw(int depth, long iterations) {
  const auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < iterations; ++i) {
    try {
      dive(depth);
    } catch (const std::exception&) {
    }
  }
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() /
         static_cast<double>(iterations);
}

}  // namespace

int main(int argc, char** argv) {
  const long iterations = argc > 1 ? std::atol(argv[1]) : 200000;
  std::printf("%-8s %14s %14s %12s\n", "depth", "off ns/throw", "on ns/throw", "hook ns");
  for (const int depth : {1, 10, 30, 60}) {
    oncely::detail::enable_stack_traces(oncely::StackTraces::off);
    ns_per_throw(depth, iterations / 10);  // warm caches and the unwinder's tables
    const double off = ns_per_throw(depth, iterations);
    oncely::detail::enable_stack_traces(oncely::StackTraces::dead_letters);
    const double on = ns_per_throw(depth, iterations);
    std::printf("%-8d %14.0f %14.0f %12.0f\n", depth, off, on, on - off);
  }
  // Symbolising: what recording one failure's stack costs (the symboliser is warm).
  std::exception_ptr error;
  try {
    dive(10);
  } catch (...) {
    error = std::current_exception();
  }
  const auto trace = oncely::detail::trace_of(error);
  if (!trace) return 1;
  const int rounds = 200;
  const auto start = std::chrono::steady_clock::now();
  std::size_t lines = 0;
  for (int i = 0; i < rounds; ++i) lines += oncely::detail::symbolise(*trace).size();
  const double us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / rounds;
  std::printf("symbolise one stack of %zu frames: %.0f us\n", lines / rounds, us);
  return 0;
}

// A shared library built with oncely in it, as an embedder's plugin or liboncely.so would
// be: the __cxa_throw hook is its export, and the executable's throws go through it.
#include <exception>
#include <string>

#include "support/stack_trace.hpp"

extern "C" __attribute__((visibility("default"))) void probe_enable() {
  oncely::detail::enable_stack_traces(oncely::StackTraces::dead_letters);
}

extern "C" __attribute__((visibility("default"))) int probe_names(std::exception_ptr* error, const char* function) {
  const auto trace = oncely::detail::trace_of(*error);
  if (!trace) return 0;
  return oncely::detail::symbolise(*trace).dump().find(function) != std::string::npos ? 1 : 0;
}

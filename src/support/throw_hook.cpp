// The __cxa_throw hook. Every `throw` expression calls __cxa_throw; defining it here, in an
// object that is linked into every executable and shared library built with oncely (an
// OBJECT library, src/CMakeLists.txt: a member of a static archive would be left out when
// nothing else in it is needed), makes ours the definition the dynamic linker finds first,
// ahead of libstdc++.so's. That includes throws inside libstdc++ itself
// (std::vector::at's std::out_of_range), which it calls through its PLT.
//
// Ours records the thrower's return addresses (Boost.Stacktrace's safe_dump_to: an unwind
// of the stack into a fixed buffer, no allocation, no symbols) in a small per-thread ring
// keyed by the exception object's address, then calls libstdc++'s __cxa_throw. Keyed by
// object, a rethrow (`throw;`, std::rethrow_exception: no __cxa_throw call) keeps the
// original frames, and an exception thrown and caught inside a handler does not replace
// the one that later escapes it.
//
// No <cxxabi.h> here: it declares __cxa_throw with std::type_info*, while g++ declares it
// implicitly with void* for every throw expression; the two would conflict.
#include "support/throw_hook.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstring>

#include <boost/stacktrace/safe_dump_to.hpp>

namespace oncely::detail::throw_hook {
namespace {

std::atomic<bool> g_capture{false};

struct Captured {
  const void* object = nullptr;
  const void* type = nullptr;
  std::size_t depth = 0;
  void* frames[kMaxFrames];
};

// Throws remembered per thread. A handler that throws and catches more than this many
// exceptions between the throw of one and its `throw;` loses that one's frames: the
// report then says no stack was captured, it never shows another exception's.
constexpr std::size_t kRing = 16;
thread_local Captured t_ring[kRing];
thread_local std::size_t t_next = 0;

using CxaThrow = void (*)(void*, void*, void (*)(void*));

CxaThrow real_cxa_throw() noexcept {
  static const CxaThrow real = reinterpret_cast<CxaThrow>(dlsym(RTLD_NEXT, "__cxa_throw"));
  return real;
}

}  // namespace

void set_capture(bool on) noexcept { g_capture.store(on, std::memory_order_relaxed); }
bool capturing() noexcept { return g_capture.load(std::memory_order_relaxed); }

std::size_t find(const void* object, const void* type, void** out, std::size_t max) noexcept {
  for (std::size_t i = 1; i <= kRing; ++i) {  // newest first: an address reused later wins
    const Captured& c = t_ring[(t_next + kRing - i) % kRing];
    if (c.object != object || c.type != type || c.depth == 0) continue;
    const std::size_t n = c.depth < max ? c.depth : max;
    std::memcpy(out, c.frames, n * sizeof(void*));
    return n;
  }
  return 0;
}

}  // namespace oncely::detail::throw_hook

extern "C" [[noreturn]] void __cxa_throw(void* object, void* type, void (*destructor)(void*)) {
  using namespace oncely::detail::throw_hook;
  if (g_capture.load(std::memory_order_relaxed)) {
    Captured& c = t_ring[t_next];
    t_next = (t_next + 1) % kRing;
    c.object = object;
    c.type = type;
    // skip 1: this function's own frame.
    c.depth = boost::stacktrace::safe_dump_to(1, c.frames, sizeof c.frames);
  }
  const CxaThrow real = real_cxa_throw();
  if (real == nullptr) __builtin_trap();  // libstdc++ linked statically: unsupported
  real(object, type, destructor);
  __builtin_unreachable();
}

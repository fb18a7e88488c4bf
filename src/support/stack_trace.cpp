#include "support/stack_trace.hpp"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include <boost/stacktrace.hpp>

#include "support/throw_hook.hpp"

namespace oncely::detail {
namespace {

std::atomic<StackTraces> g_mode{StackTraces::dead_letters};

// libstdc++'s std::exception_ptr is one pointer to the thrown object (its ABI since GCC
// 4.4); the hook keys frames by that address.
static_assert(sizeof(std::exception_ptr) == sizeof(void*));
const void* object_of(const std::exception_ptr& error) noexcept {
  const void* object = nullptr;
  std::memcpy(&object, static_cast<const void*>(&error), sizeof object);
  return object;
}

// A return address points after its call, which for a call that never returns (a throw
// helper) may be the first byte of the next function: symbolise the call itself.
boost::stacktrace::frame call_site(const void* return_address) {
  return boost::stacktrace::frame(reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(return_address) - 1));
}

constexpr std::string_view kBoundary = "oncely::detail::invoke_handler";

// Every symbol lookup of the process runs on this one thread. Boost.Stacktrace's libbacktrace
// backend keeps its state per thread (thread_local, never freed): each thread that
// symbolised read the binary's debug information again, about 45 MB and 100 ms of CPU per
// handler thread (16 threads: 730 MB).
class Symboliser {
 public:
  static Symboliser& instance() {
    static Symboliser symboliser;
    return symboliser;
  }
  /// Runs `lookup` on the symboliser's thread and returns its result (or rethrows).
  nlohmann::json run(std::function<nlohmann::json()> lookup) {
    std::packaged_task<nlohmann::json()> task(std::move(lookup));
    std::future<nlohmann::json> result = task.get_future();
    {
      const std::lock_guard lock(mutex_);
      tasks_.push_back(std::move(task));
    }
    ready_.notify_one();
    return result.get();
  }

 private:
  Symboliser() {
    // With every signal blocked, as the thread inherits its mask: it may start before the
    // runtime blocks SIGTERM and SIGINT for its own signal thread, and a signal delivered
    // here would end the process rather than start the shutdown.
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &previous);
    thread_ = std::jthread([this](const std::stop_token& stop) {
      while (true) {
        std::packaged_task<nlohmann::json()> task;
        {
          std::unique_lock lock(mutex_);
          if (!ready_.wait(lock, stop, [this] { return !tasks_.empty(); })) return;
          task = std::move(tasks_.front());
          tasks_.pop_front();
        }
        task();
      }
    });
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  }

  std::mutex mutex_;
  std::condition_variable_any ready_;
  std::deque<std::packaged_task<nlohmann::json()>> tasks_;
  std::jthread thread_;  // last: stopped and joined before the queue goes
};

nlohmann::json symbolise_here(const ThrowTrace& trace);

}  // namespace

void enable_stack_traces(StackTraces mode) {
  g_mode.store(mode, std::memory_order_relaxed);
  throw_hook::set_capture(mode != StackTraces::off);
  if (mode == StackTraces::off) return;
  // Warm the symboliser: libbacktrace reads the executable's DWARF on its first lookup.
  static std::once_flag warmed;
  std::call_once(warmed, [] {
    Symboliser::instance().run([] {
      const boost::stacktrace::frame here(reinterpret_cast<const void*>(&invoke_handler));
      (void)here.source_line();
      return nlohmann::json();
    });
  });
}

StackTraces stack_trace_mode() noexcept { return g_mode.load(std::memory_order_relaxed); }

std::shared_ptr<const ThrowTrace> trace_of(const std::exception_ptr& error) noexcept {
  if (!error || !throw_hook::capturing()) return nullptr;
  try {
    auto trace = std::make_shared<ThrowTrace>();
    trace->frames.resize(throw_hook::kMaxFrames);
    const std::size_t n =
        throw_hook::find(object_of(error), error.__cxa_exception_type(), trace->frames.data(), trace->frames.size());
    if (n == 0) return nullptr;
    trace->frames.resize(n);
    return trace;
  } catch (...) {
    return nullptr;  // out of memory: the failure is recorded without its stack
  }
}

nlohmann::json symbolise(const ThrowTrace& trace) {
  return Symboliser::instance().run([&trace] { return symbolise_here(trace); });
}

namespace {

nlohmann::json symbolise_here(const ThrowTrace& trace) {
  std::vector<std::string> lines;
  bool entered = false;
  for (void* address : trace.frames) {
    // The unwinder ends a chain with a null address: no call there (and null - 1 is
    // undefined behaviour, which UBSan reported in the sanitizer build).
    if (address == nullptr) break;
    const boost::stacktrace::frame frame = call_site(address);
    std::string name = frame.name();
    if (name.find(kBoundary) != std::string::npos) {
      entered = true;
      break;
    }
    std::string line = "#" + std::to_string(lines.size()) + " ";
    const std::size_t source_line = frame.source_line();
    if (!name.empty() && source_line > 0) {
      line += name + " at " + frame.source_file() + ":" + std::to_string(source_line);
    } else {
      line += boost::stacktrace::to_string(frame);
    }
    lines.push_back(std::move(line));
  }
  nlohmann::json out = nlohmann::json::array();
  for (std::size_t i = 0; i < lines.size() && i < kMaxStackFrames; ++i) out.push_back(lines[i]);
  if (lines.size() > kMaxStackFrames || (!entered && trace.frames.size() >= throw_hook::kMaxFrames)) {
    out.push_back("... (deeper frames not shown)");
  }
  return out;
}

}  // namespace

[[gnu::noinline]] void invoke_handler(const Handler& handler, JobContext& context) {
  handler(context);
  // Not a tail call: this frame must stay on the stack while the handler runs.
  asm volatile("" ::: "memory");
}

}  // namespace oncely::detail

#include "process/stop_signals.hpp"

#include <pthread.h>

#include <cerrno>

#include "oncely/runtime.hpp"

namespace oncely {
namespace detail {

sigset_t stop_signal_set() noexcept {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

sigset_t block_stop_signals_here() noexcept {
  const sigset_t stop = stop_signal_set();
  sigset_t previous;
  sigemptyset(&previous);
  pthread_sigmask(SIG_BLOCK, &stop, &previous);
  return previous;
}

int take_stop_signal(std::chrono::milliseconds tick) noexcept {
  const sigset_t stop = stop_signal_set();
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(tick);
  const timespec wait{static_cast<time_t>(seconds.count()),
                      static_cast<long>(std::chrono::nanoseconds(tick - seconds).count())};
  const int sig = sigtimedwait(&stop, nullptr, &wait);
  return sig > 0 ? sig : 0;  // EAGAIN (none came) or EINTR
}

StopSignalWatcher::StopSignalWatcher(std::function<void(int)> on_signal) : previous_(block_stop_signals_here()) {
  thread_ = std::jthread([on_signal = std::move(on_signal)](const std::stop_token& stop) {
    while (!stop.stop_requested()) {
      if (const int sig = take_stop_signal(std::chrono::milliseconds(200)); sig != 0) on_signal(sig);
    }
  });
}

StopSignalWatcher::~StopSignalWatcher() {
  thread_.request_stop();
  thread_.join();
  pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

}  // namespace detail

void block_stop_signals() noexcept { static_cast<void>(detail::block_stop_signals_here()); }

}  // namespace oncely

// What starting exec jobs' processes costs the rest of the process (docs/benchmarks.md).
//
//   oncely_spawn_bench [JOBS] [SECONDS] [HEAP_MB]
//
// 1. Sequential: one thread runs 200 short jobs (/bin/true) one after another while JOBS
//    other threads sit idle (a worker's handler threads): the cost of one job's processes
//    in a process of that many threads and HEAP_MB of touched heap.
// 2. Concurrent: JOBS threads start `/bin/sleep SECONDS` at the same moment (a lease queue of
//    concurrency JOBS taking a full claim), while a ticker that wants to wake every 100 ms
//    (the lease watchdog's interval) and then maps and touches 1 MiB records how late it
//    is done: what every other thread of the process, the lease renewal among them, gets
//    while the jobs start.
#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <latch>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "handlers/subprocess.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const auto at = static_cast<std::size_t>(p * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(at, values.size() - 1)];
}

double cpu_seconds(const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; }

// Idle threads, as a worker's handler threads waiting on their jobs are.
class IdleThreads {
 public:
  explicit IdleThreads(int n) {
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([this] {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [this] { return done_; });
      });
    }
  }
  ~IdleThreads() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

int main(int argc, char** argv) {
  const int jobs = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int seconds = argc > 2 ? std::atoi(argv[2]) : 4;
  const long heap_mb = argc > 3 ? std::atol(argv[3]) : 0;
  // A worker's heap: its connections' buffers, its jobs, its allocator's arenas.
  std::vector<char> heap(static_cast<std::size_t>(heap_mb) << 20);
  for (std::size_t i = 0; i < heap.size(); i += 4096) heap[i] = 1;

  {
    IdleThreads idle(jobs);
    constexpr int kRounds = 200;
    std::vector<double> each;
    for (int i = 0; i < kRounds; ++i) {
      const auto start = Clock::now();
      const auto result = oncely::detail::run_process({"/bin/true"}, {}, "", std::chrono::seconds(10));
      each.push_back(ms_between(start, Clock::now()));
      if (result.end != oncely::detail::ProcessResult::End::exited || result.code != 0) return 1;
    }
    std::printf(
        "sequential: %d jobs of /bin/true beside %d idle threads, %ld MiB heap: p50 %.2f ms, p90 %.2f ms, "
        "max %.2f ms per job\n",
        kRounds, jobs, heap_mb, percentile(each, 0.5), percentile(each, 0.9), percentile(each, 1.0));
  }

  rusage before{};
  ::getrusage(RUSAGE_SELF, &before);
  std::atomic<bool> ticking{true};
  std::vector<double> late;       // ms past each 100 ms tick, its 1 MiB touched
  std::vector<double> woke_late;  // ms past each tick when it woke (the scheduler's part)
  // Each tick maps and touches 1 MiB, as a large allocation does (libpq's result buffers):
  // page faults and mmap take the process's memory map lock, which fork() holds while it
  // copies the page tables. A thread that only sleeps and wakes would not see that.
  std::thread ticker([&] {
    constexpr std::size_t kTouched = 1 << 20;
    auto next = Clock::now() + std::chrono::milliseconds(100);
    while (ticking.load()) {
      std::this_thread::sleep_until(next);
      const auto woke = Clock::now();
      void* block = ::mmap(nullptr, kTouched, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (block != MAP_FAILED) {
        for (std::size_t i = 0; i < kTouched; i += 4096) static_cast<volatile char*>(block)[i] = 1;
        ::munmap(block, kTouched);
      }
      woke_late.push_back(ms_between(next, woke));
      late.push_back(ms_between(next, Clock::now()));
      next = Clock::now() + std::chrono::milliseconds(100);
    }
  });
  std::latch go(jobs + 1);
  std::vector<double> overhead(static_cast<std::size_t>(jobs));
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(jobs));
  for (int i = 0; i < jobs; ++i) {
    threads.emplace_back([&, i] {
      go.arrive_and_wait();
      const auto start = Clock::now();
      const auto result = oncely::detail::run_process({"/bin/sleep", std::to_string(seconds)}, {}, "",
                                                      std::chrono::seconds(seconds + 120));
      overhead[static_cast<std::size_t>(i)] = ms_between(start, Clock::now()) - seconds * 1000.0;
      if (result.end != oncely::detail::ProcessResult::End::exited || result.code != 0) failed.fetch_add(1);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // every thread waiting at the latch
  const auto start = Clock::now();
  go.arrive_and_wait();
  // running_jobs() counts a job once its first process has been started.
  while (oncely::detail::running_jobs() < jobs && Clock::now() - start < std::chrono::seconds(seconds)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const double all_started_ms = ms_between(start, Clock::now());
  const int started = oncely::detail::running_jobs();
  for (auto& t : threads) t.join();
  const double total_ms = ms_between(start, Clock::now());
  ticking.store(false);
  ticker.join();
  rusage after{};
  ::getrusage(RUSAGE_SELF, &after);

  std::printf(
      "concurrent: %d jobs of /bin/sleep %d at once: %d started within %.0f ms (%.2f ms per job); all done "
      "in %.0f ms, %d failed\n",
      jobs, seconds, started, all_started_ms, all_started_ms / std::max(started, 1), total_ms, failed.load());
  std::printf("  per job, beyond its %d s: p50 %.0f ms, p90 %.0f ms, max %.0f ms\n", seconds, percentile(overhead, 0.5),
              percentile(overhead, 0.9), percentile(overhead, 1.0));
  std::printf("  a 100 ms ticker touching 1 MiB was late by: p50 %.1f ms, p99 %.1f ms, max %.1f ms (%zu ticks)\n",
              percentile(late, 0.5), percentile(late, 0.99), percentile(late, 1.0), late.size());
  std::printf("    of which waking up: p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", percentile(woke_late, 0.5),
              percentile(woke_late, 0.99), percentile(woke_late, 1.0));
  std::printf("  this process's CPU: user %.2f s, system %.2f s\n",
              cpu_seconds(after.ru_utime) - cpu_seconds(before.ru_utime),
              cpu_seconds(after.ru_stime) - cpu_seconds(before.ru_stime));
  return failed.load() == 0 ? 0 : 1;
}

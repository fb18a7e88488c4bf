// The exec handler's process hygiene (subprocess.cpp): nothing a job's program starts
// outlives run_process.
#include <doctest/doctest.h>

#include <signal.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stop_token>
#include <string>
#include <thread>

#include "handlers/subprocess.hpp"
#include "support/temp_dir.hpp"

using oncely::detail::ProcessResult;
using oncely::detail::run_process;
using oncely::test::TempDir;
using namespace std::chrono_literals;

// ------------------------------------------------------------------ exec process hygiene

namespace {

bool gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

pid_t pid_in(const TempDir& dir, const std::string& name) { return static_cast<pid_t>(std::stol(dir.read(name))); }

// Leaves a member of its process group and a process in a session of its own behind, each
// recording its pid, then runs `rest`.
std::string leaves_two_behind(const TempDir& dir, const std::string& rest) {
  const std::string d = dir.path().string();
  return "sleep 1000 & echo $! > " + d + "/member; setsid sh -c 'echo $$ > " + d +
         "/escaped; exec sleep 1000' & while [ ! -s " + d + "/escaped ]; do sleep 0.01; done; " + rest;
}

}  // namespace

TEST_CASE("lifecycle: when run_process returns, nothing the program started is running, whichever way it ended") {
  TempDir dir;
  SUBCASE("it exited 0") {
    const ProcessResult r = run_process({"/bin/sh", "-c", leaves_two_behind(dir, "exit 0")}, {}, "", 20s);
    CHECK(r.end == ProcessResult::End::exited);
    CHECK(r.code == 0);
  }
  SUBCASE("it was killed by a signal") {
    const ProcessResult r = run_process({"/bin/sh", "-c", leaves_two_behind(dir, "kill -KILL $$")}, {}, "", 20s);
    CHECK(r.end == ProcessResult::End::signaled);
    CHECK(r.code == SIGKILL);
  }
  SUBCASE("it timed out") {
    const ProcessResult r = run_process({"/bin/sh", "-c", leaves_two_behind(dir, "sleep 1000")}, {}, "", 1s);
    CHECK(r.end == ProcessResult::End::timed_out);
  }
  CHECK(gone(pid_in(dir, "member")));
  CHECK(gone(pid_in(dir, "escaped")));
}

TEST_CASE("lifecycle: run_process stopped: SIGTERM to the job's processes, SIGKILL after kTerminateGrace") {
  TempDir dir;
  std::stop_source stop;
  const std::string pid_file = dir.file("pid");
  // Asks for the stop once the program has started (or after 10 s, failing the test).
  std::jthread stopper([&] {
    const auto give_up = std::chrono::steady_clock::now() + 10s;
    while (dir.read("pid").empty() && std::chrono::steady_clock::now() < give_up) std::this_thread::sleep_for(10ms);
    stop.request_stop();
  });
  const auto start = std::chrono::steady_clock::now();
  SUBCASE("a program that ends on SIGTERM ends at once") {
    const ProcessResult r = run_process({"/bin/sh", "-c", "echo $$ > " + pid_file + "; exec sleep 1000"}, {}, "", 20s,
                                        4096, stop.get_token());
    CHECK(r.end == ProcessResult::End::stopped);
    CHECK(std::chrono::steady_clock::now() - start < oncely::detail::kTerminateGrace);
  }
  SUBCASE("one that ignores it, and what it left behind, are killed after the grace") {
    const ProcessResult r = run_process(
        {"/bin/sh", "-c", "trap '' TERM; " + leaves_two_behind(dir, "echo $$ > " + pid_file + "; sleep 1000")}, {}, "",
        20s, 4096, stop.get_token());
    CHECK(r.end == ProcessResult::End::stopped);
    CHECK(std::chrono::steady_clock::now() - start >= oncely::detail::kTerminateGrace);
    CHECK(std::chrono::steady_clock::now() - start < oncely::detail::kTerminateGrace + oncely::detail::kEndBound + 2s);
    CHECK(gone(pid_in(dir, "member")));
    CHECK(gone(pid_in(dir, "escaped")));
  }
  CHECK(gone(pid_in(dir, "pid")));
}

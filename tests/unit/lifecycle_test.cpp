// The connection parameters oncely adds to every connection (db.cpp), so that no libpq call
// waits for ever behind a network partition, and how a user's own values win.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <stop_token>
#include <string>
#include <thread>

#include "handlers/subprocess.hpp"
#include "support/db.hpp"
#include "support/temp_dir.hpp"

using oncely::detail::ProcessResult;
using oncely::detail::run_process;
using oncely::detail::with_connection_defaults;
using oncely::test::TempDir;
using namespace std::chrono_literals;

namespace {

const char* no_environment(const char*) { return nullptr; }

constexpr const char* kAll =
    "connect_timeout=10 keepalives=1 keepalives_idle=30 keepalives_interval=10 keepalives_count=3 "
    "tcp_user_timeout=30000";

}  // namespace

TEST_CASE("lifecycle: every connection gets a connect timeout, keepalives and a TCP user timeout") {
  CHECK(with_connection_defaults("host=db dbname=app", no_environment) == std::string("host=db dbname=app ") + kAll);
  CHECK(with_connection_defaults("", no_environment) == kAll);
  CHECK(with_connection_defaults("postgresql://app@db/app", no_environment) ==
        "postgresql://app@db/app?connect_timeout=10&keepalives=1&keepalives_idle=30&keepalives_interval=10&"
        "keepalives_count=3&tcp_user_timeout=30000");
  CHECK(with_connection_defaults("postgres://app@db/app?sslmode=require", no_environment) ==
        "postgres://app@db/app?sslmode=require&connect_timeout=10&keepalives=1&keepalives_idle=30&"
        "keepalives_interval=10&keepalives_count=3&tcp_user_timeout=30000");
}

TEST_CASE("lifecycle: a connection parameter the user set is left as it is") {
  CHECK(with_connection_defaults("host=db connect_timeout=3 tcp_user_timeout=0", no_environment) ==
        "host=db connect_timeout=3 tcp_user_timeout=0 keepalives=1 keepalives_idle=30 keepalives_interval=10 "
        "keepalives_count=3");
  CHECK(with_connection_defaults("postgresql://db/app?keepalives=0&connect_timeout=5", no_environment) ==
        "postgresql://db/app?keepalives=0&connect_timeout=5&keepalives_idle=30&keepalives_interval=10&"
        "keepalives_count=3&tcp_user_timeout=30000");
  SUBCASE("PGCONNECT_TIMEOUT in the environment counts as set") {
    const auto env = [](const char* name) -> const char* {
      return std::strcmp(name, "PGCONNECT_TIMEOUT") == 0 ? "4" : nullptr;
    };
    CHECK(with_connection_defaults("host=db", env) ==
          "host=db keepalives=1 keepalives_idle=30 keepalives_interval=10 keepalives_count=3 tcp_user_timeout=30000");
  }
  SUBCASE("a string libpq cannot parse is passed on unchanged, for libpq to report") {
    CHECK(with_connection_defaults("host='unterminated", no_environment) == "host='unterminated");
  }
  SUBCASE("a URL ending in '?' gets no empty parameter") {
    CHECK(with_connection_defaults("postgresql://db/app?", no_environment) ==
          "postgresql://db/app?connect_timeout=10&keepalives=1&keepalives_idle=30&keepalives_interval=10&"
          "keepalives_count=3&tcp_user_timeout=30000");
  }
}

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

TEST_CASE("lifecycle: run_process in a process whose stdin is closed (a pipe then gets descriptor 0)") {
  // The shepherd is given its descriptors at 0 to 4: one of ours among those numbers must
  // not be overwritten before it is handed on.
  const int saved = ::fcntl(0, F_DUPFD_CLOEXEC, 10);
  REQUIRE(saved >= 0);
  ::close(0);
  const ProcessResult r = run_process({"/bin/sh", "-c", "cat >&2"}, {}, "from stdin", 10s);
  REQUIRE(::dup2(saved, 0) == 0);
  ::close(saved);
  CHECK(r.end == ProcessResult::End::exited);
  CHECK(r.code == 0);
  CHECK(r.stderr_tail == "from stdin");
}

TEST_CASE("lifecycle: the program's environment is not in its shepherd's command line, which every user can read") {
  const ProcessResult r =
      run_process({"/bin/sh", "-c", "{ tr '\\0' ' ' < /proc/$PPID/cmdline; echo; cat /proc/$PPID/comm; } >&2"},
                  {"PATH=/usr/bin:/bin", "TOKEN=s3cret-value"}, "", 10s);
  CHECK(r.code == 0);
  INFO("the shepherd's command line and name: " << r.stderr_tail);
  CHECK(r.stderr_tail.starts_with("oncely-shepherd "));
  CHECK(r.stderr_tail.find(" /bin/sh -c ") != std::string::npos);
  CHECK(r.stderr_tail.find("s3cret-value") == std::string::npos);
  CHECK(r.stderr_tail.ends_with("\noncely-shepherd\n"));
}

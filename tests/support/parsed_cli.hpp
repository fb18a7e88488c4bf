#pragma once
// ParsedCli: the real `oncely` command line (make_app) parsed from an argument vector, with
// its output captured, for CLI tests that need no process (CLI11's TApp idea).

#include <memory>
#include <optional>
#include <sstream>
#include <vector>

#include "cli/app.hpp"

namespace oncely::test {

struct ParsedCli {
  std::unique_ptr<oncely::cli::Cli> cli = oncely::cli::make_app();
  std::ostringstream out, err;
  std::optional<int> exit;  // set when parsing itself ended the command (usage error, --help)

  explicit ParsedCli(std::vector<const char*> args) {
    args.insert(args.begin(), "oncely");
    exit = oncely::cli::parse(*cli, static_cast<int>(args.size()), args.data(), {out, err});
  }

  int dispatch() { return oncely::cli::dispatch(*cli, {out, err}); }
};

}  // namespace oncely::test

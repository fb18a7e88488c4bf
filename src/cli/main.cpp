// oncely: a thin command line over the library. Parsing and dispatch live in app.cpp.
#include <iostream>

#include "cli/app.hpp"

int main(int argc, char** argv) {
  auto cli = oncely::cli::make_app();
  const oncely::cli::Io io{std::cout, std::cerr};
  if (const auto usage_exit = oncely::cli::parse(*cli, argc, argv, io)) return *usage_exit;
  return oncely::cli::dispatch(*cli, io);
}

// BatchLedger: the batching of `oncely enqueue -` (api/batch_ledger.hpp), driven the way
// detail::bulk_enqueue drives it, over scripted input instead of a pipe and a database.
#include <doctest/doctest.h>

#include <cctype>
#include <cstddef>
#include <string>
#include <string_view>

#include "api/batch_ledger.hpp"

using oncely::detail::BatchLedger;

namespace {

/// Runs bulk_enqueue's loop over `input`, one character a line:
///   j  a job            u  a unique job            b  a blank line
///   x  a line that does not parse (the load stops there)
/// in upper case (J, U, B) when the producer pauses after the line (nothing more ready).
/// Returns the commits, each "copy first..last" or "insert line", then " | " and either
/// the error ("line N" and the account) or "N jobs, M lines".
std::string batches(std::size_t batch_size, std::string_view input) {
  BatchLedger ledger(batch_size);
  std::string out;
  std::size_t next = 0;  // the index of the next line to read
  // Asked only after a line was read: whether the producer paused after it.
  const auto more_ready = [&] { return !std::isupper(static_cast<unsigned char>(input[next - 1])); };
  const auto commit = [&] {
    out += (ledger.single() ? "insert " + std::to_string(ledger.last_line()) : "copy " + ledger.span()) + ", ";
    ledger.committed();
  };
  while (true) {
    if (ledger.commits_at_pause(more_ready)) commit();
    if (next == input.size()) break;
    const char line = static_cast<char>(std::tolower(static_cast<unsigned char>(input[next++])));
    const long number = ledger.read_line();
    if (line == 'b') continue;
    if (line == 'x') return out + "| line " + std::to_string(number) + ledger.account();
    const bool unique = line == 'u';
    if (ledger.commits_before(unique)) commit();
    if (!ledger.is_open()) ledger.open(ledger.opens_single(unique, more_ready));
    ledger.add_line();
    if (ledger.full()) commit();
  }
  if (ledger.is_open()) commit();
  return out + "| " + std::to_string(ledger.enqueued()) + " jobs, " + std::to_string(ledger.lines()) + " lines";
}

}  // namespace

TEST_CASE("BatchLedger: where batches start and end, and the account an error ends with") {
  struct Case {
    std::size_t batch_size;
    std::string_view input;
    std::string_view expected;
  };
  const Case cases[] = {
      // Nothing at all.
      {5, "", "| 0 jobs, 0 lines"},
      {5, "bb", "| 0 jobs, 2 lines"},
      // Full batches, then the rest at the end of the input.
      {3, "jjjjj", "copy 1..3, copy 4..5, | 5 jobs, 5 lines"},
      {2, "jjjj", "copy 1..2, copy 3..4, | 4 jobs, 4 lines"},
      // --batch-size 1: every job an INSERT of its own.
      {1, "jjj", "insert 1, insert 2, insert 3, | 3 jobs, 3 lines"},
      // A job with nothing behind it goes alone.
      {5, "J", "insert 1, | 1 jobs, 1 lines"},
      {5, "jJJ", "copy 1..2, insert 3, | 3 jobs, 3 lines"},
      // A pause commits the open batch before the next read blocks.
      {5, "jjJjj", "copy 1..3, copy 4..5, | 5 jobs, 5 lines"},
      {5, "jjjBjj", "copy 1..3, copy 5..6, | 5 jobs, 6 lines"},
      // A unique job goes alone, after the batch before it.
      {5, "jjujj", "copy 1..2, insert 3, copy 4..5, | 5 jobs, 5 lines"},
      {5, "uu", "insert 1, insert 2, | 2 jobs, 2 lines"},
      // Blank lines count as lines, not as jobs.
      {5, "bjjbj", "copy 2..5, | 3 jobs, 5 lines"},
      {2, "jbbj", "copy 1..4, | 2 jobs, 4 lines"},
      // A bad line: the open batch is not in the account, the committed ones are.
      {5, "x", "| line 1; no jobs were enqueued"},
      {5, "jjx", "| line 3; no jobs were enqueued"},
      {2, "jjjx", "copy 1..2, | line 4; 2 jobs from lines 1..2 were enqueued before it"},
      {5, "jJjx", "copy 1..2, | line 4; 2 jobs from lines 1..2 were enqueued before it"},
      // The account ends at the last committed job's line, not at a blank line after it.
      {5, "jjjBx", "copy 1..3, | line 5; 3 jobs from lines 1..3 were enqueued before it"},
      {1, "jbux", "insert 1, insert 3, | line 4; 2 jobs from lines 1..3 were enqueued before it"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.batch_size);
    CAPTURE(c.input);
    CHECK(batches(c.batch_size, c.input) == c.expected);
  }
}

TEST_CASE("BatchLedger: the open batch names its rows by input line") {
  BatchLedger ledger(10);
  CHECK(ledger.account() == "; no jobs were enqueued");
  ledger.open(/*single=*/false);
  for (int i = 0; i < 3; ++i) {  // lines 1..3, committed
    ledger.read_line();
    ledger.add_line();
  }
  ledger.committed();
  ledger.read_line();  // line 4, blank
  ledger.open(/*single=*/false);
  ledger.read_line();
  ledger.add_line();  // line 5: row 0
  ledger.read_line();
  ledger.read_line();
  ledger.add_line();  // line 7: row 1
  CHECK(ledger.line_of_row(0) == 5);
  CHECK(ledger.line_of_row(1) == 7);
  CHECK(ledger.last_line() == 7);
  CHECK(ledger.span() == "5..7");
  CHECK_FALSE(ledger.full());
  CHECK(ledger.account() == "; 3 jobs from lines 1..3 were enqueued before it");
}

TEST_CASE("BatchLedger: more_ready is asked only when it decides") {
  int asked = 0;
  const auto more_ready = [&] {
    ++asked;
    return true;
  };
  BatchLedger one(1);
  CHECK(one.opens_single(false, more_ready));
  CHECK_FALSE(one.commits_at_pause(more_ready));  // no batch open
  CHECK(asked == 0);
  BatchLedger many(5);
  CHECK_FALSE(many.opens_single(false, more_ready));
  CHECK(asked == 1);
}

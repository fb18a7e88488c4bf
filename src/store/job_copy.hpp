#pragma once
// The COPY of a batch of jobs into the jobs table, for `oncely enqueue -` and
// Client::enqueue_batch. COPY cannot use a column's DEFAULT for some rows and a value for
// others, so each batch asks the database for its clock once (the value now() has in the
// batch's transaction, which is what DEFAULT now() would have given) and sends it for rows
// without run_at. COPY cannot RETURN either: when ids are wanted they are drawn from the
// jobs identity sequence first and sent with the rows. Apart from jobs.hpp because a COPY
// is a stream written row by row, not a statement.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <pqxx/stream_to>
#include <pqxx/transaction_base>

#include "oncely/errors.hpp"
#include "oncely/values.hpp"
#include "store/jobs.hpp"

namespace oncely::detail {

/// A row the database refused during COPY (a run_at it cannot read, say): which row of
/// the batch (0-based) and the server's reason, one line.
class CopyRowError : public ConfigError {
 public:
  CopyRowError(std::size_t row, const std::string& why) : ConfigError("", why), row_(row) {}
  [[nodiscard]] std::size_t row() const noexcept { return row_; }

 private:
  std::size_t row_;
};

/// The first line of a server message without its "ERROR:  " prefix.
[[nodiscard]] std::string primary_message(std::string_view what);

/// A batch's clock, read once in the batch's own transaction: now() as text (exactly what
/// the column's DEFAULT would store; COPY reads it back in the same session, so DateStyle
/// and TimeZone round-trip) and as microseconds since the epoch, for "+DURATION" rows.
struct BatchClock {
  std::string now_text;
  std::int64_t now_us = 0;
};

[[nodiscard]] BatchClock read_batch_clock(pqxx::transaction_base& tx);

/// The run_at text for a job: its own, or now() plus its delay from the batch's clock (a
/// delay on top of a text of its own is resolved by the database beforehand). Throws
/// ConfigError("run_at") for a delay that overflows.
[[nodiscard]] std::string run_at_text(const NewJob& job, const BatchClock& clock);

/// One COPY into <schema>.jobs, written row by row, so that the server works on a batch
/// while the rest of it is still being read and parsed.
class JobCopy {
 public:
  /// Starts the COPY: from here until complete(), `tx` can run nothing else.
  JobCopy(pqxx::transaction_base& tx, const JobsTable& table, bool with_ids);

  /// Sends one row (`id` only when the COPY is `with_ids`).
  void write(const NewJob& job, const std::string& run_at, std::int64_t id = 0);

  /// Ends the COPY. A row the server refused becomes a CopyRowError naming it.
  void complete();

 private:
  bool with_ids_;
  std::size_t rows_ = 0;
  pqxx::stream_to stream_;
};

/// COPYs `jobs` (validated by the caller) into `table` inside `tx`, in one COPY.
/// Returns the new ids in the order of `jobs` when `with_ids`, else an empty vector.
/// Throws CopyRowError when the server rejects one row (the transaction is then aborted),
/// pqxx exceptions for everything else.
std::vector<std::int64_t> copy_jobs(pqxx::transaction_base& tx, const JobsTable& table, const std::vector<NewJob>& jobs,
                                    bool with_ids);

}  // namespace oncely::detail

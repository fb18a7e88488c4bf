#pragma once
// Bulk enqueue: jobs loaded with COPY, for `oncely enqueue -` (newline-delimited JSON on
// stdin) and Client::enqueue_batch. COPY cannot use a column's DEFAULT for some rows and a
// value for others, so each batch asks the database for its clock once (the value now()
// has in the batch's transaction, which is what DEFAULT now() would have given) and sends
// it for rows without run_at. COPY cannot RETURN either: when ids are wanted they are drawn
// from the jobs identity sequence first and sent with the rows.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <pqxx/connection>
#include <pqxx/transaction_base>

#include "oncely/database_url.hpp"
#include "oncely/values.hpp"
#include "oncely/errors.hpp"
#include "store/jobs.hpp"

namespace oncely::detail {

/// Lines per transaction for `oncely enqueue -` unless --batch-size says otherwise.
inline constexpr std::size_t kDefaultBulkBatchSize = 5000;

/// Whether a line holds nothing but whitespace (such lines are skipped).
[[nodiscard]] bool is_blank_line(std::string_view line) noexcept;

/// Parses one input line, a JSON object
///   {"kind": "...", "payload": {...}, "queue": "...", "key": "...", "run_at": "...",
///    "priority": N, "max_attempts": N}
/// where only kind is required, "idempotency_key" is accepted for "key", null means absent,
/// and run_at is a timestamp Postgres accepts or "+DURATION" (from now). Fields the line
/// leaves out come from `defaults`. The payload comes back as payload_json: its text with
/// whitespace dropped and non-ASCII characters escaped, every number exactly as written
/// (never through a double). The job is validated (validate_new_job) and checked for what
/// COPY would reject (NUL characters); a field given twice is refused. Throws ConfigError
/// naming the field.
[[nodiscard]] NewJob parse_job_line(std::string_view line, const NewJob& defaults = NewJob{});

/// ConfigError("jobs[<i>].<field>", ...) for the first invalid job.
void validate_jobs(const std::vector<NewJob>& jobs);

/// A row the database refused during COPY (a run_at it cannot read, say): which row of
/// the batch (0-based) and the server's reason, one line.
class CopyRowError : public ConfigError {
 public:
  CopyRowError(std::size_t row, const std::string& why) : ConfigError("", why), row_(row) {}
  [[nodiscard]] std::size_t row() const noexcept { return row_; }

 private:
  std::size_t row_;
};

/// COPYs `jobs` (validated by the caller) into `table` inside `tx`, in one COPY.
/// Returns the new ids in the order of `jobs` when `with_ids`, else an empty vector.
/// Throws CopyRowError when the server rejects one row (the transaction is then aborted),
/// pqxx exceptions for everything else.
std::vector<std::int64_t> copy_jobs(pqxx::transaction_base& tx, const JobsTable& table,
                                    const std::vector<NewJob>& jobs, bool with_ids);

struct BulkEnqueueResult {
  long enqueued = 0;  ///< jobs committed
  long lines = 0;     ///< lines read, blank ones included
};

/// Reads newline-delimited JSON jobs from the file descriptor `fd` and loads them on
/// `conn`, at most `batch_size` jobs per transaction: with COPY, or, for a batch of one
/// job, one prepared autocommit INSERT (one round trip instead of a COPY's five). Input is
/// taken as it arrives: whenever nothing more is ready (poll(2) without waiting) the open
/// batch commits before the next read blocks, so a slow producer's jobs are never held
/// back for a full batch. A bad line stops the load before
/// its batch commits: earlier batches stay committed, and the ConfigError says so
/// ("<source> line N: <why>; 5000 jobs from lines 1..5000 were enqueued before it").
/// Database failures throw DatabaseError (password-free, one line) with the same account.
/// `prepared` false (or ONCELY_PREPARED_STATEMENTS=0): the single-job INSERT is unnamed,
/// for a transaction-mode pooler.
BulkEnqueueResult bulk_enqueue(pqxx::connection& conn, const DatabaseUrl& url, std::string_view schema, int fd,
                               const NewJob& defaults = NewJob{}, std::size_t batch_size = kDefaultBulkBatchSize,
                               std::string_view source = "stdin", bool prepared = true);

}  // namespace oncely::detail

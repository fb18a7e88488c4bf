#pragma once
// Bulk enqueue: `oncely enqueue -` (newline-delimited JSON on stdin, loaded in batches)
// and the check of Client::enqueue_batch's jobs. The COPY both use, and why it is shaped
// as it is, is store/job_copy.hpp; the lines come from support/stdin_lines.hpp.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <pqxx/connection>

#include "api/batch_ledger.hpp"  // kDefaultBulkBatchSize
#include "oncely/database_url.hpp"
#include "oncely/errors.hpp"
#include "oncely/values.hpp"

namespace oncely::detail {

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

#pragma once
// The batching of `oncely enqueue -` without its I/O: where each batch starts and ends, and
// the account of what the committed ones hold that every error ends with ("; 5000 jobs
// from lines 1..5000 were enqueued before it"). detail::bulk_enqueue (api/bulk_enqueue.cpp)
// does the reading, the COPY and the commits, and asks this which to do when; the
// decisions are pure, so tests/unit/batch_ledger_test.cpp drives them through a table.

#include <cstddef>
#include <string>
#include <vector>

namespace oncely::detail {

/// Lines per transaction for `oncely enqueue -` unless --batch-size says otherwise.
inline constexpr std::size_t kDefaultBulkBatchSize = 5000;

/// One bulk enqueue's batches, as input lines: at most `batch_size` jobs each, one at a
/// time. A batch is a single job (one autocommit INSERT) or a COPY in a transaction of its
/// own.
class BatchLedger {
 public:
  /// `batch_size` is at least 1 (the caller checks it).
  explicit BatchLedger(std::size_t batch_size);

  /// Counts one input line (blank ones too) and returns its number, from 1.
  long read_line() noexcept { return ++lines_; }
  [[nodiscard]] long lines() const noexcept { return lines_; }
  /// Jobs in committed batches.
  [[nodiscard]] long enqueued() const noexcept { return enqueued_; }

  [[nodiscard]] bool is_open() const noexcept { return open_; }
  /// Whether the open batch is a single job.
  [[nodiscard]] bool single() const noexcept { return single_; }

  /// Whether the open batch commits before the next job is read: the input has nothing
  /// more ready, so a slow producer (tail -f | oncely enqueue -) gets its jobs committed as
  /// soon as it pauses, not when a whole batch has come together. `more_ready()` (a
  /// poll(2)) is asked only while a batch is open.
  template <class MoreReady>
  [[nodiscard]] bool commits_at_pause(MoreReady&& more_ready) const {
    return open_ && !more_ready();
  }

  /// Whether the open batch commits before a job is added: a unique job goes alone, one
  /// call of enqueue_unique() (COPY has no ON CONFLICT), and the batch before it commits
  /// first, so that the input's order is kept.
  [[nodiscard]] bool commits_before(bool unique) const noexcept { return open_ && unique; }

  /// Whether the batch opened for a job is a single job: with --batch-size 1, a unique
  /// job, or a job with nothing behind it (an INSERT costs one round trip, a COPY five).
  /// `more_ready()` is asked only when the batch size leaves a choice.
  template <class MoreReady>
  [[nodiscard]] bool opens_single(bool unique, MoreReady&& more_ready) const {
    return batch_size_ == 1 || !more_ready() || unique;
  }

  /// Opens a batch (none may be open).
  void open(bool single);
  /// Adds the line last read to the open batch, as its next job.
  void add_line();
  /// Whether the open batch commits now that its last job was added: a single job always,
  /// a COPY when it holds batch_size jobs.
  [[nodiscard]] bool full() const noexcept { return single_ || batch_lines_.size() >= batch_size_; }
  /// The open batch was committed: its jobs join the account and it closes.
  void committed();

  /// The input line of the open batch's last job, and of its row `row` (0-based).
  [[nodiscard]] long last_line() const { return batch_lines_.back(); }
  [[nodiscard]] long line_of_row(std::size_t row) const { return batch_lines_.at(row); }
  /// The open batch's lines, "first..last".
  [[nodiscard]] std::string span() const;

  /// What every error ends with: "; no jobs were enqueued", or "; N jobs from lines 1..M
  /// were enqueued before it" (M: the last line of the last committed batch).
  [[nodiscard]] std::string account() const;

 private:
  std::size_t batch_size_;
  long lines_ = 0;
  long enqueued_ = 0;
  long committed_through_ = 0;
  bool open_ = false;
  bool single_ = false;
  std::vector<long> batch_lines_;  // the input line of each job of the open batch
};

}  // namespace oncely::detail

// BatchLedger: the batching of `oncely enqueue -` without its I/O (api/batch_ledger.hpp).
#include "api/batch_ledger.hpp"

#include <algorithm>

namespace oncely::detail {

BatchLedger::BatchLedger(std::size_t batch_size) : batch_size_(batch_size) {}

void BatchLedger::open(bool single) {
  open_ = true;
  single_ = single;
  batch_lines_.clear();
  // Not more up front: --batch-size may be far larger than the batches the input's pauses form.
  batch_lines_.reserve(std::min(batch_size_, kDefaultBulkBatchSize));
}

void BatchLedger::add_line() { batch_lines_.push_back(lines_); }

void BatchLedger::committed() {
  enqueued_ += static_cast<long>(batch_lines_.size());
  committed_through_ = batch_lines_.back();
  open_ = false;
  batch_lines_.clear();
}

std::string BatchLedger::span() const {
  return std::to_string(batch_lines_.front()) + ".." + std::to_string(batch_lines_.back());
}

std::string BatchLedger::account() const {
  if (enqueued_ == 0) return "; no jobs were enqueued";
  return "; " + std::to_string(enqueued_) + " jobs from lines 1.." + std::to_string(committed_through_) +
         " were enqueued before it";
}

}  // namespace oncely::detail

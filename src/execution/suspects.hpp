#pragma once
// Suspects: jobs that were in flight in a worker process that died (their attempt records
// never finished), and where each of them runs next. Pure decisions; the executor applies
// them (claim, attempt record, AttributionGate).
//
// A process that dies takes the attempts of every thread with it, and its records do not
// say which job killed it, if any did: in the common case the kill came from outside (the
// OOM killer, a deploy, kill -9) and every job in flight is innocent. So a job's first
// crash only makes it a suspect: it runs again beside the others, in any batch, and the
// record of that crash stays as evidence. Only a job seen in a second crash is isolated:
// it runs in a group with nothing else in flight in its process, at most
// kFirstIsolatedGroup jobs; a group that crashes again is halved, and a job that crashes
// alone (a group of one) is charged that attempt (the alone count). Innocents are never
// charged, the survivors of an outside kill are never held, and a job that kills its
// worker every time is alone by its seventh crash at the latest (groups of at most 16, 8,
// 4, 2, then 1) and dead-lettered as `crashed` once its charged crashes use up max_attempts.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "store/records.hpp"

namespace oncely::detail {

/// The first group of jobs isolated after a second crash: large enough that the jobs of a
/// killed process clear in a few isolated runs (each holds the process until the batches
/// in flight end), small enough that a poison job is alone after four more crashes.
constexpr int kFirstIsolatedGroup = 16;

/// A job to run isolated, in a group of at most `group_at_most` jobs.
struct Suspect {
  std::int64_t job_id = 0;
  int group_at_most = 1;
};

/// Where a job named by `unfinished` runs next: nullopt for anywhere (a first crash),
/// otherwise isolated in a group of at most that many.
std::optional<int> isolated_group_for(const UnfinishedAttempts& unfinished);

/// The suspects of a batch of `batch_size` jobs (run isolated: `isolated`) that may not run
/// in it: isolated ones in a batch that is not, or in a larger group than they may.
std::vector<Suspect> misplaced_suspects(const std::vector<UnfinishedAttempts>& unfinished, std::size_t batch_size,
                                        bool isolated);

/// Takes the next isolated group from the front of `queue`: as many as every member allows.
std::vector<std::int64_t> take_isolated_group(std::deque<Suspect>& queue);

}  // namespace oncely::detail

// Executor: one batch's life (claim -> record -> run -> settle, and the recovery of a lost
// batch). Over 400 lines on purpose: every step reads and updates the same batch state
// (started_, lost_, suspects_), whose invariants are easier to check in one
// file than across several. The decisions it applies live elsewhere: classify() in
// retry_policy (pure), a failure's retry or dead letter in the schema (decide() in
// attempt.hpp asks it), the SQL in store/.
#include "execution/executor.hpp"

#include <algorithm>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <utility>

#include <spdlog/spdlog.h>
#include <pqxx/pqxx>

#include "execution/job_events.hpp"
#include "support/db.hpp"
#include "support/pooler.hpp"
#include "support/trace_context.hpp"

namespace oncely::detail {
namespace {

using Clock = std::chrono::steady_clock;

// A batch stops starting handlers after this long and commits what it has done; the jobs
// it had not started are released to other workers. Keeps transactions (and the row locks
// on claimed-but-waiting jobs) short when handlers are slow.
constexpr auto kBatchTimeBudget = std::chrono::milliseconds(1000);

// The client checks for a dead connection this often during long statements, so a
// partitioned worker's locks are released in seconds rather than at TCP keepalive time.
constexpr std::string_view kConnectionCheckIntervalMs = "2000";

// A batch's hold on the process's attribution gate, until commit or rollback: exclusive for
// a suspect (so that a crash is its own), shared for every other batch.
class GateHold {
 public:
  GateHold(AttributionGate* gate, bool exclusive) {
    if (gate == nullptr) return;
    if (exclusive)
      alone_ = std::unique_lock(*gate);
    else
      shared_ = std::shared_lock(*gate);
  }

 private:
  std::unique_lock<AttributionGate> alone_;
  std::shared_lock<AttributionGate> shared_;
};

}  // namespace

Executor::Executor(const QueueContext& queue, std::uint64_t seed) : queue_(queue), rng_(seed) {
  const auto timeout_ms = queue.config.job_timeout.count();
  limits_.statement_timeout = std::to_string(timeout_ms);
  // Between two statements a job transaction is idle only while a handler computes; a
  // handler stuck longer than its job_timeout gets its session (and locks) ended.
  limits_.idle_in_transaction_session_timeout = std::to_string(timeout_ms + 1000);
  limits_.client_connection_check_interval = std::string(kConnectionCheckIntervalMs);
}

int Executor::claim_limit() const {
  // With other threads beside it, a thread's first claim takes one job: until one has run,
  // how long a handler takes is unknown, and a full batch of slow jobs (10 ms each: 500
  // jobs are 5 s) would sit locked behind one thread while the others find nothing to
  // claim. A no-op queue pays one short batch per thread.
  if (!claimed_before_ && queue_.config.concurrency > 1) return 1;
  // A batch runs its jobs one after another and holds one slot of the queue for all of them,
  // but a slot of each of its jobs' keys until it commits: under a per-key limit, a batch of
  // several would hold keys it is not running.
  if (limited() && queue_.config.limits->per_key_concurrency) return 1;
  // Handlers that write through the transaction need a savepoint each; claim no more than
  // one transaction may open, rather than release the rest unstarted.
  const int batch =
      used_savepoints_ ? std::min(queue_.config.batch_size, JobTransaction::kMaxSavepoints) : queue_.config.batch_size;
  if (mean_run_us_ <= 0) return batch;
  // Clamp before converting: a no-op handler's sub-microsecond mean would overflow an int.
  const double fits = std::chrono::duration<double, std::micro>(kBatchTimeBudget).count() / mean_run_us_;
  return static_cast<int>(std::clamp(fits, 1.0, static_cast<double>(batch)));
}

void Executor::emit(const std::vector<JobEvent>& events) const { detail::emit(queue_.on_event, *queue_.log, events); }

Executor::BatchResult Executor::run_batch(WorkerConnections& c, const std::stop_token& stop, int max_jobs) {
  const Store& store = *queue_.store;
  started_.clear();
  lost_.reset();
  BatchResult result{0, std::min(claim_limit(), max_jobs)};
  if (isolated_batches_left_ > 0) --isolated_batches_left_;
  batch_ran_external_ = false;
  const bool exclusive = !suspects_.empty();
  const GateHold hold(queue_.gate, exclusive);
  {
    // ---- claim ----
    std::optional<JobTransaction> claim_txn(std::in_place, *c.job);
    std::vector<ClaimedJob> jobs;
    std::vector<JobEvent> events;
    std::optional<ClaimKey> claimed_after;  // where the claim started (none: the head)
    try {
      // Suspects seen in more than one crash run isolated, in groups that halve while they
      // crash, so that a job that kills workers ends up alone, where its crash counts.
      // (Another worker may have taken them meanwhile: then the next group, then the queue.)
      while (jobs.empty() && !suspects_.empty()) {
        const std::vector<std::int64_t> group = take_isolated_group(suspects_);
        jobs = claim_suspects(claim_txn->work(), group);
        result.limit = static_cast<int>(group.size());
      }
      if (jobs.empty() && exclusive) {
        // Every suspect was gone: the next batch claims from the queue, not isolated.
        claim_txn->work().abort();
        return {0, 0, 0};
      }
      if (jobs.empty()) {
        result.limit = std::min(claim_limit(), max_jobs);
        jobs = claim_ready(claim_txn->work(), result.limit, claimed_after);
      }
    } catch (const pqxx::broken_connection&) {
      throw;
    } catch (const pqxx::sql_error& e) {
      if (is_connection_loss(e)) throw;  // a read-only server: no row's fault, reconnect
      // The claim statement failed, before any attempt was recorded: most likely on a row it
      // cannot handle. Retrying it would fail the same way for ever and stop the queue, so
      // the batch is claimed again one job at a time, and the job that fails alone goes.
      claim_txn.reset();
      claim_txn.emplace(*c.job);
      jobs = claim_one_at_a_time(claim_txn->work(), result.limit, claimed_after, e, events);
    }
    JobTransaction& txn = *claim_txn;
    result.claimed = static_cast<int>(jobs.size());
    result.held_back = std::exchange(held_back_, false);
    if (!jobs.empty()) claimed_before_ = true;
    if (jobs.empty()) {
      if (events.empty()) {
        txn.work().abort();
      } else {  // only dead letters of unclaimable rows
        store.job_stats.count_outcomes(txn.work(), c.record.stats_key(), queue_.name, count(events, 0));
        txn.work().commit();
        emit(events);
      }
      return result;
    }

    // ---- record, and count what never finished ----
    const auto unfinished = record_attempts(c, txn, jobs, exclusive);
    if (!unfinished) return result;  // given back; its jobs run alone first
    const long crashed = charge_unfinished(c, txn, jobs, *unfinished, events);

    // ---- run ----
    std::vector<std::int64_t> finished;
    std::vector<CompletedAttempt> completed;  // finished by their handler: their records
    std::vector<std::string> released;
    const auto batch_deadline = Clock::now() + kBatchTimeBudget;
    bool starting = true;
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      const ClaimedJob& job = jobs[i];
      if (job.duplicate()) {
        finished.push_back(job.id);
        events.push_back(event_of(job, queue_.name, 0, JobEvent::Outcome::deduplicated));
        continue;
      }
      if (starting && i > 0 &&
          (stop.stop_requested() || Clock::now() >= batch_deadline || txn.savepoints_exhausted())) {
        starting = false;
      }
      if (!starting) {
        ++result.released;
        if (job.marker) released.push_back(*job.marker);
        queue_.claim_start->rewind();  // released jobs are before the start
        continue;
      }
      const AttemptResult attempt = run_one(txn, job);
      if (attempt.kind == AttemptResult::Kind::lost) {
        lost_ = LostFailure{job, attempt};
        break;
      }
      if (attempt.kind == AttemptResult::Kind::completed) {
        finished.push_back(job.id);
        if (job.marker) completed.push_back({job.id, completion_record(job, attempt.attempt, attempt.run)});
        events.push_back(event_of(job, queue_.name, attempt.attempt, JobEvent::Outcome::completed));
        with_run(events.back(), attempt.run);
      } else {
        events.push_back(record_failure(txn.work(), job, attempt));
      }
    }

    // ---- abandoned: the shutdown grace is over ----
    // Nothing of the batch is written, not even the failure of a handler stopped for the
    // shutdown, and its attempt record goes: every job is redelivered, its attempt not
    // charged (a thread stuck past this point leaves the record, and the attempt counts).
    if (queue_.abandon.stop_requested()) {
      txn.work().abort();
      pqxx::work tx(*c.job);
      store.attempts_in_flight.clear(tx, c.record.id());
      tx.commit();
      started_.clear();
      lost_.reset();
      return result;
    }

    // ---- settle ----
    if (!lost_) {
      used_savepoints_ = txn.savepoints() > 0;
      store.jobs.complete_batch(txn.work(), {.finished_ids = finished,
                                             .completed = completed,
                                             .released_markers = released,
                                             .record = c.record.id(),
                                             .slot = c.record.stats_key(),
                                             .queue = queue_.name,
                                             .worker = queue_.worker_name,
                                             .counts = count(events, crashed)});
      try {
        txn.work().commit();
      } catch (const pqxx::in_doubt_error&) {
        throw;
      } catch (const pqxx::broken_connection&) {
        throw;
      } catch (const pqxx::sql_error& e) {
        // COMMIT itself failed (a deferred constraint, a serialization failure): the batch
        // rolled back, and the error belongs to a job the transaction cannot name. When it
        // is one job's, its failure is recorded below, once this transaction is gone
        // (libpqxx refuses a new one on the connection while the failed one lives).
        if (!settle_failed_commit(c, jobs, finished, e)) return result;
      }
      if (!lost_) {
        emit(events);
        return result;
      }
    }
  }  // the lost batch's transaction rolls back here

  // A job's writes could not be undone on their own (no savepoint, or the transaction is
  // gone). The rest of the batch is redelivered; the failure is recorded afresh.
  const Failure& failure = *lost_->result.run.failure;
  if (failure.cls == FailureClass::connection) {
    throw pqxx::broken_connection("the connection broke inside a handler: " + failure.message);
  }
  if (lost_->result.without_savepoint) {
    // A transaction-only handler failed after writing. Isolate jobs with savepoints for a
    // while, so that a kind that keeps failing costs one batch now and then, not each one.
    isolated_batches_left_ = kIsolatedBatchesAfterLoss;
    queue_.log->debug(
        "batch rolled back for a failed transaction-only job, its other jobs run again queue={} id={}{} "
        "others={}",
        queue_.name, lost_->job.id, trace_field(lost_->job.trace_context), result.claimed - 1);
  }
  recover(c);
  return result;
}

std::optional<std::vector<UnfinishedAttempts>> Executor::record_attempts(WorkerConnections& c, JobTransaction& txn,
                                                                         const std::vector<ClaimedJob>& jobs,
                                                                         bool exclusive) {
  // Durable record of the attempts before any handler runs: committed on the second
  // connection, it survives whatever happens to this process and this transaction.
  std::vector<std::int64_t> ids;
  ids.reserve(jobs.size());
  for (const ClaimedJob& job : jobs) ids.push_back(job.id);
  // Through a pooler, the server backend running this transaction is known only inside it.
  const int backend = c.job_pooled ? server_backend_pid(txn.work()) : c.job->backendpid();
  std::vector<UnfinishedAttempts> unfinished = c.record.start(ids, backend, exclusive);
  // Some of these jobs were in a transaction that never finished. A record of one job that
  // ran alone in its process is that job's crashed attempt; any other record does not say
  // which job crashed its process, and charging them all would dead-letter innocent jobs
  // along with a poison one. A first crash is kept as evidence and the job runs here; a job
  // seen in more crashes must run isolated: the batch is given back untouched, and they
  // run first, in groups (suspects.hpp).
  std::vector<Suspect> misplaced = misplaced_suspects(unfinished, jobs.size(), exclusive);
  if (!misplaced.empty()) {
    queue_.claim_start->rewind();  // the batch goes back: its jobs are before the start
    c.record.clear();
    txn.work().abort();
    queue_.log->warn("jobs of batches that never finished run isolated first queue={} jobs={} group={}", queue_.name,
                     misplaced.size(), misplaced.front().group_at_most);
    suspects_.insert(suspects_.end(), misplaced.begin(), misplaced.end());
    return std::nullopt;
  }
  // Not isolated: first crashes, whose records stay as the evidence of them.
  if (!exclusive) return std::vector<UnfinishedAttempts>{};
  return unfinished;
}

long Executor::charge_unfinished(WorkerConnections& c, JobTransaction& txn, std::vector<ClaimedJob>& jobs,
                                 const std::vector<UnfinishedAttempts>& unfinished, std::vector<JobEvent>& events) {
  if (unfinished.empty()) return 0;
  long crashed = 0;
  std::vector<std::pair<std::int64_t, int>> charge;
  for (const UnfinishedAttempts& u : unfinished) {
    charge.emplace_back(u.job_id, u.alone);
    crashed += u.alone;
  }
  const auto counted = queue_.store->jobs.fold_interrupted(txn.work(), charge, c.record.id());
  for (ClaimedJob& job : jobs) {
    for (const UnfinishedAttempts& u : unfinished) {
      if (u.job_id == job.id) {
        job.interrupted = u.alone;
        job.suspect = true;
      }
    }
    for (const auto& [id, attempts] : counted) {
      if (id == job.id) job.attempts = attempts;
    }
    for (int n = 0; n < job.interrupted; ++n) {
      JobEvent crash = event_of(job, queue_.name, job.attempts - job.interrupted + n + 1, JobEvent::Outcome::crashed);
      crash.error_class = to_string(FailureClass::crashed);
      crash.error = "its worker died mid-attempt (the attempt ran alone there, and never finished)";
      events.push_back(std::move(crash));
    }
  }
  return crashed;
}

std::vector<ClaimedJob> Executor::claim_one_at_a_time(pqxx::work& tx, int limit,
                                                      const std::optional<ClaimKey>& failed_after,
                                                      const pqxx::sql_error& cause, std::vector<JobEvent>& events) {
  const Store& store = *queue_.store;
  queue_.log->warn("claim failed, claiming its jobs one at a time queue={} sqlstate={} error={}", queue_.name,
                   cause.sqlstate(), one_line(queue_.url, cause.what()));
  queue_.claim_start->rewind();
  std::vector<ClaimedJob> jobs;
  // The rows the failed claim tried, not the head's: a claim after the start that fails on
  // a row would otherwise fail again and again while the head holds other jobs.
  // A limited queue's jobs come with their slots, taken here for all of them.
  const std::vector<std::int64_t> ids = limited() ? store.jobs.lock_limited(tx, queue_.name, limit, {}).ids
                                                  : store.jobs.lock_ready(tx, queue_.name, limit, failed_after);
  for (const std::int64_t id : ids) {
    // Statements through exec_params/exec_prepared leave the savepoint usable when they fail.
    tx.exec("SAVEPOINT oncely_claim");
    try {
      std::vector<ClaimedJob> one = store.jobs.claim_by_ids(tx, {id}, limits_);
      tx.exec("RELEASE SAVEPOINT oncely_claim");
      for (ClaimedJob& job : one) jobs.push_back(std::move(job));
    } catch (const pqxx::broken_connection&) {
      throw;
    } catch (const pqxx::sql_error& e) {
      if (!is_unclaimable_row(e.sqlstate())) throw;  // the server's state, not this row's
      tx.exec("ROLLBACK TO SAVEPOINT oncely_claim");
      Failure failure = Failure::of(FailureClass::unreadable,
                                    "the claim cannot handle this job's row: " + one_line(queue_.url, e.what()));
      failure.detail["sqlstate"] = e.sqlstate();
      ClaimedJob unread;
      unread.id = id;
      unread.max_attempts = 1;
      const Decision decision = decide(tx, store, queue_.config, failure, unread, 0);  // a dead letter: never ran
      const std::string cls(to_string(decision.cls));
      std::optional<std::string> trace_context =
          store.dead_letters.move_unclaimed(tx, id, failure.message, cls, failure.detail);
      // Its kind may be what broke the claim (10 KB): not for a metrics label or a log line.
      events.push_back(JobEvent{.id = id,
                                .queue = queue_.name,
                                .kind = "(unreadable)",
                                .outcome = JobEvent::Outcome::dead_lettered,
                                .error_class = cls,
                                .error = failure.message,
                                .trace_context = std::move(trace_context)});
    }
  }
  return jobs;
}

bool Executor::settle_failed_commit(WorkerConnections& c, const std::vector<ClaimedJob>& jobs,
                                    const std::vector<std::int64_t>& finished, const pqxx::sql_error& error) {
  queue_.claim_start->rewind();
  // The batch's record is of a transaction that rolled back while its worker lives: it is
  // no crashed attempt of anyone's.
  c.record.clear();
  const auto ran = std::find_if(jobs.begin(), jobs.end(), [&](const ClaimedJob& job) {
    return std::find(finished.begin(), finished.end(), job.id) != finished.end() && !job.duplicate();
  });
  if (jobs.size() > 1) {
    // Which job's writes COMMIT refused is not known: each runs alone next, where a failing
    // COMMIT is that job's.
    for (const ClaimedJob& job : jobs) suspects_.push_back({job.id, 1});
    queue_.log->warn("batch COMMIT failed, its jobs run alone next queue={} jobs={} sqlstate={} error={}", queue_.name,
                     jobs.size(), error.sqlstate(), one_line(queue_.url, error.what()));
    return false;
  }
  if (ran == jobs.end()) {
    queue_.log->error("COMMIT failed queue={} id={}{} sqlstate={} error={}", queue_.name, jobs.front().id,
                      trace_field(jobs.front().trace_context), error.sqlstate(), one_line(queue_.url, error.what()));
    return false;  // nothing of its own ran: redelivered as it is
  }
  // One job, whose handler succeeded, and COMMIT refused its writes: that is its attempt's
  // failure, recorded like any other that the transaction could not hold.
  Failure failure = classify(std::make_exception_ptr(error));
  failure.message = "COMMIT failed: " + one_line(queue_.url, failure.message);
  lost_ = LostFailure{*ran, AttemptResult{AttemptResult::Kind::lost, ran->attempts + 1, {failure, {}, nullptr}}};
  started_ = {ran->id};
  return true;
}

std::vector<ClaimedJob> Executor::claim_ready(pqxx::work& tx, int limit, std::optional<ClaimKey>& started_after) {
  if (limited()) {
    // The jobs that get their slots, from the head of the queue (the limits bound the scan,
    // not the claim start), then their claim. When every slot is held, the claim waits for
    // one, up to the poll interval: a slot given back by a worker that died (its transaction
    // with it) is announced by nothing else.
    const JobsTable::LimitedJobs free =
        queue_.store->jobs.lock_limited(tx, queue_.name, limit, {}, queue_.config.poll_interval);
    held_back_ = free.held_back;
    if (free.ids.empty()) return {};
    std::vector<ClaimedJob> jobs = queue_.store->jobs.claim_by_ids(tx, free.ids, limits_);
    // In the order the limited claim took them (keys in turn), not in the queue's: a batch
    // runs its jobs one after another, and in claim order a key behind another's backlog
    // would wait for the batch's share of that backlog.
    std::unordered_map<std::int64_t, std::size_t> turn;
    for (std::size_t i = 0; i < free.ids.size(); ++i) turn.emplace(free.ids[i], i);
    std::ranges::sort(jobs, {}, [&](const ClaimedJob& job) { return turn.at(job.id); });
    return jobs;
  }
  return claim_at(
      *queue_.claim_start,
      [&](const std::optional<ClaimKey>& after) {
        started_after = after;  // kept when the claim throws, for claim_one_at_a_time()
        return queue_.store->jobs.claim(tx, queue_.name, limit, limits_, after);
      },
      [](const std::vector<ClaimedJob>& jobs) { return jobs.empty() ? std::nullopt : jobs.back().key; },
      queue_.observe_claim);
}

std::vector<ClaimedJob> Executor::claim_suspects(pqxx::work& tx, const std::vector<std::int64_t>& ids) {
  const Store& store = *queue_.store;
  if (!limited()) return store.jobs.claim_by_ids(tx, ids, limits_);
  const std::vector<std::int64_t> free =
      store.jobs.lock_limited(tx, queue_.name, static_cast<int>(ids.size()), ids).ids;
  return free.empty() ? std::vector<ClaimedJob>{} : store.jobs.claim_by_ids(tx, free, limits_);
}

Executor::AttemptResult Executor::run_one(JobTransaction& txn, const ClaimedJob& job) {
  using Kind = AttemptResult::Kind;
  const int max_attempts = job.max_attempts.value_or(queue_.config.max_attempts);

  // Attempts that crashed their workers may already have used up the allowance.
  if (job.attempts >= max_attempts) {
    const bool crashed = job.interrupted > 0;
    return {Kind::failed,
            job.attempts,
            {crashed ? Failure::of(FailureClass::crashed, "its attempts were used up by workers that died mid-attempt")
                     : Failure::of(FailureClass::retryable, "no attempts left (max_attempts lowered?)"),
             {},
             nullptr},
            false};
  }

  const int attempt = job.attempts + 1;
  const RegisteredHandler* handler = find_handler(*queue_.handlers, job.kind);
  if (handler == nullptr) return {Kind::failed, attempt, {no_handler_for(job.kind), {}, nullptr}};

  // A transaction-only job runs without a savepoint while nothing else has run in this
  // batch that a rollback of the whole batch would make happen twice.
  const bool transaction_only = handler->options.transaction_only;
  const bool isolate = !transaction_only || batch_ran_external_ || isolated_batches_left_ > 0;
  if (!transaction_only) batch_ran_external_ = true;
  started_.push_back(job.id);
  txn.begin_job(isolate);
  queue_.in_flight->fetch_add(1);
  HandlerRun run = run_attempt(*handler, &txn,
                               {.job = job,
                                .queue = queue_.name,
                                .attempt = attempt,
                                .deadline = Clock::now() + queue_.config.job_timeout,
                                .job_timeout = queue_.config.job_timeout,
                                .stop = queue_.abandon},
                               rng_);
  queue_.in_flight->fetch_sub(1);
  const double run_us = static_cast<double>(run.run_time.count());
  mean_run_us_ = mean_run_us_ <= 0 ? run_us : 0.8 * mean_run_us_ + 0.2 * run_us;

  if (!run.failure) return {Kind::completed, attempt, std::move(run)};
  // This job's writes cannot be undone alone: the batch is rolled back and the failure
  // recorded in a fresh transaction (run_batch, recover()).
  const bool lost = transaction_state(txn.work()) == TransactionState::gone ||
                    run.failure->cls == FailureClass::connection || !txn.rollback_job();
  return {lost ? Kind::lost : Kind::failed, attempt, std::move(run), true, lost && !isolate};
}

JobEvent Executor::record_failure(pqxx::transaction_base& tx, const ClaimedJob& job, const AttemptResult& result) {
  return write_failure(tx, queue_, {.job = job, .attempt = result.attempt, .run = result.run, .counts = result.counts},
                       [&](const FailureRecord& record, std::chrono::milliseconds delay) {
                         queue_.store->jobs.retry(tx, record, delay);
                       });
}

void Executor::recover(WorkerConnections& c) {
  const Store& store = *queue_.store;
  queue_.claim_start->rewind();  // the lost batch's jobs are free again, before the start
  if (lost_ && c.job && c.job->is_open()) {
    // Re-lock the failing job by id, only if nobody moved it since our claim saw it, and
    // record its failure; the rest of the batch is simply redelivered.
    std::vector<JobEvent> events;
    pqxx::work tx(*c.job);
    ClaimedJob job = lost_->job;
    job.marker.reset();  // the claim's marker went with the lost transaction
    // The lost transaction's fold of unfinished attempts went with it too: re-lock at the
    // attempts the claim saw, and fold again.
    if (store.jobs.relock(tx, job.id, job.claimed_attempts)) {
      if (job.suspect) store.jobs.fold_interrupted(tx, {{job.id, job.interrupted}}, c.record.id());
      events.push_back(record_failure(tx, job, lost_->result));
      store.job_stats.count_outcomes(tx, c.record.stats_key(), queue_.name, count(events, 0));
    }
    // The other jobs of the batch ran but their work was rolled back with it: that is no
    // failed attempt of theirs, so nothing of the batch stays in the record.
    store.attempts_in_flight.clear(tx, c.record.id());
    tx.commit();
    emit(events);
    started_.clear();
    lost_.reset();
    return;
  }
  // Keep the attempts that started in the old record, for whoever claims those jobs next,
  // and start a fresh record for this thread.
  c.record.retire(started_);
  started_.clear();
  lost_.reset();
}

}  // namespace oncely::detail

#include "execution/lease_queue.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>
#include <pqxx/pqxx>

#include "execution/job_events.hpp"
#include "execution/poll_timing.hpp"
#include "store/store.hpp"
#include "support/db.hpp"

namespace oncely::detail {
namespace {

using Clock = std::chrono::steady_clock;

// How long finished attempts wait for others still running, to be settled with them.
constexpr auto kGroupSettle = std::chrono::milliseconds(2);

}  // namespace

LeaseQueue::LeaseQueue(QueueContext context, LeaseKeeper& keeper, std::shared_ptr<RateLimiter> limiter)
    : context_(std::move(context)), keeper_(keeper), limiter_(std::move(limiter)) {}

LeaseQueue::~LeaseQueue() {
  request_stop();
  if (control_thread_.joinable()) control_thread_.join();
  handler_threads_.close();
}

void LeaseQueue::start() {
  control_thread_ = std::thread([this] { control(); });
}

void LeaseQueue::wake_one() {
  {
    std::lock_guard lock(mutex_);
    woken_ = true;
  }
  control_cv_.notify_all();
}

void LeaseQueue::look_back() {
  context_.claim_start->owe_head();
  wake_one();
}

void LeaseQueue::request_stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  control_cv_.notify_all();
}

bool LeaseQueue::wait_stopped(Clock::time_point until) {
  std::unique_lock lock(mutex_);
  return done_cv_.wait_until(lock, until, [&] { return done_; });
}

bool LeaseQueue::abandon(Clock::time_point until) {
  {
    std::lock_guard lock(mutex_);
    abandoning_ = true;
    abandon_by_ = until;
  }
  control_cv_.notify_all();
  bool stopped = false;
  {
    std::unique_lock lock(mutex_);
    stopped = done_cv_.wait_until(lock, until, [&] { return done_; });
  }
  if (!stopped || in_flight_.load() > 0 || handlers_left_behind_.load()) {
    // Handlers that would not return: the process exits under them.
    if (control_thread_.joinable() && !stopped) control_thread_.detach();
    handler_threads_.detach();
    return false;
  }
  return true;
}

pqxx::connection& LeaseQueue::connection() {
  if (!conn_ || !conn_->is_open()) {
    conn_.reset();
    auto conn = connect(context_.url);
    context_.store->prepare(*conn);
    // Bounds the statements of on_complete effects and sql handlers, run in the completion.
    const auto limit = std::min<long long>(context_.config.job_timeout.count(), 24LL * 3600 * 1000);
    pqxx::nontransaction(*conn).exec("SET statement_timeout = " + std::to_string(limit));
    conn_ = std::move(conn);
  }
  return *conn_;
}

std::vector<FinishedAttempt> LeaseQueue::take_finished() {
  // At most kMaxSavepoints attempts with database effects per settlement (each gets a savepoint).
  std::vector<FinishedAttempt> batch;
  int with_effects = 0;
  while (!finished_.empty()) {
    FinishedAttempt& next = finished_.front();
    const bool effects = !next.run.failure && !next.attempt->effects.empty();
    if (effects && with_effects == JobTransaction::kMaxSavepoints) break;
    with_effects += effects ? 1 : 0;
    batch.push_back(std::move(next));
    finished_.pop_front();
  }
  return batch;
}

void LeaseQueue::control() {
  const QueueConfig& config = context_.config;
  auto reconnect_delay = kReconnectFirst;
  auto next_claim = Clock::now();  // the first claim at once
  // The last claim was held back by the queue's limits: the attempts this thread settles free
  // slots of them, so its next settlement claims too, in the same transaction (which then
  // announces none of the slots it frees: JobLeasesTable::take_back_freed_slots()).
  bool claim_at_settlement = false;
  std::mt19937_64 jitter(std::random_device{}());
  while (true) {
    std::vector<FinishedAttempt> batch;
    bool stopping = false;
    bool abandoning = false;
    {
      std::unique_lock lock(mutex_);
      const bool room = !stopping_ && static_cast<int>(running_.size()) < config.concurrency;
      control_cv_.wait_until(lock, room ? next_claim : Clock::now() + config.poll_interval, [&] {
        return !finished_.empty() || abandoning_ || (stopping_ && running_.empty()) || (woken_ && room);
      });
      // Group settlement: attempts that finish within a moment of each other share one
      // transaction (and one commit), as jobs of one claim that are short do; a settlement
      // waits at most kGroupSettle for the others still running.
      if (!finished_.empty() && unfinished_ > 0) {
        control_cv_.wait_for(lock, kGroupSettle, [&] {
          return abandoning_ || unfinished_ == 0 || static_cast<int>(finished_.size()) >= config.batch_size;
        });
      }
      batch = take_finished();
      if (woken_) next_claim = Clock::now();
      woken_ = false;
      stopping = stopping_;
      abandoning = abandoning_;
    }
    try {
      pqxx::connection& conn = connection();
      if (abandoning) {
        if (!batch.empty()) settle_or_isolate(conn, batch);
        give_up(conn, abandon_by_.value_or(Clock::now()));
        break;
      }
      // The attempts being settled free their slots in the same transaction.
      const int room = config.concurrency - static_cast<int>(running_.size() - batch.size());
      // Paused (`oncely queue pause`): nothing new is claimed; what runs finishes. A resume
      // wakes this thread; the poll interval is the fallback.
      const bool claim_due =
          !stopping && room > 0 && (Clock::now() >= next_claim || (claim_at_settlement && !batch.empty()));
      const bool paused = claim_due && !may_claim(context_);
      int limit = claim_due && !paused ? std::min(room, config.batch_size) : 0;
      if (limit > 0 && limiter_) limit = limiter_->try_take(limit);
      Claimed claimed;
      if (!batch.empty() || limit > 0) {
        try {
          claimed = cycle(conn, batch, limit);
        } catch (const std::exception& e) {
          if (limiter_ && limit > 0) limiter_->give_back(limit);
          if (!conn.is_open() || is_connection_loss(e) || batch.empty()) throw;
          // The settlement and the claim share a transaction: settle on its own (and, if
          // that fails too, attempt by attempt); the claim waits for the next turn.
          context_.log->warn("queue {}: settling {} attempt(s) and claiming together failed: {}", context_.name,
                             batch.size(), one_line(context_.url, e.what()));
          settle_or_isolate(conn, batch);
          limit = 0;
        }
        if (limiter_ && claimed.leased < limit) limiter_->give_back(limit - claimed.leased);
      }
      reconnect_delay = kReconnectFirst;
      if (stopping) {
        if (running_.empty()) break;
        continue;
      }
      if (paused) {
        next_claim = Clock::now() + config.poll_interval;
      } else if (claim_due) {
        // A full claim, counted in rows taken, not leased: more is probably waiting. (A
        // claim whose rows were copies of one key, or duplicates of keys already processed,
        // leases fewer than it takes; counting leases took it for the end of the queue and
        // drained such a queue at a claim per poll interval.) Otherwise wait for a NOTIFY, a
        // finished job (room), or the poll interval (±10 %, so workers drift apart), which
        // is also when an expired lease, which sends no NOTIFY, is taken back.
        next_claim = claimed.taken == limit && limit > 0
                         ? Clock::now()
                         : Clock::now() + (limit == 0 && limiter_ ? std::chrono::milliseconds(50)
                                                                  : jittered_poll(config.poll_interval, jitter));
        // A queue held back by its limits: no commit announces a rate window moving on or a
        // lease expiring, so look again then rather than at the poll.
        if (claimed.retry_in) next_claim = std::min(next_claim, Clock::now() + *claimed.retry_in);
        claim_at_settlement = claimed.retry_in.has_value();
        // A claim from the head that is owed, if this thread makes it: when the pace allows.
        if (const auto due = context_.claim_start->owed_head_due(Clock::now())) next_claim = std::min(next_claim, *due);
      }
    } catch (const std::exception& e) {
      context_.log->error("lease queue error queue={} error={}; reconnecting", context_.name,
                          one_line(context_.url, e.what()));
      conn_.reset();
      {
        std::unique_lock lock(mutex_);
        // What could not be settled is settled after the reconnect (the fence makes a second try safe).
        for (auto it = batch.rbegin(); it != batch.rend(); ++it) finished_.push_front(std::move(*it));
        control_cv_.wait_for(lock, reconnect_delay, [&] { return abandoning_; });
        if (abandoning_ && !abandoning) continue;  // give up now, on a fresh connection
      }
      if (abandoning) {
        // The grace is over and the database is unreachable: the leases run out by themselves.
        context_.log->error(
            "queue {}: could not release {} lease(s) at exit; they are claimable again when they expire", context_.name,
            running_.size());
        break;
      }
      reconnect_delay = next_reconnect_delay(reconnect_delay);
    }
  }
  {
    std::lock_guard lock(mutex_);
    done_ = true;
  }
  done_cv_.notify_all();
}

LeaseQueue::Claimed LeaseQueue::cycle(pqxx::connection& conn, std::vector<FinishedAttempt>& batch, int claim_limit) {
  // Attempts whose effects ended the transaction: they fail, and the transaction starts over
  // (each try clears one attempt's effects, so this ends).
  for (std::size_t tries = 0; tries <= batch.size(); ++tries) {
    JobTransaction txn(conn);
    std::optional<std::vector<JobEvent>> settlement;
    if (!batch.empty()) {
      // A limited queue: the claim that follows takes the freed slots back, wanted or not.
      if (context_.config.limits && claim_limit >= static_cast<int>(batch.size())) {
        context_.store->leases.take_back_freed_slots(txn.work(), context_.name);
      }
      settlement = settle_leases(txn, context_, batch);
      if (!settlement) continue;
    }
    LeaseClaim claim;
    try {
      if (claim_limit > 0) claim = claim_leases(txn.work(), context_, claim_limit);
      OutcomeCounts counts = claim.counts;
      if (settlement) counts += count(*settlement, 0);
      if (!counts.empty())
        context_.store->job_stats.count_outcomes(txn.work(), context_.worker_id, context_.name, counts);
      txn.work().commit();
    } catch (...) {
      context_.claim_start->rewind();  // the jobs it locked are ready again, maybe before the start
      throw;
    }
    if (settlement) settled(batch, *settlement);
    return start_claimed(claim);
  }
  throw std::logic_error("lease settlement: its transaction was lost on every try");
}

LeaseQueue::Claimed LeaseQueue::start_claimed(LeaseClaim& claim) {
  for (const auto& a : claim.attempts) {
    keeper_.hold(a);
    running_.emplace(a->held.token, a);
  }
  // Every lease of the claim is renewed from now on, before any handler starts: starting
  // hundreds of them (threads, exec processes) can take longer than a lease, and a job
  // handed to the renewal only when its turn came had lost its lease by then.
  dispatch(claim.attempts);
  emit(context_.on_event, *context_.log, claim.events);
  return {claim.taken, static_cast<int>(claim.attempts.size()), claim.retry_in};
}

void LeaseQueue::dispatch(const std::vector<std::shared_ptr<LeaseAttempt>>& attempts) {
  if (attempts.empty()) return;
  {
    std::lock_guard lock(mutex_);
    unfinished_ += static_cast<int>(attempts.size());
  }
  handler_threads_.dispatch(attempts);
}

void LeaseQueue::run(std::shared_ptr<LeaseAttempt> attempt) {
  thread_local std::mt19937_64 span_ids(std::random_device{}());
  in_flight_.fetch_add(1);
  FinishedAttempt finished{attempt, {}};
  const ClaimedJob& job = attempt->job;
  if (const RegisteredHandler* handler = find_handler(*context_.handlers, job.kind)) {
    finished.run = run_attempt(*handler, attempt.get(),
                               {.job = job,
                                .queue = context_.name,
                                .attempt = job.attempts,
                                .deadline = attempt->deadline,
                                .job_timeout = context_.config.job_timeout,
                                .stop = attempt->stop.get_token()},
                               span_ids);
  } else {
    finished.run.failure = no_handler_for(job.kind);
  }
  attempt->finished = true;
  in_flight_.fetch_sub(1);
  bool wake = false;
  {
    std::lock_guard lock(mutex_);
    finished_.push_back(std::move(finished));
    --unfinished_;
    // The control thread settles finished attempts in groups (control()): it needs to
    // hear of the first, of a full group, and of the last one running.
    wake = finished_.size() == 1 || static_cast<int>(finished_.size()) >= context_.config.batch_size ||
           unfinished_ == 0 || abandoning_;
  }
  if (wake) control_cv_.notify_all();
}

void LeaseQueue::settled(std::vector<FinishedAttempt>& batch, const std::vector<JobEvent>& events) {
  for (const FinishedAttempt& f : batch) {
    keeper_.drop(f.attempt->held.token);
    running_.erase(f.attempt->held.token);
  }
  emit(context_.on_event, *context_.log, events);
  batch.clear();  // settled: nothing of it to try again
}

void LeaseQueue::settle_or_isolate(pqxx::connection& conn, std::vector<FinishedAttempt>& batch) {
  try {
    cycle(conn, batch, 0);
    return;
  } catch (const std::exception& e) {
    // The connection, or a read-only server (25006): reconnect and settle the batch again.
    if (!conn.is_open() || is_connection_loss(e)) throw;
    context_.log->warn("queue {}: settling {} attempt(s) together failed: {}; settling them one at a time",
                       context_.name, batch.size(), one_line(context_.url, e.what()));
  }
  // One attempt whose settlement fails on a working connection must not keep the others
  // (and the queue's room) waiting for ever: settled alone, and if that fails too, it is
  // recorded as a failed attempt without its effects.
  std::vector<FinishedAttempt> rest(std::make_move_iterator(batch.begin()), std::make_move_iterator(batch.end()));
  batch.clear();
  for (std::size_t i = 0; i < rest.size(); ++i) {
    std::vector<FinishedAttempt> one;
    one.push_back(std::move(rest[i]));
    try {
      try {
        cycle(conn, one, 0);
      } catch (const std::exception& e) {
        if (!conn.is_open() || is_connection_loss(e)) throw;
        FinishedAttempt& f = one.front();
        f.attempt->effects.clear();
        const std::string why = "its completion failed: " + one_line(context_.url, e.what());
        f.run.failure = Failure::of(FailureClass::retryable, why);
        f.run.trace.reset();
        cycle(conn, one, 0);
      }
    } catch (...) {
      // What is left goes back to be settled after the reconnect.
      batch.push_back(std::move(one.front()));
      for (std::size_t j = i + 1; j < rest.size(); ++j) batch.push_back(std::move(rest[j]));
      throw;
    }
  }
}

void LeaseQueue::give_up(pqxx::connection& conn, Clock::time_point until) {
  // Stop every handler still running; give them until shortly before `until` to return.
  for (const auto& [token, attempt] : running_) attempt->stop.request_stop();
  const auto wait_until = until - std::chrono::milliseconds(500);
  std::vector<FinishedAttempt> finished;
  {
    std::unique_lock lock(mutex_);
    control_cv_.wait_until(lock, wait_until, [&] { return in_flight_.load() == 0; });
    while (!finished_.empty()) {
      finished.push_back(std::move(finished_.front()));
      finished_.pop_front();
    }
  }
  // A handler that completed is settled as usual; one that failed after it was asked to
  // stop was stopped by us, not by its job: it is released with the rest.
  std::vector<FinishedAttempt> completed;
  for (FinishedAttempt& f : finished) {
    if (!f.run.failure) completed.push_back(std::move(f));
  }
  if (!completed.empty()) settle_or_isolate(conn, completed);
  std::vector<HeldLease> held;
  for (const auto& [token, attempt] : running_) held.push_back(attempt->held);
  if (held.empty()) return;
  pqxx::work tx(conn);
  const long released = context_.store->leases.release(tx, held);
  tx.commit();
  for (const HeldLease& h : held) keeper_.drop(h.token);
  context_.log->warn(
      "queue {}: released {} lease job(s) still running at the end of the shutdown grace (ready again "
      "now, the attempt not charged)",
      context_.name, released);
  if (in_flight_.load() > 0) handlers_left_behind_ = true;
  running_.clear();
}

}  // namespace oncely::detail

#include "execution/lease_queue.hpp"

#include <algorithm>
#include <unordered_set>

#include <pqxx/pqxx>
#include <spdlog/spdlog.h>

#include "execution/job_events.hpp"
#include "execution/job_transaction.hpp"
#include "execution/retry_policy.hpp"
#include "oncely/job_context.hpp"
#include "store/store.hpp"
#include "support/db.hpp"
#include "support/duration.hpp"
#include "support/stack_trace.hpp"
#include "support/steady_clock.hpp"
#include "support/trace_context.hpp"

namespace oncely::detail {
namespace {

using Clock = std::chrono::steady_clock;

constexpr auto kReconnectFirst = std::chrono::milliseconds(100);
constexpr auto kReconnectMax = std::chrono::milliseconds(5000);
// How long finished attempts wait for others still running, to be settled with them.
constexpr auto kGroupSettle = std::chrono::milliseconds(2);

std::chrono::microseconds since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
}

JobEvent event_of(const LeaseAttempt& a, JobEvent::Outcome outcome, std::string error_class = {},
                  std::chrono::microseconds run_time = {}) {
  return {a.held.job_id, a.queue, a.job.kind, a.job.attempts, outcome, std::move(error_class), run_time,
          std::chrono::microseconds(a.job.waited_us)};
}

}  // namespace

LeaseQueue::LeaseQueue(QueueContext context, LeaseKeeper& keeper, std::shared_ptr<RateLimiter> limiter)
    : context_(std::move(context)), keeper_(keeper), limiter_(std::move(limiter)) {}

LeaseQueue::~LeaseQueue() {
  request_stop();
  if (control_thread_.joinable()) control_thread_.join();
  {
    std::lock_guard lock(handlers_mutex_);
    closing_ = true;
  }
  handlers_cv_.notify_all();
  for (auto& t : handler_threads_) {
    if (t.joinable()) t.join();
  }
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
    for (auto& t : handler_threads_) {
      if (t.joinable()) t.detach();
    }
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

std::vector<LeaseQueue::Finished> LeaseQueue::take_finished() {
  // At most kMaxSavepoints attempts with database effects per settlement (each gets a savepoint).
  std::vector<Finished> batch;
  int with_effects = 0;
  while (!finished_.empty()) {
    Finished& next = finished_.front();
    const bool effects = !next.failure && !next.attempt->effects.empty();
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
  std::mt19937_64 jitter(std::random_device{}());
  while (true) {
    std::vector<Finished> batch;
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
      const bool claim_due = !stopping && room > 0 && Clock::now() >= next_claim;
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
        const auto poll = config.poll_interval;
        std::uniform_int_distribution<long> spread(-poll.count() / 10, poll.count() / 10);
        next_claim = claimed.taken == limit && limit > 0
                         ? Clock::now()
                         : Clock::now() + (limit == 0 && limiter_ ? std::chrono::milliseconds(50)
                                                                  : poll + std::chrono::milliseconds(spread(jitter)));
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
        context_.log->error("queue {}: could not release {} lease(s) at exit; they are claimable again when they expire",
                            context_.name, running_.size());
        break;
      }
      reconnect_delay = std::min(reconnect_delay * 2, kReconnectMax);
    }
  }
  {
    std::lock_guard lock(mutex_);
    done_ = true;
  }
  done_cv_.notify_all();
}

LeaseQueue::Claimed LeaseQueue::cycle(pqxx::connection& conn, std::vector<Finished>& batch, int claim_limit) {
  // Attempts whose effects ended the transaction: they fail, and the transaction starts over
  // (each try clears one attempt's effects, so this ends).
  for (std::size_t tries = 0; tries <= batch.size(); ++tries) {
    JobTransaction txn(conn);
    std::optional<Settlement> settlement;
    if (!batch.empty()) {
      settlement = settle_in(txn, batch);
      if (!settlement) continue;
    }
    Claim claim;
    try {
      if (claim_limit > 0) claim = claim_in(txn.work(), claim_limit);
      OutcomeCounts counts = claim.counts;
      if (settlement) counts += count(settlement->events, 0);
      if (!counts.empty()) context_.store->job_stats.count_outcomes(txn.work(), context_.worker_id, context_.name, counts);
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

std::vector<std::int64_t> LeaseQueue::lock_ready(pqxx::work& tx, int limit) {
  return claim_at(
             *context_.claim_start,
             [&](const std::optional<ClaimKey>& after) {
               return context_.store->leases.lock_ready(tx, context_.name, limit, after);
             },
             [](const LockedJobs& locked) { return locked.last; }, context_.observe_claim)
      .ids;
}

LeaseQueue::Claim LeaseQueue::claim_in(pqxx::work& tx, int limit) {
  const Store& store = *context_.store;
  const QueueConfig& config = context_.config;
  Claim claim;
  // The lease is ours from before the claim's statement on the server's clock: counting it
  // from here errs on the safe side.
  const std::int64_t sent = steady_ms();
  const auto deadline = Clock::now() + config.job_timeout;
  const std::vector<std::int64_t> locked = lock_ready(tx, limit);
  claim.taken = static_cast<int>(locked.size());
  if (locked.empty()) return claim;
  std::vector<LeasedJob> rows = store.leases.lease(tx, locked, context_.worker_id, config.lease, config.max_attempts);
  long crashed = 0;
  for (const LeasedJob& r : rows) {
    if (r.took_expired) ++crashed;
    if (r.kind == LeasedJob::Kind::duplicate) {
      claim.events.push_back({r.job.id, context_.name, r.job.kind, 0, JobEvent::Outcome::deduplicated, {}, {}, {}});
    } else if (r.kind == LeasedJob::Kind::exhausted) {
      // Its last attempt's lease expired: the attempt was counted at its claim.
      nlohmann::json detail = nlohmann::json::object();
      if (r.previous_holder) detail["worker_id"] = *r.previous_holder;
      store.dead_letters.move_job(
          tx, FailureRecord{r.job.id, std::nullopt, r.job.attempts,
                            "lease expired: its worker stopped renewing it (died, froze or lost the database), and no "
                            "attempt is left",
                            "lease_expired", "lease_expired", detail});
      claim.events.push_back({r.job.id, context_.name, r.job.kind, r.job.attempts, JobEvent::Outcome::dead_lettered,
                              "lease_expired", {}, {}});
      claim.logs.push_back(fmt::format("job dead-lettered queue={} kind={} id={} attempt={}{} class=lease_expired",
                                       context_.name, r.job.kind, r.job.id, r.job.attempts,
                                       trace_field(r.job.trace_context)));
    }
  }
  claim.counts = count(claim.events, crashed);
  for (LeasedJob& r : rows) {
    if (r.kind != LeasedJob::Kind::leased) continue;
    auto a = std::make_shared<LeaseAttempt>();
    a->held = {r.job.id, r.token};
    a->queue = context_.name;
    a->lease = config.lease;
    a->deadline = deadline;
    a->valid_until_ms = sent + config.lease.count();
    a->job = std::move(r.job);
    if (r.took_expired) {
      // Reported before this attempt's outcome, as a transaction queue reports a crash.
      JobEvent lost = event_of(*a, JobEvent::Outcome::crashed, "lease_expired");
      lost.attempt = a->job.attempts - 1;
      claim.events.insert(claim.events.begin(), lost);
      claim.warnings.push_back(fmt::format("job lease expired queue={} kind={} id={} attempt={}{} worker={}: taken back",
                                           context_.name, a->job.kind, a->held.job_id, lost.attempt,
                                           trace_field(a->job.trace_context), r.previous_holder.value_or(0)));
    }
    claim.attempts.push_back(std::move(a));
  }
  return claim;
}

LeaseQueue::Claimed LeaseQueue::start_claimed(Claim& claim) {
  for (const std::string& line : claim.logs) context_.log->error("{}", line);
  for (const std::string& line : claim.warnings) context_.log->warn("{}", line);
  for (const auto& a : claim.attempts) {
    keeper_.hold(a);
    running_.emplace(a->held.job_id, a);
  }
  // Every lease of the claim is renewed from now on, before any handler starts: starting
  // hundreds of them (threads, exec processes) can take longer than a lease, and a job
  // handed to the renewal only when its turn came had lost its lease by then.
  dispatch(claim.attempts);
  emit(context_.on_event, *context_.log, claim.events);
  return {claim.taken, static_cast<int>(claim.attempts.size())};
}

void LeaseQueue::dispatch(const std::vector<std::shared_ptr<LeaseAttempt>>& attempts) {
  if (attempts.empty()) return;
  {
    std::lock_guard lock(mutex_);
    unfinished_ += static_cast<int>(attempts.size());
  }
  std::lock_guard lock(handlers_mutex_);
  ready_.insert(ready_.end(), attempts.begin(), attempts.end());
  // A thread per job running at once, started as needed and kept for the next ones. One
  // idle thread is woken; each thread that takes a job wakes the next while jobs are left
  // (handler_main), so short jobs are run by the few threads that are awake rather than
  // costing a wake-up each.
  const int to_start = std::min(static_cast<int>(ready_.size()) - idle_handlers_,
                                context_.config.concurrency - static_cast<int>(handler_threads_.size()));
  for (int i = 0; i < to_start; ++i) handler_threads_.emplace_back([this] { handler_main(); });
  if (idle_handlers_ > 0 && wakes_pending_ == 0) {
    ++wakes_pending_;
    handlers_cv_.notify_one();
  }
}

void LeaseQueue::handler_main() {
  while (true) {
    std::shared_ptr<LeaseAttempt> attempt;
    bool wake_next = false;
    {
      std::unique_lock lock(handlers_mutex_);
      ++idle_handlers_;
      while (!closing_ && ready_.empty()) {
        handlers_cv_.wait(lock);
        if (wakes_pending_ > 0) --wakes_pending_;  // this thread is awake: the wake-up has landed
      }
      --idle_handlers_;
      if (ready_.empty()) return;  // closing
      attempt = std::move(ready_.front());
      ready_.pop_front();
      // Jobs are left: one more thread is woken, unless one is on its way already. Each
      // thread that wakes and takes a job wakes the next, so long jobs all start; short
      // ones are taken by the threads that are awake (a thread whose job ended takes the
      // next without waiting), not at the cost of a wake-up and a context switch each.
      wake_next = !ready_.empty() && idle_handlers_ > 0 && wakes_pending_ == 0;
      if (wake_next) ++wakes_pending_;
    }
    // Outside the lock, so that the thread woken does not wait for it.
    if (wake_next) handlers_cv_.notify_one();
    in_flight_.fetch_add(1);
    Finished finished = run(*attempt);
    finished.attempt = std::move(attempt);
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
}

LeaseQueue::Finished LeaseQueue::run(LeaseAttempt& a) {
  const ClaimedJob& job = a.job;
  Finished result{nullptr, std::nullopt, {}, nullptr};
  thread_local std::mt19937_64 span_ids(std::random_device{}());
  const auto handler = context_.handlers->find(job.kind);
  if (handler == context_.handlers->end()) {
    result.failure = Failure{FailureClass::unknown_kind, "no handler for kind '" + job.kind + "' in this worker",
                             nlohmann::json::object(), std::nullopt};
  } else {
    const auto start = Clock::now();
    try {
      JobContext context(a, job.id, context_.name, job.kind, job.payload_text, job.attempts, job.effective_key(),
                         a.deadline, a.stop.get_token());
      if (job.trace_context) context.set_traceparent(child_traceparent(*job.trace_context, span_ids));
      invoke_handler(handler->second.run, context);  // a frame of its own: where a stack trace stops
      if (Clock::now() > a.deadline) {
        result.failure = Failure{FailureClass::timeout,
                                 "ran for " + format_duration(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                  Clock::now() - start)) +
                                     ", over the job_timeout of " + format_duration(context_.config.job_timeout),
                                 nlohmann::json::object(), std::nullopt};
      }
    } catch (...) {
      result.failure = classify(std::current_exception());
      result.trace = trace_to_keep(std::current_exception());
    }
    result.run_time = since(start);
  }
  a.finished = true;
  return result;
}

std::optional<LeaseQueue::Settlement> LeaseQueue::settle_in(JobTransaction& txn, std::vector<Finished>& batch) {
  const Store& store = *context_.store;
  const QueueConfig& config = context_.config;
  pqxx::work& tx = txn.work();
  std::vector<HeldLease> held;
  held.reserve(batch.size());
  for (const Finished& f : batch) held.push_back(f.attempt->held);
  const bool only_plain_completions = std::ranges::all_of(
      batch, [](const Finished& f) { return !f.failure && f.attempt->effects.empty(); });
  Settlement settlement;
  // The common case, nothing but completions without effects: one statement completes
  // what is still ours and says which those were. Otherwise the held rows are locked
  // first, so that effects and failures are applied only to jobs still ours.
  std::vector<std::int64_t> locked = only_plain_completions ? store.leases.complete(tx, held)
                                                            : store.leases.lock_held(tx, held);
  const std::unordered_set<std::int64_t> ours(locked.begin(), locked.end());
  std::vector<HeldLease> completed;
  for (Finished& f : batch) {
    LeaseAttempt& a = *f.attempt;
    if (!ours.contains(a.held.job_id)) {
      settlement.events.push_back(event_of(a, JobEvent::Outcome::lease_stale, {}, f.run_time));
      settlement.logs.emplace_back(spdlog::level::warn,
                                   fmt::format("lease stale: its lease was lost before the attempt finished, its "
                                               "outcome changed nothing queue={} kind={} id={} attempt={}{}",
                                               a.queue, a.job.kind, a.held.job_id, a.job.attempts,
                                               trace_field(a.job.trace_context)));
      continue;
    }
    if (!f.failure && !a.effects.empty()) {
      txn.begin_job(true);
      try {
        pqxx::work& w = txn.for_handler();
        for (const auto& effect : a.effects) effect(w);
        if (transaction_state(w) != TransactionState::open) {
          f.failure = Failure{FailureClass::retryable,
                              "an on_complete effect caught an SQL error and returned normally, but its "
                              "transaction was aborted",
                              nlohmann::json::object(), std::nullopt};
        }
      } catch (...) {
        f.failure = classify(std::current_exception());
        f.trace = trace_to_keep(std::current_exception());
      }
      if (f.failure && !txn.rollback_job()) {
        a.effects.clear();  // the failure stands; the next try records it without them
        return std::nullopt;
      }
    }
    if (!f.failure) {
      completed.push_back(a.held);
      settlement.events.push_back(event_of(a, JobEvent::Outcome::completed, {}, f.run_time));
      if (context_.log->should_log(spdlog::level::debug)) {
        settlement.logs.emplace_back(spdlog::level::debug,
                                     fmt::format("job completed queue={} kind={} id={} attempt={}{} run_us={}", a.queue,
                                                 a.job.kind, a.held.job_id, a.job.attempts,
                                                 trace_field(a.job.trace_context), f.run_time.count()));
      }
      continue;
    }
    const Failure& failure = *f.failure;
    const int max_attempts = a.job.max_attempts.value_or(config.max_attempts);
    const Decision decision = decide(failure, a.job.attempts, max_attempts, config.backoff, rng_);
    const std::string cls(to_string(decision.cls));
    FailureRecord record{a.held.job_id, std::nullopt, a.job.attempts, failure.message,
                         std::string(to_string(failure.cls)), cls, failure.detail};
    add_stack(record, decision.dead_letter(), f.trace.get());  // symbolised only here, and only if asked for
    const std::string trace = trace_field(a.job.trace_context);
    if (decision.dead_letter()) {
      store.dead_letters.move_job(tx, record);
      settlement.events.push_back(event_of(a, JobEvent::Outcome::dead_lettered, cls, f.run_time));
      settlement.logs.emplace_back(spdlog::level::err,
                                   fmt::format("job dead-lettered queue={} kind={} id={} attempt={}{} class={} error={}",
                                               a.queue, a.job.kind, a.held.job_id, a.job.attempts, trace, cls,
                                               failure.message));
    } else {
      store.leases.retry(tx, a.held, record, decision.delay);
      settlement.events.push_back(event_of(a, JobEvent::Outcome::retried, cls, f.run_time));
      settlement.logs.emplace_back(spdlog::level::warn,
                                   fmt::format("job retry queue={} kind={} id={} attempt={}{} delay={} class={} error={}",
                                               a.queue, a.job.kind, a.held.job_id, a.job.attempts, trace,
                                               format_duration(decision.delay), cls, failure.message));
    }
  }
  if (!only_plain_completions) {
    if (!completed.empty()) store.leases.complete(tx, completed);
    if (!locked.empty()) store.leases.unguard(tx);
  }
  return settlement;
}

void LeaseQueue::settled(std::vector<Finished>& batch, const Settlement& settlement) {
  for (const Finished& f : batch) {
    keeper_.drop(f.attempt->held.job_id);
    running_.erase(f.attempt->held.job_id);
  }
  for (const auto& [level, line] : settlement.logs) context_.log->log(level, "{}", line);
  emit(context_.on_event, *context_.log, settlement.events);
  batch.clear();  // settled: nothing of it to try again
}

void LeaseQueue::settle_or_isolate(pqxx::connection& conn, std::vector<Finished>& batch) {
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
  std::vector<Finished> rest(std::make_move_iterator(batch.begin()), std::make_move_iterator(batch.end()));
  batch.clear();
  for (std::size_t i = 0; i < rest.size(); ++i) {
    std::vector<Finished> one;
    one.push_back(std::move(rest[i]));
    try {
      try {
        cycle(conn, one, 0);
      } catch (const std::exception& e) {
        if (!conn.is_open() || is_connection_loss(e)) throw;
        Finished& f = one.front();
        f.attempt->effects.clear();
        const std::string why = "its completion failed: " + one_line(context_.url, e.what());
        f.failure = Failure{FailureClass::retryable, why, nlohmann::json::object(), std::nullopt};
        f.trace.reset();
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
  for (const auto& [id, attempt] : running_) attempt->stop.request_stop();
  const auto wait_until = until - std::chrono::milliseconds(500);
  std::vector<Finished> finished;
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
  std::vector<Finished> completed;
  for (Finished& f : finished) {
    if (!f.failure) completed.push_back(std::move(f));
  }
  if (!completed.empty()) settle_or_isolate(conn, completed);
  std::vector<HeldLease> held;
  for (const auto& [id, attempt] : running_) held.push_back(attempt->held);
  if (held.empty()) return;
  pqxx::work tx(conn);
  const long released = context_.store->leases.release(tx, held);
  tx.commit();
  for (const HeldLease& h : held) keeper_.drop(h.job_id);
  context_.log->warn("queue {}: released {} lease job(s) still running at the end of the shutdown grace (ready again "
                     "now, the attempt not charged)",
                     context_.name, released);
  if (in_flight_.load() > 0) handlers_left_behind_ = true;
  running_.clear();
}

}  // namespace oncely::detail

"""The conformance scenarios: written once against the abstract worker (harness.py), run
against every implementation. Each docstring's first line is the scenario's row in the matrix
(docs/conformance.md). The conformance kinds: `credit` writes one row of
conformance_effects in the transaction that completes its job; `fail` always fails;
`poison` kills the worker that runs it.
"""

from __future__ import annotations

import json
import random
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from conftest import Workers
from harness import Database, Implementation, Policy, wait_until


def assert_each_key_once(db: Database, keys: int, cents: int) -> None:
    """Exactly one effect and one marker per key, the exact sum, nothing left or dead."""
    assert db.count("jobs") == 0
    assert db.scalar("SELECT count(*) FROM {s}.conformance_effects") == keys
    assert db.scalar("SELECT count(DISTINCT key) FROM {s}.conformance_effects") == keys
    assert db.scalar("SELECT coalesce(sum(cents), 0) FROM {s}.conformance_effects") == cents
    assert db.count("processed_jobs") == keys
    assert db.count("dead_letters") == 0


def drained(db: Database) -> bool:
    return db.count("jobs") == 0


def test_duplicates(impl: Implementation, db: Database, workers: Workers, tmp_path: Path) -> None:
    """Duplicates: copies of a key, and a key processed before, have one effect"""
    impl.configure(db, {"default": Policy()}, tmp_path)
    db.enqueue("credit", {"account": 1, "cents": 1000}, "early")
    worker = workers.start("w1")
    wait_until(lambda: drained(db), 60, "the first job")
    for i in range(30):
        for _ in range(3):
            db.enqueue("credit", {"account": i, "cents": i}, f"order-{i}")
    db.enqueue("credit", {"account": 1, "cents": 1000}, "early")  # processed already
    wait_until(lambda: drained(db), 60, "the duplicates to settle")
    assert worker.terminate() == 0
    assert_each_key_once(db, 31, 1000 + sum(range(30)))


def test_kill9_loop(impl: Implementation, db: Database, workers: Workers, tmp_path: Path) -> None:
    """kill -9 at random moments, in a loop: exact sums, one marker per key, no dead letter"""
    impl.configure(db, {"default": Policy()}, tmp_path)
    rng = random.Random(20261205)
    jobs = 120
    for i in range(jobs):
        db.enqueue("credit", {"account": i % 7, "cents": i, "sleep_ms": rng.randrange(0, 20)}, f"pay-{i}")
    for round in range(5):
        done = db.count("conformance_effects")
        worker = workers.start(f"w{round}")
        # A random moment once this worker has made progress: mid-handler, mid-commit, anywhere.
        wait_until(lambda: db.count("conformance_effects") > done or drained(db), 60, "progress")
        time.sleep(rng.uniform(0, 0.3))
        worker.kill9()
    worker = workers.start("survivor")
    wait_until(lambda: drained(db), 120, "every job to complete after the kills")
    assert worker.terminate() == 0
    assert_each_key_once(db, jobs, sum(range(jobs)))


def test_frozen_worker(impl: Implementation, db: Database, workers: Workers, tmp_path: Path) -> None:
    """A frozen worker: its job is taken over, its late completion changes nothing"""
    # The lease (lease modes) or the job timeout (transaction mode: the frozen session is
    # ended after it) lets another worker take the job while the first is stopped. In
    # lease mode the job timeout is long, so that nothing but the lease fences the frozen
    # attempt (an exec handler's supervisor would otherwise end it at its timeout).
    policy = Policy(lease="3s", job_timeout="30s") if impl.lease else Policy(job_timeout="2s")
    impl.configure(db, {"default": policy}, tmp_path)
    db.enqueue("credit", {"account": 1, "cents": 500, "sleep_ms": 1000, "record": True}, "frozen-1")
    frozen = workers.start("frozen")
    wait_until(lambda: db.count("conformance_starts") == 1, 30, "the first worker to start the job")
    frozen.freeze(db.scalar("SELECT pid FROM {s}.conformance_starts"))  # mid-handler
    survivor = workers.start("survivor")
    wait_until(lambda: db.count("conformance_effects") == 1, 60, "another worker to complete the job")
    frozen.thaw()  # SIGCONT: it finishes its handler and tries to complete
    assert frozen.terminate() == 0
    assert survivor.terminate() == 0
    # A lease that expired counts its attempt; a transaction ended by the server takes its
    # attempt count with it.
    assert db.rows("SELECT worker, attempt FROM {s}.conformance_effects") == [("survivor", 2 if impl.lease else 1)]
    assert_each_key_once(db, 1, 500)


def test_retry_then_dead_letter(impl: Implementation, db: Database, workers: Workers, tmp_path: Path) -> None:
    """Retry, then dead letter, as the stored policy says (attempts, backoff gaps)"""
    policy = Policy(max_attempts=3, backoff_base="400ms", backoff_cap="10s", backoff_jitter="equal")
    impl.configure(db, {"default": policy}, tmp_path)
    job = db.enqueue("fail", {}, "doomed")
    worker = workers.start("w1")
    wait_until(lambda: db.count("dead_letters") == 1, 60, "the dead letter")
    assert worker.terminate() == 0
    stored = db.rows("SELECT max_attempts, backoff_base, backoff_jitter FROM {s}.queue_policies "
                     "WHERE queue = 'default'")
    assert stored == [(3, timedelta(milliseconds=400), "equal")]
    row = db.rows("SELECT job_id, attempts, error_class, errors FROM {s}.dead_letters")[0]
    assert row[:3] == (job, 3, "exhausted")
    errors = row[3]
    assert [e["attempt"] for e in errors] == [1, 2, 3]
    assert all("always fails" in e["error"] for e in errors)
    # Failure n waits base * 2^(n-1) with equal jitter: [d/2, d]. The next attempt starts
    # then, or at the worker's next poll (retries send no NOTIFY): 0.1 s here, plus slack.
    at = [time_of(e["at"]) for e in errors]
    for n, (before, after) in enumerate(zip(at, at[1:]), start=1):
        d = 0.4 * 2 ** (n - 1)
        assert d / 2 - 0.01 <= after - before <= d + 1.0, f"gap after failure {n}: {after - before:.3f}s"


def time_of(iso: str) -> float:
    from datetime import datetime
    return datetime.fromisoformat(iso).timestamp()


def test_poison_job(impl: Implementation, db: Database, workers: Workers, tmp_path: Path) -> None:
    """A poison job that kills its worker ends as a dead letter; the other jobs complete"""
    # A worker's death costs every job it held an attempt (as with River, Oban and the
    # others): the neighbours leased with the poison job are charged with it, so only the
    # poison job has few attempts here (jobs.max_attempts overrides the policy's).
    impl.configure(db, {"default": Policy(lease="3s")}, tmp_path)
    poison = db.enqueue("poison", {}, "poison")
    db.execute("UPDATE {s}.jobs SET max_attempts = 2 WHERE id = %s", (poison,))
    for i in range(20):
        db.enqueue("credit", {"account": 1, "cents": i}, f"ok-{i}")
    worker = workers.start("w0")
    deadline = time.monotonic() + 120
    while db.count("dead_letters") == 0 or not drained(db):  # a supervisor: restart what dies
        assert time.monotonic() < deadline, "timed out waiting for the poison job's dead letter"
        if not worker.alive():
            worker = workers.start(f"w{len(workers.started)}")
        time.sleep(0.05)
    assert worker.terminate() == 0
    assert db.rows("SELECT job_id, error_class FROM {s}.dead_letters") in (
        [(poison, "crashed")], [(poison, "lease_expired")])
    assert db.scalar("SELECT count(*) FROM {s}.conformance_effects") == 20
    assert db.scalar("SELECT sum(cents) FROM {s}.conformance_effects") == sum(range(20))


def test_pause(impl: Implementation, db: Database, workers: Workers, tmp_path: Path) -> None:
    """A paused queue is not run while its worker serves another; resumed, it runs"""
    impl.configure(db, {"default": Policy(), "other": Policy()}, tmp_path)
    db.cli("queue", "pause", "default", "--reason", "conformance")
    db.enqueue("credit", {"account": 1, "cents": 7}, "paused-1", queue="default")
    worker = workers.start("w1")
    for i in range(2):  # two rounds of the worker's claims after the pause
        db.enqueue("credit", {"account": 2, "cents": 1}, f"other-{i}", queue="other")
        wait_until(lambda: db.count("conformance_effects") == i + 1, 30, "the other queue's job")
    assert db.rows("SELECT idempotency_key, attempts, lease_token FROM {s}.jobs") == [("paused-1", 0, None)]
    db.cli("queue", "resume", "default")
    wait_until(lambda: drained(db), 30, "the resumed queue's job")
    assert worker.terminate() == 0
    assert_each_key_once(db, 3, 9)


def test_sigterm(impl: Implementation, db: Database, workers: Workers, tmp_path: Path) -> None:
    """SIGTERM: a running job is given back without charging its attempt; exit 0"""
    impl.configure(db, {"default": Policy(lease="30s")}, tmp_path)
    job = db.enqueue("credit", {"account": 1, "cents": 3, "sleep_ms": 60000, "record": True}, "long-1")
    worker = workers.start("w1")
    wait_until(lambda: db.count("conformance_starts") == 1, 30, "the job to start")
    assert worker.terminate() == 0
    assert db.rows("SELECT id, attempts, lease_token, run_at <= now() FROM {s}.jobs") == [(job, 0, None, True)]
    db.execute("UPDATE {s}.jobs SET payload = payload || %s::jsonb", ('{"sleep_ms": 0}',))
    again = workers.start("w2")
    wait_until(lambda: drained(db), 30, "the job to run again")
    assert again.terminate() == 0
    assert db.rows("SELECT worker, attempt FROM {s}.conformance_starts ORDER BY at") == [("w1", 1), ("w2", 1)]
    assert_each_key_once(db, 1, 3)


def test_limits(impl: Implementation, db: Database, workers: Workers, tmp_path: Path) -> None:
    """Limits across three workers: never more running than the queue's limit; a key behind another's backlog runs before it"""
    impl.configure(db, {"default": Policy(limits={"concurrency": 2, "key": "/account"})}, tmp_path)
    for i in range(40):  # account 1's backlog, enough to fill the queue's two slots for a while
        db.enqueue("credit", {"account": 1, "cents": 1, "sleep_ms": 100, "record": True}, f"a-{i}")
    started = [workers.start(f"w{n}") for n in range(3)]
    wait_until(lambda: db.count("conformance_effects") >= 4, 30, "account 1's backlog under way")
    for i in range(6):
        db.enqueue("credit", {"account": 2, "cents": 10, "sleep_ms": 100, "record": True}, f"b-{i}")
    wait_until(lambda: db.count("conformance_effects WHERE account = 2") == 6, 60, "account 2's jobs")
    # The keys took turns: account 2 did not wait for account 1's backlog.
    assert db.scalar("SELECT count(*) FROM {s}.jobs WHERE concurrency_key = '1'") >= 10
    wait_until(lambda: drained(db), 60, "the backlog")
    for worker in started:
        assert worker.terminate() == 0
    assert_each_key_once(db, 46, 40 + 60)
    # Each run from its handler's start to its effect, written in the transaction that completed
    # it: within the time its slot was held. At no run's start were more than 2 running.
    runs = """(SELECT s.key, s.at AS started, e.at AS ended
                 FROM {s}.conformance_starts s JOIN {s}.conformance_effects e ON e.key = s.key)"""
    assert db.scalar(f"SELECT max((SELECT count(*) FROM {runs} o WHERE o.started <= r.started AND o.ended > r.started))"
                     f" FROM {runs} r") <= 2


def test_rate_and_kill(impl: Implementation, db: Database, workers: Workers, tmp_path: Path) -> None:
    """A rate across three workers: no second with more starts than it; a worker killed with kill -9 gives its slots back within its lease (transaction mode: a rate is refused)"""
    # 6 slots of 400 ms jobs could start 15 a second: the rate holds them to 10.
    policy = Policy(limits={"concurrency": 6, "rate": "10/1s"})  # a lease of 3 s
    impl.configure(db, {"default": policy}, tmp_path)
    if not impl.lease:
        # A transaction-mode claim's transaction lasts as long as its jobs: a rate's window
        # would stay locked meanwhile, so the queue refuses one, naming the fix.
        refused = workers.start("w0")
        assert refused.proc.wait(timeout=30) != 0
        assert '"mode": "lease"' in refused.output()
        return
    for i in range(30):
        db.enqueue("credit", {"account": i % 3, "cents": 1, "sleep_ms": 400, "record": True}, f"r-{i}")
    started = [workers.start(f"w{n}") for n in range(3)]
    # A worker killed while it runs a job (one started in the last 200 ms of 400), holding its slot.
    victims: list[str] = []

    def running_job_worker() -> bool:
        victims.append(db.scalar("""SELECT s.worker FROM {s}.conformance_starts s
                                     WHERE s.at > clock_timestamp() - interval '200 milliseconds'
                                       AND NOT EXISTS (SELECT 1 FROM {s}.conformance_effects e WHERE e.key = s.key)
                                     ORDER BY s.at DESC LIMIT 1"""))
        return victims[-1] is not None

    wait_until(running_job_worker, 30, "a job running")
    victim_name = victims[-1]
    victim = started[int(victim_name[1:])]
    victim.kill9()
    killed_at = db.scalar("SELECT clock_timestamp()")
    wait_until(lambda: drained(db), 90, "the queue, with a worker killed")
    for worker in started:
        if worker is not victim:
            assert worker.terminate() == 0
    assert_each_key_once(db, 30, 30)
    # The killed worker's unfinished jobs ran again on the others once their leases (3 s,
    # renewed until the kill) expired, in their turn behind the backlog's (at 10 a second).
    rerun_after = db.scalar("""SELECT max(extract(epoch FROM again.at - %s))
                                 FROM {s}.conformance_starts lost
                                 JOIN {s}.conformance_starts again ON again.key = lost.key AND again.attempt > lost.attempt
                                WHERE lost.worker = %s AND NOT EXISTS (
                                        SELECT 1 FROM {s}.conformance_effects e
                                         WHERE e.key = lost.key AND e.attempt = lost.attempt)""",
                            (killed_at, victim_name))
    assert rerun_after is not None and rerun_after < 8.0
    # The rate: in no 0.8 s more than 10 starts (the starts as the handlers recorded them, a
    # little after their claims, so a window a little shorter than the period).
    assert db.scalar("""SELECT max((SELECT count(*) FROM {s}.conformance_starts o
                                     WHERE o.at >= s.at AND o.at < s.at + interval '800 milliseconds'))
                          FROM {s}.conformance_starts s""") <= 10
    # The concurrency: at no start more than 6 running (a killed run counted until the kill).
    runs = """(SELECT s.key, s.at AS started, coalesce(e.at, %s) AS ended
                 FROM {s}.conformance_starts s
                 LEFT JOIN {s}.conformance_effects e ON e.key = s.key AND e.attempt = s.attempt)"""
    assert db.scalar(f"SELECT max((SELECT count(*) FROM {runs} o WHERE o.started <= r.started AND o.ended > r.started))"
                     f" FROM {runs} r", (killed_at, killed_at)) <= 6


def runs_in_order(db: Database, before: str, after: str) -> bool:
    """Whether job `before` completed (its effect, written in its completing transaction)
    before job `after` started."""
    return bool(db.scalar("""SELECT e.at < s.at FROM {s}.conformance_effects e, {s}.conformance_starts s
                              WHERE e.key = %s AND s.key = %s""", (before, after)))


def test_dependencies(impl: Implementation, db: Database, workers: Workers, tmp_path: Path) -> None:
    """Dependencies: a diamond runs in order, its last job once; a dead-lettered parent fails its descendants, and their replay runs them in order"""
    impl.configure(db, {"default": Policy()}, tmp_path)

    def job(name: str, kind: str = "credit", **columns: Any) -> int:
        return db.enqueue(kind, {"account": 1, "cents": 1, "sleep_ms": 100, "record": True}, name, **columns)

    a = job("a")
    b, c = job("b", depends_on=[a]), job("c", depends_on=[a])
    job("d", depends_on=[b, c])
    f = job("f", "fail", max_attempts=1)  # a parent that will not complete
    g = job("g", depends_on=[f])
    job("h", depends_on=[g])
    assert db.count("jobs WHERE parents_left IS NOT NULL") == 5  # waiting: b, c, d, g, h
    started = [workers.start(f"w{n}") for n in range(2)]
    wait_until(lambda: db.count("jobs") == 0, 60, "the diamond, and the failed chain's dead letters")
    assert runs_in_order(db, "a", "b") and runs_in_order(db, "a", "c")
    assert runs_in_order(db, "b", "d") and runs_in_order(db, "c", "d")
    assert db.rows("SELECT key, count(*) FROM {s}.conformance_starts WHERE key = 'd' GROUP BY key") == [("d", 1)]
    assert db.rows("SELECT idempotency_key, error_class FROM {s}.dead_letters ORDER BY id") == [
        ("f", "exhausted"), ("g", "dependency_failed"), ("h", "dependency_failed")]
    assert db.count("conformance_starts WHERE key IN ('g', 'h')") == 0  # never ran
    # The fix (f's handler was wrong), then the replay: parent first, then its descendants.
    db.execute("UPDATE {s}.dead_letters SET kind = 'credit' WHERE job_id = %s", (f,))
    for key in ("f", "g", "h"):
        db.cli("dlq", "replay", "--job-id", str(db.scalar("SELECT job_id FROM {s}.dead_letters WHERE idempotency_key = %s",
                                                          (key,))))
    wait_until(lambda: db.count("conformance_effects") == 7, 60, "the replayed chain")
    for worker in started:
        assert worker.terminate() == 0
    assert runs_in_order(db, "f", "g") and runs_in_order(db, "g", "h")
    assert db.count("jobs") == 0 and db.count("processed_jobs") == 7
    assert db.scalar("SELECT count(DISTINCT key) FROM {s}.conformance_effects") == 7


def batch_callbacks(db: Database, batch: int) -> list[tuple[Any, ...]]:
    """The callback jobs a batch enqueued that completed: (key, worker), from their effects."""
    return db.rows("""SELECT e.key, e.worker FROM {s}.conformance_effects e
                       WHERE e.key LIKE %s ORDER BY e.key""", (f"oncely-batch-{batch}-%",))


def test_batch_with_kills(impl: Implementation, db: Database, workers: Workers, tmp_path: Path) -> None:
    """A batch of 1,000 run by three workers killed with kill -9 in a loop: its callbacks enqueued once, its counts exact"""
    impl.configure(db, {"default": Policy()}, tmp_path)
    callback = {"kind": "credit", "payload": {"account": 9, "cents": 0}}
    batch = int(db.scalar("SELECT {s}.open_batch(on_failure => %s, on_finish => %s)",
                          (json.dumps(callback), json.dumps(callback))))
    rng = random.Random(20261207)
    members = 1000
    doomed = set(rng.sample(range(members), 10))  # each fails its only attempt
    for i in range(members):
        if i in doomed:
            db.enqueue("fail", {}, f"m-{i}", batch_id=batch, max_attempts=1)
        else:
            db.enqueue("credit", {"account": i % 7, "cents": 1, "sleep_ms": rng.randrange(0, 5)}, f"m-{i}",
                       batch_id=batch)
    running = [workers.start(f"w{n}") for n in range(3)]
    db.execute("SELECT {s}.close_batch(%s)", (batch,))
    for round in range(6):  # a random worker killed at a random moment once there is progress, then restarted
        done = db.count("conformance_effects")
        wait_until(lambda: db.count("conformance_effects") > done or drained(db), 60, "progress")
        time.sleep(rng.uniform(0, 0.4))
        victim = rng.randrange(len(running))
        running[victim].kill9()
        running[victim] = workers.start(f"w{3 + round}")
    wait_until(lambda: drained(db) and db.count("processed_jobs") == members - len(doomed) + 2, 180,
               "the batch and its callbacks")
    for worker in running:
        assert worker.terminate() == 0
    # Its members: those counted, and none left unsettled.
    completed, dead, callbacks = db.rows(
        "SELECT completed, dead, cardinality(callback_job_ids) FROM {s}.batches WHERE id = %s", (batch,))[0]
    assert (completed, dead, callbacks) == (members - len(doomed), len(doomed), 2)
    assert db.count("batch_members") == 0
    assert [key for key, _ in batch_callbacks(db, batch)] == [f"oncely-batch-{batch}-on_failure",
                                                              f"oncely-batch-{batch}-on_finish"]
    assert db.scalar("SELECT count(*) FROM {s}.conformance_effects WHERE key LIKE 'm-%%'") == members - len(doomed)
    assert db.scalar("SELECT count(DISTINCT key) FROM {s}.conformance_effects") == members - len(doomed) + 2
    assert db.rows("SELECT count(*), count(*) FILTER (WHERE batch_id = %s) FROM {s}.dead_letters", (batch,)) == [
        (len(doomed), len(doomed))]


def test_batch_last_members_at_once(impl: Implementation, db: Database, workers: Workers, tmp_path: Path) -> None:
    """Batches whose last two members complete at the same instant on different workers: one callback each"""
    # One job per claim: a transaction-mode thread would otherwise take every member at once
    # and run them one after the other in its one transaction.
    impl.configure(db, {"default": Policy(batch_size=1)}, tmp_path)
    callback = {"kind": "credit", "payload": {"account": 9, "cents": 0}}
    running = [workers.start(f"w{n}") for n in range(3)]
    # Rounds of 48 batches of two members, until the race has happened: a batch whose two
    # members completed on two workers within 100 ms (timing on a shared machine decides how
    # often; a round is a few seconds).
    for round in range(5):
        batches = [int(db.scalar("SELECT {s}.open_batch(on_success => %s)", (json.dumps(callback),)))
                   for _ in range(48)]
        # Committed at once, with every batch closed: the workers, woken together, claim in id
        # order; the ids go in groups of four first members, then their four second members, so
        # that neighbouring claims split the pairs. Every member takes as long: a pair on two
        # workers completes at the same instant.
        with db.conn.transaction():
            for group in range(0, len(batches), 4):
                for member in range(2):
                    for batch in batches[group:group + 4]:
                        db.enqueue("credit", {"account": member, "cents": 1, "sleep_ms": 200},
                                   f"r{round}b{batch}-{member}", batch_id=batch)
            for batch in batches:
                db.execute("SELECT {s}.close_batch(%s)", (batch,))
        wait_until(lambda: all(db.scalar("SELECT finished_at IS NOT NULL FROM {s}.batches WHERE id = %s", (b,))
                               for b in batches) and drained(db), 90, "every batch's callback")
        for batch in batches:
            assert [key for key, _ in batch_callbacks(db, batch)] == [f"oncely-batch-{batch}-on_success"]
        assert db.scalar("SELECT count(*) FROM {s}.batches WHERE id = ANY (%s) AND completed = 2 AND dead = 0 "
                         "AND cardinality(callback_job_ids) = 1", (batches,)) == len(batches)
        split = db.scalar("""SELECT count(*) FROM (
                               SELECT split_part(key, '-', 1) FROM {s}.conformance_effects WHERE key LIKE %s
                                GROUP BY 1 HAVING count(DISTINCT worker) = 2
                                              AND max(at) - min(at) < interval '100 milliseconds') close_calls""",
                          (f"r{round}b%",))
        print(f"round {round}: batches whose two members completed within 100 ms on two workers: {split} of 48")
        if split > 0:
            break
    for worker in running:
        assert worker.terminate() == 0
    assert split > 0, "no batch had its two members completing at once on two workers, in five rounds"

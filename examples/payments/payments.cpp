// A payment scenario with the C++ API: a payment arrives; in the same transaction that
// records it, the application enqueues "update_balance" (an increment that must apply
// once however often it is delivered) and "send_receipt" (an external effect that gets
// the idempotency key). Then a worker runs both.
//
//   DATABASE_URL=postgresql://... payments [SCHEMA]
//
// To show the guarantee, every payment is enqueued twice (a producer retry after a
// timeout, say) and the receipt service fails its first call: the balances still move
// once per payment, and the receipt service sees each key as often as it was called but
// sends each receipt once, because it deduplicates by the key it is given.
#include <atomic>
#include <cstdlib>
#include <iostream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include <pqxx/pqxx>

#include "oncely/oncely.hpp"
#include "oncely/runtime.hpp"

namespace {

// Stands in for an email or payment provider that honours idempotency keys.
class ReceiptService {
 public:
  void send(const std::string& idempotency_key, long user_id, long cents) {
    std::lock_guard lock(mutex_);
    if (++calls_ == 1) throw std::runtime_error("receipt service timed out");  // first call fails
    if (!sent_.insert(idempotency_key).second) return;                         // already sent: the provider dedups
    std::cout << "  receipt sent to user " << user_id << " for " << cents << " cents (key " << idempotency_key << ")\n";
  }
  std::size_t sent() {
    std::lock_guard lock(mutex_);
    return sent_.size();
  }

 private:
  std::mutex mutex_;
  int calls_ = 0;
  std::set<std::string> sent_;
};

}  // namespace

int main(int argc, char** argv) {
  const char* url_env = std::getenv("DATABASE_URL");
  if (url_env == nullptr) {
    std::cerr << "payments: set DATABASE_URL\n";
    return 2;
  }
  const oncely::DatabaseUrl url(url_env);
  const std::string schema = argc > 1 ? argv[1] : "payments_example";
  try {
    pqxx::connection app{url.expose()};
    {  // a fresh schema per run, so the example shows the same thing every time
      pqxx::nontransaction tx{app};
      tx.exec("SET client_min_messages = warning");
      tx.exec("DROP SCHEMA IF EXISTS " + tx.quote_name(schema) + " CASCADE");
    }
    oncely::migrate(url, schema);
    {
      pqxx::work tx{app};
      tx.exec("CREATE TABLE IF NOT EXISTS " + tx.quote_name(schema) +
              ".balances (user_id bigint PRIMARY KEY, cents bigint NOT NULL)");
      tx.exec("CREATE TABLE IF NOT EXISTS " + tx.quote_name(schema) +
              ".payments (id bigint PRIMARY KEY, user_id bigint NOT NULL, cents bigint NOT NULL)");
      tx.commit();
    }

    // 1. Payments arrive. Each is recorded and its jobs enqueued in ONE transaction: the
    //    jobs exist if and only if the payment does.
    oncely::Client client(url, schema);
    const std::vector<std::tuple<long, long, long>> payments = {{1001, 42, 10000}, {1002, 42, 2500}, {1003, 7, 990}};
    for (int delivery = 1; delivery <= 2; ++delivery) {  // the producer sends everything twice
      for (const auto& [payment_id, user_id, cents] : payments) {
        pqxx::work tx{app};
        tx.exec_params(
            "INSERT INTO " + tx.quote_name(schema) + ".payments VALUES ($1, $2, $3) ON CONFLICT (id) DO NOTHING",
            payment_id, user_id, cents);
        const std::string key = "payment-" + std::to_string(payment_id);
        const nlohmann::json payload = {{"user_id", user_id}, {"cents", cents}};
        client.enqueue(tx, {.kind = "update_balance", .payload = payload, .queue = "critical", .idempotency_key = key});
        client.enqueue(tx, {.kind = "send_receipt", .payload = payload, .idempotency_key = key});
        tx.commit();
      }
    }
    std::cout << "enqueued " << 2 * 2 * payments.size() << " jobs for " << payments.size() << " payments\n";

    // 2. The worker. update_balance writes through the job's transaction: the increment
    //    commits together with the dedup marker, or not at all.
    oncely::Config config;
    config.database_url = url.expose();
    config.schema = schema;
    config.queues = {{"critical", oncely::QueueConfig{.concurrency = 2}}, {"default", oncely::QueueConfig{}}};
    config.queues["default"].backoff.schedule = {std::chrono::milliseconds(200)};  // retry the receipt quickly
    std::atomic<int> finished{0};
    oncely::RuntimeOptions options;
    options.handle_signals = false;
    options.on_event = [&](const oncely::JobEvent& e) {
      if (e.outcome != oncely::JobEvent::Outcome::retried) finished.fetch_add(1);
      if (e.outcome == oncely::JobEvent::Outcome::deduplicated) {
        std::cout << "  duplicate " << e.kind << " job " << e.id << " skipped\n";
      }
    };
    oncely::Runtime runtime(config, options);
    const std::string balances = pqxx::work(app).quote_name(schema) + ".balances";
    // Its only effect is its write through the job's transaction: declared transaction-only,
    // it needs no savepoint of its own.
    runtime.handle("update_balance",
                   [&](oncely::JobContext& job) {
                     job.tx().exec_params("INSERT INTO " + balances +
                                              " (user_id, cents) VALUES ($1, $2) "
                                              "ON CONFLICT (user_id) DO UPDATE SET cents = " +
                                              balances + ".cents + EXCLUDED.cents",
                                          job.payload().at("user_id").get<long>(),
                                          job.payload().at("cents").get<long>());
                   },
                   {.transaction_only = true});
    ReceiptService receipts;
    runtime.handle("send_receipt", [&](oncely::JobContext& job) {
      if (!job.payload().contains("cents")) throw oncely::PermanentError("payload has no cents");
      receipts.send(job.idempotency_key(), job.payload().at("user_id").get<long>(),
                    job.payload().at("cents").get<long>());
    });
    std::thread worker([&] { runtime.run(); });
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (finished.load() < static_cast<int>(4 * payments.size()) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    runtime.request_stop();
    worker.join();

    // 3. What happened.
    pqxx::work tx{app};
    std::cout << "balances:\n";
    for (const auto& row : tx.exec("SELECT user_id, cents FROM " + balances + " ORDER BY user_id")) {
      std::cout << "  user " << row[0].as<long>() << ": " << row[1].as<long>() << " cents\n";
    }
    std::cout << "receipts sent: " << receipts.sent() << " (one per payment)\n";
    const long expected_42 = 12500, expected_7 = 990;
    const bool exact = tx.exec1("SELECT cents FROM " + balances + " WHERE user_id = 42")[0].as<long>() == expected_42 &&
                       tx.exec1("SELECT cents FROM " + balances + " WHERE user_id = 7")[0].as<long>() == expected_7 &&
                       receipts.sent() == payments.size();
    std::cout << (exact ? "every payment applied exactly once\n" : "MISMATCH: something applied twice or not at all\n")
              << std::flush;
    return exact ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "payments: " << url.scrub(e.what()) << "\n";
    return 1;
  }
}

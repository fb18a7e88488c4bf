#include "oncely/client.hpp"

#include <pqxx/pqxx>

#include "db.hpp"
#include "oncely/errors.hpp"
#include "store.hpp"

namespace oncely {

struct Client::Impl {
  DatabaseUrl url;
  detail::Store store;
  std::unique_ptr<pqxx::connection> conn;  // opened on first use
};

Client::Client(DatabaseUrl url, std::string schema)
    : impl_(std::make_unique<Impl>(Impl{std::move(url), detail::Store(schema), nullptr})) {}
Client::~Client() = default;
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;

std::int64_t Client::enqueue(const NewJob& job) {
  detail::validate_new_job(job);
  if (!impl_->conn || !impl_->conn->is_open()) impl_->conn = detail::connect(impl_->url);
  try {
    pqxx::work tx{*impl_->conn};
    const std::int64_t id = impl_->store.enqueue(tx, job);
    tx.commit();
    return id;
  } catch (const pqxx::broken_connection& e) {
    impl_->conn.reset();
    throw DatabaseError("enqueue failed, connection lost: " + detail::one_line(impl_->url, e.what()));
  } catch (const pqxx::sql_error& e) {
    throw DatabaseError("enqueue failed: " + detail::one_line(impl_->url, e.what()));
  }
}

std::int64_t Client::enqueue(pqxx::transaction_base& tx, const NewJob& job) const {
  return impl_->store.enqueue(tx, job);
}

}  // namespace oncely

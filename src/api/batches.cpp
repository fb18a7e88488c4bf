// list_batches() and find_batch(): the operator's view of batches (`oncely batches`, the console).

#include "oncely/batches.hpp"

#include <pqxx/pqxx>

#include "oncely/errors.hpp"
#include "store/store.hpp"
#include "support/db.hpp"

namespace oncely {

std::vector<BatchStatus> list_batches(const DatabaseUrl& url, std::string_view schema,
                                      const ListBatchesOptions& options) {
  const detail::Store store(schema);
  if (options.limit < 1 || options.limit > 1000) throw ConfigError("limit", "must be between 1 and 1000");
  try {
    auto conn = detail::connect(url);
    pqxx::read_transaction tx(*conn);
    return store.batches.list(tx, options.unfinished, options.limit, options.before_id);
  } catch (const pqxx::sql_error& e) {
    throw detail::schema_error(url, store.schema(), "batches list failed", e);
  } catch (const pqxx::failure& e) {
    throw DatabaseError("batches list failed: " + detail::one_line(url, e.what()));
  }
}

std::optional<BatchStatus> find_batch(const DatabaseUrl& url, std::string_view schema, std::int64_t id,
                                      bool callbacks) {
  const detail::Store store(schema);
  try {
    auto conn = detail::connect(url);
    pqxx::read_transaction tx(*conn);
    return store.batches.find(tx, id, callbacks);
  } catch (const pqxx::sql_error& e) {
    throw detail::schema_error(url, store.schema(), "batches show failed", e);
  } catch (const pqxx::failure& e) {
    throw DatabaseError("batches show failed: " + detail::one_line(url, e.what()));
  }
}

}  // namespace oncely

#include "db.hpp"

#include <pqxx/except>

#include "oncely/errors.hpp"
#include "text.hpp"

namespace oncely::detail {

std::string one_line(const DatabaseUrl& url, const std::string& message) { return fold_lines(url.scrub(message)); }

std::unique_ptr<pqxx::connection> connect(const DatabaseUrl& url) {
  try {
    return std::make_unique<pqxx::connection>(url.expose());
  } catch (const pqxx::broken_connection& e) {
    throw DatabaseError("cannot connect to " + url.redacted() + ": " + one_line(url, e.what()));
  } catch (const pqxx::failure& e) {
    throw DatabaseError("cannot connect to " + url.redacted() + ": " + one_line(url, e.what()));
  }
}

}  // namespace oncely::detail

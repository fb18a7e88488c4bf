#include "db.hpp"

#include <pqxx/except>

#include "oncely/errors.hpp"

namespace oncely::detail {

std::string one_line(const DatabaseUrl& url, const std::string& message) {
  std::string out;
  bool pending_space = false;
  for (const char c : url.scrub(message)) {
    if (c == '\n' || c == '\r' || c == '\t') {
      pending_space = !out.empty();
      continue;
    }
    if (pending_space && c != ' ') out += ' ';
    pending_space = false;
    out += c;
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

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

#pragma once
// Opening connections. Every message that may quote a connection string goes through
// DatabaseUrl::scrub, so passwords never reach a log or a terminal.

#include <memory>
#include <string>
#include <string_view>

#include <pqxx/connection>
#include <pqxx/except>

#include "oncely/errors.hpp"

#include "oncely/database_url.hpp"

namespace oncely::detail {

/// Opens a connection; throws DatabaseError (password-free, one line) when it cannot.
std::unique_ptr<pqxx::connection> connect(const DatabaseUrl& url);

/// A multi-line libpq/server message folded into one line, password removed.
std::string one_line(const DatabaseUrl& url, const std::string& message);

/// The error to throw for `e`, met while `what` ran against `schema`: "<what>: <message>",
/// unless the server says a table, column or function is missing (the schema is mistyped
/// or not migrated to this version), in which case it says that and what to do, naming the
/// oncely schemas the database has. Never throws itself.
DatabaseError schema_error(const DatabaseUrl& url, std::string_view schema, std::string_view what,
                           const pqxx::sql_error& e) noexcept;

}  // namespace oncely::detail

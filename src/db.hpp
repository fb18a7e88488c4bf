#pragma once
// Opening connections. Every message that may quote a connection string goes through
// DatabaseUrl::scrub, so passwords never reach a log or a terminal.

#include <memory>
#include <string>

#include <pqxx/connection>

#include "oncely/database_url.hpp"

namespace oncely::detail {

/// Opens a connection; throws DatabaseError (password-free, one line) when it cannot.
std::unique_ptr<pqxx::connection> connect(const DatabaseUrl& url);

/// A multi-line libpq/server message folded into one line, password removed.
std::string one_line(const DatabaseUrl& url, const std::string& message);

}  // namespace oncely::detail

#pragma once
// SQLSTATE codes oncely acts on where libpqxx 6.4 has no exception class for them.

#include <string_view>

namespace oncely::detail {

/// query_canceled: a statement_timeout or a cancel request. libpqxx 6 has no
/// pqxx::query_canceled (7.x added it, as an sql_error carrying this code), so it is
/// recognised by its code.
inline constexpr std::string_view kQueryCanceled = "57014";

}  // namespace oncely::detail

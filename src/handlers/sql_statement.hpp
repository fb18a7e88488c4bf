#pragma once
// A light scan of a declared SQL statement, so that mistakes a retry could never fix are
// reported at start-up with the offending path rather than dead-lettering jobs later.

#include <string_view>

namespace oncely::detail {

struct StatementShape {
  int highest_placeholder = 0;       ///< the largest $N outside literals, identifiers and comments
  bool multiple_statements = false;  ///< something other than whitespace/comments after a ';'
};

/// Skips '...' and E'...' literals, "quoted identifiers", $tag$dollar quotes$tag$, -- and
/// (nested) /* */ comments, and identifiers containing '$' (a$1), as PostgreSQL's lexer
/// does with standard_conforming_strings on (the default since 9.1).
StatementShape scan_statement(std::string_view sql);

}  // namespace oncely::detail

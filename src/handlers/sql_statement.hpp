#pragma once
// A light scan of a declared SQL statement, so that mistakes a retry could never fix are
// reported at start-up with the offending path rather than dead-lettering jobs later.

#include <string>
#include <string_view>

namespace oncely::detail {

struct StatementShape {
  int highest_placeholder = 0;       ///< the largest $N outside literals, identifiers and comments
  bool multiple_statements = false;  ///< something other than whitespace/comments after a ';'
  /// The statement's first two words (keywords or unquoted identifiers), upper-cased, after
  /// leading whitespace and comments; empty where the statement has fewer words before
  /// anything else (a literal, a parenthesis, a placeholder).
  std::string first_word;
  std::string second_word;
};

/// Skips '...' and E'...' literals, "quoted identifiers", $tag$dollar quotes$tag$, -- and
/// (nested) /* */ comments, and identifiers containing '$' (a$1), as PostgreSQL's lexer
/// does with standard_conforming_strings on (the default since 9.1).
StatementShape scan_statement(std::string_view sql);

/// The transaction-control command `shape` starts with ("COMMIT", "PREPARE TRANSACTION",
/// ...), or empty. BEGIN, START, COMMIT, END, ROLLBACK, ABORT, SAVEPOINT and RELEASE (with
/// COMMIT PREPARED and ROLLBACK PREPARED), and PREPARE TRANSACTION. A handler's statement
/// runs inside the batch's transaction, which only oncely may end: a COMMIT there would
/// commit the other jobs' dedup markers before they have run.
std::string transaction_control(const StatementShape& shape);

}  // namespace oncely::detail

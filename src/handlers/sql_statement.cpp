#include "handlers/sql_statement.hpp"

#include <algorithm>
#include <string>

namespace oncely::detail {
namespace {

bool is_ident_char(char c) {
  const auto byte = static_cast<unsigned char>(c);
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' ||
         byte >= 0x80;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

std::string upper(std::string_view word) {
  std::string out(word);
  for (char& c : out) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return out;
}

// Index just past the quote closing the literal or identifier that opens at `open`.
// `backslash`: E'...' strings, where a backslash escapes the next character.
std::size_t skip_quoted(std::string_view sql, std::size_t open, bool backslash) {
  const char quote = sql[open];
  std::size_t i = open + 1;
  while (i < sql.size()) {
    if (backslash && sql[i] == '\\') {
      i += 2;
    } else if (sql[i] == quote) {
      if (i + 1 < sql.size() && sql[i + 1] == quote) {
        i += 2;  // a doubled quote stands for itself
      } else {
        return i + 1;
      }
    } else {
      ++i;
    }
  }
  return sql.size();
}

std::size_t skip_block_comment(std::string_view sql, std::size_t open) {
  int depth = 0;
  std::size_t i = open;
  while (i < sql.size()) {
    if (sql.compare(i, 2, "/*") == 0) {
      ++depth;
      i += 2;
    } else if (sql.compare(i, 2, "*/") == 0) {
      i += 2;
      if (--depth == 0) return i;
    } else {
      ++i;
    }
  }
  return sql.size();
}

}  // namespace

StatementShape scan_statement(std::string_view sql) {
  StatementShape shape;
  bool after_semicolon = false;
  int words_seen = 0;  // leading words; -1 once anything else came first
  std::size_t i = 0;
  while (i < sql.size()) {
    const char c = sql[i];
    const bool follows_ident = i > 0 && is_ident_char(sql[i - 1]);
    if (words_seen >= 0 && words_seen < 2 && !is_space(c) && sql.compare(i, 2, "--") != 0 &&
        sql.compare(i, 2, "/*") != 0) {
      // A word starts with a letter and is not the E of E'...' (nor followed by a quote).
      std::size_t end = i;
      while (end < sql.size() && is_ident_char(sql[end]) && sql[end] != '$') ++end;
      if (is_letter(c) && (end == sql.size() || (sql[end] != '\'' && sql[end] != '$'))) {
        (words_seen == 0 ? shape.first_word : shape.second_word) = upper(sql.substr(i, end - i));
        ++words_seen;
        i = end;
        continue;
      }
      words_seen = -1;
    }
    if (sql.compare(i, 2, "--") == 0) {
      const std::size_t end = sql.find('\n', i);
      i = end == std::string_view::npos ? sql.size() : end + 1;
      continue;
    }
    if (sql.compare(i, 2, "/*") == 0) {
      i = skip_block_comment(sql, i);
      continue;
    }
    if (after_semicolon && !is_space(c) && c != ';') shape.multiple_statements = true;
    if (c == '\'') {
      // E'...' (or e'...') when the E is a word of its own, not the end of an identifier.
      const bool escape_string =
          i > 0 && (sql[i - 1] == 'E' || sql[i - 1] == 'e') && !(i > 1 && is_ident_char(sql[i - 2]));
      i = skip_quoted(sql, i, escape_string);
    } else if (c == '"') {
      i = skip_quoted(sql, i, false);
    } else if (c == '$' && !follows_ident) {
      std::size_t j = i + 1;
      if (j < sql.size() && is_digit(sql[j])) {
        int number = 0;
        while (j < sql.size() && is_digit(sql[j])) {
          number = std::min(number * 10 + (sql[j] - '0'), 1000000);
          ++j;
        }
        shape.highest_placeholder = std::max(shape.highest_placeholder, number);
        i = j;
        continue;
      }
      while (j < sql.size() && is_ident_char(sql[j]) && sql[j] != '$') ++j;
      if (j < sql.size() && sql[j] == '$') {  // $$ or $tag$: a dollar-quoted string
        const std::string_view tag = sql.substr(i, j - i + 1);
        const std::size_t close = sql.find(tag, j + 1);
        i = close == std::string_view::npos ? sql.size() : close + tag.size();
      } else {
        i = j;
      }
    } else {
      if (c == ';') after_semicolon = true;
      ++i;
    }
  }
  return shape;
}

std::string transaction_control(const StatementShape& shape) {
  const std::string& first = shape.first_word;
  for (const char* command : {"BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "SAVEPOINT", "RELEASE"}) {
    if (first == command) {
      const bool prepared = (first == "COMMIT" || first == "ROLLBACK") && shape.second_word == "PREPARED";
      return prepared ? first + " PREPARED" : first;
    }
  }
  // PREPARE name AS ... only defines a statement; PREPARE TRANSACTION ends the transaction.
  if (first == "PREPARE" && shape.second_word == "TRANSACTION") return "PREPARE TRANSACTION";
  return {};
}

}  // namespace oncely::detail

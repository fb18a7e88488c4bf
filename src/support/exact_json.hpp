#pragma once
// Exact JSON: JSON texts read without turning their numbers into doubles.
//
// nlohmann::json stores a number as a double unless it is a 64-bit integer, so
// 12345678901234567.89 comes back as 12345678901234568 and 1.5e-400 as 0; it refuses 1e400
// outright. PostgreSQL's jsonb keeps every number as numeric, exactly. Payloads therefore go
// into the database, and come out of it towards SQL parameters, as text: this module reads
// that text with a small validating pull parser that keeps every number's lexeme (the
// digits as written). It is iterative (an explicit stack, no recursion), so no nesting
// depth can overflow the call stack. Text coming in (validate, object_members) may nest
// at most kMaxNesting deep: deeper input is refused with the offset of the first bracket
// too many. Text read back out of jsonb (compact, find) is not bounded here: PostgreSQL
// bounds the depth it stores itself.
//
// What is accepted is RFC 8259 JSON in UTF-8, as jsonb reads it: no lone UTF-16
// surrogates in \u escapes. compact() also refuses \u0000, which jsonb cannot store.

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace oncely::detail::exact_json {

/// The deepest nesting of arrays and objects accepted from the user (payloads, NDJSON lines,
/// configuration files). Far beyond any real payload; well inside what nlohmann's recursive
/// copies and dumps and PostgreSQL's jsonb input (about 10,000 at max_stack_depth 2MB) hold.
inline constexpr std::size_t kMaxNesting = 1000;

/// A text that is not JSON: why (one line) and where (a byte offset into the text).
class SyntaxError : public std::runtime_error {
 public:
  SyntaxError(std::size_t offset, const std::string& why) : std::runtime_error(why), offset_(offset) {}
  [[nodiscard]] std::size_t offset() const noexcept { return offset_; }

 private:
  std::size_t offset_;
};

/// A string with the escape \u0000: JSON, but jsonb cannot store it.
class NulCharacter : public SyntaxError {
 public:
  using SyntaxError::SyntaxError;
};

/// One line for a user: "not valid JSON at <unit> N: <why>" (N counted from 1), or the
/// NulCharacter's message as it is.
[[nodiscard]] std::string describe(const SyntaxError& e, std::string_view unit = "byte");

/// How compact() writes strings: as written (UTF-8), or with every non-ASCII character as a
/// \u escape (7-bit text, the same JSON value).
enum class Encoding { as_written, ascii };

/// The JSON value of `text` written without insignificant whitespace. Numbers keep their
/// text exactly; strings keep their escapes as written. Throws SyntaxError (NulCharacter
/// for \u0000).
[[nodiscard]] std::string compact(std::string_view text, Encoding encoding = Encoding::as_written);

/// Throws SyntaxError (NulCharacter for \u0000) unless `text` is JSON jsonb can store,
/// nested at most kMaxNesting deep.
void validate(std::string_view text);

/// The JSON type of a value, named as nlohmann::json::type_name() names it.
enum class Type { null, boolean, number, string, object, array };
[[nodiscard]] const char* type_name(Type type) noexcept;

/// One value found in a text.
struct Value {
  Type type = Type::null;
  std::string json;  ///< the value as compact JSON text (a number: its lexeme as written)
  std::string text;  ///< a string's characters, unescaped (UTF-8); empty for other types

  /// What an SQL parameter gets from it: a string's characters, or the JSON text of
  /// anything else (a number as written, true/false, objects and arrays as JSON); none
  /// for null.
  [[nodiscard]] std::optional<std::string> parameter() const;
};

/// One member of a JSON object.
struct Member {
  std::string name;            ///< unescaped
  Value value;                 ///< objects and arrays compacted with `encoding`
  bool value_has_nul = false;  ///< the value holds a \u0000 escape somewhere (a string: `text` has a NUL)
};

/// The members of the object `text`, in order (duplicates kept). Throws SyntaxError (also for
/// nesting deeper than kMaxNesting), and
/// NotAnObject (naming the type found) when the text is valid JSON but not an object.
/// Unlike compact(), \u0000 is not refused here: value_has_nul says where it is.
[[nodiscard]] std::vector<Member> object_members(std::string_view text, Encoding encoding = Encoding::as_written);

class NotAnObject : public std::runtime_error {
 public:
  explicit NotAnObject(Type found)
      : std::runtime_error(std::string("expected a JSON object, got ") + type_name(found)), found_(found) {}
  [[nodiscard]] Type found() const noexcept { return found_; }

 private:
  Type found_;
};

/// A JSON pointer (RFC 6901), checked as nlohmann::json_pointer checks one (the same
/// nlohmann::json::exception for a text that is not a pointer), kept as its reference
/// tokens. "" is the whole document.
class Pointer {
 public:
  explicit Pointer(const std::string& text);
  [[nodiscard]] const std::vector<std::string>& tokens() const noexcept { return tokens_; }

 private:
  std::vector<std::string> tokens_;
};

/// The value `pointer` names in `text`, or none (no such member, an index past the end or
/// not an index, a scalar in the way), as nlohmann::json::at(json_pointer) finds it: an
/// array index is "0" or digits without a leading zero. Of duplicate member names the first
/// wins (jsonb's text never has any). Objects and arrays come back compacted as written.
/// Throws SyntaxError for a text that is not JSON (as far as it had to be read).
[[nodiscard]] std::optional<Value> find(std::string_view text, const Pointer& pointer);

/// The first number in `text` (valid JSON) that a double cannot hold: one beyond its range
/// (1e400), or one that is not zero but would become zero (1.5e-400). None if all fit.
[[nodiscard]] std::optional<std::string> first_number_beyond_double(std::string_view text);

}  // namespace oncely::detail::exact_json

// An iterative JSON reader that keeps every number's text (nlohmann reads them into
// doubles), with bounded nesting. Over 400 lines: a complete RFC 8259 scanner (strings
// with escapes and surrogates, numbers, literals) written without recursion so that deep
// input can neither crash it nor exhaust the stack.
#include "support/exact_json.hpp"

#include <charconv>
#include <cstdint>
#include <cstring>
#include <system_error>

#include <nlohmann/json.hpp>

namespace oncely::detail::exact_json {
namespace {

enum class Token { begin_object, end_object, begin_array, end_array, key, string, number, true_, false_, null, end };

/// What the scan of the current string (or key) found, so that copying it needs no second
/// look unless it must be changed.
struct StringInfo {
  bool escapes = false;
  bool non_ascii = false;
  bool nul = false;  // a \u0000 escape
};

bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }

int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/// The length of the well-formed UTF-8 sequence (RFC 3629: no overlong forms, no
/// surrogates, nothing above U+10FFFF) starting at s[i], or 0.
std::size_t utf8_length(std::string_view s, std::size_t i) noexcept {
  const auto byte = [&](std::size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0U; };
  const auto cont = [&](std::size_t k) { return (byte(k) & 0xC0U) == 0x80U; };
  const unsigned b0 = byte(0);
  const unsigned b1 = byte(1);
  if (b0 >= 0xC2 && b0 <= 0xDF) return cont(1) ? 2 : 0;
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    const bool second = b0 == 0xE0 ? (b1 >= 0xA0 && b1 <= 0xBF) : b0 == 0xED ? (b1 >= 0x80 && b1 <= 0x9F) : cont(1);
    return second && cont(2) ? 3 : 0;
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    const bool second = b0 == 0xF0 ? (b1 >= 0x90 && b1 <= 0xBF) : b0 == 0xF4 ? (b1 >= 0x80 && b1 <= 0x8F) : cont(1);
    return second && cont(2) && cont(3) ? 4 : 0;
  }
  return 0;
}

void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

void append_u_escape(std::string& out, std::uint32_t unit) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(unit >> shift) & 0xF];
}

/// A pull parser over one JSON text: next() returns one token at a time and checks the
/// grammar as it goes, with the open containers on an explicit stack.
class Reader {
 public:
  /// `max_depth`: the most containers a value may nest (deeper is a SyntaxError), not
  /// counting `envelope` outer ones (an NDJSON line's object around its payload).
  explicit Reader(std::string_view text, std::size_t max_depth = SIZE_MAX, std::size_t envelope = 0)
      : text_(text), max_depth_(max_depth), envelope_(envelope) {}

  Token next() {
    skip_whitespace();
    while (true) {
      switch (state_) {
        case State::done:
          if (pos_ < text_.size()) fail(pos_, "unexpected text after the JSON value");
          lexeme_ = text_.substr(pos_, 0);
          return Token::end;
        case State::value: return scan_value();
        case State::first_in_array:
          if (at(']')) return close(Token::end_array);
          state_ = State::value;
          continue;
        case State::first_in_object:
          if (at('}')) return close(Token::end_object);
          if (!at('"')) fail(pos_, "expected a member name (a string) or '}'");
          state_ = State::key;
          continue;
        case State::key: {
          if (!at('"')) fail(pos_, "expected a member name (a string)");
          scan_string();
          const std::string_view key = lexeme_;
          skip_whitespace();
          if (!at(':')) fail(pos_, "expected ':' after a member name");
          ++pos_;
          lexeme_ = key;
          state_ = State::value;
          return Token::key;
        }
        case State::after_value: {
          if (stack_.empty()) {
            state_ = State::done;
            continue;
          }
          const bool object = stack_.back() == '{';
          if (at(',')) {
            ++pos_;
            skip_whitespace();
            state_ = object ? State::key : State::value;
            continue;
          }
          if (at(object ? '}' : ']')) return close(object ? Token::end_object : Token::end_array);
          fail(pos_, pos_ < text_.size() ? (object ? "expected ',' or '}'" : "expected ',' or ']'")
                                         : (object ? "unexpected end of text; expected ',' or '}'"
                                                   : "unexpected end of text; expected ',' or ']'"));
        }
      }
    }
  }

  /// The current token's text: a string or key with its quotes, a number as written.
  [[nodiscard]] std::string_view lexeme() const noexcept { return lexeme_; }
  [[nodiscard]] const StringInfo& string_info() const noexcept { return string_; }
  /// Containers open after the current token.
  [[nodiscard]] std::size_t depth() const noexcept { return stack_.size(); }
  [[nodiscard]] std::size_t offset() const noexcept { return static_cast<std::size_t>(lexeme_.data() - text_.data()); }

 private:
  enum class State { value, first_in_array, first_in_object, key, after_value, done };

  [[noreturn]] static void fail(std::size_t at, const char* why) { throw SyntaxError(at, why); }

  [[nodiscard]] bool at(char c) const noexcept { return pos_ < text_.size() && text_[pos_] == c; }

  void skip_whitespace() noexcept {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return;
      ++pos_;
    }
  }

  Token close(Token token) {
    lexeme_ = text_.substr(pos_++, 1);
    stack_.pop_back();
    state_ = State::after_value;
    return token;
  }

  Token open(char bracket, State state, Token token) {
    if (stack_.size() == max_depth_ + envelope_) {
      throw SyntaxError(pos_, "arrays and objects nested more than " + std::to_string(max_depth_) + " deep");
    }
    lexeme_ = text_.substr(pos_++, 1);
    stack_.push_back(bracket);
    state_ = state;
    return token;
  }

  Token scan_value() {
    if (pos_ >= text_.size()) fail(pos_, "unexpected end of text; expected a value");
    const char c = text_[pos_];
    if (c == '{') return open('{', State::first_in_object, Token::begin_object);
    if (c == '[') return open('[', State::first_in_array, Token::begin_array);
    state_ = State::after_value;
    if (c == '"') {
      scan_string();
      return Token::string;
    }
    if (c == '-' || is_digit(c)) return scan_number();
    if (c == 't') return scan_literal("true", Token::true_);
    if (c == 'f') return scan_literal("false", Token::false_);
    if (c == 'n') return scan_literal("null", Token::null);
    fail(pos_, "expected a value");
  }

  Token scan_literal(std::string_view word, Token token) {
    if (text_.substr(pos_, word.size()) != word) fail(pos_, "expected a value");
    lexeme_ = text_.substr(pos_, word.size());
    pos_ += word.size();
    return token;
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  Token scan_number() {
    const std::size_t start = pos_;
    const auto digits = [&] {
      const std::size_t from = pos_;
      while (pos_ < text_.size() && is_digit(text_[pos_])) ++pos_;
      if (pos_ == from) fail(start, "a number is not written as JSON writes numbers");
    };
    if (at('-')) ++pos_;
    if (at('0')) {
      ++pos_;
    } else {
      digits();
    }
    if (at('.')) {
      ++pos_;
      digits();
    }
    if (at('e') || at('E')) {
      ++pos_;
      if (at('+') || at('-')) ++pos_;
      digits();
    }
    lexeme_ = text_.substr(start, pos_ - start);
    return Token::number;
  }

  std::uint32_t hex4(std::size_t escape) const {
    std::uint32_t unit = 0;
    for (std::size_t k = escape + 2; k < escape + 6; ++k) {
      const int v = k < text_.size() ? hex_value(text_[k]) : -1;
      if (v < 0) fail(escape, "a \\u escape needs four hexadecimal digits");
      unit = unit * 16 + static_cast<std::uint32_t>(v);
    }
    return unit;
  }

  void scan_string() {
    const std::size_t start = pos_++;
    string_ = StringInfo{};
    while (true) {
      if (pos_ >= text_.size()) fail(start, "unterminated string");
      const auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') break;
      if (c == '\\') {
        string_.escapes = true;
        const char e = pos_ + 1 < text_.size() ? text_[pos_ + 1] : '\0';
        if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
          pos_ += 2;
          continue;
        }
        if (e != 'u') fail(pos_, "invalid escape in a string");
        const std::size_t escape = pos_;
        const std::uint32_t unit = hex4(escape);
        pos_ += 6;
        if (unit == 0) string_.nul = true;
        if (unit >= 0xDC00 && unit <= 0xDFFF) fail(escape, "a lone UTF-16 surrogate in a \\u escape");
        if (unit >= 0xD800 && unit <= 0xDBFF) {
          // A high surrogate must be followed at once by a low one: the pair is one character.
          if (!(at('\\') && pos_ + 1 < text_.size() && text_[pos_ + 1] == 'u')) {
            fail(escape, "a lone UTF-16 surrogate in a \\u escape");
          }
          const std::uint32_t low = hex4(pos_);
          if (low < 0xDC00 || low > 0xDFFF) fail(escape, "a lone UTF-16 surrogate in a \\u escape");
          pos_ += 6;
        }
        continue;
      }
      if (c < 0x20) fail(pos_, "a control character in a string (it must be escaped)");
      if (c < 0x80) {
        ++pos_;
        continue;
      }
      const std::size_t n = utf8_length(text_, pos_);
      if (n == 0) fail(pos_, "invalid UTF-8 in a string");
      string_.non_ascii = true;
      pos_ += n;
    }
    ++pos_;
    lexeme_ = text_.substr(start, pos_ - start);
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  std::vector<char> stack_;  // '{' or '[' for each open container
  std::size_t max_depth_;
  std::size_t envelope_;
  State state_ = State::value;
  std::string_view lexeme_;
  StringInfo string_;
};

/// A string lexeme's characters, escapes resolved (the lexeme is well-formed).
std::string unescape(std::string_view lexeme, bool escapes) {
  const std::string_view inner = lexeme.substr(1, lexeme.size() - 2);
  if (!escapes) return std::string(inner);
  std::string out;
  out.reserve(inner.size());
  const auto unit_at = [&](std::size_t i) {
    std::uint32_t unit = 0;
    for (std::size_t k = i + 2; k < i + 6; ++k) unit = unit * 16 + static_cast<std::uint32_t>(hex_value(inner[k]));
    return unit;
  };
  for (std::size_t i = 0; i < inner.size();) {
    if (inner[i] != '\\') {
      out += inner[i++];
      continue;
    }
    const char e = inner[i + 1];
    switch (e) {
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        std::uint32_t cp = unit_at(i);
        if (cp >= 0xD800 && cp <= 0xDBFF) {
          cp = 0x10000 + ((cp - 0xD800) << 10) + (unit_at(i + 6) - 0xDC00);
          i += 6;
        }
        append_utf8(out, cp);
        i += 6;
        continue;
      }
      default: out += e; break;  // " \ /
    }
    i += 2;
  }
  return out;
}

/// A string lexeme with every non-ASCII character written as a \u escape (a pair above
/// U+FFFF); escapes already there stay as written.
void append_ascii(std::string& out, std::string_view lexeme) {
  for (std::size_t i = 0; i < lexeme.size();) {
    const auto b0 = static_cast<unsigned char>(lexeme[i]);
    if (b0 < 0x80) {
      out += lexeme[i++];
      continue;
    }
    const std::size_t n = utf8_length(lexeme, i);  // well-formed: the Reader checked it
    std::uint32_t cp = b0 & (n == 2 ? 0x1FU : n == 3 ? 0x0FU : 0x07U);
    for (std::size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(lexeme[i + k]) & 0x3FU);
    if (cp >= 0x10000) {
      cp -= 0x10000;
      append_u_escape(out, 0xD800 + (cp >> 10));
      append_u_escape(out, 0xDC00 + (cp & 0x3FF));
    } else {
      append_u_escape(out, cp);
    }
    i += n;
  }
}

/// Writes tokens as compact JSON text.
class Writer {
 public:
  Writer(std::string& out, Encoding encoding) : out_(out), encoding_(encoding) {}

  void write(const Reader& r, Token token) {
    switch (token) {
      case Token::begin_object:
      case Token::begin_array:
        separate();
        out_ += r.lexeme();
        comma_ = false;
        return;
      case Token::end_object:
      case Token::end_array:
        out_ += r.lexeme();
        comma_ = true;
        return;
      case Token::key:
        separate();
        append_string(r);
        out_ += ':';
        comma_ = false;
        return;
      case Token::string:
        separate();
        append_string(r);
        comma_ = true;
        return;
      case Token::number:
      case Token::true_:
      case Token::false_:
      case Token::null:
        separate();
        out_ += r.lexeme();
        comma_ = true;
        return;
      case Token::end: return;
    }
  }

 private:
  void separate() {
    if (comma_) out_ += ',';
  }
  void append_string(const Reader& r) {
    if (encoding_ == Encoding::ascii && r.string_info().non_ascii) {
      append_ascii(out_, r.lexeme());
    } else {
      out_ += r.lexeme();
    }
  }

  std::string& out_;
  Encoding encoding_;
  bool comma_ = false;
};

bool is_string(Token t) noexcept { return t == Token::string || t == Token::key; }
bool is_end(Token t) noexcept { return t == Token::end_object || t == Token::end_array; }

[[noreturn]] void fail_nul(const Reader& r) {
  throw NulCharacter(r.offset(), "contains the character U+0000, which PostgreSQL's jsonb cannot store");
}

Type type_of(Token t) noexcept {
  switch (t) {
    case Token::begin_object: return Type::object;
    case Token::begin_array: return Type::array;
    case Token::string: return Type::string;
    case Token::number: return Type::number;
    case Token::true_:
    case Token::false_: return Type::boolean;
    default: return Type::null;
  }
}

/// Reads past the value whose first token is `first`.
void skip_value(Reader& r, Token first) {
  if (first != Token::begin_object && first != Token::begin_array) return;
  const std::size_t depth = r.depth() - 1;
  while (true) {
    const Token t = r.next();
    if (is_end(t) && r.depth() == depth) return;
  }
}

/// Reads the value whose first token is `first`; sets `has_nul` if it holds \u0000.
Value read_value(Reader& r, Token first, Encoding encoding, bool& has_nul) {
  Value v;
  v.type = type_of(first);
  Writer w(v.json, encoding);
  if (first == Token::string) {
    has_nul = has_nul || r.string_info().nul;
    v.text = unescape(r.lexeme(), r.string_info().escapes);
  }
  w.write(r, first);
  if (first != Token::begin_object && first != Token::begin_array) return v;
  const std::size_t depth = r.depth() - 1;
  while (true) {
    const Token t = r.next();
    if (is_string(t) && r.string_info().nul) has_nul = true;
    w.write(r, t);
    if (is_end(t) && r.depth() == depth) return v;
  }
}

bool key_equals(const Reader& r, const std::string& name) {
  const std::string_view lexeme = r.lexeme();
  if (!r.string_info().escapes) return lexeme.substr(1, lexeme.size() - 2) == name;
  return unescape(lexeme, true) == name;
}

/// An array index as nlohmann's json_pointer reads one: "0", or digits without a leading 0.
std::optional<std::size_t> array_index(const std::string& token) {
  if (token.empty() || (token.size() > 1 && token[0] == '0')) return std::nullopt;
  std::size_t index = 0;
  const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), index);
  if (ec != std::errc() || end != token.data() + token.size()) return std::nullopt;
  return index;
}

/// Whether a number lexeme (valid JSON) is within a double's range: neither infinite as a
/// double nor zero as a double while not zero itself. (from_chars, not strtod: no locale.)
bool fits_double(std::string_view lexeme) {
  // Without an exponent, fewer than 300 characters cannot leave the range (1e-307 to 1e308).
  if (lexeme.size() < 300 && lexeme.find_first_of("eE") == std::string_view::npos) return true;
  double value = 0;
  const auto [end, ec] = std::from_chars(lexeme.data(), lexeme.data() + lexeme.size(), value);
  return ec != std::errc::result_out_of_range;
}

}  // namespace

std::string describe(const SyntaxError& e, std::string_view unit) {
  if (dynamic_cast<const NulCharacter*>(&e) != nullptr) return e.what();
  return "not valid JSON at " + std::string(unit) + " " + std::to_string(e.offset() + 1) + ": " + e.what();
}

const char* type_name(Type type) noexcept {
  switch (type) {
    case Type::null: return "null";
    case Type::boolean: return "boolean";
    case Type::number: return "number";
    case Type::string: return "string";
    case Type::object: return "object";
    case Type::array: return "array";
  }
  return "null";
}

std::optional<std::string> Value::parameter() const {
  switch (type) {
    case Type::null: return std::nullopt;
    case Type::string: return text;
    default: return json;
  }
}

std::string compact(std::string_view text, Encoding encoding) {
  Reader r(text);
  std::string out;
  out.reserve(text.size());
  Writer w(out, encoding);
  for (Token t = r.next(); t != Token::end; t = r.next()) {
    if (is_string(t) && r.string_info().nul) fail_nul(r);
    w.write(r, t);
  }
  return out;
}

void validate(std::string_view text) {
  Reader r(text, kMaxNesting);
  for (Token t = r.next(); t != Token::end; t = r.next()) {
    if (is_string(t) && r.string_info().nul) fail_nul(r);
  }
}

std::vector<Member> object_members(std::string_view text, Encoding encoding) {
  Reader r(text, kMaxNesting, /*envelope=*/1);  // its members' values are bounded as payloads are
  Token t = r.next();
  if (t != Token::begin_object) {
    // A syntax error anywhere in the text is reported before the wrong type.
    skip_value(r, t);
    r.next();
    throw NotAnObject(type_of(t));
  }
  std::vector<Member> members;
  while ((t = r.next()) != Token::end_object) {
    Member m;
    m.name = unescape(r.lexeme(), r.string_info().escapes);
    m.value = read_value(r, r.next(), encoding, m.value_has_nul);
    members.push_back(std::move(m));
  }
  r.next();  // nothing may follow
  return members;
}

Pointer::Pointer(const std::string& text) {
  // nlohmann's parser is the judge of what a pointer is (the sql handler's configuration
  // errors come from it); the tokens are split here, as RFC 6901 says: ~1 is '/', ~0 is '~'.
  [[maybe_unused]] const nlohmann::json::json_pointer checked(text);
  if (text.empty()) return;
  std::string token;
  for (std::size_t i = 1; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '/') {
      tokens_.push_back(std::move(token));
      token.clear();
    } else if (c == '~') {
      token += text[++i] == '1' ? '/' : '~';
    } else {
      token += c;
    }
  }
  tokens_.push_back(std::move(token));
}

std::optional<Value> find(std::string_view text, const Pointer& pointer) {
  Reader r(text);
  Token t = r.next();
  for (const std::string& token : pointer.tokens()) {
    if (t == Token::begin_object) {
      while (true) {
        if (r.next() == Token::end_object) return std::nullopt;
        const bool match = key_equals(r, token);
        t = r.next();
        if (match) break;
        skip_value(r, t);
      }
    } else if (t == Token::begin_array) {
      const std::optional<std::size_t> index = array_index(token);
      if (!index) return std::nullopt;
      for (std::size_t i = 0;; ++i) {
        t = r.next();
        if (t == Token::end_array) return std::nullopt;
        if (i == *index) break;
        skip_value(r, t);
      }
    } else {
      return std::nullopt;
    }
  }
  bool has_nul = false;
  return read_value(r, t, Encoding::as_written, has_nul);
}

std::optional<std::string> first_number_beyond_double(std::string_view text) {
  // A plain scan, not a parse: the text is valid JSON, so a '-' or digit outside a string
  // starts a number.
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '"') {
      // To the closing quote: the next '"' not escaped (after an even run of backslashes).
      const std::size_t open = i;
      while (true) {
        const void* quote = std::memchr(text.data() + i + 1, '"', text.size() - i - 1);
        if (quote == nullptr) return std::nullopt;
        i = static_cast<std::size_t>(static_cast<const char*>(quote) - text.data());
        std::size_t backslashes = 0;
        while (i - backslashes - 1 > open && text[i - backslashes - 1] == '\\') ++backslashes;
        if (backslashes % 2 == 0) break;
      }
      ++i;
    } else if (c == '-' || is_digit(c)) {
      const std::size_t start = i;
      while (i < text.size() && (is_digit(text[i]) || text[i] == '-' || text[i] == '+' || text[i] == '.' ||
                                 text[i] == 'e' || text[i] == 'E')) {
        ++i;
      }
      const std::string_view lexeme = text.substr(start, i - start);
      if (!fits_double(lexeme)) return std::string(lexeme);
    } else {
      ++i;
    }
  }
  return std::nullopt;
}

}  // namespace oncely::detail::exact_json

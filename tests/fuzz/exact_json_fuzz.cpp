// The exact JSON reader under the payloads, NDJSON lines and jsonb text. Against nlohmann
// (the other JSON reader in the tree): both accept the same texts, except where exact_json
// is stricter on purpose (\u0000, nesting over kMaxNesting) or nlohmann cannot hold a
// number (1e400), skips a byte-order mark or stops at a NUL byte. compact() is idempotent,
// gives the same value (its ASCII form too, 7-bit), and find() finds each member.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "fuzz_check.hpp"
#include "support/exact_json.hpp"

namespace {

namespace exact_json = oncely::detail::exact_json;

std::size_t depth_of(std::string_view text) {
  std::size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = oncely::fuzz::as_text(data, size);
  bool exact_ok = true;
  bool nul = false;
  try {
    exact_json::validate(text);
  } catch (const exact_json::NulCharacter&) {
    exact_ok = false;
    nul = true;
  } catch (const exact_json::SyntaxError& e) {
    exact_ok = false;
    FUZZ_CHECK(e.offset() <= text.size(), text, std::to_string(e.offset()));
    static_cast<void>(exact_json::describe(e));
  }
  const bool nlohmann_ok = nlohmann::json::accept(text);
  const bool bom = text.starts_with("\xef\xbb\xbf");
  if (exact_ok && !nlohmann_ok) {
    FUZZ_CHECK(exact_json::first_number_beyond_double(text).has_value(), text, "nlohmann refused it");
  }
  // nlohmann takes a NUL byte for the end of the input ("1\0garbage" is 1); exact_json
  // refuses it, as jsonb's input does.
  if (nlohmann_ok && !exact_ok && text.find('\0') == std::string_view::npos) {
    FUZZ_CHECK(nul || bom || depth_of(text) > exact_json::kMaxNesting, text, "exact_json refused it");
  }
  if (!exact_ok) return 0;

  const std::string compacted = exact_json::compact(text);
  FUZZ_CHECK(exact_json::compact(compacted) == compacted, text, compacted);
  const std::string ascii = exact_json::compact(text, exact_json::Encoding::ascii);
  FUZZ_CHECK(std::all_of(ascii.begin(), ascii.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }), text,
             ascii);
  FUZZ_CHECK(exact_json::compact(ascii, exact_json::Encoding::ascii) == ascii, text, ascii);
  if (nlohmann_ok) {
    const auto value = nlohmann::json::parse(text);
    FUZZ_CHECK(nlohmann::json::parse(compacted) == value, text, compacted);
    FUZZ_CHECK(nlohmann::json::parse(ascii) == value, text, ascii);
    if (value.is_object()) {
      const auto members = exact_json::object_members(text);
      std::size_t distinct = 0;
      for (std::size_t i = 0; i < members.size(); ++i) {
        bool first = true;
        for (std::size_t j = 0; j < i; ++j) first = first && members[j].name != members[i].name;
        if (!first) continue;
        ++distinct;
        FUZZ_CHECK(value.contains(members[i].name), text, members[i].name);
        // Of duplicate names nlohmann keeps the last, find() the first: compare unique names only.
        bool unique = true;
        for (std::size_t j = i + 1; j < members.size(); ++j) unique = unique && members[j].name != members[i].name;
        if (!unique) continue;
        FUZZ_CHECK(nlohmann::json::parse(members[i].value.json) == value[members[i].name], text, members[i].value.json);
        std::string token;
        for (const char c : members[i].name) token += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
        const auto found = exact_json::find(text, exact_json::Pointer("/" + token));
        FUZZ_CHECK(found && found->json == members[i].value.json, text, found ? found->json : "(not found)");
      }
      FUZZ_CHECK(distinct == value.size(), text, std::to_string(distinct));
    }
  }
  return 0;
}

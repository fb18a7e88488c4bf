#include <doctest/doctest.h>

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "support/exact_json.hpp"

namespace json = oncely::detail::exact_json;
using json::Encoding;
using json::Type;

namespace {

/// The SyntaxError's message and offset for `text`, or "" when compact() accepts it.
std::string compact_error(const std::string& text) {
  try {
    (void)json::compact(text);
  } catch (const json::SyntaxError& e) {
    return std::string(e.what()) + " @" + std::to_string(e.offset());
  }
  return "";
}

std::optional<std::string> parameter_at(const std::string& text, const std::string& pointer) {
  const auto value = json::find(text, json::Pointer(pointer));
  REQUIRE_MESSAGE(value.has_value(), pointer << " not found in " << text);
  return value->parameter();
}

}  // namespace

TEST_CASE("exact_json: compact keeps every number's text and drops only whitespace") {
  struct Case {
    const char* in;
    const char* out;
  };
  for (const Case& c : {
           Case{R"({"cents": 12345678901234567.89})", R"({"cents":12345678901234567.89})"},
           Case{"99999999999999999999", "99999999999999999999"},
           Case{"[1.5e-400, 1e400, -0.000000000000000000001, 1E+2, -0, 0.10]",
                "[1.5e-400,1e400,-0.000000000000000000001,1E+2,-0,0.10]"},
           Case{" \t\r\n{ \"a\" : [ 1 , { } , [ ] , true , false , null ] , \"b\" : \"x y\" } \n",
                R"({"a":[1,{},[],true,false,null],"b":"x y"})"},
           Case{R"("caf\u00e9 \"q\" \\ \/ \n")", R"("caf\u00e9 \"q\" \\ \/ \n")"},  // escapes as written
           Case{"\"h\xC3\xA9 \xF0\x9F\x98\x80\"", "\"h\xC3\xA9 \xF0\x9F\x98\x80\""},
           Case{R"({"a":1,"a":2})", R"({"a":1,"a":2})"},  // duplicates are jsonb's business (the last wins)
           Case{R"("C:\\u0000")", R"("C:\\u0000")"},      // an escaped backslash, then text: no NUL
       }) {
    CAPTURE(c.in);
    CHECK(json::compact(c.in) == c.out);
  }
}

TEST_CASE("exact_json: ascii encoding escapes non-ASCII characters, pairs above U+FFFF") {
  CHECK(json::compact("{\"n\xC3\xA9\": \"h\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80\", \"x\": 1e400}", Encoding::ascii) ==
        R"({"n\u00e9":"h\u00e9 \u20ac \ud83d\ude00","x":1e400})");
  // The same value as nlohmann reads it.
  CHECK(nlohmann::json::parse(json::compact("\"\xF0\x9F\x98\x80\xC3\xA9\"", Encoding::ascii)) ==
        "\xF0\x9F\x98\x80\xC3\xA9");
}

TEST_CASE("exact_json: what is not JSON jsonb stores is refused with the reason and where") {
  struct Case {
    std::string in;
    const char* error;
  };
  for (const Case& c : {
           Case{"", "unexpected end of text; expected a value @0"},
           Case{"   ", "unexpected end of text; expected a value @3"},
           Case{"{not json", "expected a member name (a string) or '}' @1"},
           Case{R"({"a" 1})", "expected ':' after a member name @5"},
           Case{R"({"a": 1,})", "expected a member name (a string) @8"},
           Case{R"({"a": 1)", "unexpected end of text; expected ',' or '}' @7"},
           Case{"[1 2]", "expected ',' or ']' @3"},
           Case{"[1,]", "expected a value @3"},
           Case{R"({"kind": "k"} trailing)", "unexpected text after the JSON value @14"},
           Case{"01", "unexpected text after the JSON value @1"},
           Case{"1.", "a number is not written as JSON writes numbers @0"},
           Case{".5", "expected a value @0"},
           Case{"-", "a number is not written as JSON writes numbers @0"},
           Case{"1e", "a number is not written as JSON writes numbers @0"},
           Case{"+1", "expected a value @0"},
           Case{"NaN", "expected a value @0"},
           Case{"Infinity", "expected a value @0"},
           Case{"tru", "expected a value @0"},
           Case{R"("abc)", "unterminated string @0"},
           Case{"\"a\tb\"", "a control character in a string (it must be escaped) @2"},
           Case{R"("\x")", "invalid escape in a string @1"},
           Case{R"("\u12")", "a \\u escape needs four hexadecimal digits @1"},
           Case{R"("\ud83d")", "a lone UTF-16 surrogate in a \\u escape @1"},
           Case{R"("\ude00")", "a lone UTF-16 surrogate in a \\u escape @1"},
           Case{R"("\ud83d\u0041")", "a lone UTF-16 surrogate in a \\u escape @1"},
           Case{"\"\xC3\"", "invalid UTF-8 in a string @1"},
           Case{"\"\xC0\xAF\"", "invalid UTF-8 in a string @1"},          // overlong
           Case{"\"\xED\xA0\x80\"", "invalid UTF-8 in a string @1"},      // an encoded surrogate
           Case{"\"\xF4\x90\x80\x80\"", "invalid UTF-8 in a string @1"},  // above U+10FFFF
           Case{"\xC3\xA9", "expected a value @0"},
           Case{R"({"a": ["\u0000"]})", "contains the character U+0000, which PostgreSQL's jsonb cannot store @7"},
           Case{R"({"\u0000": 1})", "contains the character U+0000, which PostgreSQL's jsonb cannot store @1"},
       }) {
    CAPTURE(c.in);
    CHECK(compact_error(c.in) == c.error);
  }
  CHECK_THROWS_AS(json::validate(R"({"a": "\u0000"})"), json::NulCharacter);
  CHECK_NOTHROW(json::validate(R"({"a": [1e400, "\ud83d\ude00"]})"));
}

TEST_CASE("exact_json: no nesting depth overflows the stack") {
  const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  CHECK(json::compact(deep) == deep);
  CHECK(json::find(deep, json::Pointer("/0/0/0/0"))->type == Type::array);
  CHECK(compact_error(std::string(1'000'000, '[')) == "unexpected end of text; expected a value @1000000");
}

TEST_CASE("exact_json: find extracts SQL parameters as the sql handler binds them") {
  const std::string payload = R"({"cents": 12345678901234567.89, "big": 99999999999999999999, "tiny": 1.5e-400,
      "huge": 1e400, "neg": -0.000000000000000000001, "int": 42, "name": "Zo\u00eb \"Z\"", "yes": true,
      "no": false, "none": null, "list": [1.10, {"x": 2E3}], "obj": {"b": 1, "a": [ ]},
      "a/b": 1, "m~n": 2, "": 3, "nested": {"k": {"k": "deep"}}})";
  struct Case {
    const char* pointer;
    std::optional<std::string> parameter;
  };
  for (const Case& c : {
           Case{"/cents", "12345678901234567.89"},
           Case{"/big", "99999999999999999999"},
           Case{"/tiny", "1.5e-400"},
           Case{"/huge", "1e400"},
           Case{"/neg", "-0.000000000000000000001"},
           Case{"/int", "42"},
           Case{"/name", "Zo\xC3\xAB \"Z\""},  // a string's characters, unquoted
           Case{"/yes", "true"},
           Case{"/no", "false"},
           Case{"/none", std::nullopt},  // SQL NULL
           Case{"/list", R"([1.10,{"x":2E3}])"},
           Case{"/list/0", "1.10"},
           Case{"/list/1/x", "2E3"},
           Case{"/obj", R"({"b":1,"a":[]})"},
           Case{"/a~1b", "1"},
           Case{"/m~0n", "2"},
           Case{"/", "3"},
           Case{"/nested/k/k", "deep"},
       }) {
    CAPTURE(c.pointer);
    CHECK(parameter_at(payload, c.pointer) == c.parameter);
  }
  CHECK(json::find(payload, json::Pointer(""))->type == Type::object);  // the whole payload
  CHECK(json::find(payload, json::Pointer("/name"))->json == R"("Zo\u00eb \"Z\"")");
}

TEST_CASE("exact_json: find says none where nlohmann's at(json_pointer) throws") {
  const std::string payload = R"({"a": {"b": [10, 20]}, "s": "text", "n": null})";
  const nlohmann::json parsed = nlohmann::json::parse(payload);
  for (const char* pointer : {"/missing", "/a/c", "/a/b/2", "/a/b/-", "/a/b/01", "/a/b/x", "/a/b/1/z", "/s/0", "/n/x",
                              "/a/b/99999999999999999999999"}) {
    CAPTURE(pointer);
    CHECK_FALSE(json::find(payload, json::Pointer(pointer)));
    CHECK_THROWS_AS((void)parsed.at(nlohmann::json::json_pointer(pointer)), nlohmann::json::exception);
  }
  CHECK(json::find(payload, json::Pointer("/a/b/1"))->json == "20");
  CHECK(json::find(R"({"k": 1, "k": 2})", json::Pointer("/k"))->json == "1");  // first wins; jsonb has none
  CHECK(json::find(R"({"\u006b": 5})", json::Pointer("/k"))->json == "5");     // names compared unescaped
}

TEST_CASE("exact_json: a pointer that is not one is refused as nlohmann refuses it") {
  for (const char* bad : {"user_id", "/a~2", "/a~"}) {
    CAPTURE(bad);
    CHECK_THROWS_AS(json::Pointer{bad}, nlohmann::json::exception);
  }
  CHECK(json::Pointer("/a~1b/~0/").tokens() == std::vector<std::string>{"a/b", "~", ""});
  CHECK(json::Pointer("").tokens().empty());
}

TEST_CASE("exact_json: object_members reads an NDJSON line's fields, payload text kept") {
  const auto members = json::object_members(
      R"({"kind": "charge", "payload": {"cents": 12345678901234567.89, "note": "h\u00e9", "x": 1e400},
          "priority": -5, "key": "k\u0000", "run_at": null})",
      Encoding::ascii);
  REQUIRE(members.size() == 5);
  CHECK(members[0].name == "kind");
  CHECK(members[0].value.type == Type::string);
  CHECK(members[0].value.text == "charge");
  CHECK(members[1].name == "payload");
  CHECK(members[1].value.type == Type::object);
  CHECK(members[1].value.json == R"({"cents":12345678901234567.89,"note":"h\u00e9","x":1e400})");
  CHECK_FALSE(members[1].value_has_nul);
  CHECK(members[2].value.type == Type::number);
  CHECK(members[2].value.json == "-5");
  CHECK(members[3].value.text == std::string("k\0", 2));
  CHECK(members[3].value_has_nul);
  CHECK(members[4].value.type == Type::null);
  CHECK(json::object_members(R"({"p": {"a": ["\u0000"]}})")[0].value_has_nul);

  CHECK_THROWS_WITH_AS(json::object_members("[1, 2]"), "expected a JSON object, got array", json::NotAnObject);
  CHECK_THROWS_WITH_AS(json::object_members(R"("kind")"), "expected a JSON object, got string", json::NotAnObject);
  CHECK_THROWS_AS(json::object_members("[1, 2"), json::SyntaxError);  // not JSON before not an object
  CHECK_THROWS_AS(json::object_members(R"({"a": 1} x)"), json::SyntaxError);
}

TEST_CASE("exact_json: numbers a double cannot hold are found, in any notation") {
  struct Case {
    const char* text;
    std::optional<std::string> beyond;
  };
  const std::string zeros400(400, '0');
  const std::string huge_plain = "1" + zeros400;          // 1e400 as jsonb's text writes it
  const std::string tiny_plain = "0." + zeros400 + "15";  // 1.5e-402
  for (const Case& c : {
           Case{R"({"a": 1, "b": 12345678901234567.89, "c": 99999999999999999999, "d": 1e308})", std::nullopt},
           Case{R"({"a": 0, "b": 0.0, "c": 0e-999, "d": -0, "e": 2.2250738585072014e-308})", std::nullopt},
           Case{R"({"a": "1e400 in a string", "b\"1e400": 2})", std::nullopt},
           Case{R"({"a\\": "\\\"1e400\\", "b": 2})", std::nullopt}, Case{R"(["\\", 1e400])", "1e400"},
           Case{R"(["\"", -1e400])", "-1e400"}, Case{R"({"a": 1e400})", "1e400"}, Case{R"([1, -1E+309])", "-1E+309"},
           Case{R"({"x": [1.5e-400]})", "1.5e-400"}, Case{R"({"x": 1e-330})", "1e-330"},  // not zero, but would be
       }) {
    CAPTURE(c.text);
    CHECK(json::first_number_beyond_double(c.text) == c.beyond);
  }
  CHECK(json::first_number_beyond_double("[" + huge_plain + "]") == huge_plain);
  CHECK(json::first_number_beyond_double("[" + tiny_plain + "]") == tiny_plain);
  CHECK_FALSE(json::first_number_beyond_double("[0." + std::string(320, '0') + "]"));
}

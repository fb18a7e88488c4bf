// The reference in docs/ against the code it describes, so that it cannot drift (the
// configuration table once said concurrency 1 / batch_size 100 while the code used 4 / 500):
// - docs/configuration.md's key table: every key is accepted by Config::parse, its default
//   is oncely::Config's, its range is where Config::validate draws the line, and every field
//   of the Config structs (include/oncely/config.hpp) has a row;
// - docs/cli.md: every command of `oncely --help` has a section naming each of its options;
// - docs/internals.md's "Map of the source": every file a row names exists, and every
//   symbol it names is spelled in one of the files its row names.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "oncely/admin.hpp"
#include "oncely/config.hpp"
#include "oncely/errors.hpp"
#include "support/duration.hpp"

#ifndef ONCELY_SOURCE_DIR
#error "ONCELY_SOURCE_DIR must name the source tree (tests/CMakeLists.txt sets it for this file)"
#endif

using nlohmann::json;
using oncely::BackoffConfig;
using oncely::Config;
using oncely::QueueConfig;

namespace {

std::string read_source(const std::string& relative) {
  const std::filesystem::path path = std::filesystem::path(ONCELY_SOURCE_DIR) / relative;
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path.string());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string trim(std::string s) {
  const auto begin = s.find_first_not_of(" \t");
  const auto end = s.find_last_not_of(" \t");
  return begin == std::string::npos ? std::string() : s.substr(begin, end - begin + 1);
}

std::string unquote(std::string s) {  // `x` -> x
  s = trim(std::move(s));
  if (s.size() >= 2 && s.front() == '`' && s.back() == '`') return s.substr(1, s.size() - 2);
  return s;
}

// The cells of a Markdown table row ("| a | b \| c |" -> {"a", "b | c"}).
std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  for (std::size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
      cell += '|';
      ++i;
    } else if (line[i] == '|') {
      out.push_back(trim(cell));
      cell.clear();
    } else {
      cell += line[i];
    }
  }
  return out;
}

struct KeyRow {
  std::string key;  // e.g. "queues.<name>.concurrency"
  std::string type;
  std::string default_value;  // JSON text, or "(none)"
  std::string range;
};

// The rows of the table under "## Keys" in docs/configuration.md.
std::vector<KeyRow> documented_keys() {
  std::istringstream doc(read_source("docs/configuration.md"));
  std::vector<KeyRow> rows;
  bool in_section = false;
  for (std::string line; std::getline(doc, line);) {
    if (line.starts_with("## ")) in_section = line == "## Keys";
    if (!in_section || !line.starts_with("| `")) continue;
    const auto c = cells(line);
    REQUIRE_MESSAGE(c.size() == 5, "a row of the key table needs 5 cells: " << line);
    rows.push_back({unquote(c[0]), c[1], unquote(c[2]), c[3]});
  }
  REQUIRE_MESSAGE(!rows.empty(), "docs/configuration.md has no key table under \"## Keys\"");
  return rows;
}

constexpr const char* kQueue = "q";  // the queue name that stands for <name>

// "queues.<name>.backoff.base" -> the JSON pointer "/queues/q/backoff/base".
std::string pointer_of(const std::string& key) {
  std::string pointer;
  std::istringstream parts(key);
  for (std::string part; std::getline(parts, part, '.');) pointer += "/" + (part == "<name>" ? kQueue : part);
  return pointer;
}

// A configuration document that sets only `key` to `value`.
json document_with(const std::string& key, const json& value) {
  json document = json::object();
  document[json::json_pointer(pointer_of(key))] = value;
  // A lease is a key of lease-mode queues only (elsewhere it is refused as meaningless).
  if (key == "queues.<name>.lease" || key == "queues.<name>.connections") {
    document[json::json_pointer(pointer_of("queues.<name>.mode"))] = "lease";
  }
  // Limits are a lease queue's; a per-key limit needs a key.
  if (key.starts_with("queues.<name>.limits")) document[json::json_pointer(pointer_of("queues.<name>.mode"))] = "lease";
  if (key == "queues.<name>.limits.per_key_concurrency" || key == "queues.<name>.limits.per_key_rate") {
    document[json::json_pointer(pointer_of("queues.<name>.limits.key"))] = "/k";
  }
  // Connections are at most the concurrency: enough of it for the whole range.
  if (key == "queues.<name>.connections") document[json::json_pointer(pointer_of("queues.<name>.concurrency"))] = 16;
  return document;
}

// Every field of a Config, for comparing two of them.
json describe(const oncely::AlarmConfig& a) {
  const auto ms = [](const std::optional<std::chrono::milliseconds>& d) { return d ? json(d->count()) : json(); };
  return {
      {"dead_letters_warning", a.dead_letters_warning ? json(*a.dead_letters_warning) : json()},
      {"dead_letters_critical", a.dead_letters_critical ? json(*a.dead_letters_critical) : json()},
      {"failure_rate_warning", a.failure_rate_warning ? json(*a.failure_rate_warning) : json()},
      {"failure_rate_critical", a.failure_rate_critical ? json(*a.failure_rate_critical) : json()},
      {"failure_rate_min_attempts", a.failure_rate_min_attempts},
      {"max_age_warning", ms(a.max_age_warning)},
      {"max_age_critical", ms(a.max_age_critical)},
      {"dead_letter_growth_warning", a.dead_letter_growth_warning ? json(*a.dead_letter_growth_warning) : json()},
      {"dead_letter_growth_critical", a.dead_letter_growth_critical ? json(*a.dead_letter_growth_critical) : json()}};
}

json describe(const QueueConfig& q) {
  json schedule = json::array();
  for (const auto d : q.backoff.schedule) schedule.push_back(d.count());
  return {{"mode", static_cast<int>(q.mode)},
          {"lease", q.lease.count()},
          {"connections", q.connections},
          {"concurrency", q.concurrency},
          {"batch_size", q.batch_size},
          {"max_attempts", q.max_attempts},
          {"backoff",
           {{"base", q.backoff.base.count()},
            {"cap", q.backoff.cap.count()},
            {"jitter", static_cast<int>(q.backoff.jitter)},
            {"schedule", schedule}}},
          {"rate_limit_per_sec", q.rate_limit_per_sec},
          {"job_timeout", q.job_timeout.count()},
          {"poll_interval", q.poll_interval.count()},
          {"alarms", describe(q.alarms)},
          {"limits",
           {{"concurrency", q.limits && q.limits->concurrency ? json(*q.limits->concurrency) : json()},
            {"key", q.limits && q.limits->key ? json(*q.limits->key) : json()},
            {"per_key_concurrency",
             q.limits && q.limits->per_key_concurrency ? json(*q.limits->per_key_concurrency) : json()},
            {"rate", q.limits && q.limits->rate ? json(q.limits->rate->count) : json()},
            {"per_key_rate", q.limits && q.limits->per_key_rate ? json(q.limits->per_key_rate->count) : json()}}}};
}

json describe(const Config& c) {
  json queues = json::object();
  for (const auto& [name, queue] : c.queues) queues[name] = describe(queue);
  return {{"shutdown_grace", c.shutdown_grace.count()},
          {"dedup_window", c.dedup_window.count()},
          {"prepared_statements", c.prepared_statements},
          {"stack_traces", static_cast<int>(c.stack_traces)},
          {"handlers", c.handlers},
          {"cron", c.cron.size()},  // its entries' keys: docs/configuration.md#periodic-jobs-cron
          {"queues", queues}};
}

// What Config::parse says: "" when it accepts the document, else the error's path.
std::optional<std::string> rejection(const json& document) {
  try {
    Config::parse(document);
    return std::nullopt;
  } catch (const oncely::ConfigError& e) {
    return e.path().empty() ? std::string("(no path)") : e.path();
  }
}

json duration_value(const KeyRow& row, std::chrono::milliseconds d) {
  const json text = oncely::detail::format_duration(d);
  return row.type == "array of durations" ? json::array({text}) : text;
}

void check_accepted(const KeyRow& row, const json& value) {
  const auto error = rejection(document_with(row.key, value));
  CHECK_MESSAGE(!error, row.key << " = " << value.dump() << " is in the documented range " << row.range
                                << " but the parser refuses it (at " << error.value_or("") << ")");
}

void check_refused(const KeyRow& row, const json& value) {
  const auto error = rejection(document_with(row.key, value));
  CHECK_MESSAGE(error.has_value(), row.key << " = " << value.dump() << " is outside the documented range " << row.range
                                           << " but the parser accepts it");
  if (error) {
    CHECK_MESSAGE(error->starts_with(pointer_of(row.key)), row.key << " = " << value.dump() << " is refused at "
                                                                   << *error << ", not at " << pointer_of(row.key));
  }
}

// Checks the range cell's bounds against the parser: both ends accepted, just beyond refused.
void check_range(const KeyRow& row) {
  static const std::regex between(R"(^(?:each )?(\S+) – (\S+)$)");
  static const std::regex zero_or_between(R"(^0, or (\S+) – (\S+)$)");
  std::smatch m;
  if (row.range.empty() || row.type == "object") return;  // shapes, checked by the parser's own tests
  if (row.type == "integer" && std::regex_match(row.range, m, between)) {
    const long min = std::stol(m[1]);
    const long max = std::stol(m[2]);
    check_accepted(row, min);
    check_accepted(row, max);
    check_refused(row, min - 1);
    check_refused(row, max + 1);
  } else if (row.type.find("duration") != std::string::npos && std::regex_match(row.range, m, between)) {
    const auto min = oncely::detail::parse_duration(m[1].str());
    const auto max = oncely::detail::parse_duration(m[2].str());
    check_accepted(row, duration_value(row, min));
    check_accepted(row, duration_value(row, max));
    if (min.count() > 0) check_refused(row, duration_value(row, min - std::chrono::milliseconds(1)));
    check_refused(row, duration_value(row, max + std::chrono::milliseconds(1)));
  } else if (row.type == "number" && std::regex_match(row.range, m, zero_or_between)) {
    const double min = std::stod(m[1]);
    const double max = std::stod(m[2]);
    check_accepted(row, 0);
    check_accepted(row, min);
    check_accepted(row, max);
    check_refused(row, min / 2);
    check_refused(row, max + 1);
    check_refused(row, -1);
  } else if (row.type == "boolean" && row.range == "true, false") {
    check_accepted(row, true);
    check_accepted(row, false);
    check_refused(row, "true");
  } else if (row.type == "string") {
    const json choices = json::parse("[" + row.range + "]");  // "full", "equal", "none"
    for (const auto& choice : choices) check_accepted(row, choice);
    check_refused(row, "not-one-of-them");
  } else {
    FAIL_CHECK(row.key << ": the test cannot read the range \"" << row.range << "\" of a " << row.type);
  }
}

// The data members of `struct name` in a header, by name ("int concurrency = 4;").
std::set<std::string> struct_fields(const std::string& header, const std::string& name) {
  const auto begin = header.find("struct " + name + " {");
  REQUIRE_MESSAGE(begin != std::string::npos, "struct " << name << " not found in include/oncely/config.hpp");
  const auto end = header.find("\n};", begin);
  std::istringstream body(header.substr(begin, end - begin));
  static const std::regex member(R"(^\s+([A-Za-z_][\w:]*(<[^;()]*>)?)\s+(\w+)\s*(=|\{|;))");
  std::set<std::string> fields;
  for (std::string line; std::getline(body, line);) {
    std::smatch m;
    if (std::regex_search(line, m, member) && m[1] != "static" && m[1] != "enum" && m[1] != "return") {
      fields.insert(m[3]);
    }
  }
  return fields;
}

}  // namespace

TEST_CASE("docs/configuration.md: every key's default is the code's, and the parser accepts it") {
  for (const KeyRow& row : documented_keys()) {
    CAPTURE(row.key);
    if (row.default_value == "(none)") continue;
    json value;
    REQUIRE_NOTHROW(value = json::parse(row.default_value));
    const auto error = rejection(document_with(row.key, value));
    REQUIRE_MESSAGE(!error, row.key << ": the parser refuses the documented default " << row.default_value << " (at "
                                    << error.value_or("") << ")");
    // The default stated in the table gives the same configuration as leaving the key out.
    Config expected;
    if (row.key.starts_with("queues.<name>.")) expected.queues = {{kQueue, QueueConfig{}}};
    if (row.key == "queues.<name>.lease" || row.key == "queues.<name>.connections") {
      expected.queues[kQueue].mode = QueueConfig::Mode::lease;  // see document_with
    }
    if (row.key == "queues.<name>.connections") expected.queues[kQueue].concurrency = 16;
    const Config parsed = Config::parse(document_with(row.key, value));
    CHECK_MESSAGE(describe(parsed) == describe(expected),
                  row.key << ": the table says the default is " << row.default_value << ", but leaving it out gives "
                          << describe(expected).dump() << ", not " << describe(parsed).dump());
  }
}

TEST_CASE("docs/configuration.md: every documented range is the one Config::validate enforces") {
  for (const KeyRow& row : documented_keys()) {
    CAPTURE(row.key);
    check_range(row);
  }
}

TEST_CASE("docs/configuration.md: every field of the Config structs is documented") {
  const std::string header = read_source("include/oncely/config.hpp");
  std::set<std::string> keys;
  for (const KeyRow& row : documented_keys()) keys.insert(row.key);
  const std::string config_doc = read_source("docs/configuration.md");

  // Fields that come from the environment, never from the file: the Environment table.
  const std::map<std::string, std::string> from_environment{{"database_url", "DATABASE_URL"},
                                                            {"listen_database_url", "ONCELY_LISTEN_DATABASE_URL"},
                                                            {"schema", "ONCELY_SCHEMA"}};
  std::set<std::string> expected;
  for (const auto& field : struct_fields(header, "Config")) {
    if (const auto env = from_environment.find(field); env != from_environment.end()) {
      CHECK_MESSAGE(config_doc.find("| `" + env->second + "` |") != std::string::npos,
                    "Config::" << field << " comes from " << env->second << ", which the Environment table lacks");
      CHECK_MESSAGE(rejection(document_with(field, "x")) == std::optional<std::string>("/" + field),
                    "Config::" << field << " is documented as environment-only but the file accepts it");
      continue;
    }
    expected.insert(field);
  }
  for (const auto& field : struct_fields(header, "QueueConfig")) expected.insert("queues.<name>." + field);
  for (const auto& field : struct_fields(header, "BackoffConfig")) expected.insert("queues.<name>.backoff." + field);
  for (const auto& field : struct_fields(header, "AlarmConfig")) expected.insert("queues.<name>.alarms." + field);
  for (const auto& field : struct_fields(header, "QueueLimits")) expected.insert("queues.<name>.limits." + field);
  CHECK(expected.size() >= 15);  // the parse of the header found the fields
  // describe() compares defaults field by field: it must know every field, or a new one's
  // documented default would go unchecked.
  std::set<std::string> described;
  const json whole = describe(Config{});
  const json queue = describe(QueueConfig{});
  for (const auto& [key, value] : whole.items()) described.insert(key);
  for (const auto& [key, value] : queue.items()) described.insert("queues.<name>." + key);
  for (const auto& [key, value] : queue["backoff"].items()) described.insert("queues.<name>.backoff." + key);
  for (const auto& [key, value] : queue["alarms"].items()) described.insert("queues.<name>.alarms." + key);
  for (const auto& [key, value] : queue["limits"].items()) described.insert("queues.<name>.limits." + key);
  CHECK_MESSAGE(described == expected, "describe() in this test must cover every field of the Config structs");
  for (const auto& key : expected)
    CHECK_MESSAGE(keys.count(key) == 1, "no row for " << key << " in docs/configuration.md");
  for (const auto& key : keys)
    CHECK_MESSAGE(expected.count(key) == 1,
                  "docs/configuration.md documents " << key << ", which no Config field holds");
}

namespace {

// docs/cli.md's sections by command: "## oncely dlq" and "### oncely dlq list" hold the
// text up to the next heading of level 2 or 3; "## oncely: global options" is the root's
// ("oncely").
std::map<std::string, std::string> cli_sections() {
  std::istringstream doc(read_source("docs/cli.md"));
  std::map<std::string, std::string> sections;
  std::string current;
  static const std::regex heading(R"(^#{2,3} `?(oncely[a-z -]*?)`?(:.*)?$)");
  for (std::string line; std::getline(doc, line);) {
    std::smatch m;
    if (line.starts_with("## ") || line.starts_with("### ")) {
      current = std::regex_match(line, m, heading) ? m[1].str() : std::string();
      continue;
    }
    if (!current.empty()) sections[current] += line + "\n";
  }
  return sections;
}

void check_command(const CLI::App& command, const std::string& path, const std::vector<std::string>& inherited,
                   const std::map<std::string, std::string>& sections, std::set<std::string>& seen) {
  seen.insert(path);
  const auto section = sections.find(path);
  REQUIRE_MESSAGE(section != sections.end(), "docs/cli.md has no section \"## " << path << "\"");
  // An option may be described in its command's section or in an ancestor's (dlq's filters).
  std::vector<std::string> texts = inherited;
  texts.push_back(section->second);
  for (const CLI::Option* option : command.get_options()) {
    std::vector<std::string> names;
    for (const auto& name : option->get_lnames()) names.push_back("--" + name);
    if (names.empty() && option->get_positional()) names.push_back(option->get_name(true));
    for (const auto& name : names) {
      if (name == "--help") continue;
      bool found = false;
      for (const auto& text : texts) found = found || text.find("`" + name) != std::string::npos;
      CHECK_MESSAGE(found, "docs/cli.md: the section of `" << path << "` does not describe " << name);
    }
  }
  for (const CLI::App* sub : command.get_subcommands({})) {
    check_command(*sub, path + " " + sub->get_name(), texts, sections, seen);
  }
}

}  // namespace

TEST_CASE("docs/cli.md: a section for every command, naming each of its options") {
  const auto cli = oncely::cli::make_app();
  const auto sections = cli_sections();
  std::set<std::string> seen;
  check_command(cli->app, "oncely", {}, sections, seen);
  CHECK(seen.size() >= 11);  // oncely, six commands, four dlq subcommands
  for (const auto& [path, text] : sections) {
    CHECK_MESSAGE(seen.count(path) == 1, "docs/cli.md has a section for `" << path << "`, which is no command");
  }
}

TEST_CASE("docs/console.md: its screenshots are in docs/images, and no copy of one lies in tests/") {
  const std::filesystem::path source(ONCELY_SOURCE_DIR);
  const std::string console = read_source("docs/console.md");
  const std::regex image(R"(\]\(images/([^)]+\.png)\))");
  std::set<std::string> shots;
  for (auto it = std::sregex_iterator(console.begin(), console.end(), image); it != std::sregex_iterator(); ++it) {
    shots.insert((*it)[1].str());
  }
  CHECK(shots.size() >= 3);
  for (const std::string& shot : shots) {
    CHECK_MESSAGE(std::filesystem::exists(source / "docs" / "images" / shot), "docs/images/" << shot << " is missing");
  }
  // The browser test writes them to docs/images only when asked to, otherwise into the
  // build tree (ONCELY_SCREENSHOT_DIR) or a temporary directory.
  auto it = std::filesystem::recursive_directory_iterator(source / "tests");
  for (; it != std::filesystem::recursive_directory_iterator(); ++it) {
    if (it->path().filename() == "node_modules") {
      it.disable_recursion_pending();
      continue;
    }
    CHECK_MESSAGE(shots.count(it->path().filename().string()) == 0,
                  "a stray copy of a screenshot: " << std::filesystem::relative(it->path(), source).string());
  }
}

// The README's tour and the CLI reference print what `oncely migrate` prints today: the
// schema version in their examples is this binary's (the tour once said "version 6" at 16).
TEST_CASE("README.md and docs/cli.md: every example schema version is this binary's") {
  const std::string latest = std::to_string(oncely::latest_schema_version());
  const std::regex version(R"((migrated to version|up to date at version|this worker needs) (\d+))");
  int examples = 0;
  for (const char* file : {"README.md", "docs/cli.md"}) {
    const std::string text = read_source(file);
    for (auto it = std::sregex_iterator(text.begin(), text.end(), version); it != std::sregex_iterator(); ++it) {
      CAPTURE(file);
      CAPTURE((*it)[0].str());
      CHECK((*it)[2].str() == latest);
      ++examples;
    }
  }
  CHECK(examples >= 3);
}

TEST_CASE("docs/internals.md: every file and symbol its map of the source names exists") {
  // The rows of the table under "## Map of the source": the second cell says where. A
  // backticked path (it has a '/') must exist; a backticked name (`JobsTable::claim`,
  // `decide()`, `kClaimTemplate`) must be spelled, each part of it, in one of the files the
  // same row names.
  std::istringstream doc(read_source("docs/internals.md"));
  std::string line;
  while (std::getline(doc, line) && line != "## Map of the source") {
  }
  REQUIRE_MESSAGE(doc, "docs/internals.md has no \"## Map of the source\"");
  const std::regex code("`([^`]+)`");
  const std::regex name("[A-Za-z_][A-Za-z0-9_]*(::[A-Za-z_][A-Za-z0-9_]*)*(\\(\\))?");
  int rows = 0;
  int symbols = 0;
  while (std::getline(doc, line) && !line.starts_with("|")) {
  }  // the map is the section's first table
  for (; doc && line.starts_with("|"); std::getline(doc, line)) {
    if (line.starts_with("| what") || line.starts_with("|---")) continue;
    const std::size_t second = line.find(" | ");
    REQUIRE(second != std::string::npos);
    const std::string where = line.substr(second + 3);
    std::vector<std::string> texts;
    std::vector<std::string> names;
    for (auto it = std::sregex_iterator(where.begin(), where.end(), code); it != std::sregex_iterator(); ++it) {
      const std::string token = (*it)[1];
      if (token.find('/') != std::string::npos) {
        CHECK_MESSAGE(std::filesystem::exists(std::filesystem::path(ONCELY_SOURCE_DIR) / token),
                      "docs/internals.md's map names " << token << ", which does not exist");
        if (std::filesystem::is_regular_file(std::filesystem::path(ONCELY_SOURCE_DIR) / token)) {
          texts.push_back(read_source(token));
        }
      } else if (std::regex_match(token, name)) {
        names.push_back(token);
      }
    }
    ++rows;
    for (const std::string& n : names) {
      std::string bare = n.ends_with("()") ? n.substr(0, n.size() - 2) : n;
      for (std::size_t from = 0;;) {
        const std::size_t sep = bare.find("::", from);
        const std::string part = bare.substr(from, sep == std::string::npos ? std::string::npos : sep - from);
        const bool found = std::any_of(texts.begin(), texts.end(),
                                       [&](const std::string& t) { return t.find(part) != std::string::npos; });
        CHECK_MESSAGE(found, "docs/internals.md's map names " << n << ", but " << part
                                                              << " is in none of the files its row names");
        ++symbols;
        if (sep == std::string::npos) break;
        from = sep + 2;
      }
    }
  }
  CHECK(rows >= 10);
  CHECK(symbols >= 20);
}

// `oncely dlq list|show|replay|purge`: the weekly dead-letter review. Find the error
// pattern (list --group-by error), look at examples (show --id), fix, then replay.
#include <algorithm>
#include <ostream>
#include <random>

#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "cli/cli_numbers.hpp"
#include "cli/table.hpp"
#include "oncely/dead_letters.hpp"
#include "oncely/errors.hpp"
#include "support/duration.hpp"
#include "support/exact_json.hpp"

namespace oncely::cli {
namespace {

// --limit of every subcommand.
constexpr IntegerRule kRows{"a number of rows, 0 for all", 0, kMaxId};

void add_filters(CLI::App* sub, DlqOptions& o) {
  sub->add_option("--id", o.ids, "dead-letter id; repeat it (or give 1,2,3) for several")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->transform(integer(kDeadLetterId));
  sub->add_option("--job-id", o.job_ids,
                  "job id, as the worker's log prints it: the job that failed, or the job a replay enqueued")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->transform(integer(kJobId));
  sub->add_option("--queue", o.queue, "source queue");
  sub->add_option("--kind", o.kind, "job kind");
  sub->add_option("--class", o.error_class, "error class: permanent, exhausted, unknown_kind, timeout, crashed...");
  sub->add_option("--error", o.error, "TEXT found in the last error (case-insensitive)");
  sub->add_option("--older-than", o.older_than, "failed more than DURATION ago (e.g. 7d)")->type_name("DURATION");
  sub->add_option("--newer-than", o.newer_than, "failed less than DURATION ago (e.g. 1h)")->type_name("DURATION");
  sub->add_flag("--all", o.all, "select every dead letter (replay and purge refuse to run without a filter)");
}

void on_parse(CLI::App* sub, DlqOptions& o, DlqAction action) {
  sub->parse_complete_callback([&o, action] { o.action = action; });
}

std::optional<std::chrono::milliseconds> duration_option(const std::optional<std::string>& text, const char* name) {
  if (!text) return std::nullopt;
  try {
    return detail::parse_duration(*text);
  } catch (const ConfigError& e) {
    throw ConfigError(name, e.what());
  }
}

std::optional<std::string> text_option(const std::optional<std::string>& text, const char* name) {
  if (text && text->empty()) throw ConfigError(name, "must not be empty");
  return text;
}

DeadLetterFilter make_filter(const DlqOptions& o) {
  DeadLetterFilter f;
  f.ids = o.ids;
  f.job_ids = o.job_ids;
  f.queue = text_option(o.queue, "--queue");
  f.kind = text_option(o.kind, "--kind");
  f.error_class = text_option(o.error_class, "--class");
  f.error_text = text_option(o.error, "--error");
  f.older_than = duration_option(o.older_than, "--older-than");
  f.newer_than = duration_option(o.newer_than, "--newer-than");
  f.all = o.all;
  return f;
}

std::string plural(long n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

/// "2025-03-01T09:30:00.123456Z" -> "2025-03-01 09:30:00".
std::string short_time(const std::string& iso) {
  std::string t = iso.substr(0, 19);
  if (t.size() > 10 && t[10] == 'T') t[10] = ' ';
  return t;
}

void print_dead_letters(std::ostream& out, const DeadLetterList& list, bool replay_column) {
  std::vector<std::string> header{"ID", "FAILED (UTC)", "QUEUE", "KIND", "CLASS", "ATTEMPTS"};
  if (replay_column) header.emplace_back("REPLAYED AS");
  header.emplace_back("LAST ERROR");
  std::vector<std::vector<std::string>> rows;
  for (const DeadLetter& d : list.dead_letters) {
    std::vector<std::string> row{std::to_string(d.id), short_time(d.failed_at), cell(d.queue, 24),
                                 cell(d.kind, 32),     cell(d.error_class, 16), std::to_string(d.attempts)};
    if (replay_column) row.push_back(d.replayed_job_id ? "job " + std::to_string(*d.replayed_job_id) : "-");
    row.push_back(cell(d.last_error.value_or(""), 80));
    rows.push_back(std::move(row));
  }
  print_table(out, header, rows);
}

void print_truncation(std::ostream& out, std::size_t shown, long total) {
  if (static_cast<long>(shown) < total) {
    out << "(showing " << shown << " of " << total << "; --limit N shows more, --limit 0 all)\n";
  }
}

// Output objects keep their fields in the order written here (id first), not sorted.
using Json = nlohmann::ordered_json;

Json optional_json(const auto& value) { return value ? Json(*value) : Json(); }

Json to_json(const DeadLetter& d, bool details) {
  Json j = {{"id", d.id},
            {"job_id", d.job_id},
            {"queue", d.queue},
            {"kind", d.kind},
            {"idempotency_key", optional_json(d.idempotency_key)},
            {"priority", d.priority},
            {"attempts", d.attempts},
            {"max_attempts", optional_json(d.max_attempts)},
            {"error_class", d.error_class},
            {"last_error", optional_json(d.last_error)},
            {"created_at", d.created_at},
            {"failed_at", d.failed_at},
            {"replayed_at", optional_json(d.replayed_at)},
            {"replayed_job_id", optional_json(d.replayed_job_id)},
            {"key_processed", d.key_processed}};
  if (details) {
    j["payload"] = Json(d.payload);
    j["errors"] = Json(d.errors);
    j["error_detail"] = Json(d.error_detail);
  }
  return j;
}

/// JSON out of database text: a value that is not valid UTF-8 is replaced, never thrown.
std::string dump(const Json& j, int indent) { return j.dump(indent, ' ', false, Json::error_handler_t::replace); }

/// The dead letters with their details as JSON, each payload exactly as the database holds
/// it (nlohmann would round 12345678901234567.89 and cannot hold 1e400): the payloads go in
/// as placeholders, replaced in the text by their compact JSON.
std::string dump_with_exact_payloads(const std::vector<DeadLetter>& dead_letters) {
  // A control character is written as \u00XX, and a nonce makes the placeholder one that
  // no text of the dead letters (last_error is anyone's) can spell by chance.
  const std::string nonce = std::to_string(std::random_device{}()) + std::to_string(std::random_device{}());
  const auto placeholder = [&](std::size_t i, bool escaped) {
    const std::string mark = escaped ? "\\u0001" : "\x01";
    return mark + "oncely-payload-" + nonce + "-" + std::to_string(i) + mark;
  };
  Json array = Json::array();
  for (std::size_t i = 0; i < dead_letters.size(); ++i) {
    Json j = to_json(dead_letters[i], true);
    j["payload"] = placeholder(i, false);
    array.push_back(std::move(j));
  }
  std::string text = dump(array, 2);
  for (std::size_t i = 0; i < dead_letters.size(); ++i) {
    const std::string from = "\"" + placeholder(i, true) + "\"";
    const std::size_t at = text.find(from);
    if (at == std::string::npos) continue;
    const std::string& payload = dead_letters[i].payload_text;
    text.replace(at, from.size(), payload.empty() ? std::string("null") : detail::exact_json::compact(payload));
  }
  return text;
}

void warn_key_processed(std::ostream& err, std::int64_t dead_letter_id, const std::string& kind,
                        const std::optional<std::string>& key, std::optional<std::int64_t> job_id) {
  err << "oncely: warning: dead letter " << dead_letter_id;
  if (job_id) err << " (job " << *job_id << ")";
  err << ": key \"" << cell(key.value_or(""), 80) << "\" of kind \"" << cell(kind, 80)
      << "\" was processed since it failed; the job " << (job_id ? "will be" : "would be")
      << " skipped as a duplicate\n";
}

int run_list(const DlqOptions& o, DeadLetterFilter filter, const Globals& g, Io io) {
  // An id names one row: show it, replayed or not.
  filter.include_replayed = o.include_replayed || !o.ids.empty() || !o.job_ids.empty();
  const DatabaseUrl url(g.database_url);
  if (o.group_by) {
    const DeadLetterGrouping by = parse_dead_letter_grouping(*o.group_by);
    const DeadLetterGroups groups = group_dead_letters(url, g.schema, filter, by, o.limit);
    if (o.json) {
      Json array = Json::array();
      for (const DeadLetterGroup& group : groups.groups) {
        array.push_back({{"group_by", std::string(to_string(by))},
                         {"key", group.key},
                         {"count", group.count},
                         {"first_failed_at", group.first_failed_at},
                         {"last_failed_at", group.last_failed_at},
                         {"example_id", group.example_id},
                         {"example_error", optional_json(group.example_error)}});
      }
      io.out << dump(array, 2) << "\n";
      return kExitOk;
    }
    if (groups.groups.empty()) {
      io.out << "no dead letters match\n";
      return kExitOk;
    }
    const std::string key_header = by == DeadLetterGrouping::error         ? "LAST ERROR (numbers as #)"
                                   : by == DeadLetterGrouping::error_class ? "CLASS"
                                   : by == DeadLetterGrouping::kind        ? "KIND"
                                                                           : "QUEUE";
    std::vector<std::vector<std::string>> rows;
    for (const DeadLetterGroup& group : groups.groups) {
      rows.push_back({std::to_string(group.count), short_time(group.first_failed_at), short_time(group.last_failed_at),
                      std::to_string(group.example_id), cell(group.key, 100)});
    }
    print_table(io.out, {"COUNT", "FIRST (UTC)", "LAST (UTC)", "EXAMPLE", key_header}, rows);
    if (static_cast<long>(groups.groups.size()) < groups.total_groups) {
      io.out << "(showing the " << groups.groups.size() << " largest of " << groups.total_groups
             << " groups; --limit N shows more, --limit 0 all)\n";
    }
    return kExitOk;
  }

  const DeadLetterList list = list_dead_letters(url, g.schema, filter, o.limit, /*details=*/false);
  if (o.json) {
    Json array = Json::array();
    for (const DeadLetter& d : list.dead_letters) array.push_back(to_json(d, false));
    io.out << dump(array, 2) << "\n";
    if (static_cast<long>(list.dead_letters.size()) < list.total) {
      io.err << "oncely: showing " << list.dead_letters.size() << " of " << list.total
             << " dead letters; --limit 0 shows all\n";
    }
    return kExitOk;
  }
  if (list.dead_letters.empty()) {
    io.out << "no dead letters match\n";
    return kExitOk;
  }
  print_dead_letters(io.out, list, filter.include_replayed);
  print_truncation(io.out, list.dead_letters.size(), list.total);
  return kExitOk;
}

// Logs print job ids, and `--id` takes dead-letter ids: an --id that names no dead letter
// but is a dead letter's job id gets a hint instead of an empty answer.
int no_such_dead_letter(const DlqOptions& o, const DeadLetterFilter& filter, const Globals& g, Io io) {
  DeadLetterFilter as_jobs;
  as_jobs.job_ids = filter.ids;
  as_jobs.include_replayed = true;
  const bool are_job_ids =
      list_dead_letters(DatabaseUrl(g.database_url), g.schema, as_jobs, 1, /*details=*/false).total > 0;
  std::string ids;
  for (const std::int64_t id : o.ids) ids += (ids.empty() ? "" : ",") + std::to_string(id);
  io.err << "oncely: error: no dead letter " << ids
         << (are_job_ids ? "; did you mean --job-id " + ids + "? (--id takes dead-letter ids)" : "") << "\n";
  return kExitFailure;
}

int run_show(const DlqOptions& o, DeadLetterFilter filter, const Globals& g, Io io) {
  filter.include_replayed = o.include_replayed || !o.ids.empty() || !o.job_ids.empty();
  const DeadLetterList list =
      list_dead_letters(DatabaseUrl(g.database_url), g.schema, filter, o.limit, /*details=*/true);
  if (list.dead_letters.empty() && !o.ids.empty()) return no_such_dead_letter(o, filter, g, io);
  io.out << dump_with_exact_payloads(list.dead_letters) << "\n";
  if (static_cast<long>(list.dead_letters.size()) < list.total) {
    io.err << "oncely: showing " << list.dead_letters.size() << " of " << list.total
           << " dead letters; --limit 0 shows all\n";
  }
  return kExitOk;
}

int run_replay(const DlqOptions& o, DeadLetterFilter filter, const Globals& g, Io io) {
  if (o.to_queue && o.to_queue->empty()) throw ConfigError("--to-queue", "must not be empty");
  const DatabaseUrl url(g.database_url);
  const std::string destination = o.to_queue ? " to queue " + *o.to_queue : "";
  if (o.dry_run) {
    filter.include_replayed = false;
    const DeadLetterList pending = list_dead_letters(url, g.schema, filter, o.limit, false);
    filter.include_replayed = true;
    const long selected = list_dead_letters(url, g.schema, filter, 1, false).total;
    io.out << "dry run: would replay " << plural(pending.total, "dead letter", "dead letters") << destination
           << "; nothing was changed\n";
    if (!pending.dead_letters.empty()) {
      print_dead_letters(io.out, pending, false);
      print_truncation(io.out, pending.dead_letters.size(), pending.total);
    }
    if (selected > pending.total) {
      io.out << plural(selected - pending.total, "dead letter was", "dead letters were")
             << " already replayed and would be skipped\n";
    }
    for (const DeadLetter& d : pending.dead_letters) {
      if (d.key_processed) warn_key_processed(io.err, d.id, d.kind, d.idempotency_key, std::nullopt);
    }
    return kExitOk;
  }

  const ReplayResult result = replay_dead_letters(url, g.schema, filter, o.to_queue);
  io.out << "replayed " << plural(static_cast<long>(result.replayed.size()), "dead letter", "dead letters")
         << destination << (result.replayed.empty() ? "\n" : ":\n");
  for (const ReplayedDeadLetter& r : result.replayed) {
    io.out << "  dead letter " << r.dead_letter_id << " -> job " << r.job_id << " (queue " << r.queue << ", kind "
           << r.kind << ")\n";
  }
  if (result.already_replayed > 0) {
    io.out << "skipped " << plural(result.already_replayed, "dead letter", "dead letters") << " already replayed:";
    for (const auto& [dead_letter_id, job_id] : result.already_replayed_sample) {
      io.out << " " << dead_letter_id << " (as job " << job_id << ")";
    }
    if (result.already_replayed > static_cast<long>(result.already_replayed_sample.size())) io.out << " ...";
    io.out << "\n";
  }
  for (const ReplayedDeadLetter& r : result.replayed) {
    if (r.key_processed) warn_key_processed(io.err, r.dead_letter_id, r.kind, r.idempotency_key, r.job_id);
  }
  return kExitOk;
}

int run_purge(const DlqOptions& o, DeadLetterFilter filter, const Globals& g, Io io) {
  const DatabaseUrl url(g.database_url);
  if (o.dry_run) {
    filter.include_replayed = true;
    const DeadLetterList selected = list_dead_letters(url, g.schema, filter, o.limit, false);
    io.out << "dry run: would purge " << plural(selected.total, "dead letter", "dead letters")
           << "; nothing was changed\n";
    if (!selected.dead_letters.empty()) {
      print_dead_letters(io.out, selected, true);
      print_truncation(io.out, selected.dead_letters.size(), selected.total);
    }
    return kExitOk;
  }
  const long purged = purge_dead_letters(url, g.schema, filter);  // before anything is printed
  io.out << "purged " << plural(purged, "dead letter", "dead letters") << "\n";
  return kExitOk;
}

}  // namespace

void add_dlq(Cli& cli) {
  DlqOptions& o = cli.dlq;
  CLI::App* dlq = cli.app.add_subcommand("dlq", "dead letters: list, show, replay, purge");
  dlq->require_subcommand(1);
  dlq->fallthrough();
  dlq->footer(
      "Filters (on every subcommand): --id, --queue, --kind, --class, --error, --older-than, --newer-than, --all. "
      "replay and purge refuse to run without one.");

  CLI::App* list = dlq->add_subcommand("list", "list dead letters, newest first (only those not yet replayed)");
  add_filters(list, o);
  list->add_flag("--include-replayed", o.include_replayed, "also list dead letters already replayed");
  list->add_flag("--json", o.json, "print a JSON array");
  list->add_option("--group-by", o.group_by,
                   "count by error (messages differing only in numbers group together), class, kind or queue; "
                   "most frequent first")
      ->check(CLI::IsMember({"error", "class", "kind", "queue"}));
  list->add_option("--limit", o.limit, "at most N rows (groups with --group-by); 0: all")
      ->capture_default_str()
      ->transform(integer(kRows));
  on_parse(list, o, DlqAction::list);

  CLI::App* show = dlq->add_subcommand(
      "show", "everything about the selected dead letters (payload, error history, detail) as JSON");
  add_filters(show, o);
  show->add_flag("--include-replayed", o.include_replayed,
                 "also show dead letters already replayed (--id always does)");
  show->add_option("--limit", o.limit, "at most N dead letters; 0: all")
      ->capture_default_str()
      ->transform(integer(kRows));
  on_parse(show, o, DlqAction::show);

  CLI::App* replay = dlq->add_subcommand(
      "replay",
      "enqueue the selected dead letters again as new jobs (attempts reset), atomically; a dead letter is "
      "replayed at most once");
  add_filters(replay, o);
  replay->add_option("--to-queue", o.to_queue, "enqueue to queue Q instead of each dead letter's own");
  replay->add_flag("--dry-run", o.dry_run, "show what would be replayed; change nothing");
  replay->add_option("--limit", o.limit, "rows --dry-run shows; 0: all")
      ->capture_default_str()
      ->transform(integer(kRows));
  on_parse(replay, o, DlqAction::replay);

  CLI::App* purge = dlq->add_subcommand("purge", "delete the selected dead letters (replayed or not)");
  add_filters(purge, o);
  purge->add_flag("--dry-run", o.dry_run, "show what would be purged; change nothing");
  purge->add_option("--limit", o.limit, "rows --dry-run shows; 0: all")
      ->capture_default_str()
      ->transform(integer(kRows));
  on_parse(purge, o, DlqAction::purge);

  cli.dlq_cmd = dlq;
}

int run_dlq(const DlqOptions& o, const Globals& globals, Io io) {
  // Everything about the request is checked before connecting.
  const DeadLetterFilter filter = make_filter(o);
  switch (o.action) {
    case DlqAction::list: return run_list(o, filter, globals, io);
    case DlqAction::show: return run_show(o, filter, globals, io);
    case DlqAction::replay:
      if (filter.empty() && !filter.all) {
        throw ConfigError("", "refusing to replay every dead letter: give a filter or --all");
      }
      return run_replay(o, filter, globals, io);
    case DlqAction::purge:
      if (filter.empty() && !filter.all) {
        throw ConfigError("", "refusing to purge every dead letter: give a filter or --all");
      }
      return run_purge(o, filter, globals, io);
    case DlqAction::none: break;
  }
  throw ConfigError("dlq", "give a subcommand: list, show, replay or purge");
}

}  // namespace oncely::cli

// `oncely jobs list|show|cancel`: what is waiting, why a job keeps retrying, and taking
// jobs out (to dead_letters, replayable) before they run.
#include <cmath>
#include <ostream>

#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "cli/cli_numbers.hpp"
#include "cli/table.hpp"
#include "oncely/dead_letters.hpp"
#include "oncely/errors.hpp"
#include "oncely/jobs.hpp"
#include "support/duration.hpp"
#include "support/exact_json.hpp"
#include "support/text.hpp"

namespace oncely::cli {
namespace {

using Json = nlohmann::ordered_json;

Json optional_json(const auto& value) { return value ? Json(*value) : Json(); }

std::string dump(const Json& j, int indent) { return j.dump(indent, ' ', false, Json::error_handler_t::replace); }

void add_filters(CLI::App* sub, JobsOptions& o, bool with_ids) {
  if (with_ids) {
    sub->add_option("--id", o.ids, "job id, as the worker's log prints it; repeat it (or give 1,2,3) for several")
        ->delimiter(',')
        ->allow_extra_args(false)
        ->transform(integer(kJobId));
  }
  sub->add_option("--queue,-q", o.queue, "queue");
  sub->add_option("--kind", o.kind, "job kind");
  sub->add_option("--state", o.state,
                  with_ids ? "ready, scheduled, retrying, running or waiting (for parents)"
                           : "ready, scheduled, retrying, running, waiting (for parents) or completed");
  sub->add_option("--batch", o.batch, "members of this batch (oncely batches)")->transform(integer(kBatchId));
  sub->add_option("--error", o.error, "TEXT found in the last error (case-insensitive)");
  sub->add_option("--older-than", o.older_than, "enqueued more than DURATION ago (e.g. 1h)")->type_name("DURATION");
}

JobFilter make_filter(const JobsOptions& o) {
  JobFilter f;
  f.ids = o.ids;
  const auto text = [](const std::optional<std::string>& v, const char* name) {
    if (v && v->empty()) throw ConfigError(name, "must not be empty");
    return v;
  };
  f.queue = text(o.queue, "--queue");
  f.kind = text(o.kind, "--kind");
  f.error_text = text(o.error, "--error");
  f.batch_id = o.batch;
  if (o.state) {
    try {
      f.state = parse_job_state(*o.state);
    } catch (const ConfigError& e) {
      throw ConfigError("--state", std::string(e.what()).substr(std::string("state: ").size()));
    }
  }
  if (o.older_than) {
    try {
      f.older_than = detail::parse_duration(*o.older_than);
    } catch (const ConfigError& e) {
      throw ConfigError("--older-than", e.what());
    }
  }
  f.all = o.all;
  return f;
}

/// "2025-03-01T09:30:00.123456Z" -> "2025-03-01 09:30:00".
std::string short_time(const std::string& iso) {
  std::string t = iso.substr(0, 19);
  if (t.size() > 10 && t[10] == 'T') t[10] = ' ';
  return t;
}

Json summary_json(const JobSummary& s) {
  return {{"id", s.id},
          {"queue", s.queue},
          {"kind", s.kind},
          {"state", std::string(to_string(s.state))},
          {"priority", s.priority},
          {"attempts", s.attempts},
          {"max_attempts", optional_json(s.max_attempts)},
          {"run_at", s.run_at},
          {"created_at", s.created_at},
          {"idempotency_key", optional_json(s.idempotency_key)},
          {"unique_key", optional_json(s.unique_key)},
          {"last_error", optional_json(s.last_error)},
          {"waiting_for", s.waiting_for},
          {"batch_id", optional_json(s.batch_id)}};
}

/// A waiting job's parents left, else its last error.
std::string note_of(const JobSummary& s) {
  if (s.state == JobState::waiting) return "waits for job " + ids_text(s.waiting_for);
  return s.last_error.value_or("");
}

std::string jobs_count(std::size_t n) { return std::to_string(n) + (n == 1 ? " job" : " jobs"); }

std::string completed_line(const CompletedJob& c) {
  std::string line = "attempt " + (c.attempt ? std::to_string(*c.attempt) : std::string("?"));
  if (c.run_time_ms)
    line += ", ran " + detail::format_duration(std::chrono::milliseconds(std::llround(*c.run_time_ms)));
  if (c.worker) line += " on " + *c.worker;
  return line;
}

/// A completed job as JSON, its output exactly as stored (its text, never through a double).
std::string completed_json(const CompletedJob& c, int indent) {
  const Json j = {{"id", c.id},
                  {"state", "completed"},
                  {"queue", c.queue},
                  {"kind", c.kind},
                  {"idempotency_key", optional_json(c.idempotency_key)},
                  {"completed_at", c.completed_at},
                  {"attempt", optional_json(c.attempt)},
                  {"run_time_ms", optional_json(c.run_time_ms)},
                  {"worker", optional_json(c.worker)},
                  {"trace_id", optional_json(c.trace_id)}};
  std::string text = dump(j, indent);
  if (!c.output_hidden) {
    const std::string output = c.output_text ? detail::exact_json::compact(*c.output_text) : "null";
    text.insert(text.size() - (indent > 0 ? 2 : 1), std::string(indent > 0 ? ",\n" : ",") +
                                                        std::string(static_cast<std::size_t>(indent), ' ') +
                                                        "\"output\": " + output);
  }
  return text;
}

int run_list_completed(const JobsOptions& o, const Globals& g, Io io) {
  if (o.error || o.older_than || o.batch || o.group_by || o.after) {
    throw ConfigError("--state", "completed jobs are filtered by --queue, --kind and --key, and paged with --before");
  }
  CompletedJobFilter filter;
  filter.queue = o.queue;
  filter.kind = o.kind;
  filter.idempotency_key = o.key;
  const CompletedJobPage page = list_completed_jobs(DatabaseUrl(g.database_url), g.schema, filter, o.limit, o.before);
  if (o.json) {
    std::string jobs = "[";
    for (const auto& c : page.jobs) jobs += (jobs.size() > 1 ? "," : "") + completed_json(c, 0);
    io.out << "{\"jobs\": " << jobs << "], \"next_before\": " << dump(optional_json(page.next_before), 0) << "}\n";
    return kExitOk;
  }
  if (page.jobs.empty()) {
    io.out << "no completed jobs match (records are kept for the dedup window)\n";
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& c : page.jobs) {
    rows.push_back({std::to_string(c.id), cell(c.queue, 24), cell(c.kind, 32), cell(c.idempotency_key.value_or(""), 40),
                    short_time(c.completed_at), cell(completed_line(c), 60)});
  }
  print_table(io.out, {"ID", "QUEUE", "KIND", "KEY", "COMPLETED (UTC)", "ATTEMPT"}, rows);
  if (page.next_before) io.out << "(more: --before " << *page.next_before << ")\n";
  return kExitOk;
}

int run_list(const JobsOptions& o, const Globals& g, Io io) {
  if (o.state == "completed") return run_list_completed(o, g, io);
  if (o.before || o.key) throw ConfigError(o.before ? "--before" : "--key", "goes with --state completed");
  const DatabaseUrl url(g.database_url);
  const JobFilter filter = make_filter(o);
  if (o.group_by) {
    if (*o.group_by != "error")
      throw ConfigError("--group-by", "unknown grouping '" + *o.group_by + "' (expected error)");
    const auto groups = group_jobs_by_error(url, g.schema, filter, o.limit);
    if (o.json) {
      Json array = Json::array();
      for (const auto& gr : groups) {
        array.push_back({{"error", gr.error},
                         {"count", gr.count},
                         {"example_id", gr.example_id},
                         {"example_error", optional_json(gr.example_error)}});
      }
      io.out << dump(array, 2) << "\n";
      return kExitOk;
    }
    if (groups.empty()) {
      io.out << "no jobs match\n";
      return kExitOk;
    }
    std::vector<std::vector<std::string>> rows;
    for (const auto& gr : groups) {
      rows.push_back({std::to_string(gr.count), std::to_string(gr.example_id), cell(gr.error, 100)});
    }
    print_table(io.out, {"COUNT", "EXAMPLE", "LAST ERROR (numbers as #)"}, rows);
    return kExitOk;
  }
  const JobPage page = list_jobs(url, g.schema, filter, o.limit, o.after);
  if (o.json) {
    Json jobs = Json::array();
    for (const auto& s : page.jobs) jobs.push_back(summary_json(s));
    io.out << dump(Json{{"jobs", jobs}, {"next_after", optional_json(page.next_after)}}, 2) << "\n";
    return kExitOk;
  }
  if (page.jobs.empty()) {
    io.out << "no jobs match\n";
    return kExitOk;
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& s : page.jobs) {
    rows.push_back({std::to_string(s.id), std::string(to_string(s.state)), cell(s.queue, 24), cell(s.kind, 32),
                    std::to_string(s.attempts), short_time(s.run_at), short_time(s.created_at), cell(note_of(s), 80)});
  }
  print_table(io.out,
              {"ID", "STATE", "QUEUE", "KIND", "ATTEMPTS", "RUN AT (UTC)", "CREATED (UTC)", "LAST ERROR / WAITS FOR"},
              rows);
  if (page.next_after) io.out << "(more: --after " << *page.next_after << ")\n";
  return kExitOk;
}

void print_completed(const CompletedJob& c, Io io) {
  io.out << "job " << c.id << " (completed)\n"
         << "  queue         " << cell(c.queue, 128) << "\n"
         << "  kind          " << cell(c.kind, 255) << "\n";
  if (c.idempotency_key) io.out << "  key           " << cell(*c.idempotency_key, 1024) << "\n";
  io.out << "  completed at  " << c.completed_at << "\n";
  if (c.attempt) io.out << "  attempt       " << *c.attempt << "\n";
  if (c.run_time_ms) io.out << "  run time      " << *c.run_time_ms << " ms\n";
  if (c.worker) io.out << "  worker        " << cell(*c.worker, 255) << "\n";
  if (c.trace_id) io.out << "  trace id      " << *c.trace_id << "\n";
  if (c.output_text) io.out << "  output        " << *c.output_text << "\n";
}

/// A job that is no longer queued: its completed record, or where its dead letter is.
int show_finished(const JobsOptions& o, const Globals& g, Io io) {
  const DatabaseUrl url(g.database_url);
  CompletedJobFilter completed;
  completed.id = o.show_id;
  completed.idempotency_key = o.key;
  const CompletedJobPage page = list_completed_jobs(url, g.schema, completed, 10, std::nullopt, true);
  DeadLetterFilter dead;
  if (o.show_id) dead.job_ids = {*o.show_id};
  dead.idempotency_key = o.key;
  dead.include_replayed = true;
  const DeadLetterList letters = list_dead_letters(url, g.schema, dead, 10, false);
  if (o.json) {
    std::string jobs = "[";
    for (const auto& c : page.jobs) jobs += (jobs.size() > 1 ? ",\n" : "\n") + completed_json(c, 2);
    Json pointers = Json::array();
    for (const auto& d : letters.dead_letters) {
      pointers.push_back(
          {{"dead_letter_id", d.id}, {"job_id", d.job_id}, {"error_class", d.error_class}, {"failed_at", d.failed_at}});
    }
    io.out << "{\"completed\": " << jobs << "],\n \"dead_letters\": " << dump(pointers, 0) << "}\n";
  } else {
    for (const auto& c : page.jobs) print_completed(c, io);
    for (const auto& d : letters.dead_letters) {
      io.out << "job " << d.job_id << " (dead-lettered " << d.failed_at << ", class " << d.error_class
             << "): oncely dlq show --id " << d.id << "\n";
    }
  }
  if (!page.jobs.empty() || !letters.dead_letters.empty()) return kExitOk;
  io.err << "oncely: error: no job "
         << (o.show_id ? std::to_string(*o.show_id) : "with key " + detail::printable(*o.key))
         << " queued, completed within the dedup window, or dead-lettered\n";
  return kExitFailure;
}

int run_show(const JobsOptions& o, const Globals& g, Io io) {
  if (o.show_id.has_value() == o.key.has_value()) throw ConfigError("show", "give a job id (ID or --id) or --key");
  std::optional<JobDetail> job;
  if (o.show_id) job = show_job(DatabaseUrl(g.database_url), g.schema, *o.show_id);
  if (!job) return show_finished(o, g, io);
  const JobSummary& s = job->summary;
  if (o.json) {
    Json j = summary_json(s);
    j["errors"] = Json::parse(job->errors_text, nullptr, false);
    j["origin_job_id"] = optional_json(job->origin_job_id);
    j["held_by_worker"] = optional_json(job->held_by_worker);
    j["lease"] = job->lease_token ? Json{{"token", *job->lease_token},
                                         {"leased_by", optional_json(job->leased_by)},
                                         {"live", job->lease_live},
                                         {"expires_at", s.run_at}}
                                  : Json();
    // The payload exactly as stored: its text goes in as it is, never through a double.
    std::string text = dump(j, 2);
    text.insert(text.size() - 2, ",\n  \"payload\": " + detail::exact_json::compact(job->payload_text));
    io.out << text << "\n";
    return kExitOk;
  }
  io.out << "job " << s.id << " (" << to_string(s.state) << ")\n"
         << "  queue         " << cell(s.queue, 128) << "\n"
         << "  kind          " << cell(s.kind, 255) << "\n"
         << "  priority      " << s.priority << "\n"
         << "  attempts      " << s.attempts << (s.max_attempts ? " of " + std::to_string(*s.max_attempts) : "") << "\n"
         << "  run at        " << s.run_at << "\n"
         << "  created at    " << s.created_at << "\n";
  if (s.idempotency_key) io.out << "  key           " << cell(*s.idempotency_key, 1024) << "\n";
  if (s.unique_key) io.out << "  unique key    " << cell(*s.unique_key, 1024) << "\n";
  if (job->origin_job_id) io.out << "  replay of     job " << *job->origin_job_id << "\n";
  if (!s.waiting_for.empty()) io.out << "  waits for     job " << ids_text(s.waiting_for) << "\n";
  if (s.batch_id) io.out << "  batch         " << *s.batch_id << " (oncely batches show " << *s.batch_id << ")\n";
  if (job->held_by_worker) io.out << "  running on    worker " << *job->held_by_worker << " (transaction mode)\n";
  if (job->lease_token) {
    io.out << "  lease         token " << *job->lease_token << " held by worker "
           << (job->leased_by ? std::to_string(*job->leased_by) : "?") << ", "
           << (job->lease_live ? "expires " : "expired ") << s.run_at << "\n";
  }
  io.out << "  payload       " << job->payload_text << "\n";
  if (s.last_error) io.out << "  last error    " << cell(*s.last_error, 2000) << "\n";
  const Json errors = Json::parse(job->errors_text, nullptr, false);
  if (errors.is_array() && !errors.empty()) {
    io.out << "  errors\n";
    for (const auto& e : errors) {
      io.out << "    #" << e.value("attempt", 0) << " " << e.value("at", std::string()) << " ["
             << e.value("class", std::string()) << "] " << cell(e.value("error", std::string()), 500) << "\n";
    }
  }
  return kExitOk;
}

int run_cancel(const JobsOptions& o, const Globals& g, Io io) {
  const CancelResult r = cancel_jobs(DatabaseUrl(g.database_url), g.schema, make_filter(o), o.dry_run);
  if (o.json) {
    io.out << dump(Json{{"dry_run", o.dry_run},
                        {"cancelled", r.cancelled},
                        {"descendants", r.descendants},
                        {"running", r.running},
                        {"gone", r.gone}},
                   2)
           << "\n";
  } else if (o.dry_run) {
    io.out << "would cancel " << jobs_count(r.cancelled.size())
           << (r.cancelled.empty() ? "" : ": " + ids_text(r.cancelled))
           << (r.descendants.empty() ? ""
                                     : " and " + std::to_string(r.descendants.size()) +
                                           " waiting descendants: " + ids_text(r.descendants))
           << " (dry run: nothing changed)\n";
    if (!r.running.empty()) {
      io.out << "would leave " << jobs_count(r.running.size())
             << " running in a worker's batch: " << ids_text(r.running) << "\n";
    }
  } else {
    io.out << "cancelled " << jobs_count(r.cancelled.size())
           << (r.cancelled.empty() ? ""
                                   : ": " + ids_text(r.cancelled) +
                                         " (now in dead_letters, class cancelled; oncely dlq replay --class "
                                         "cancelled brings them back)")
           << "\n";
    if (!r.descendants.empty()) {
      io.out << "and " << r.descendants.size() << " waiting descendants with them: " << ids_text(r.descendants) << "\n";
    }
    if (r.gone > 0)
      io.out << jobs_count(static_cast<std::size_t>(r.gone)) << " finished before they could be cancelled\n";
  }
  if (!r.running.empty()) {
    if (!o.dry_run) {
      io.err << "oncely: " << jobs_count(r.running.size())
             << " running in a worker's batch, left to finish: " << ids_text(r.running) << "\n";
    }
    return kExitFailure;
  }
  return kExitOk;
}

}  // namespace

void add_jobs(Cli& cli) {
  JobsOptions& o = cli.jobs;
  CLI::App* cmd = cli.app.add_subcommand("jobs", "list, show and cancel jobs that have not finished");
  cmd->require_subcommand(1);
  CLI::App* list = cmd->add_subcommand("list", "jobs by id, filtered; keyset paging with --after");
  add_filters(list, o, false);
  list->add_option("--limit", o.limit, "at most N jobs")
      ->capture_default_str()
      ->transform(integer({"a number of jobs", 1, kMaxJobsLimit}));
  list->add_option("--after", o.after, "only jobs with an id above ID (the next page)")
      ->transform(integer({"a job id", 0, kMaxId}));
  list->add_option("--group-by", o.group_by, "error: count the jobs by last error (numbers as #)");
  list->add_flag("--json", o.json, "print JSON");
  list->parse_complete_callback([&o] { o.action = JobsAction::list; });
  list->add_option("--key", o.key, "--state completed: jobs with this idempotency key");
  list->add_option("--before", o.before, "--state completed: only jobs with an id below ID (the next page)")
      ->transform(integer({"a job id", 0, kMaxId}));
  CLI::App* show = cmd->add_subcommand(
      "show",
      "one job: queued (payload, attempts, error history, lease), completed (its record and output), or "
      "where its dead letter is");
  CLI::Option* id = show->add_option("ID", o.show_id, "job id")->transform(integer(kJobId));
  CLI::Option* id_option = show->add_option("--id", o.show_id, "job id")->transform(integer(kJobId))->excludes(id);
  show->add_option("--key", o.key, "the idempotency key of a completed or dead-lettered job")
      ->excludes(id)
      ->excludes(id_option);
  show->add_flag("--json", o.json, "print JSON");
  show->parse_complete_callback([&o] { o.action = JobsAction::show; });
  CLI::App* cancel = cmd->add_subcommand(
      "cancel",
      "move waiting jobs (and running lease-mode jobs) to dead_letters, class cancelled, in one transaction; "
      "exit 1 when some were running in a worker's batch and left alone");
  add_filters(cancel, o, true);
  cancel->add_flag("--all", o.all, "select every job (cancel refuses to run without --id or a filter)");
  cancel->add_flag("--dry-run", o.dry_run, "show what would be cancelled; change nothing");
  cancel->add_flag("--json", o.json, "print JSON");
  cancel->parse_complete_callback([&o] { o.action = JobsAction::cancel; });
  cli.jobs_cmd = cmd;
}

int run_jobs(const JobsOptions& o, const Globals& g, Io io) {
  switch (o.action) {
    case JobsAction::list: return run_list(o, g, io);
    case JobsAction::show: return run_show(o, g, io);
    case JobsAction::cancel: return run_cancel(o, g, io);
    case JobsAction::none: break;
  }
  io.err << "oncely: error: jobs needs a subcommand: list, show or cancel\n";
  return kExitUsage;
}

}  // namespace oncely::cli

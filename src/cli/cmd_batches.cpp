// `oncely batches open|close|list|show`: batches whose callbacks run once, when the batch is
// closed and its last member has settled (docs/dependencies.md).
#include <ostream>

#include <nlohmann/json.hpp>

#include "cli/app.hpp"
#include "cli/cli_numbers.hpp"
#include "cli/table.hpp"
#include "oncely/batches.hpp"
#include "oncely/client.hpp"
#include "oncely/errors.hpp"
#include "support/exact_json.hpp"

namespace oncely::cli {
namespace {

/// A callback option's text, checked here to name the option (sent as it is).
const std::optional<std::string>& description_option(const std::optional<std::string>& text, const char* name) {
  if (!text) return text;
  try {
    detail::exact_json::validate(*text);
  } catch (const detail::exact_json::SyntaxError& e) {
    throw ConfigError(name,
                      "not a JSON job description such as {\"kind\": \"report\"}: " + detail::exact_json::describe(e));
  }
  return text;
}

nlohmann::json optional_json(const std::optional<std::string>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

nlohmann::json description_json(const std::optional<std::string>& v) {
  return v ? nlohmann::json::parse(*v) : nlohmann::json();
}

nlohmann::json to_json(const BatchStatus& b) {
  nlohmann::json out{{"id", b.id},
                     {"state", b.state()},
                     {"total", b.total},
                     {"completed", b.completed},
                     {"dead", b.dead},
                     {"pending", b.pending()},
                     {"waiting", b.waiting},
                     {"created_at", b.created_at},
                     {"created_by", b.created_by},
                     {"closed_at", optional_json(b.closed_at)},
                     {"finished_at", optional_json(b.finished_at)},
                     {"callback_job_ids", b.callback_job_ids}};
  if (b.callbacks_read) {
    out["on_success"] = description_json(b.on_success);
    out["on_failure"] = description_json(b.on_failure);
    out["on_finish"] = description_json(b.on_finish);
  }
  return out;
}

std::string progress(const BatchStatus& b) {
  return std::to_string(b.completed + b.dead) + "/" + std::to_string(b.total);
}

std::string callback_ids(const std::vector<std::int64_t>& ids) { return ids.empty() ? "-" : ids_text(ids); }

void print_batch(std::ostream& out, const BatchStatus& b) {
  out << "batch " << b.id << " (" << b.state() << ")\n"
      << "  members       " << b.total << ": " << b.completed << " completed, " << b.dead << " dead-lettered, "
      << b.pending() << " pending (" << b.waiting << " waiting for parents)\n"
      << "  opened        " << b.created_at << " by " << b.created_by << "\n"
      << "  closed        " << b.closed_at.value_or("- (members may still join)") << "\n"
      << "  finished      " << b.finished_at.value_or("-") << "\n"
      << "  callback jobs " << callback_ids(b.callback_job_ids) << "\n";
  const auto callback = [&](const char* name, const std::optional<std::string>& d) {
    out << "  " << name << std::string(14 - std::string_view(name).size(), ' ')
        << (b.callbacks_read ? d.value_or("-") : "(hidden: this role may not read payloads)") << "\n";
  };
  callback("on_success", b.on_success);
  callback("on_failure", b.on_failure);
  callback("on_finish", b.on_finish);
}

}  // namespace

void add_batches(Cli& cli) {
  BatchesOptions& o = cli.batches;
  CLI::App* cmd = cli.app.add_subcommand(
      "batches", "batches of jobs whose callback jobs are enqueued once, when the last member settles");
  cmd->require_subcommand(1);
  CLI::App* open = cmd->add_subcommand("open", "open a batch and print its id (enqueue members with --batch ID)");
  const char* description = "a job description: {\"kind\": ..., \"payload\": {...}, \"queue\": ..., \"key\": ...}";
  open->add_option("--on-success", o.on_success,
                   std::string("enqueued when no member was dead-lettered: ") + description)
      ->type_name("JSON");
  open->add_option("--on-failure", o.on_failure, "enqueued when a member was dead-lettered")->type_name("JSON");
  open->add_option("--on-finish", o.on_finish, "enqueued either way")->type_name("JSON");
  open->parse_complete_callback([&o] { o.action = BatchesAction::open; });
  CLI::App* close = cmd->add_subcommand(
      "close", "no more members: the callbacks are enqueued when the last member settles (at once if all have)");
  close->add_option("ID", o.id, "batch id")->required()->transform(integer(kBatchId));
  close->parse_complete_callback([&o] { o.action = BatchesAction::close; });
  CLI::App* list = cmd->add_subcommand("list", "batches, newest first, with their progress");
  list->add_flag("--unfinished", o.unfinished, "only batches whose callbacks have not been enqueued");
  list->add_option("--limit", o.limit, "at most this many")
      ->capture_default_str()
      ->transform(integer({"a number of batches", 1, 1000}));
  list->add_option("--before", o.before, "batches with an id below this one (the next page)")
      ->transform(integer(kBatchId));
  list->add_flag("--json", o.json, "print JSON");
  list->parse_complete_callback([&o] { o.action = BatchesAction::list; });
  CLI::App* show = cmd->add_subcommand("show", "one batch: counters, callbacks and the jobs they enqueued");
  show->add_option("ID", o.id, "batch id")->required()->transform(integer(kBatchId));
  show->add_flag("--json", o.json, "print JSON");
  show->parse_complete_callback([&o] { o.action = BatchesAction::show; });
  cli.batches_cmd = cmd;
}

int run_batches(const BatchesOptions& o, const Globals& globals, Io io) {
  const DatabaseUrl url(globals.database_url);
  switch (o.action) {
    case BatchesAction::open: {
      // Sent as given: a payload's numbers keep every digit (the Client checks the text).
      BatchCallbacks callbacks;
      callbacks.on_success_json = description_option(o.on_success, "--on-success");
      callbacks.on_failure_json = description_option(o.on_failure, "--on-failure");
      callbacks.on_finish_json = description_option(o.on_finish, "--on-finish");
      Client client(url, globals.schema, ClientOptions{globals.prepared_statements});
      io.out << client.open_batch(callbacks) << "\n";
      return kExitOk;
    }
    case BatchesAction::close: {
      Client client(url, globals.schema, ClientOptions{globals.prepared_statements});
      client.close_batch(o.id);
      // A producer's role may close a batch but not read batches: closed is all it learns.
      std::optional<BatchStatus> batch;
      try {
        batch = find_batch(url, globals.schema, o.id, false);
      } catch (const DatabaseError&) {
        io.out << "batch " << o.id << " closed\n";
        return kExitOk;
      }
      io.out << "batch " << o.id << " closed: " << (batch ? progress(*batch) : "?") << " members settled"
             << (batch && batch->finished_at
                     ? ", callbacks enqueued (jobs " + callback_ids(batch->callback_job_ids) + ")"
                     : "")
             << "\n";
      return kExitOk;
    }
    case BatchesAction::list: {
      const auto batches = list_batches(url, globals.schema, {o.unfinished, o.limit, o.before});
      if (o.json) {
        nlohmann::json out = nlohmann::json::array();
        for (const auto& b : batches) out.push_back(to_json(b));
        io.out << out.dump(2) << "\n";
        return kExitOk;
      }
      if (batches.empty()) {
        io.out << "no batches\n";
        return kExitOk;
      }
      std::vector<std::vector<std::string>> rows;
      for (const auto& b : batches) {
        rows.push_back({std::to_string(b.id), std::string(b.state()), progress(b), std::to_string(b.completed),
                        std::to_string(b.dead), std::to_string(b.waiting), b.created_at,
                        callback_ids(b.callback_job_ids)});
      }
      print_table(io.out, {"ID", "STATE", "SETTLED", "COMPLETED", "DEAD", "WAITING", "OPENED", "CALLBACK JOBS"}, rows);
      if (static_cast<int>(batches.size()) == o.limit) {
        io.out << "(more: --before " << batches.back().id << ")\n";
      }
      return kExitOk;
    }
    case BatchesAction::show: {
      const auto batch = find_batch(url, globals.schema, o.id);
      if (!batch) {
        io.err << "oncely: error: no batch " << o.id << " (see oncely batches list)\n";
        return kExitFailure;
      }
      if (o.json) {
        io.out << to_json(*batch).dump(2) << "\n";
      } else {
        print_batch(io.out, *batch);
      }
      return kExitOk;
    }
    case BatchesAction::none: break;
  }
  return kExitUsage;
}

}  // namespace oncely::cli

#include "oncely/dead_letters.hpp"

#include <pqxx/pqxx>

#include "oncely/errors.hpp"
#include "store/store.hpp"
#include "support/db.hpp"

namespace oncely {
namespace {

/// Runs `fn(tx, store.dead_letters)` in a transaction of its own on a new connection; commits when
/// `write`. Database failures become one-line, password-free DatabaseErrors.
template <typename Fn>
auto in_transaction(const DatabaseUrl& url, std::string_view schema, std::string_view what, bool write, Fn&& fn) {
  const detail::Store store(schema);  // validates the schema name before connecting
  auto conn = detail::connect(url);
  try {
    pqxx::work tx{*conn};
    auto result = fn(tx, store.dead_letters);
    if (write) tx.commit();
    return result;
  } catch (const pqxx::broken_connection& e) {
    throw DatabaseError(std::string(what) + " failed, connection lost: " + detail::one_line(url, e.what()));
  } catch (const pqxx::sql_error& e) {
    throw detail::schema_error(url, schema, std::string(what) + " failed", e);
  } catch (const pqxx::in_doubt_error& e) {
    throw DatabaseError(std::string(what) + " may or may not have committed (connection lost during COMMIT): " +
                        detail::one_line(url, e.what()));
  }
}

}  // namespace

DeadLetterGrouping parse_dead_letter_grouping(std::string_view name) {
  if (name == "error") return DeadLetterGrouping::error;
  if (name == "class") return DeadLetterGrouping::error_class;
  if (name == "kind") return DeadLetterGrouping::kind;
  if (name == "queue") return DeadLetterGrouping::queue;
  throw ConfigError("group-by", "unknown grouping '" + std::string(name) + "' (expected error, class, kind or queue)");
}

std::string_view to_string(DeadLetterGrouping grouping) {
  switch (grouping) {
    case DeadLetterGrouping::error: return "error";
    case DeadLetterGrouping::error_class: return "class";
    case DeadLetterGrouping::kind: return "kind";
    case DeadLetterGrouping::queue: return "queue";
  }
  return "error";
}

DeadLetterList list_dead_letters(const DatabaseUrl& url, std::string_view schema, const DeadLetterFilter& filter,
                                 long limit, bool details) {
  detail::validate_filter(filter);
  return in_transaction(url, schema, "listing dead letters", false,
                        [&](pqxx::transaction_base& tx, const detail::DeadLettersTable& table) {
                          return table.list(tx, filter, limit, details);
                        });
}

DeadLetterGroups group_dead_letters(const DatabaseUrl& url, std::string_view schema, const DeadLetterFilter& filter,
                                    DeadLetterGrouping by, long limit) {
  detail::validate_filter(filter);
  return in_transaction(url, schema, "grouping dead letters", false,
                        [&](pqxx::transaction_base& tx, const detail::DeadLettersTable& table) {
                          return table.group(tx, filter, by, limit);
                        });
}

ReplayResult replay_dead_letters(const DatabaseUrl& url, std::string_view schema, const DeadLetterFilter& filter,
                                 const std::optional<std::string>& to_queue) {
  // Refuse before connecting: a bad request should not need a database to be refused.
  detail::validate_filter(filter);
  detail::require_selection(filter, "replay");
  if (to_queue && to_queue->empty()) throw ConfigError("to-queue", "must not be empty");
  return in_transaction(url, schema, "replay", true,
                        [&](pqxx::transaction_base& tx, const detail::DeadLettersTable& table) {
                          return table.replay(tx, filter, to_queue);
                        });
}

long purge_dead_letters(const DatabaseUrl& url, std::string_view schema, const DeadLetterFilter& filter) {
  detail::validate_filter(filter);
  detail::require_selection(filter, "purge");
  return in_transaction(
      url, schema, "purge", true,
      [&](pqxx::transaction_base& tx, const detail::DeadLettersTable& table) { return table.purge(tx, filter); });
}

DeadLetterPage page_dead_letters(const DatabaseUrl& url, std::string_view schema, const DeadLetterFilter& filter,
                                 const DeadLetterPageOptions& options) {
  detail::validate_filter(filter);
  return in_transaction(url, schema, "listing dead letters", false,
                        [&](pqxx::transaction_base& tx, const detail::DeadLettersTable& table) {
                          return table.page(tx, filter, options);
                        });
}

long count_dead_letters(const DatabaseUrl& url, std::string_view schema, const DeadLetterFilter& filter) {
  detail::validate_filter(filter);
  return in_transaction(
      url, schema, "counting dead letters", false,
      [&](pqxx::transaction_base& tx, const detail::DeadLettersTable& table) { return table.count(tx, filter); });
}

std::optional<DeadLetter> show_dead_letter(const DatabaseUrl& url, std::string_view schema, std::int64_t id,
                                           bool with_payload) {
  if (id <= 0) throw InvalidArgument("id", "must be positive");
  DeadLetterFilter filter;
  filter.ids = {id};
  filter.include_replayed = true;
  DeadLetterPageOptions options;
  options.limit = 1;
  options.details = true;
  options.payload = with_payload;
  DeadLetterPage page = page_dead_letters(url, schema, filter, options);
  if (page.dead_letters.empty()) return std::nullopt;
  return std::move(page.dead_letters.front());
}

ConfirmedReplay replay_dead_letters_confirmed(const DatabaseUrl& url, std::string_view schema,
                                              const DeadLetterFilter& filter, long expected) {
  detail::validate_filter(filter);
  detail::require_selection(filter, "replay");
  return in_transaction(url, schema, "replay", true,
                        [&](pqxx::transaction_base& tx, const detail::DeadLettersTable& table) {
                          DeadLetterFilter unreplayed = filter;
                          unreplayed.include_replayed = false;  // what a replay would touch
                          ConfirmedReplay confirmed;
                          confirmed.selected = table.count(tx, unreplayed);
                          if (confirmed.selected != expected) return confirmed;  // rolled back: nothing written
                          confirmed.result = table.replay(tx, filter, std::nullopt);
                          confirmed.done = true;
                          return confirmed;
                        });
}

ConfirmedPurge purge_dead_letters_confirmed(const DatabaseUrl& url, std::string_view schema,
                                            const DeadLetterFilter& filter, long expected) {
  detail::validate_filter(filter);
  detail::require_selection(filter, "purge");
  return in_transaction(url, schema, "purge", true,
                        [&](pqxx::transaction_base& tx, const detail::DeadLettersTable& table) {
                          DeadLetterFilter every = filter;
                          every.include_replayed = true;  // a purge deletes replayed and unreplayed alike
                          ConfirmedPurge confirmed;
                          confirmed.selected = table.count(tx, every);
                          if (confirmed.selected != expected) return confirmed;
                          confirmed.purged = table.purge(tx, filter);
                          confirmed.done = true;
                          return confirmed;
                        });
}

PayloadAccess payload_access(const DatabaseUrl& url, std::string_view schema) {
  return in_transaction(
      url, schema, "reading privileges", false,
      [&](pqxx::transaction_base& tx, const detail::DeadLettersTable& table) { return table.payload_access(tx); });
}

DeadLetterList list_dead_letters(pqxx::transaction_base& tx, std::string_view schema, const DeadLetterFilter& filter,
                                 long limit, bool details) {
  return detail::Store(schema).dead_letters.list(tx, filter, limit, details);
}

DeadLetterGroups group_dead_letters(pqxx::transaction_base& tx, std::string_view schema, const DeadLetterFilter& filter,
                                    DeadLetterGrouping by, long limit) {
  return detail::Store(schema).dead_letters.group(tx, filter, by, limit);
}

ReplayResult replay_dead_letters(pqxx::transaction_base& tx, std::string_view schema, const DeadLetterFilter& filter,
                                 const std::optional<std::string>& to_queue) {
  return detail::Store(schema).dead_letters.replay(tx, filter, to_queue);
}

long purge_dead_letters(pqxx::transaction_base& tx, std::string_view schema, const DeadLetterFilter& filter) {
  return detail::Store(schema).dead_letters.purge(tx, filter);
}

DeadLetterPage page_dead_letters(pqxx::transaction_base& tx, std::string_view schema, const DeadLetterFilter& filter,
                                 const DeadLetterPageOptions& options) {
  return detail::Store(schema).dead_letters.page(tx, filter, options);
}

}  // namespace oncely

#include "execution/retry_policy.hpp"

#include <cxxabi.h>

#include <cctype>
#include <cstdlib>
#include <memory>
#include <typeinfo>

#include <pqxx/except>

#include "oncely/errors.hpp"
#include "support/sqlstate.hpp"
#include "support/text.hpp"

namespace oncely::detail {
namespace {

struct FreeDeleter {
  void operator()(char* p) const noexcept { std::free(p); }
};

// "oncely::PermanentError" rather than "N6oncely14PermanentErrorE".
std::string type_name(const std::exception& e) {
  const char* mangled = typeid(e).name();
  int status = 0;
  const std::unique_ptr<char, FreeDeleter> demangled(abi::__cxa_demangle(mangled, nullptr, nullptr, &status));
  return status == 0 && demangled ? std::string(demangled.get()) : std::string(mangled);
}

Failure unknown_exception() {
  Failure failure;
  failure.message = "unknown exception";
  return failure;
}

// `e` as a Failure of class `cls`; its message (after `prefix`) folded into one line, or
// its type when it has none, so that errors[] never holds an empty message.
Failure failure_of(FailureClass cls, const std::exception& e, std::string_view prefix = {}) {
  Failure failure;
  failure.cls = cls;
  const std::string type = type_name(e);
  failure.detail["exception"] = type;
  const std::string message = fold_lines(e.what());
  failure.message = std::string(prefix) + (message.empty() ? type : message);
  return failure;
}

}  // namespace

std::string sqlstate_of(const pqxx::sql_error& e) {
  if (!e.sqlstate().empty()) return e.sqlstate();
  // pqxx::result::ThrowSQLError (6.4.5) passes the code to every sql_error subclass it
  // throws but this one; the others that lose it (classes 08, 40, 53300) are not sql_errors.
  if (dynamic_cast<const pqxx::insufficient_privilege*>(&e) != nullptr) return "42501";
  return {};
}

std::string_view to_string(FailureClass c) {
  switch (c) {
    case FailureClass::retryable: return "retryable";
    case FailureClass::permanent: return "permanent";
    case FailureClass::timeout: return "timeout";
    case FailureClass::connection: return "connection";
    case FailureClass::unknown_kind: return "unknown_kind";
    case FailureClass::exhausted: return "exhausted";
    case FailureClass::crashed: return "crashed";
    case FailureClass::unreadable: return "unreadable";
    case FailureClass::lease_expired: return "lease_expired";
  }
  return "invalid";  // only for a value cast from an out-of-range integer
}

Failure classify(std::exception_ptr error) noexcept {
  // Allocation failure while building the Failure would end the process (noexcept): at
  // that point no outcome could be recorded anyway.
  if (!error) return unknown_exception();
  try {
    std::rethrow_exception(error);
  } catch (const HandlerError& e) {
    Failure failure;
    failure.cls = e.cls();
    failure.message = fold_lines(e.what());
    failure.detail = e.detail();
    failure.retry_after = e.retry_after();
    return failure;
  } catch (const PermanentError& e) {
    return failure_of(FailureClass::permanent, e);
  } catch (const RetryAfter& e) {
    Failure failure = failure_of(FailureClass::retryable, e);
    failure.retry_after = e.delay();
    return failure;
  } catch (const pqxx::broken_connection& e) {
    return failure_of(FailureClass::connection, e);
  } catch (const pqxx::sql_error& e) {
    const std::string sqlstate = sqlstate_of(e);
    Failure failure =
        sqlstate == kReadOnlySqlstate ? failure_of(FailureClass::connection, e, "the server is read-only: ")
        : sqlstate == kQueryCanceled  ? failure_of(FailureClass::timeout, e, "statement exceeded the job timeout: ")
        : sqlstate == kHandlerCommittedSqlstate ? failure_of(FailureClass::permanent, e)
                                                : failure_of(FailureClass::retryable, e);
    failure.detail["sqlstate"] = sqlstate;
    return failure;
  } catch (const std::exception& e) {
    return failure_of(FailureClass::retryable, e);
  } catch (...) {
    return unknown_exception();
  }
}

bool is_connection_loss(const std::exception& e) noexcept {
  if (dynamic_cast<const pqxx::broken_connection*>(&e) != nullptr) return true;
  const auto* sql = dynamic_cast<const pqxx::sql_error*>(&e);
  if (sql == nullptr) return false;
  try {
    return sqlstate_of(*sql) == kReadOnlySqlstate;
  } catch (...) {
    return false;  // (a string copy that could not allocate)
  }
}

bool is_unclaimable_row(std::string_view sqlstate) noexcept {
  return sqlstate.starts_with("22") || sqlstate.starts_with("54");
}

std::optional<FailureClass> failure_class_named(std::string_view name) noexcept {
  for (const FailureClass c : {FailureClass::retryable, FailureClass::permanent, FailureClass::timeout,
                               FailureClass::connection, FailureClass::unknown_kind, FailureClass::exhausted,
                               FailureClass::crashed, FailureClass::unreadable, FailureClass::lease_expired}) {
    if (to_string(c) == name) return c;
  }
  return std::nullopt;
}

Decision decision_of(FailureClass failed, std::string_view outcome, std::chrono::milliseconds delay) {
  if (outcome == "retry") return {Decision::Action::retry, failed, delay};
  const std::optional<FailureClass> cls = failure_class_named(outcome);
  if (!cls) throw std::runtime_error("the schema's failure_outcome() gave '" + std::string(outcome) + "', no class");
  return {Decision::Action::dead_letter, *cls, {}};
}

}  // namespace oncely::detail

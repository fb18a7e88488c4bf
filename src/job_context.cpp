#include "oncely/job_context.hpp"

#include "exact_json.hpp"
#include "job_transaction.hpp"
#include "oncely/errors.hpp"

namespace oncely {
namespace {

/// A number for a one-line message: a long one (jsonb writes 1e400 as 401 digits) cut.
std::string abbreviated(const std::string& number) {
  if (number.size() <= 40) return number;
  return number.substr(0, 20) + "..." + number.substr(number.size() - 8) + " (" + std::to_string(number.size()) +
         " characters)";
}

}  // namespace

const nlohmann::json& JobContext::payload() const {
  if (payload_checked_) return payload_;
  // nlohmann reads 1e400 not at all and 1.5e-400 as 0: a handler must not act on either.
  if (const auto number = detail::exact_json::first_number_beyond_double(payload_text())) {
    throw PermanentError("payload number " + abbreviated(*number) +
                         " is out of range for a double (read it exactly with payload_text())");
  }
  if (payload_.is_discarded()) throw PermanentError("payload is not JSON that nlohmann::json can read");
  payload_checked_ = true;
  return payload_;
}

std::string_view JobContext::payload_text() const {
  if (!payload_text_.empty() || payload_.is_discarded()) return payload_text_;
  if (dumped_.empty()) dumped_ = payload_.dump();
  return dumped_;
}

pqxx::work& JobContext::tx() { return transaction_.for_handler(); }

}  // namespace oncely

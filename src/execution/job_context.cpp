#include "oncely/job_context.hpp"

#include "execution/job_output.hpp"
#include "execution/job_transaction.hpp"
#include "execution/lease_attempt.hpp"
#include "execution/retry_policy.hpp"
#include "oncely/errors.hpp"
#include "support/exact_json.hpp"

namespace oncely {

void JobContext::set_output(const nlohmann::json& output) {
  std::string text;
  try {
    text = output.dump();
  } catch (const nlohmann::json::exception& e) {  // a string that is not UTF-8
    throw PermanentError(std::string("output cannot be written as JSON: ") + e.what());
  }
  output_ = detail::checked_output(std::move(text));
}

void JobContext::set_output_text(std::string json_text) { output_ = detail::checked_output(std::move(json_text)); }

void JobContext::on_complete_output(std::function<std::optional<std::string>(pqxx::work&)> effect) {
  if (!effect) return;
  if (lease_ == nullptr) {
    if (auto output = effect(tx())) set_output_text(std::move(*output));
    return;
  }
  lease_->effects.push_back([attempt = lease_, effect = std::move(effect)](pqxx::work& tx) {
    if (auto output = effect(tx)) attempt->effects_output = detail::checked_output(std::move(*output));
  });
}

const nlohmann::json& JobContext::payload() const {
  if (payload_) return *payload_;
  // Read here, not at the claim: handlers that take the text (sql, exec, http) never pay
  // for it, and a payload nlohmann cannot read fails only its own job.
  using detail::FailureClass;
  using detail::HandlerError;
  // nlohmann reads 1e400 not at all and 1.5e-400 as 0: a handler must not act on either.
  if (const auto number = detail::exact_json::first_number_beyond_double(payload_text_)) {
    throw HandlerError(FailureClass::unreadable,
                       "payload number " + detail::abbreviated_number(*number) +
                           " is out of range for a double (read it exactly with payload_text())");
  }
  nlohmann::json parsed = nlohmann::json::parse(payload_text_, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded())
    throw HandlerError(FailureClass::unreadable, "payload is not JSON that nlohmann::json can read");
  payload_ = std::move(parsed);
  return *payload_;
}

pqxx::work& JobContext::tx() {
  if (transaction_ == nullptr) {
    throw PermanentError(
        "job.tx() on lease queue '" + queue_ +
        "': no transaction is open while a lease job runs; register database effects with job.on_complete()");
  }
  return transaction_->for_handler();
}

bool JobContext::lease_lost() const noexcept { return lease_ != nullptr && lease_->lost.load(); }

std::optional<std::int64_t> JobContext::lease_token() const noexcept {
  if (lease_ == nullptr) return std::nullopt;
  return lease_->held.token;
}

void JobContext::on_complete(std::function<void(pqxx::work&)> effect) {
  if (!effect) return;
  if (lease_ == nullptr) {
    effect(tx());  // the job's own transaction commits with its completion
    return;
  }
  lease_->effects.push_back(std::move(effect));
}

}  // namespace oncely

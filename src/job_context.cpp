#include "oncely/job_context.hpp"

#include "job_transaction.hpp"

namespace oncely {

pqxx::work& JobContext::tx() { return transaction_.for_handler(); }

}  // namespace oncely

#include "execution/job_transaction.hpp"

#include <libpq-fe.h>

#include <pqxx/largeobject>

namespace oncely::detail {
namespace {

// libpqxx 6.4 keeps the libpq connection to itself; largeobject lets subclasses see it.
struct LibpqHandle : pqxx::largeobject {
  static PGconn* of(const pqxx::dbtransaction& tx) { return raw_connection(tx); }
};

}  // namespace

TransactionState transaction_state(const pqxx::dbtransaction& tx) {
  PGconn* raw = LibpqHandle::of(tx);
  switch (raw == nullptr ? PQTRANS_UNKNOWN : PQtransactionStatus(raw)) {
    case PQTRANS_INTRANS: return TransactionState::open;
    case PQTRANS_INERROR: return TransactionState::failed;
    default: return TransactionState::gone;  // idle: libpqxx rolled it back; unknown: no connection
  }
}

}  // namespace oncely::detail

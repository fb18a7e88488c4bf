#include "store/wakeup_window.hpp"

#include <pqxx/nontransaction>

#include "support/schema.hpp"

namespace oncely::detail {

WakeupWindow::WakeupWindow(std::string_view schema)
    : acknowledge_(render_sql("SELECT :ONCELY_SCHEMA.wakeup_received()", schema)) {}

std::int64_t WakeupWindow::acknowledge(pqxx::connection& conn) const {
  pqxx::nontransaction tx{conn};
  return tx.exec1(acknowledge_)[0].as<std::int64_t>();
}

}  // namespace oncely::detail

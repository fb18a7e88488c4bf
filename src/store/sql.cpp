#include "store/sql.hpp"

#include <type_traits>

#include "support/schema.hpp"

namespace oncely::detail {
namespace {

constexpr std::string_view kIsoUtcFormat = R"('YYYY-MM-DD"T"HH24:MI:SS.US"Z"')";

void append_quoted(std::string& out, std::string_view value) {
  out += '"';
  for (const char c : value) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  out += '"';
}

template <typename T>
std::string join_array(const std::vector<T>& values) {
  std::string out = "{";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i) out += ',';
    if constexpr (std::is_same_v<T, std::string>) {
      append_quoted(out, values[i]);
    } else if constexpr (std::is_same_v<T, std::optional<std::string>>) {
      if (values[i])
        append_quoted(out, *values[i]);
      else
        out += "NULL";
    } else {
      out += std::to_string(values[i]);
    }
  }
  return out + "}";
}

}  // namespace

std::string prune_older_sql(std::string_view table, std::string_view column) {
  const std::string t = ":ONCELY_SCHEMA." + std::string(table);
  return "DELETE FROM " + t + " WHERE ctid = ANY (ARRAY(SELECT ctid FROM " + t + " WHERE " + std::string(column) +
         " < now() - $1::bigint * interval '1 millisecond' LIMIT $2))";
}

std::string render_statement(std::string_view sql, std::string_view schema) {
  std::string text(sql);
  for (std::size_t at = text.find(kIsoUtcPlaceholder); at != std::string::npos;
       at = text.find(kIsoUtcPlaceholder, at + kIsoUtcFormat.size())) {
    text.replace(at, kIsoUtcPlaceholder.size(), kIsoUtcFormat);
  }
  return render_sql(text, schema);
}

StatementSet::StatementSet(std::string_view schema, bool prepared) : schema_(schema), prepared_(prepared) {}

const Statement& StatementSet::add(std::string_view name, std::string_view sql) {
  return all_.emplace_back(Statement{"oncely_" + std::string(name), render_statement(sql, schema_)});
}

void StatementSet::prepare(pqxx::connection& conn) const {
  if (!prepared_) return;
  for (const Statement& s : all_) conn.prepare(s.name, s.sql);
}

nlohmann::json json_or_null(const pqxx::field& f) {
  return f.is_null() ? nlohmann::json() : nlohmann::json::parse(f.c_str());
}

std::string to_array_literal(const std::vector<std::int64_t>& values) { return join_array(values); }
std::string to_array_literal(const std::vector<int>& values) { return join_array(values); }
std::string to_array_literal(const std::vector<std::string>& values) { return join_array(values); }
std::string to_array_literal(const std::vector<std::optional<std::string>>& values) { return join_array(values); }

}  // namespace oncely::detail

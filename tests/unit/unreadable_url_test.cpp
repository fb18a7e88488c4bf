// A database URL libpq cannot read is the user's input to fix: ConfigError (the CLI's exit
// 2), password masked; it was a DatabaseError "cannot connect" (exit 1), as if the server
// were down. No server is needed: nothing is sent.
#include <doctest/doctest.h>

#include <string>

#include "oncely/database_url.hpp"
#include "oncely/errors.hpp"
#include "support/db.hpp"

TEST_CASE("unreadable URL: libpq's parse error is a ConfigError naming the masked URL") {
  struct Row {
    const char* conninfo;
    const char* says;
  };
  for (const Row& row : {Row{"not a url at all", R"(missing "=" after "not")"},
                         Row{"postgresql://u:S3cret@127.0.0.1:1/db?evil=1", R"(invalid URI query parameter: "evil")"},
                         Row{"postgresql://u:S3cret@[::1/db", "IPv6 host address"},
                         Row{"host=127.0.0.1 password='S3cret", "unterminated quoted string"}}) {
    CAPTURE(row.conninfo);
    try {
      oncely::detail::connect(oncely::DatabaseUrl(row.conninfo));
      FAIL("expected a ConfigError");
    } catch (const oncely::ConfigError& e) {
      const std::string what = e.what();
      CHECK(what.starts_with("cannot read the database URL "));
      CHECK(what.find(row.says) != std::string::npos);
      CHECK(what.find("S3cret") == std::string::npos);
    }
  }
}

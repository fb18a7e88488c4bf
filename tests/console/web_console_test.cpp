// The console's pure decisions: escaping, logins, the change rule, addresses.

#include <doctest/doctest.h>

#include <sys/stat.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <thread>

#include "cli/app.hpp"
#include "oncely/errors.hpp"
#include "web/auth.hpp"
#include "web/console.hpp"
#include "web/html.hpp"

using namespace oncely;
using namespace oncely::web;

TEST_CASE("web: escape turns every markup character into text") {
  CHECK(escape("<img src=x onerror=alert(1)>") == "&lt;img src=x onerror=alert(1)&gt;");
  CHECK(escape("a&b\"c'd") == "a&amp;b&quot;c&#39;d");
  CHECK(escape("plain") == "plain");
}

TEST_CASE("web: query strings percent-encode every value and skip unset ones") {
  CHECK(query_string({{"pattern", "a&b=#c \"x\""}, {"queue", std::nullopt}, {"kind", "k"}}) ==
        "?pattern=a%26b%3D%23c%20%22x%22&kind=k");
  CHECK(query_string({}).empty());
  CHECK(hidden("q", "\"><script>") == "<input type=\"hidden\" name=\"q\" value=\"&quot;&gt;&lt;script&gt;\">");
}

TEST_CASE("web: a login file gives roles and names; bad lines are named") {
  const auto c = parse_login_file("# logins\n\noperator alice 0123456789abcdef0\nviewer bob fedcba98765432100\n");
  REQUIRE(c.size() == 2);
  CHECK(c[0].role == Role::operator_);
  CHECK(c[0].name == "alice");
  CHECK(c[1].role == Role::viewer);
  CHECK_THROWS_WITH_AS(parse_login_file("admin x 0123456789abcdef0"),
                       "login file line 1: role must be operator or viewer", ConfigError);
  CHECK_THROWS_WITH_AS(parse_login_file("\noperator alice short"),
                       "login file line 2: token shorter than 16 characters", ConfigError);
  CHECK_THROWS_AS(parse_login_file("operator alice"), ConfigError);
  CHECK_THROWS_AS(parse_login_file("operator alice 0123456789abcdef0 extra"), ConfigError);
}

TEST_CASE("web: a login file others can read is refused") {
  const std::string path = "/tmp/oncely_web_logins_" + std::to_string(::getpid());
  { std::ofstream(path) << "operator alice 0123456789abcdef0\n"; }
  ::chmod(path.c_str(), 0640);
  CHECK_THROWS_WITH_AS(load_credentials(path), doctest::Contains("readable by others"), ConfigError);
  ::chmod(path.c_str(), 0600);
  CHECK(load_credentials(path).size() >= 1);
  std::remove(path.c_str());
}

TEST_CASE("web: tokens are compared whole") {
  CHECK(constant_time_equal("0123456789abcdef", "0123456789abcdef"));
  CHECK_FALSE(constant_time_equal("0123456789abcdef", "0123456789abcdeg"));
  CHECK_FALSE(constant_time_equal("0123456789abcdef", "0123456789abcde"));
  CHECK_FALSE(constant_time_equal("", "x"));
  const std::vector<Credential> all{{Role::viewer, "v", "viewer-token-0123456"},
                                    {Role::operator_, "o", "operator-token-0123"}};
  CHECK(find_credential(all, "operator-token-0123")->name == "o");
  CHECK_FALSE(find_credential(all, "operator-token-012"));
}

TEST_CASE("web: a change needs Sec-Fetch-Site same-origin and the session's CSRF token") {
  CHECK_FALSE(refuse_change("same-origin", "tok", "tok"));
  CHECK(refuse_change("same-site", "tok", "tok"));  // another port of this host
  CHECK(refuse_change("cross-site", "tok", "tok"));
  CHECK(refuse_change("none", "tok", "tok"));        // typed into the address bar
  CHECK(refuse_change(std::nullopt, "tok", "tok"));  // a client that does not say
  CHECK(refuse_change("same-origin", "tok", std::nullopt));
  CHECK(refuse_change("same-origin", "tok", "other"));
  CHECK(refuse_change("same-origin", "", ""));
}

TEST_CASE("web: a non-loopback address needs a login") {
  ConsoleOptions o;
  o.host = "127.0.0.1";
  CHECK_NOTHROW(validate(o));
  o.host = "0.0.0.0";
  CHECK_THROWS_WITH_AS(validate(o), doctest::Contains("not a loopback address"), ConfigError);
  o.credentials.push_back({Role::viewer, "v", "viewer-token-0123456"});
  CHECK_NOTHROW(validate(o));
  CHECK(is_loopback("localhost"));
  CHECK(is_loopback("[::1]"));
  CHECK(is_loopback("127.0.0.2"));
  CHECK_FALSE(is_loopback("10.0.0.1"));
  CHECK_FALSE(is_loopback("::"));
}

TEST_CASE("web: --addr is HOST:PORT") {
  CHECK(cli::parse_web_address("127.0.0.1:9470") == std::pair<std::string, int>{"127.0.0.1", 9470});
  CHECK(cli::parse_web_address("[::1]:0") == std::pair<std::string, int>{"[::1]", 0});
  CHECK_THROWS_AS(cli::parse_web_address("127.0.0.1"), ConfigError);
  CHECK_THROWS_AS(cli::parse_web_address("::1:80"), ConfigError);
  CHECK_THROWS_AS(cli::parse_web_address("h:99999"), ConfigError);
  CHECK_THROWS_AS(cli::parse_web_address("h:8x"), ConfigError);
}

TEST_CASE("web: sessions expire when idle and are unguessable") {
  SessionTable table(std::chrono::seconds(3600), 2);
  const Session a = table.create(Role::operator_, "a");
  CHECK(a.id.size() == 64);
  CHECK(a.csrf != a.id);
  CHECK(table.find(a.id)->name == "a");
  table.create(Role::viewer, "b");
  table.create(Role::viewer, "c");  // full: the oldest goes
  CHECK_FALSE(table.find(a.id));
  SessionTable expiring(std::chrono::seconds(0));
  const Session s = expiring.create(Role::viewer, "s");
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK_FALSE(expiring.find(s.id));
}

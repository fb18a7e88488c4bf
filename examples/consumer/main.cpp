// Enqueues one job through an installed oncely: `consumer DATABASE_URL [SCHEMA]`.
#include <iostream>

#include <oncely/oncely.hpp>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: consumer DATABASE_URL [SCHEMA]\n";
    return 2;
  }
  try {
    const oncely::DatabaseUrl url(argv[1]);
    const std::string schema = argc > 2 ? argv[2] : std::string(oncely::kDefaultSchema);
    oncely::migrate(url, schema);
    oncely::Client client(url, schema);
    std::cout << client.enqueue({.kind = "hello", .payload = {{"from", "consumer"}}}) << "\n";
  } catch (const oncely::Error& e) {
    std::cerr << "consumer: " << e.what() << "\n";
    return 1;
  }
}

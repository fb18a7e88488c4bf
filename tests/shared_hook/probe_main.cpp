// The hook in a shared build: this executable has no oncely in it; it links the probe
// library, which does. A std::vector::at thrown here (inside libstdc++) must be captured
// by the library's hook. Exit 0 when the stack names the thrower, 1 when no stack was
// captured or it does not.
#include <cstdio>
#include <exception>
#include <vector>

extern "C" void probe_enable();
extern "C" int probe_names(std::exception_ptr* error, const char* function);

[[gnu::noinline]] void thrower_in_executable() {
  std::vector<int> v;
  (void)v.at(3);
}

int main() {
  probe_enable();
  std::exception_ptr error;
  try {
    thrower_in_executable();
  } catch (...) {
    error = std::current_exception();
  }
  const int found = probe_names(&error, "thrower_in_executable");
  std::puts(found ? "shared build: the hook captured the stack" : "shared build: no stack captured");
  return found ? 0 : 1;
}

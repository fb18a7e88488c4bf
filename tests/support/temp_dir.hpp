#pragma once
// TempDir: a private directory for one test (scripts, files a child process writes),
// removed with everything in it at the end of the test.

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

namespace oncely::test {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "oncely_test_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  [[nodiscard]] std::string file(const std::string& name) const { return (path_ / name).string(); }

  /// Writes `content` to `name` with `mode` (executable by default) and returns its path.
  std::string write(const std::string& name, const std::string& content, mode_t mode = 0755) const {
    const std::string target = file(name);
    std::ofstream(target, std::ios::binary | std::ios::trunc) << content;
    if (::chmod(target.c_str(), mode) != 0) throw std::runtime_error("chmod failed: " + target);
    return target;
  }

  /// The content of `name`, or "" when it does not exist (yet).
  [[nodiscard]] std::string read(const std::string& name) const {
    std::ifstream in(file(name), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

 private:
  std::filesystem::path path_;
};

}  // namespace oncely::test

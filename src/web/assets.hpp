#pragma once
// The console's static files, embedded at build time (cmake/EmbedAssets.cmake).

#include <string_view>
#include <vector>

namespace oncely::web {

struct Asset {
  std::string_view path;  ///< "/assets/app.js"
  std::string_view content_type;
  std::string_view text;
};

const std::vector<Asset>& assets();

}  // namespace oncely::web

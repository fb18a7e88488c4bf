#include "cli/table.hpp"

#include <algorithm>

namespace oncely::cli {

std::string cell(std::string_view text, std::size_t max) {
  std::string out;
  std::size_t chars = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    const bool continuation = (c & 0xC0) == 0x80;
    if (!continuation) {
      if (chars == max) {
        // Room for the marker: drop back to max - 3 characters.
        std::size_t cut = out.size();
        for (int dropped = 0; dropped < 3 && cut > 0;) {
          --cut;
          if ((static_cast<unsigned char>(out[cut]) & 0xC0) != 0x80) ++dropped;
        }
        out.resize(cut);
        return out + "...";
      }
      ++chars;
    }
    out += (c < 0x20 || c == 0x7F) ? ' ' : text[i];
  }
  return out;
}

std::size_t display_width(std::string_view text) {
  return static_cast<std::size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

void print_table(std::ostream& out, const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> widths(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) widths[c] = display_width(header[c]);
  for (const auto& row : rows) {
    for (std::size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], display_width(row[c]));
  }
  const auto line = [&](const std::vector<std::string>& cells) {
    std::string text;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      text += cells[c];
      if (c + 1 < cells.size()) text += std::string(widths[c] - display_width(cells[c]) + 2, ' ');
    }
    out << text << "\n";
  };
  line(header);
  for (const auto& row : rows) line(row);
}

std::string ids_text(const std::vector<std::int64_t>& ids) {
  std::string text;
  for (std::size_t i = 0; i < ids.size() && i < 20; ++i) text += (i ? ", " : "") + std::to_string(ids[i]);
  if (ids.size() > 20) text += ", ... (" + std::to_string(ids.size() - 20) + " more)";
  return text;
}

}  // namespace oncely::cli

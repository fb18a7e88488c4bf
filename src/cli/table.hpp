#pragma once
// Plain text tables for the command line's listings (`oncely dlq list`, ...): columns
// padded to their widest cell, cells kept to one line.

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace oncely::cli {

/// Control characters become spaces (a table row stays one line); at most `max` characters
/// (UTF-8 code points), the cut marked with "...".
std::string cell(std::string_view text, std::size_t max);

/// The characters (UTF-8 code points) of `text`, as a terminal shows them.
std::size_t display_width(std::string_view text);

/// A plain text table: columns padded to their widest cell, the last one not padded.
/// "1, 2, 3", the first 20 of `ids` and how many more.
std::string ids_text(const std::vector<std::int64_t>& ids);

void print_table(std::ostream& out, const std::vector<std::string>& header,
                 const std::vector<std::vector<std::string>>& rows);

}  // namespace oncely::cli

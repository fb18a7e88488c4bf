#pragma once
// Text on its way into one-line messages, logs and error detail.
//
// Text from outside (a child's stderr, an HTTP response body) on its way into error
// messages and error detail. Both end up in Postgres: jsonb and text reject NUL characters
// and invalid UTF-8, and a dead letter that cannot be written is worse than a mangled
// excerpt, so such bytes are replaced.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace oncely::detail {

/// User text made safe to quote in a one-line message: control characters JSON-escaped.
std::string printable(std::string_view text);

/// Whether `text` holds a control character (below 0x20, or DEL); a tab too unless
/// `tab_allowed` (HTTP header values may hold one).
bool has_control_character(std::string_view text, bool tab_allowed = false);

/// JSON pointer (RFC 6901) of `key` inside the object at `parent`, e.g. "/queues/bulk".
std::string child_path(std::string_view parent, std::string_view key);

/// A multi-line message (a server error with DETAIL and HINT lines) on one line: runs of
/// whitespace become one space, leading and trailing whitespace goes.
std::string fold_lines(std::string_view text);

/// `bytes` as valid UTF-8 without NUL: each invalid sequence or NUL becomes U+FFFD.
std::string sanitize_utf8(std::string_view bytes);

/// The first at most `max_bytes` of `bytes`, cut so that no character is split; sanitized.
std::string utf8_head(std::string_view bytes, std::size_t max_bytes);

/// The last at most `max_bytes` of `bytes`, cut so that no character is split; sanitized.
std::string utf8_tail(std::string_view bytes, std::size_t max_bytes);

/// Every occurrence of `from` in `text` replaced by `to`, left to right; what `to` puts in
/// is not searched again. An empty `from` changes nothing.
void replace_all(std::string& text, std::string_view from, std::string_view to);

/// The last line of `text` that is not blank, without surrounding whitespace.
std::string_view last_line(std::string_view text);

/// `text` on one line: runs of whitespace and control characters become one space;
/// longer than `max_bytes` is cut (on a character boundary) and marked with "…" (U+2026:
/// not ASCII, so the mark can never complete a header secret or a password in the text).
std::string summary_line(std::string_view text, std::size_t max_bytes = 300);

/// `text` with every byte that lies in an occurrence of any of `secrets` (empty ones
/// ignored) masked: each run of such bytes becomes "***". Occurrences are found in `text`
/// as given, so overlapping secrets leave no piece of either visible, and a mask is never
/// searched again (a secret such as "*" cannot multiply the text).
std::string mask_secrets(std::string_view text, const std::vector<std::string>& secrets);

}  // namespace oncely::detail

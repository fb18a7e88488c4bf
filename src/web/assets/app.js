// oncely console: live refresh without reloading the page. Every few seconds (the body's
// data-refresh) it fetches the current page again and swaps each [data-live] section for
// the fresh one; sections holding focus or a ticked checkbox are left alone, so nobody's
// selection is wiped. The fetched HTML is parsed inertly (DOMParser runs no script).
(function () {
  'use strict';
  var seconds = parseInt(document.body.getAttribute('data-refresh') || '0', 10);
  var status = document.getElementById('live-status');
  if (!seconds || !document.querySelector('[data-live]')) return;

  function busy(section) {
    return section.contains(document.activeElement) ||
      section.querySelector('input[type=checkbox]:checked') !== null;
  }

  function say(text, bad) {
    if (!status) return;
    status.textContent = text;
    status.className = bad ? 'live bad' : 'live';
  }

  function refresh() {
    if (document.hidden) return;
    fetch(window.location.href, { credentials: 'same-origin', headers: { 'X-Oncely-Refresh': '1' } })
      .then(function (response) {
        return response.text().then(function (text) { return { ok: response.ok, status: response.status, text: text }; });
      })
      .then(function (r) {
        if (!r.ok) {
          say(r.status === 503 ? 'database unavailable, retrying' : 'refresh failed (' + r.status + ')', true);
          return;
        }
        var fresh = new DOMParser().parseFromString(r.text, 'text/html');
        document.querySelectorAll('[data-live]').forEach(function (section) {
          var next = fresh.querySelector('[data-live="' + section.getAttribute('data-live') + '"]');
          if (next && !busy(section)) section.replaceWith(document.importNode(next, true));
        });
        say('live · ' + new Date().toLocaleTimeString(), false);
      })
      .catch(function () { say('console unreachable, retrying', true); });
  }

  say('live', false);
  window.setInterval(refresh, seconds * 1000);
})();

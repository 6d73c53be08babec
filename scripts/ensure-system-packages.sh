#!/usr/bin/env bash
# The web UI test drives Debian's Chromium through Playwright (never a downloaded browser).
# Installs it when missing and we may; otherwise the browser test skips and says why.
set -u
if [ -x /usr/bin/chromium ]; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian's chromium for the browser test" >&2
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
    || echo "could not install chromium; the browser test will be skipped" >&2
else
  echo "no /usr/bin/chromium and no root apt-get; the browser test will be skipped" >&2
fi
exit 0

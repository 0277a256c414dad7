#!/usr/bin/env bash
# Make sure a headless-capable Chromium is installed for the dashboard's browser test
# (tests/service/test_dashboard_browser.py drives /usr/bin/chromium with playwright).
#
# - If chromium is already on PATH (or BLOCKBUDGET_CHROMIUM names a binary), nothing happens.
# - As root with apt-get available, the Debian package `chromium` is installed.
# - Otherwise it says so loudly; the browser test then SKIPS with that reason. Never fails the build.
set -uo pipefail

if [ -n "${BLOCKBUDGET_CHROMIUM:-}" ] && [ -x "${BLOCKBUDGET_CHROMIUM}" ]; then
  exit 0
fi
if command -v chromium >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "ensure-chromium: installing the Debian package chromium ..." >&2
  if (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) \
      >/tmp/blockbudget-apt-chromium.log 2>&1; then
    exit 0
  fi
  echo "ensure-chromium: apt-get failed (see /tmp/blockbudget-apt-chromium.log)" >&2
fi
echo "ensure-chromium: chromium not available — the dashboard browser test will be SKIPPED" >&2
exit 0

#!/usr/bin/env bash
# Installs the npm packages of the viewer's page (web/package-lock.json: uPlot, esbuild,
# playwright-core) into web/node_modules with `npm ci`, unless they are already installed
# from the same lock file. Run by scripts/test.sh and by the build (cmake/viewer.cmake);
# builds in several directories at once share one install, serialised by a lock.
set -euo pipefail
cd "$(dirname "$0")/../web"
if ! command -v npm >/dev/null; then
  echo "web-deps: npm is missing: run scripts/install-deps.sh" >&2
  exit 1
fi
exec 9>"${TMPDIR:-/tmp}/hbm-web-deps-$(id -u).lock"
flock 9
stamp=node_modules/.package-lock.json
if [[ -f $stamp && $stamp -nt package-lock.json && -x node_modules/.bin/esbuild ]]; then
  exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
touch "$stamp"

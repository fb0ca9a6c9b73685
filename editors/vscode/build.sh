#!/usr/bin/env bash
# Builds the VS Code extension: editors/vscode/ptxfactory-<version>.vsix.
#   npm ci (exact versions from package-lock.json) → tsc --noEmit (type check) → unit tests of the pure logic
#   (node's test runner on the compiled src/config.ts) → esbuild bundle (dist/extension.js, with
#   vscode-languageclient inside) → vsce package --no-dependencies.
# Needs Node.js 20+ and npm, and the npm registry for `npm ci` (skipped when node_modules is current:
# set PTXFACTORY_VSCODE_SKIP_CI=1). Install the result with: code --install-extension editors/vscode/ptxfactory-*.vsix
set -euo pipefail
cd "$(dirname "$0")"

node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 20 ]; then
  echo "build.sh: Node.js 20 or newer is needed (found $(node --version)); @vscode/vsce 3 runs on Node 20" >&2
  exit 1
fi

if [ "${PTXFACTORY_VSCODE_SKIP_CI:-}" != 1 ]; then
  npm ci --ignore-scripts --no-audit --no-fund --loglevel=error  # no install scripts: esbuild finds its platform package itself
fi

echo "build.sh: type check (tsc --noEmit)"
npx --no-install tsc -p . --noEmit

echo "build.sh: unit tests (node --test)"
rm -rf out
npx --no-install tsc -p . --outDir out
node --test out/test/

echo "build.sh: bundle (esbuild)"
rm -rf dist
npx --no-install esbuild src/extension.ts --bundle --platform=node --target=node18 --format=cjs \
  --external:vscode --outfile=dist/extension.js --minify --log-level=warning

version=$(node -p 'require("./package.json").version')
vsix="ptxfactory-$version.vsix"
rm -f ./*.vsix
echo "build.sh: package ($vsix)"
npx --no-install vsce package --no-dependencies --skip-license --allow-missing-repository --out "$vsix" </dev/null
ls -l "$vsix"

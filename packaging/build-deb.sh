#!/usr/bin/env bash
# Builds leash_<version>_<arch>.deb from a built checkout (npm ci && npm run build done).
# Usage: packaging/build-deb.sh [OUT_DIR]
# The maintainer is $DEBFULLNAME <$DEBEMAIL> when both are set (the Debian convention), else the
# `author` of package.json. SOURCE_DATE_EPOCH (default: the last commit, else now) dates the
# changelog and the man page. LEASH_DEB_COMPRESSION (default xz) is dpkg-deb's -Z: gzip builds in seconds where xz
# takes minutes on a loaded machine (the runtime is most of the 95 MB).
# The package carries its own Node runtime (code-server's convention): the build host's node (LEASH_NODE, default
# the one on PATH, >= 20) goes to /usr/lib/leash/bin/node, its license (LEASH_NODE_LICENSE, default the one its
# package installed) into the copyright file, and its shared libraries into Depends (dpkg-shlibdeps). Debian 12 and
# Ubuntu 24.04 ship Node 18: a `Depends: nodejs (>= 20)` could not be installed from their archives.
set -euo pipefail
cd "$(dirname "$0")/.."
export npm_config_nodedir=/usr
out="${1:-$PWD/dist-deb}"
version=$(node -p "require('./package.json').version")
arch=$(dpkg --print-architecture)
if [ -n "${DEBFULLNAME:-}" ] && [ -n "${DEBEMAIL:-}" ]; then
  maintainer="$DEBFULLNAME <$DEBEMAIL>"
else
  maintainer=$(node -p "require('./package.json').author || ''")
fi
[ -n "$maintainer" ] || { echo "build-deb: no maintainer: set DEBFULLNAME and DEBEMAIL, or author in package.json" >&2; exit 2; }
: "${SOURCE_DATE_EPOCH:=$(git log -1 --format=%ct 2>/dev/null || date +%s)}"
export SOURCE_DATE_EPOCH
for f in dist/src/cli/main.js build/Release/leash_native.node; do
  [ -e "$f" ] || { echo "build-deb: $f is missing: run npm ci && npm run build first" >&2; exit 2; }
done
node_bin=$(readlink -f "${LEASH_NODE:-$(command -v node)}")
node_major=$("$node_bin" -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 20 ] || { echo "build-deb: $node_bin is Node $node_major: the package needs Node >= 20" >&2; exit 2; }
node_license=${LEASH_NODE_LICENSE:-$(dirname "$node_bin")/../share/doc/nodejs/LICENSE}
[ -r "$node_license" ] || { echo "build-deb: no license text for $node_bin: set LEASH_NODE_LICENSE" >&2; exit 2; }
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
umask 022

lib="$stage/usr/lib/leash"
doc="$stage/usr/share/doc/leash"
mkdir -p "$lib/bin" "$lib/build/Release" "$lib/dist" "$stage/usr/bin" "$stage/lib/systemd/system" "$stage/usr/share/leash" \
  "$doc" "$stage/usr/share/man/man1" "$stage/usr/share/bash-completion/completions" \
  "$stage/usr/share/zsh/vendor-completions" "$stage/DEBIAN"
cp package.json package-lock.json "$lib/"
cp -r dist/src "$lib/dist/src"
# A shared object: not executable, no symbols or build notes a user does not need.
install -m 0644 build/Release/leash_native.node "$lib/build/Release/"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$lib/build/Release/leash_native.node"
# Runtime dependencies only, from the lockfile already installed here (no network needed): the
# build-time ones (node-gyp, node-addon-api, the toolchain of tests and lint) are devDependencies.
cp -r node_modules "$lib/node_modules"
(cd "$lib" && npm prune --omit=dev --no-audit --no-fund >/dev/null)
rm -rf "$lib/node_modules/.bin" "$lib/node_modules/.package-lock.json"
# What a module ships for its own developers, not for running it: docs pages (pino's index.html
# loads scripts from CDNs), VCS and CI files, type declarations, source maps.
find "$lib/node_modules" \( -name '*.md' -o -name '*.markdown' -o -name 'index.html' -o -name '.git*' \
  -o -name '.npmignore' -o -name '.eslintrc*' -o -name '.prettierrc*' -o -name '.editorconfig' \
  -o -name '.travis.yml' -o -name '.taprc' -o -name '*.d.ts' -o -name '*.d.cts' -o -name '*.d.mts' \
  -o -name '*.map' -o -name 'tsconfig.json' -o -name '*.sh' \) -not -path '*/LICENSE*' -exec rm -rf {} +
for d in .github .husky test tests __tests__ spec specs fixtures docs benchmarks bench example examples; do
  find "$lib/node_modules" -mindepth 2 -type d -name "$d" -prune -exec rm -rf {} +
done
# Source maps point at TypeScript sources that are not shipped.
find "$lib/dist" -name '*.map' -delete
# npm prune leaves the scope directories of what it removed.
find "$lib/node_modules" -mindepth 1 -type d -empty -delete
find "$lib" -type f -exec chmod 0644 {} +
# A module's own command-line scripts keep their #! and stay runnable (lintian: script-not-executable).
find "$lib/node_modules" -type f -exec sh -c 'for f; do [ "$(head -c 2 "$f")" = "#!" ] && chmod 0755 "$f"; done; true' sh {} +
# The runtime, without its symbol tables and debug sections (NodeSource's binary ships them: ~10 MB more). Scripts
# for node are run by it, never by their #! (which would name a node the package does not depend on: lintian's
# missing-dep-for-interpreter): the line is emptied, so stack traces keep their line numbers.
install -m 0755 "$node_bin" "$lib/bin/node"
strip --strip-unneeded --remove-section=.comment --remove-section=.note "$lib/bin/node"
find "$lib/dist" "$lib/node_modules" -type f -exec sh -c \
  'for f; do head -n 1 "$f" | grep -q "^#!.*node" && sed -i "1s/.*//" "$f" && chmod 0644 "$f"; done; true' sh {} +
install -D -m 0644 packaging/lintian-overrides "$stage/usr/share/lintian/overrides/leash"

install -m 0755 packaging/leash-wrapper.sh "$stage/usr/bin/leash"
install -m 0644 systemd/leash.service "$stage/lib/systemd/system/leash.service"
install -m 0644 packaging/leash.default.yaml "$stage/usr/share/leash/leash.default.yaml"
install -D -m 0644 packaging/leash.logrotate "$stage/etc/logrotate.d/leash"

# Documentation: the README, docs/, the man page made from docs/cli.md, completion made from the
# program's own command definitions. Nothing hand-copied, so none of it can drift.
install -m 0644 README.md "$doc/README.md"
for f in docs/*.md; do install -m 0644 "$f" "$doc/$(basename "$f")"; done
node scripts/cli-man.mjs docs/cli.md "$version" | gzip -9n > "$stage/usr/share/man/man1/leash.1.gz"
node dist/src/cli/main.js completion bash > "$stage/usr/share/bash-completion/completions/leash"
node dist/src/cli/main.js completion zsh > "$stage/usr/share/zsh/vendor-completions/_leash"
gzip -9nc "$node_license" > "$doc/nodejs-notices.gz"
node packaging/copyright.mjs "$lib/node_modules" /usr/share/doc/leash/nodejs-notices.gz > "$doc/copyright"
date_r=$(date -R -u -d "@$SOURCE_DATE_EPOCH")
printf 'leash (%s) unstable; urgency=medium\n\n  * Release %s. The history of changes is the project'"'"'s git log.\n\n -- %s  %s\n' \
  "$version" "$version" "$maintainer" "$date_r" | gzip -9n > "$doc/changelog.gz"

install -m 0755 packaging/postinst "$stage/DEBIAN/postinst"
install -m 0755 packaging/prerm "$stage/DEBIAN/prerm"
install -m 0755 packaging/postrm "$stage/DEBIAN/postrm"
echo /etc/logrotate.d/leash > "$stage/DEBIAN/conffiles"
chmod 0644 "$stage/DEBIAN/conffiles"

(cd "$stage" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum) > "$stage/DEBIAN/md5sums"
chmod 0644 "$stage/DEBIAN/md5sums"

# The runtime's and the addon's shared-library dependencies, as dpkg-shlibdeps finds them (it wants a
# debian/control).
shl=$(mktemp -d)
mkdir "$shl/debian"
printf 'Source: leash\n\nPackage: leash\nArchitecture: any\n' > "$shl/debian/control"
shlibs=$(cd "$shl" && dpkg-shlibdeps -O "-e$lib/bin/node" "-e$lib/build/Release/leash_native.node" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
rm -rf "$shl"
[ -n "$shlibs" ] || { echo "build-deb: dpkg-shlibdeps found no dependencies for the runtime and the addon" >&2; exit 3; }
size=$(du -sk --exclude=DEBIAN "$stage" | cut -f1)
cat > "$stage/DEBIAN/control" <<CTL
Package: leash
Version: $version
Architecture: $arch
Maintainer: $maintainer
Depends: nftables, iproute2, openssl, $shlibs
Recommends: logrotate
Installed-Size: $size
Section: admin
Priority: optional
Description: per-UID enforcement for local AI agents
 Leash makes a hard allow/block decision for everything an agent's Linux
 account does: network (nftables + transparent proxy), filesystem and
 commands (fanotify), and tools (MCP gate), with one policy engine.
CTL
mkdir -p "$out"
fakeroot dpkg-deb --build --root-owner-group "-Z${LEASH_DEB_COMPRESSION:-xz}" "$stage" "$out/leash_${version}_${arch}.deb" >/dev/null
echo "$out/leash_${version}_${arch}.deb"

#!/bin/sh
# The package's own Node runtime (Debian 12's nodejs is 18; Leash needs 20).
exec /usr/lib/leash/bin/node /usr/lib/leash/dist/src/cli/main.js "$@"

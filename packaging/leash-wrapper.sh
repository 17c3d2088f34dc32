#!/bin/sh
exec /usr/bin/node /usr/lib/leash/dist/src/cli/main.js "$@"

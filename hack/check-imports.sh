#!/usr/bin/env bash
# check-imports.sh - enforce cgpilot's package walls (run by make lint, and
# so by CI): hack/checkimports checks the import rules of its one table,
# hack/checkimports/walls.go (what each package may depend on and who may
# import it, tests included where a wall says so), that every package has
# a doc comment (in doc.go naming each file when it has several), and that
# every file reading sysfs, procfs or cgroupfs, however it spells the path,
# requires linux in its build constraint.
#
#   hack/check-imports.sh             check the checkout
#   hack/check-imports.sh -selftest   add one violation of each kind the
#                                     walls must catch to a temporary copy,
#                                     and fail unless each is reported
#
# Prints every violation and exits 1 if there is any.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec go run ./hack/checkimports "$@"

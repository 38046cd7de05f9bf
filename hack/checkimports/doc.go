// Command checkimports enforces cgpilot's package walls (make lint runs it
// through hack/check-imports.sh, and so does CI):
//
//   - the import rules of walls.go, the one table of what each package may
//     depend on and who may import it, with tests where a wall says so;
//   - every package has a package doc comment; a package of more than one
//     non-test file keeps it in doc.go, and a doc.go names every other
//     non-test file of its directory (docNamesFiles), so a reader finds
//     every file's job there;
//   - every .go file that reads sysfs, procfs or cgroupfs requires linux in
//     its build constraint, however it spells the path: a "/sys" or "/proc"
//     literal, a well-known sysfs or procfs path ("devices/system/cpu/
//     online", "self/mountinfo"), a path joined onto a root named like
//     SysRoot or procRoot, or an import of a cgroup or procfs library.
//
// It prints every violation and exits 1 if there is any. With -selftest it
// copies the checkout to a temporary directory, adds one violation of each
// kind it must catch (selftest.go), and exits 1 unless each is reported.
//
// It reads the import graph from one `go list -deps -test -json` and parses
// files with go/parser; it imports only the standard library.
//
// # Files
//
// main.go loads the import graph and runs the three checks: the walls,
// the package docs and the linux build constraints. walls.go is the
// table of walls, and selftest.go the -selftest: its list of violations
// and the copy of the checkout (git ls-files) they are added to.
package main

// Command traceconv converts public usage traces into the replay trace
// format of recommend (ts,series,cpu_cores,mem_bytes with the optional
// window-peak columns cpu_cores_max,mem_bytes_max, and no memory columns
// for a CPU-only source such as azure2017; see recommend/trace.go):
//
//	go run ./test/cmd/traceconv google2019 --src DIR --out FILE.csv.gz
//	go run ./test/cmd/traceconv azure2017 --src DIR --out FILE.csv.gz
//
// DIR is a checkout (or the session fetch tool's snapshot, checked out) of
// the source repository named in hack/traces/SOURCES; every input file is
// checked against the SHA-256 recorded there before it is parsed, and a
// mismatch or a missing file is an error that writes nothing. The output
// is gzip-compressed CSV, rows sorted by (series, ts); --report writes the
// conversion's report as JSON. hack/traces/fetch.sh runs both conversions
// into ../shared/data/<name>-sample/ with SHA256SUMS.
//
// Errors go to stderr with exit status 1 (2 for bad usage).
//
// # Files
//
// main.go is the command: the checksums and their check, the two
// converters (Google 2019's per-task CSVs, scaled to an assumed largest
// machine; Azure 2017's CPU matrices from R data files), the sorting and
// the report, and the gzip-compressed output. rds.go decodes R's
// serialization format (.rda, optionally gzip- or bzip2-compressed) as
// far as those data files need it.
package main

//go:build linux

package topology

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cgpilot/cgpilot/test/tier"
)

var (
	update       = flag.Bool("update", false, "rewrite testdata/*.golden.json from the current output")
	makeFixtures = flag.Bool("make-fixtures", false, "rebuild testdata/*.tree from ../shared/data")
)

// A tree archive is a plain-text capture of the sysfs/procfs files that
// Discover reads, so fixture changes show up as readable diffs:
//
//	== F <path> <length>\n<length bytes>\n
//	== L <path> -> <target>\n
//
// Lines starting with # before the first entry are comments (provenance).

// readTreeArchive unpacks a tree archive into a fresh temporary directory.
func readTreeArchive(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	r := bufio.NewReader(bytes.NewReader(b))
	for {
		line, err := r.ReadString('\n')
		if line == "" && err != nil {
			break
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(line, "#") || line == "":
			continue
		case strings.HasPrefix(line, "== F "):
			f := strings.Fields(line)
			if len(f) != 4 {
				t.Fatalf("%s: bad entry %q", path, line)
			}
			n, err := strconv.Atoi(f[3])
			if err != nil {
				t.Fatalf("%s: bad length in %q", path, line)
			}
			data := make([]byte, n+1)
			if _, err := io_ReadFull(r, data); err != nil || data[n] != '\n' {
				t.Fatalf("%s: truncated entry %q", path, line)
			}
			p := safeJoin(t, dst, f[2])
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, data[:n], 0o644); err != nil {
				t.Fatal(err)
			}
		case strings.HasPrefix(line, "== L "):
			f := strings.Fields(line)
			if len(f) != 5 || f[3] != "->" || filepath.IsAbs(f[4]) {
				t.Fatalf("%s: bad link %q", path, line)
			}
			p := safeJoin(t, dst, f[2])
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(f[4], p); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("%s: unexpected line %q", path, line)
		}
	}
	return dst
}

func io_ReadFull(r *bufio.Reader, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := r.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func safeJoin(t testing.TB, root, rel string) string {
	t.Helper()
	c := filepath.Clean(rel)
	if filepath.IsAbs(c) || c == ".." || strings.HasPrefix(c, "../") {
		t.Fatalf("entry %q escapes the tree", rel)
	}
	return filepath.Join(root, c)
}

// discoveryFiles are the paths Discover reads; archives keep only these.
var discoveryFiles = regexp.MustCompile(`^(` + strings.Join([]string{
	`sys/devices/system/cpu/(online|isolated)`,
	`sys/devices/system/cpu/cpu\d+/online`,
	`sys/devices/system/cpu/cpu\d+/node\d+`,
	`sys/devices/system/cpu/cpu\d+/topology/(physical_package_id|die_id|core_id|cluster_id|book_id|drawer_id|core_cpus_list|core_cpus|thread_siblings_list|thread_siblings|package_cpus_list|package_cpus|core_siblings_list|core_siblings)`,
	`sys/devices/system/cpu/cpu\d+/cache/index\d+/(level|type|shared_cpu_list|shared_cpu_map)`,
	`sys/devices/system/node/node\d+/(cpulist|cpumap|distance)`,
	`sys/block/[^/]+/mq/\d+/cpu_list`,
	`proc/cmdline`, `proc/interrupts`,
	`proc/irq/\d+/(smp_affinity_list|smp_affinity|effective_affinity_list)`,
}, "|") + `)$`)

// writeTreeArchive packs the discovery files of root into path. keepIRQ,
// when not nil, filters /proc/interrupts lines and /proc/irq directories.
func writeTreeArchive(t testing.TB, root, path, header string, keepIRQ func(line string) bool) {
	t.Helper()
	var buf bytes.Buffer
	buf.WriteString(header)
	keptIRQs := map[string]bool{}
	var entries []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() && d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		if discoveryFiles.MatchString(rel) {
			entries = append(entries, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Follow sys/block links into the device tree for mq directories.
	blocks, _ := filepath.Glob(filepath.Join(root, "sys/block/*/mq/*/cpu_list"))
	for _, b := range blocks {
		rel, _ := filepath.Rel(root, b)
		entries = append(entries, filepath.ToSlash(rel))
	}
	sort.Strings(entries)
	seen := map[string]bool{}
	for _, rel := range entries {
		if seen[rel] {
			continue
		}
		seen[rel] = true
		p := filepath.Join(root, rel)
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		// sys/block/<dev> links are flattened: their mq files are stored
		// under sys/block/<dev>/mq directly.
		if fi.Mode()&fs.ModeSymlink != 0 && !strings.Contains(rel, "/mq/") {
			target, err := os.Readlink(p)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&buf, "== L %s -> %s\n", rel, target)
			continue
		}
		if fi.IsDir() {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if rel == "proc/interrupts" && keepIRQ != nil {
			lines := strings.SplitAfter(string(data), "\n")
			var kept []string
			for i, l := range lines {
				if i == 0 || keepIRQ(l) {
					kept = append(kept, l)
					if f := strings.Fields(l); len(f) > 0 {
						keptIRQs[strings.TrimSuffix(f[0], ":")] = true
					}
				}
			}
			data = []byte(strings.Join(kept, ""))
		}
		if m := regexp.MustCompile(`^proc/irq/(\d+)/`).FindStringSubmatch(rel); m != nil && keepIRQ != nil && !keptIRQs[m[1]] {
			continue
		}
		fmt.Fprintf(&buf, "== F %s %d\n", rel, len(data))
		buf.Write(data)
		buf.WriteString("\n")
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// fixtureSources say where each committed archive comes from.
var fixtureSources = []struct {
	name, data, archive, note string
	keepIRQ                   func(string) bool
}{
	{"xeon-l5640-2s", "ghw-sysfs-snapshots", "linux-amd64-8581cf3a529e5d8b97ea876eade2f60d.tar.gz",
		"2-socket Xeon L5640, SMT2, 24 CPUs (ghw snapshot, Apache-2.0)", nil},
	{"offline-cpu0", "hwloc-linux-sysfs", "tarballs/offline-cpu0-node0.tar.bz2",
		"dual E5-2680 v3 with CPUs 0-3,21-23 and NUMA node 0 offlined by hand (hwloc test suite, BSD-3-Clause)", nil},
	{"opteron-sparse-nodes", "hwloc-linux-sysfs", "tarballs/48amd64-4pa2n6c-sparse.tar.bz2",
		"4x Opteron Magny-Cours, 8 NUMA nodes with sparse ids 0,1,2,33,34,45,72,73 (hwloc test suite, BSD-3-Clause)", nil},
	{"pcidomain-blkmq", "hwloc-linux-sysfs", "tarballs/2pa-pcidomain32bits.tar.bz2",
		"2 CPUs with one blk-mq queue (hwloc test suite, BSD-3-Clause)", nil},
	{"nto-worker1-irqs", "nto-mustgather-irq-sysinfo", "bare-metal-worker1.internal.sysinfo.tgz",
		"2S Xeon Gold 6230 RT node, isolcpus=managed_irq,0-4,11-79 (OpenShift must-gather, Apache-2.0); " +
			"/proc/interrupts trimmed to the NVMe queues, 16 NIC queues and the first 20 other IRQs", keepSomeIRQs()},
}

func keepSomeIRQs() func(string) bool {
	nic, other := 0, 0
	return func(l string) bool {
		f := strings.Fields(l)
		if len(f) == 0 {
			return false
		}
		if _, err := strconv.Atoi(strings.TrimSuffix(f[0], ":")); err != nil {
			return true // NMI:, LOC:, …
		}
		name := f[len(f)-1]
		kind, _ := classifyIRQ(name)
		switch {
		case kind == IRQNVMe:
			return true
		case kind == IRQNet:
			nic++
			return nic <= 16
		default:
			other++
			return other <= 20
		}
	}
}

// TestMakeFixtures rebuilds the committed archives from the shared data
// (go test -run TestMakeFixtures -make-fixtures).
func TestMakeFixtures(t *testing.T) {
	if !*makeFixtures {
		t.Skip("run with -make-fixtures to rebuild testdata/*.tree from ../shared/data")
	}
	for _, src := range fixtureSources {
		root := unpack(t, filepath.Join(tier.SharedData(t, src.data), src.archive))
		header := fmt.Sprintf("# %s\n# source: ../shared/data/%s/%s, reduced to the files Discover reads\n", src.note, src.data, src.archive)
		writeTreeArchive(t, root, filepath.Join("testdata", src.name+".tree"), header, src.keepIRQ)
	}
}

type golden struct {
	Summary  Summary  `json:"summary"`
	Counts   Counts   `json:"counts"`
	Warnings []string `json:"warnings"`
}

// TestFixtures discovers each committed tree and compares it with its golden
// file (go test -run TestFixtures -update rewrites them).
func TestFixtures(t *testing.T) {
	trees, _ := filepath.Glob(filepath.Join("testdata", "*.tree"))
	if len(trees) < 5 {
		t.Fatalf("only %d fixture trees in testdata", len(trees))
	}
	for _, tree := range trees {
		name := strings.TrimSuffix(filepath.Base(tree), ".tree")
		t.Run(name, func(t *testing.T) {
			root := readTreeArchive(t, tree)
			topo, warns, err := DiscoverRoot(root)
			if err != nil {
				t.Fatal(err)
			}
			g := golden{Summary: topo.Summarize(), Counts: topo.Counts(), Warnings: []string{}}
			for _, w := range warns {
				rel, _ := filepath.Rel(root, w.Path)
				g.Warnings = append(g.Warnings, rel+": "+w.Msg)
			}
			got, err := json.MarshalIndent(g, "", " ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", name+".golden.json")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from the discovered topology; run go test -run TestFixtures -update and review the diff", path)
			}
		})
	}
}

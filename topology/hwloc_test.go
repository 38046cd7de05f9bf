//go:build linux

package topology

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"
)

// hwlocView is what hwloc's expected output says about a machine: the PUs it
// shows and, per object type (Package, NUMANode, Core, L3Cache, …), the
// cpusets of its objects.
type hwlocView struct {
	pus     cpuset.CPUSet
	objects map[string][]cpuset.CPUSet
}

var consoleLine = regexp.MustCompile(`^( *)([A-Za-z][A-Za-z0-9]*)(\[[^\]]*\])? (?:L#\d+ )?\((?:P#(\d+))?`)

// parseHwlocConsole reads lstopo console output: objects nest by two-space
// indentation; an object's cpuset is the union of its PUs, and a NUMANode
// (a memory child, possibly below a MemCache) takes the cpuset of its
// nearest normal ancestor.
func parseHwlocConsole(path string) (hwlocView, error) {
	f, err := os.Open(path)
	if err != nil {
		return hwlocView{}, err
	}
	defer f.Close()
	type obj struct {
		typ    string
		indent int
		pus    []int
		parent *obj
	}
	var all []*obj
	var stack []*obj
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		m := consoleLine.FindStringSubmatch(sc.Text())
		if m == nil || !strings.Contains(sc.Text(), "L#") && m[2] != "Machine" {
			continue
		}
		indent := len(m[1])
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		o := &obj{typ: m[2], indent: indent}
		if len(stack) > 0 {
			o.parent = stack[len(stack)-1]
		}
		stack = append(stack, o)
		all = append(all, o)
		if m[2] == "PU" {
			id, err := strconv.Atoi(m[4])
			if err != nil {
				return hwlocView{}, fmt.Errorf("%s: PU without P#: %q", path, sc.Text())
			}
			for p := o; p != nil; p = p.parent {
				p.pus = append(p.pus, id)
			}
		}
	}
	v := hwlocView{pus: cpuset.New(), objects: map[string][]cpuset.CPUSet{}}
	for _, o := range all {
		set := cpuset.New(o.pus...)
		if o.typ == "NUMANode" {
			p := o.parent
			for p != nil && (p.typ == "MemCache" || p.typ == "NUMANode") {
				p = p.parent
			}
			if p != nil {
				set = cpuset.New(p.pus...)
			}
		}
		if o.typ == "PU" {
			v.pus = v.pus.Union(set)
		}
		v.objects[o.typ] = append(v.objects[o.typ], set)
	}
	return v, sc.Err()
}

type hwlocXMLObject struct {
	Type     string           `xml:"type,attr"`
	OSIndex  string           `xml:"os_index,attr"`
	CPUSet   string           `xml:"cpuset,attr"`
	Children []hwlocXMLObject `xml:"object"`
}

// parseHwlocXML reads an hwloc XML export: every object carries its cpuset.
func parseHwlocXML(path string) (hwlocView, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return hwlocView{}, err
	}
	var root struct {
		Objects []hwlocXMLObject `xml:"object"`
	}
	if err := xml.Unmarshal(b, &root); err != nil {
		return hwlocView{}, fmt.Errorf("%s: %w", path, err)
	}
	v := hwlocView{pus: cpuset.New(), objects: map[string][]cpuset.CPUSet{}}
	var walk func(o hwlocXMLObject) error
	walk = func(o hwlocXMLObject) error {
		if o.CPUSet == "" { // I/O objects (bridges, PCI devices) have none
			for _, c := range o.Children {
				if err := walk(c); err != nil {
					return err
				}
			}
			return nil
		}
		words := strings.Split(o.CPUSet, ",")
		for i := range words {
			words[i] = strings.TrimPrefix(words[i], "0x")
		}
		set, err := parseCPUMask(strings.Join(words, ","))
		if err != nil {
			return fmt.Errorf("%s: %s cpuset %q: %w", path, o.Type, o.CPUSet, err)
		}
		if o.Type == "PU" {
			v.pus = v.pus.Union(set)
		}
		v.objects[o.Type] = append(v.objects[o.Type], set)
		for _, c := range o.Children {
			if err := walk(c); err != nil {
				return err
			}
		}
		return nil
	}
	for _, o := range root.Objects {
		if err := walk(o); err != nil {
			return hwlocView{}, err
		}
	}
	return v, nil
}

// partition returns the distinct non-empty groups of sets restricted to pus,
// in canonical order, or ok=false when two groups overlap (hwloc shows
// overlapping objects, e.g. NUMA nodes sharing CPUs, that no partition can
// express).
func partition(sets []cpuset.CPUSet, pus cpuset.CPUSet) ([]string, bool) {
	seen := map[string]bool{}
	union := cpuset.New()
	total := 0
	for _, s := range sets {
		s = s.Intersection(pus)
		if s.IsEmpty() || seen[s.String()] {
			continue
		}
		seen[s.String()] = true
		union = union.Union(s)
		total += s.Size()
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out, total == union.Size()
}

// ourGroups partitions pus by an attribute of our topology; CPUs with an
// Unknown attribute form one group, as hwloc puts all such PUs under the
// machine.
func ourGroups(topo *Topology, pus cpuset.CPUSet, attr func(CPU) int) []cpuset.CPUSet {
	m := map[int][]int{}
	for _, id := range pus.List() {
		c, ok := topo.CPU(id)
		if !ok {
			continue
		}
		m[attr(c)] = append(m[attr(c)], id)
	}
	var out []cpuset.CPUSet
	for _, ids := range m {
		out = append(out, cpuset.New(ids...))
	}
	return out
}

// hwlocCase is one expected-output file of hwloc's test suite and the
// tarball it was produced from.
type hwlocCase struct {
	name, tarball, expected string
	plain                   bool // no option or environment that changes the objects compared
}

// harmlessHwlocOptions and harmlessHwlocEnv change what lstopo prints
// (verbosity, I/O devices, instruction caches, CPU kinds, merged levels) but
// not which PUs share a package, NUMA node, core or cache.
var (
	harmlessHwlocOptions = map[string]bool{"-": true, "-v": true, "--no-icaches": true, "--no-caches": true,
		"--whole-io": true, "--disallowed": true, "--merge": true, "--filter": true, "all:structure": true}
	harmlessHwlocEnv = map[string]bool{"HWLOC_COMPONENTS": true, "HWLOC_KEEP_NVIDIA_GPU_NUMA_NODES": true,
		"HWLOC_PCI_LOCALITY": true, "HWLOC_CPUKINDS": true, "HWLOC_SHOW_ERRORS": true}
)

func hwlocCases(t *testing.T, dir string) []hwlocCase {
	tests, err := filepath.Glob(filepath.Join(dir, "expected", "*.test"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no .test files under %s/expected", dir)
	}
	var out []hwlocCase
	for _, tf := range tests {
		b, err := os.ReadFile(tf)
		if err != nil {
			t.Fatal(err)
		}
		c := hwlocCase{name: strings.TrimSuffix(filepath.Base(tf), ".test"), plain: true}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ":")
			if !ok || strings.HasPrefix(line, "#") {
				continue
			}
			v = strings.TrimSpace(v)
			switch strings.TrimSpace(k) {
			case "source":
				c.tarball = filepath.Join(dir, "tarballs", v)
			case "target":
				c.expected = filepath.Join(dir, "expected", v)
			case "options":
				for _, o := range strings.Fields(v) {
					if !harmlessHwlocOptions[o] {
						c.plain = false
					}
				}
			case "env":
				if !strings.HasPrefix(v, "export ") && !harmlessHwlocEnv[strings.SplitN(v, "=", 2)[0]] {
					c.plain = false
				}
			}
		}
		out = append(out, c)
	}
	return out
}

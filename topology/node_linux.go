//go:build linux

package topology

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"
	"sort"
	"strconv"

	"k8s.io/utils/cpuset"
)

// nodeIDs lists the nodeN entries (directories or links) of dir.
func nodeIDs(dir string) ([]int, bool, error) {
	ids, err := numberedEntries(dir, "node", math.MaxInt)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("%w: %s: %w", ErrRead, dir, err)
	}
	return ids, true, nil
}

// readNodes reads <sys>/devices/system/node and sets cpus[i].NUMA. A node's
// CPUs come from node*/cpulist, else node*/cpumap; CPUs that no node lists
// fall back to their cpu*/node* links (only to nodes that exist, or to any
// node when the kernel has no node directory at all).
func readNodes(sysRoot string, cpus []CPU, index map[int]int) ([]NUMANode, []Warning, error) {
	nodeRoot := filepath.Join(sysRoot, "devices", "system", "node")
	ids, haveRoot, err := nodeIDs(nodeRoot)
	if err != nil {
		return nil, nil, err
	}
	var warns []Warning
	nodes := make([]NUMANode, 0, len(ids))
	pos := map[int]int{}
	for _, id := range ids {
		dir := filepath.Join(nodeRoot, "node"+strconv.Itoa(id))
		set, _, err := readFirstSet(dir, "cpulist", "cpumap")
		if err != nil {
			return nil, nil, err
		}
		pos[id] = len(nodes)
		nodes = append(nodes, NUMANode{ID: id, CPUs: set})
	}
	for i := range nodes {
		path := filepath.Join(nodeRoot, "node"+strconv.Itoa(nodes[i].ID), "distance")
		s, ok, err := readOptional(path)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			continue
		}
		row, err := parseDistances(s)
		if err != nil {
			return nil, nil, parseErr(path, s, err)
		}
		nodes[i].Distances = make(map[int]int, len(row))
		switch {
		case len(row) == len(nodes):
			for j, d := range row {
				nodes[i].Distances[nodes[j].ID] = d
			}
		case len(row) > ids[len(ids)-1]:
			// The row covers node ids 0..len-1, some of them offline.
			for _, n := range nodes {
				nodes[i].Distances[n.ID] = row[n.ID]
			}
		default:
			nodes[i].Distances = nil
			warns = append(warns, Warning{path, fmt.Sprintf("%d distances for %d nodes: distances ignored", len(row), len(nodes))})
		}
	}
	var overlap []int
	for _, n := range nodes {
		for _, id := range n.CPUs.List() {
			i, ok := index[id]
			if !ok {
				continue
			}
			if cpus[i].NUMA != Unknown && cpus[i].NUMA != n.ID {
				overlap = append(overlap, id)
				continue
			}
			cpus[i].NUMA = n.ID
		}
	}
	if len(overlap) > 0 {
		warns = append(warns, Warning{nodeRoot, "CPUs listed by several nodes keep the lowest node: " + cpuset.New(overlap...).String()})
	}
	// Fallback: cpu*/node* links.
	cpuRoot := filepath.Join(sysRoot, "devices", "system", "cpu")
	var unknown []int
	for i := range cpus {
		if cpus[i].NUMA != Unknown {
			continue
		}
		links, _, err := nodeIDs(filepath.Join(cpuRoot, "cpu"+strconv.Itoa(cpus[i].ID)))
		if err != nil {
			return nil, nil, err
		}
		for _, l := range links {
			if _, exists := pos[l]; exists || !haveRoot {
				cpus[i].NUMA = l
				break
			}
		}
		if cpus[i].NUMA == Unknown {
			if cpus[i].Online {
				unknown = append(unknown, cpus[i].ID)
			}
			continue
		}
		p, exists := pos[cpus[i].NUMA]
		if !exists {
			p = len(nodes)
			pos[cpus[i].NUMA] = p
			nodes = append(nodes, NUMANode{ID: cpus[i].NUMA, CPUs: cpuset.New()})
		}
		nodes[p].CPUs = nodes[p].CPUs.Union(cpuset.New(cpus[i].ID))
	}
	if !haveRoot {
		warns = append(warns, Warning{nodeRoot, "no NUMA node directory"})
	}
	if len(unknown) > 0 {
		warns = append(warns, Warning{nodeRoot, "NUMA node unknown for online CPUs " + cpuset.New(unknown...).String()})
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].ID < nodes[j].ID })
	return nodes, warns, nil
}

//go:build linux

package cgroup

import "testing"

// TestKnownRecord: the record trusts a value only in a watched directory,
// and drops it when events were lost and when the directory goes. (Reads
// and writes through held descriptors, and the watch's read of a reported
// write, are tested on real cgroups: known_kernel_test.go.)
func TestKnownRecord(t *testing.T) {
	var k known
	const dir, file, quota = "/sys/fs/cgroup/cpuset/kubepods/pod1", cpusFile, "cpu.cfs_quota_us"
	set := func(f, v string) {
		k.mu.Lock()
		defer k.mu.Unlock()
		if d := k.dir(dir); d != nil {
			d.vals[knownIndex(f)] = knownVal{v: v, set: true}
		}
	}
	set(file, "0-1")
	if _, ok := k.get(dir, file); ok {
		t.Fatal("a value of an unwatched directory is trusted")
	}
	k.watching(dir, true)
	if _, ok := k.get(dir, file); ok {
		t.Fatal("a value never read or written is trusted")
	}
	set(file, "0-1")
	if v, ok := k.get(dir, file); !ok || v != "0-1" {
		t.Fatalf("recorded: %q %v, want 0-1", v, ok)
	}
	set(quota, "-1")
	set(file, "1")
	k.clear(false) // an overflowed queue
	if _, ok := k.get(dir, quota); ok {
		t.Fatal("a value survived lost events")
	}
	if !k.watched(dir) {
		t.Fatal("lost events unwatched the directory")
	}
	set(file, "1")
	k.forget(dir)
	if _, ok := k.get(dir, file); ok {
		t.Fatal("a forgotten value is trusted")
	}
	set(file, "1")
	k.watching(dir, false) // removed
	if _, ok := k.get(dir, file); ok || k.watched(dir) {
		t.Fatal("a removed directory is still trusted")
	}
	k.watching(dir, true)
	if knownIndex("memory.limit_in_bytes") >= 0 {
		t.Fatal("a memory file is recorded")
	}
	if _, ok := k.get(dir, "memory.limit_in_bytes"); ok {
		t.Fatal("a memory file is trusted")
	}
}

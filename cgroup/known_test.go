//go:build linux

package cgroup

import "testing"

// TestKnownRecord: the record trusts a value only in a watched directory,
// only once its read or write is over, and drops it when the watch reports
// another value or reports anything while the read or write is under way.
func TestKnownRecord(t *testing.T) {
	var k known
	const dir, file = "/sys/fs/cgroup/cpuset/kubepods/pod1", cpusFile
	if tok := k.begin(dir, file); tok != 0 {
		t.Fatalf("an unwatched directory got a token %d", tok)
	}
	k.watching(dir, true)
	if _, ok := k.get(dir, file); ok {
		t.Fatal("a value never read or written is trusted")
	}
	tok := k.begin(dir, file)
	if _, ok := k.get(dir, file); ok {
		t.Fatal("a value is trusted while its write is under way")
	}
	k.commit(dir, file, tok, "0-1", true)
	if v, ok := k.get(dir, file); !ok || v != "0-1" {
		t.Fatalf("after the write: %q %v, want 0-1", v, ok)
	}
	k.observe(dir, file, "0,1") // our own write, printed another way
	if v, ok := k.get(dir, file); !ok || v != "0-1" {
		t.Fatalf("an equal set reported dropped the record: %q %v", v, ok)
	}
	k.observe(dir, file, "1") // someone else
	if _, ok := k.get(dir, file); ok {
		t.Fatal("a value someone else wrote did not drop the record")
	}

	tok = k.begin(dir, file)
	k.observe(dir, file, "0-1") // an event while our write is under way
	k.commit(dir, file, tok, "0-1", true)
	if _, ok := k.get(dir, file); ok {
		t.Fatal("a write with an event in between was trusted")
	}
	tok = k.begin(dir, file)
	k.commit(dir, file, tok, "1", false)
	if _, ok := k.get(dir, file); ok {
		t.Fatal("a failed write was recorded")
	}

	quota := "cpu.cfs_quota_us"
	k.commit(dir, quota, k.begin(dir, quota), "-1", true)
	k.commit(dir, file, k.begin(dir, file), "1", true)
	k.clear(false) // an overflowed queue
	if _, ok := k.get(dir, quota); ok {
		t.Fatal("a value survived lost events")
	}
	if !k.watched(dir) {
		t.Fatal("lost events unwatched the directory")
	}
	k.commit(dir, file, k.begin(dir, file), "1", true)
	k.watching(dir, false) // removed
	if _, ok := k.get(dir, file); ok || k.watched(dir) {
		t.Fatal("a removed directory is still trusted")
	}
	k.watching(dir, true)
	if tok := k.begin(dir, "memory.limit_in_bytes"); tok != 0 {
		t.Fatal("a memory file is recorded")
	}
}

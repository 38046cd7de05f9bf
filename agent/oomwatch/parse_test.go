package oomwatch

import (
	"errors"
	"testing"
	"time"
)

func TestParseOOMKillCounter(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     uint64
	}{
		{"v1 oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", 3},
		{"v2 memory.events", "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n", 2},
		{"no trailing newline", "oom_kill 7", 7},
		{"oom before oom_kill", "oom 9\noom_kill 1", 1},
		{"max uint64", "oom_kill 18446744073709551615\n", 1<<64 - 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseOOMKillCounter([]byte(tc.in))
			if err != nil || got != tc.want {
				t.Errorf("= %d, %v; want %d", got, err, tc.want)
			}
		})
	}
	for _, in := range []string{"", "oom 1\n", "oom_kill\n", "oom_kill x\n", "oom_kill -1\n", "oom_kill 18446744073709551616\n", "oom_kill_disable 0\n"} {
		if _, err := parseOOMKillCounter([]byte(in)); !errors.Is(err, ErrParse) {
			t.Errorf("parseOOMKillCounter(%q) err = %v, want ErrParse", in, err)
		}
	}
}

func TestParseKmsgRecord(t *testing.T) {
	r, err := parseKmsgRecord([]byte("6,1234,5678901,-;Memory cgroup out of memory: Killed process 42 (hog)\n SUBSYSTEM=x\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := kmsgRecord{Seq: 1234, Mono: 5678901 * time.Microsecond, Msg: "Memory cgroup out of memory: Killed process 42 (hog)"}
	if r != want {
		t.Errorf("= %+v, want %+v", r, want)
	}
	if r, err := parseKmsgRecord([]byte("4,5,6,c,extra;msg;with;semicolons")); err != nil || r.Msg != "msg;with;semicolons" {
		t.Errorf("extra header field: %+v, %v", r, err)
	}
	for _, in := range []string{"", "no separator", "6,1;x", "6,a,1,-;x", "6,1,b,-;x", "6,1,-5,-;x", "6,1,99999999999999999999,-;x"} {
		if _, err := parseKmsgRecord([]byte(in)); !errors.Is(err, ErrParse) {
			t.Errorf("parseKmsgRecord(%q) err = %v, want ErrParse", in, err)
		}
	}
}

func TestParseOOMKillLine(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     oomKillLine
	}{
		{"memcg v1 (captured on the v1 host)",
			"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/process_api/x/cgfeas-oom,task_memcg=/process_api/x/cgfeas-oom,task=helper,pid=20712,uid=0",
			oomKillLine{"CONSTRAINT_MEMCG", "/process_api/x/cgfeas-oom", "helper", 20712}},
		{"global OOM: no oom_memcg",
			"oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/kubepods/pod1/c1,task=java,pid=7,uid=1000",
			oomKillLine{"CONSTRAINT_NONE", "/kubepods/pod1/c1", "java", 7}},
		{"commas in path and comm",
			"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/a,b,task_memcg=/a,b/c,task=x,task=y,pid=9,uid=0",
			oomKillLine{"CONSTRAINT_MEMCG", "/a,b/c", "x,task=y", 9}},
		{"root cgroup", "oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/,task=a,pid=1,uid=0",
			oomKillLine{"CONSTRAINT_NONE", "/", "a", 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseOOMKillLine(tc.in)
			if !ok || got != tc.want {
				t.Errorf("= %+v, %v; want %+v", got, ok, tc.want)
			}
		})
	}
	for _, in := range []string{
		"",
		"Memory cgroup out of memory: Killed process 42 (hog)",
		"oom-kill:",
		"oom-kill:constraint=X,task_memcg=/a,task=b,pid=1",       // no uid
		"oom-kill:constraint=X,task_memcg=/a,task=b,uid=0",       // no pid
		"oom-kill:constraint=X,task_memcg=/a,task=b,pid=x,uid=0", // bad pid
		"oom-kill:constraint=X,task_memcg=/a,task=b,pid=0,uid=0", // pid 0
		"oom-kill:constraint=X,task=b,pid=1,uid=0",               // no task_memcg
		"oom-kill:constraint=X,task_memcg=/a,pid=1,uid=0",        // no task
		"oom-kill:constraint=X,task_memcg=a,task=b,pid=1,uid=0",  // relative path
		"oom-kill:nodemask=(null),task_memcg=/a,task=b,pid=1,uid=0",
	} {
		if l, ok := parseOOMKillLine(in); ok {
			t.Errorf("parseOOMKillLine(%q) = %+v, want not ok", in, l)
		}
	}
}

func FuzzParseOOMKillLine(f *testing.F) {
	f.Add("oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/a,task_memcg=/a/b,task=hog,pid=42,uid=0")
	f.Add("oom-kill:constraint=C,task_memcg=/,task=,pid=1,uid=0")
	f.Fuzz(func(t *testing.T, s string) {
		l, ok := parseOOMKillLine(s)
		if !ok {
			return
		}
		// What parses must survive a round trip through the kernel's format.
		again, ok := parseOOMKillLine(l.String())
		if !ok || again != l {
			t.Fatalf("round trip of %q: %+v -> %q -> %+v, %v", s, l, l.String(), again, ok)
		}
	})
}

func FuzzParseKmsgRecord(f *testing.F) {
	f.Add([]byte("6,1234,5678901,-;oom-kill:constraint=CONSTRAINT_MEMCG,task_memcg=/a,task=b,pid=1,uid=0\n"))
	f.Add([]byte("4,5,6,c,extra;msg"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := parseKmsgRecord(b)
		if err == nil && r.Mono < 0 {
			t.Fatalf("negative timestamp %v from %q", r.Mono, b)
		}
	})
}

func FuzzParseOOMKillCounter(f *testing.F) {
	f.Add([]byte("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"))
	f.Add([]byte("low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if _, err := parseOOMKillCounter(b); err != nil && !errors.Is(err, ErrParse) {
			t.Fatalf("error %v does not wrap ErrParse", err)
		}
	})
}

func TestStrings(t *testing.T) {
	for v, want := range map[interface{ String() string }]string{
		SourceBPF: "bpf:mark_victim", SourceMemoryEvents: "memory.events", SourceOOMControl: "memory.oom_control", Source(9): "Source(9)",
	} {
		if got := v.String(); got != want {
			t.Errorf("%#v.String() = %q, want %q", v, got, want)
		}
	}
}

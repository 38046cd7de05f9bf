//go:build linux

package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"golang.org/x/sys/unix"
)

// logLines is a logger that keeps every line, for tests that assert what
// the agent says.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.lines = append(l.lines, prefix+" "+args)
	}, funcr.Options{})
}

func (l *logLines) grep(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

func mode(t *testing.T, path string) (os.FileMode, int) {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode(), int(st.Sys().(*syscall.Stat_t).Gid)
}

// TestLocalAPISocketFiles: the agent makes its socket directory 0700 (and
// tightens a hostPath's 0755, saying so), refuses a directory it does not
// own or a symlink, leaves the socket 0600 whatever the process umask is
// (restored afterwards), and with a group opens both to that group only.
func TestLocalAPISocketFiles(t *testing.T) {
	var logs logLines
	base := t.TempDir()
	listen := func(path string, gid int) (net.Listener, error) {
		return listenSocket(socketOptions{path: path, gid: gid, log: logs.logger()}, localAPILimits)
	}

	old := unix.Umask(0) // the worst a caller could leave
	defer unix.Umask(old)
	fresh := filepath.Join(base, "fresh", "run", "agent.sock")
	l, err := listen(fresh, -1)
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := mode(t, filepath.Dir(fresh)); m.Perm() != 0o700 || !m.IsDir() {
		t.Errorf("new socket directory %v, want drwx------", m)
	}
	if m, _ := mode(t, fresh); m.Perm() != 0o600 || m&os.ModeSocket == 0 {
		t.Errorf("socket %v, want srw-------", m)
	}
	if cur := unix.Umask(0); cur != 0 {
		t.Errorf("umask after listenSocket %#o, want the caller's 0 back", cur)
	}
	l.Close()
	if _, err := os.Lstat(fresh); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after Close: %v", err)
	}

	// A hostPath directory as the kubelet makes it: 0755.
	loose := filepath.Join(base, "loose")
	if err := os.Mkdir(loose, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(loose, 0o755)
	l, err = listen(filepath.Join(loose, "agent.sock"), -1)
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if m, _ := mode(t, loose); m.Perm() != 0o700 {
		t.Errorf("loose directory left %v, want 0700", m)
	}
	if got := logs.grep("too open"); len(got) != 1 || !strings.Contains(got[0], "0755") {
		t.Errorf("log lines about the loose directory: %q, want one naming 0755", got)
	}

	// A stale socket is replaced; a regular file is not touched.
	stale := filepath.Join(base, "stale")
	os.Mkdir(stale, 0o700)
	sock := filepath.Join(stale, "agent.sock")
	if s, err := net.Listen("unix", sock); err == nil {
		s.(*net.UnixListener).SetUnlinkOnClose(false)
		s.Close()
	}
	if l, err = listen(sock, -1); err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	l.Close()
	regular := filepath.Join(stale, "file.sock")
	os.WriteFile(regular, []byte("keep"), 0o600)
	if _, err := listen(regular, -1); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("over a regular file: %v, want not a socket", err)
	}
	if b, _ := os.ReadFile(regular); string(b) != "keep" {
		t.Error("the regular file was changed")
	}

	// A symlinked directory and a directory someone else owns are refused.
	os.Symlink(stale, filepath.Join(base, "link"))
	if _, err := listen(filepath.Join(base, "link", "agent.sock"), -1); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("symlinked directory: %v, want refused", err)
	}
	if os.Geteuid() == 0 {
		other := filepath.Join(base, "other")
		os.Mkdir(other, 0o700)
		if err := os.Chown(other, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := listen(filepath.Join(other, "agent.sock"), -1); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Errorf("directory owned by 65534: %v, want refused", err)
		}
	}

	// With a group: the directory 0710 and the socket 0660, both the group's.
	gid := os.Getegid() // a group the test may give without root
	if os.Geteuid() == 0 {
		gid = 4242
	}
	grp := filepath.Join(base, "group", "agent.sock")
	if l, err = listen(grp, gid); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if m, g := mode(t, filepath.Dir(grp)); m.Perm() != 0o710 || g != gid {
		t.Errorf("group socket directory %v gid %d, want 0710 gid %d", m, g, gid)
	}
	if m, g := mode(t, grp); m.Perm() != 0o660 || g != gid {
		t.Errorf("group socket %v gid %d, want 0660 gid %d", m, g, gid)
	}
	if got := logs.grep("too open"); len(got) != 1 {
		t.Errorf("a correct directory was reported too open: %q", got)
	}
}

// dialEnv names the socket the dial helper (TestHelperDialSocket, run as
// another user) talks to.
const dialEnv = "CGPILOT_TEST_DIAL_SOCKET"

// TestHelperDialSocket is not a test: run by TestLocalAPIPeerCredentials
// as another user, it asks the socket in $CGPILOT_TEST_DIAL_SOCKET for
// /v1/pools and prints the status line it gets, or the error.
func TestHelperDialSocket(t *testing.T) {
	path := os.Getenv(dialEnv)
	if path == "" {
		t.Skip("helper process of TestLocalAPIPeerCredentials; runs only there")
	}
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		fmt.Println("RESULT dial:", err)
		return
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET /v1/pools HTTP/1.0\r\n\r\n"); err != nil {
		fmt.Println("RESULT write:", err)
		return
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		fmt.Println("RESULT read:", err)
		return
	}
	fmt.Println("RESULT", strings.TrimSpace(line))
}

// runAs runs the dial helper (a copy of this test binary any user may
// execute) as uid with gid and supplementary groups, and returns what it
// got.
func runAs(t *testing.T, bin, socket string, uid, gid uint32, groups ...uint32) string {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^TestHelperDialSocket$", "-test.v")
	cmd.Env = append(os.Environ(), dialEnv+"="+socket)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
	cmd.Dir = "/"
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dial helper as %d:%d: %v\n%s", uid, gid, err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if r, ok := strings.CutPrefix(l, "RESULT "); ok {
			return r
		}
	}
	t.Fatalf("dial helper printed no result:\n%s", out)
	return ""
}

// copyTestBinary copies this test binary where any user may run it.
func copyTestBinary(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cgpilot-dialhelper-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "dialhelper")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// TestLocalAPIPeerCredentials: processes of other users (uid 65534) are
// kept out of the local API twice. With the agent's own files they cannot
// even connect (the directory is 0700). With the files opened to everyone
// (as a mistaken hostPath or chmod would), the peer check still closes
// their connections unserved, counts and logs them (rate-limited); a
// member of the configured group, by its effective or a supplementary
// group, and root are served.
func TestLocalAPIPeerCredentials(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a helper process as uid 65534 (run the unit tests as root, e.g. make test-kernel)")
	}
	const nobody, group = 65534, 4242
	bin := copyTestBinary(t)
	var logs logLines
	refused := map[string]int{}
	var mu sync.Mutex
	serve := func(path string, gid int) {
		l, err := listenSocket(socketOptions{path: path, gid: gid, log: logs.logger(), refused: func(reason string) {
			mu.Lock()
			refused[reason]++
			mu.Unlock()
		}}, localAPILimits)
		if err != nil {
			t.Fatal(err)
		}
		s := newServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "{}") }), localAPILimits)
		go s.Serve(l)
		t.Cleanup(func() { s.Close() })
	}
	dir := func(name string) string {
		d := filepath.Join(t.TempDir(), name)
		os.Chmod(filepath.Dir(d), 0o755) // t.TempDir's parents are 0700
		os.Chmod(filepath.Dir(filepath.Dir(d)), 0o755)
		return filepath.Join(d, "agent.sock")
	}

	own := dir("own")
	serve(own, -1)
	if got := runAs(t, bin, own, nobody, nobody); !strings.Contains(got, "permission denied") {
		t.Errorf("uid 65534 on the agent's own socket: %q, want permission denied at connect", got)
	}

	open := dir("open")
	serve(open, group)
	os.Chmod(filepath.Dir(open), 0o755)
	os.Chmod(open, 0o666)
	for _, tc := range []struct {
		name     string
		uid, gid uint32
		groups   []uint32
		served   bool
	}{
		{"nobody", nobody, nobody, nil, false},
		{"nobody twice", nobody, nobody, []uint32{100, 101}, false},
		{"effective group", nobody, group, nil, true},
		{"supplementary group", nobody, nobody, []uint32{100, group}, true},
		{"root", 0, 0, nil, true},
	} {
		got := runAs(t, bin, open, tc.uid, tc.gid, tc.groups...)
		if served := strings.HasPrefix(got, "HTTP/1.0 200"); served != tc.served {
			t.Errorf("%s (uid %d gid %d groups %v): %q, served %v, want %v", tc.name, tc.uid, tc.gid, tc.groups, got, served, tc.served)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if refused[refusedPeer] != 2 || len(refused) != 1 {
		t.Errorf("refusals counted %v, want %s: 2", refused, refusedPeer)
	}
	if got := logs.grep("local API connection refused"); len(got) != 1 || !strings.Contains(got[0], `"uid"=65534`) {
		t.Errorf("refusal log lines %q, want one (rate-limited) naming uid 65534", got)
	}
}

// TestServerLimits holds the local API (unix) and the health endpoint
// (TCP loopback) to their limits: at most maxConns requests are served at
// once, the rest wait; a client that never finishes its headers
// (slowloris) is cut off after the read-header timeout and frees its slot;
// an idle keep-alive connection is closed after the idle timeout.
func TestServerLimits(t *testing.T) {
	lim := serverLimits{readHeader: 300 * time.Millisecond, read: time.Second, write: 5 * time.Second, idle: 300 * time.Millisecond, maxConns: 3}
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			var l net.Listener
			var err error
			addr := "127.0.0.1:0"
			if network == "unix" {
				addr = filepath.Join(t.TempDir(), "s", "agent.sock")
				l, err = listenSocket(socketOptions{path: addr, gid: -1, log: logr.Discard()}, lim)
			} else {
				l, err = listenTCP(addr, lim)
				addr = l.Addr().String()
			}
			if err != nil {
				t.Fatal(err)
			}
			var inFlight, peak atomic.Int32
			release := make(chan struct{})
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := inFlight.Add(1)
				defer inFlight.Add(-1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				if r.URL.Path == "/block" {
					<-release
				}
				io.WriteString(w, "ok")
			})
			s := newServer(h, lim)
			go s.Serve(l)
			defer s.Close()
			dial := func() net.Conn {
				c, err := net.Dial(network, addr)
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			get := func(path string) error {
				c := dial()
				defer c.Close()
				c.SetDeadline(time.Now().Add(10 * time.Second))
				io.WriteString(c, "GET "+path+" HTTP/1.0\r\n\r\n")
				line, err := bufio.NewReader(c).ReadString('\n')
				if err == nil && !strings.HasPrefix(line, "HTTP/1.0 200") {
					err = fmt.Errorf("answer %q", line)
				}
				return err
			}

			// The cap: 6 blocking requests, 3 served at once.
			var wg sync.WaitGroup
			errs := make(chan error, 6)
			for range 6 {
				wg.Add(1)
				go func() { defer wg.Done(); errs <- get("/block") }()
			}
			deadline := time.Now().Add(5 * time.Second)
			for inFlight.Load() < 3 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(100 * time.Millisecond) // room for a 4th, were the cap broken
			if p := peak.Load(); p != 3 {
				t.Errorf("%d requests served at once, want the cap 3", p)
			}
			close(release)
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Errorf("a request waiting for a slot: %v", err)
				}
			}

			// Slowloris: 3 clients hold every slot with unfinished headers.
			start := time.Now()
			var slow []net.Conn
			for range 3 {
				c := dial()
				io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n")
				slow = append(slow, c)
			}
			if err := get("/"); err != nil {
				t.Fatalf("a request behind 3 slowloris clients: %v", err)
			}
			if waited := time.Since(start); waited < lim.readHeader {
				t.Errorf("served after %v, before the slowloris clients could have been cut off (%v): the cap did not hold", waited, lim.readHeader)
			}
			for i, c := range slow {
				c.SetReadDeadline(time.Now().Add(5 * time.Second))
				b, err := io.ReadAll(c)
				if err != nil {
					t.Errorf("slowloris client %d: %v, want the server to close it", i, err)
				}
				t.Logf("slowloris client %d: closed by the server after %v with %q", i, time.Since(start).Round(time.Millisecond), firstLine(b))
				c.Close()
			}

			// Idle keep-alive: closed by the server.
			c := dial()
			defer c.Close()
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			idleFrom := time.Now()
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
				t.Errorf("idle keep-alive connection: %v, want EOF from the server", err)
			}
			if d := time.Since(idleFrom); d < lim.idle/2 {
				t.Errorf("idle connection closed after %v, before the idle timeout %v", d, lim.idle)
			}
		})
	}
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(s)
}

package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/go-logr/logr"
	"golang.org/x/net/netutil"
	"golang.org/x/sys/unix"
	"golang.org/x/time/rate"
)

// socket.go: the listeners. The local API's unix socket is for root (and
// an optional group) on this node only; every listener has timeouts and a
// connection cap, so that a slow or greedy client costs a few sockets, not
// the agent's memory or file descriptors.

// serverLimits are an HTTP server's timeouts and connection cap.
type serverLimits struct {
	readHeader, read, write, idle time.Duration
	maxConns                      int
}

// localAPILimits bound the local API: cgpilotctl asks one question per
// connection (an idle one is closed soon, it holds a slot); `history`
// streams up to days of rows, hence the long write.
var localAPILimits = serverLimits{readHeader: 5 * time.Second, read: 10 * time.Second, write: 2 * time.Minute, idle: 5 * time.Second, maxConns: 16}

// httpLimits bound the health and metrics servers: the kubelet's probes and
// a Prometheus or two.
var httpLimits = serverLimits{readHeader: 5 * time.Second, read: 10 * time.Second, write: 30 * time.Second, idle: time.Minute, maxConns: 16}

// newServer is an http.Server for h with the limits' timeouts.
func newServer(h http.Handler, lim serverLimits) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: lim.readHeader, ReadTimeout: lim.read, WriteTimeout: lim.write, IdleTimeout: lim.idle}
}

// listenTCP listens on addr with at most lim.maxConns connections open.
func listenTCP(addr string, lim serverLimits) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return netutil.LimitListener(l, lim.maxConns), nil
}

// socketOptions say who may use the local API socket.
type socketOptions struct {
	path string
	// gid, when >= 0, is a group whose members may use the socket besides
	// root: the socket is then 0660 and its directory 0710, both of that
	// group.
	gid int
	// refused is told of each connection turned away (the metric).
	refused func(reason string)
	log     logr.Logger
}

// umaskMu serializes umask changes: the umask is the whole process's.
var umaskMu sync.Mutex

// listenSocket listens on the local API socket. Its directory is the
// agent's own (root, 0700, or 0710 for the group): a looser one, such as
// a hostPath's 0755, is tightened and logged; one owned by another user,
// or a symlink, is refused. The socket is created under a umask that
// leaves it 0600, so no one else can connect between its creation and a
// chmod; only the group case widens it, while the directory is still
// closed. Every connection's peer is checked (checkPeer), at most
// lim.maxConns are served at once.
func listenSocket(o socketOptions, lim serverLimits) (net.Listener, error) {
	dir := filepath.Dir(o.path)
	if err := ownDir(dir, o.gid, o.log); err != nil {
		return nil, err
	}
	if st, err := os.Lstat(o.path); err == nil {
		if st.Mode()&fs.ModeSocket == 0 {
			return nil, fmt.Errorf("local API socket %s: exists and is not a socket", o.path)
		}
		if err := os.Remove(o.path); err != nil { // a previous run's
			return nil, err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	umaskMu.Lock()
	old := unix.Umask(0o177)
	l, err := net.Listen("unix", o.path)
	unix.Umask(old)
	umaskMu.Unlock()
	if err != nil {
		return nil, err
	}
	if o.gid >= 0 {
		// The directory is still 0700: nobody else reaches the socket
		// until it has its final owner and mode.
		err := errors.Join(os.Lchown(o.path, -1, o.gid), os.Chmod(o.path, 0o660), os.Chown(dir, -1, o.gid), os.Chmod(dir, 0o710))
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("local API socket %s for group %d: %w", o.path, o.gid, err)
		}
	}
	pl := &peerListener{Listener: l, gid: o.gid, refused: o.refused, log: o.log, sometimes: rate.Sometimes{First: 1, Interval: 10 * time.Second}}
	return netutil.LimitListener(pl, lim.maxConns), nil
}

// ownDir makes dir the agent's and closed (0700) while the socket is made:
// created if absent; if present it must be a real directory owned by the
// agent's user. A mode looser than the final one (0700, or 0710 with a
// group) is logged; listenSocket opens the group again once the socket is
// in place.
func ownDir(dir string, gid int, log logr.Logger) error {
	st, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		return os.Chmod(dir, 0o700) // MkdirAll's mode is filtered by the umask only, but be exact
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("local API socket directory %s: %s, not a directory", dir, st.Mode().Type())
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Geteuid() {
		return fmt.Errorf("local API socket directory %s: owned by uid %d, not by the agent (uid %d): refusing to serve in a directory another user controls", dir, sys.Uid, os.Geteuid())
	}
	perm, final := st.Mode().Perm(), fs.FileMode(0o700)
	if gid >= 0 {
		final = 0o710
	}
	if perm != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("local API socket directory %s: tightening mode %#o: %w", dir, perm, err)
		}
	}
	if perm&^final != 0 {
		log.Info("local API socket directory was too open: tightened", "dir", dir, "was", fmt.Sprintf("%#o", perm), "now", fmt.Sprintf("%#o", final))
	}
	return nil
}

// peerListener accepts only connections whose peer is root or, when gid
// is set, in that group (its effective or a supplementary group, as the
// kernel recorded them at connect). Others are closed at once, counted and
// logged at most every 10 s.
type peerListener struct {
	net.Listener
	gid       int
	refused   func(reason string)
	log       logr.Logger
	sometimes rate.Sometimes
}

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		cred, reason := checkPeer(c, l.gid)
		if reason == "" {
			return c, nil
		}
		c.Close()
		if l.refused != nil {
			l.refused(reason)
		}
		l.sometimes.Do(func() {
			kv := []any{"reason", reason, "allowed", "uid 0" + groupText(l.gid), "note", "logged at most every 10s; cgpilot_api_refused_connections_total counts all"}
			if cred != nil {
				kv = append(kv, "pid", cred.Pid, "uid", cred.Uid, "gid", cred.Gid)
			}
			l.log.Info("local API connection refused", kv...)
		})
	}
}

func groupText(gid int) string {
	if gid < 0 {
		return ""
	}
	return fmt.Sprintf(" or gid %d", gid)
}

// Reasons a peer is refused (the metric's label).
const (
	refusedNoCredentials = "no-credentials"
	refusedPeer          = "peer-not-allowed"
)

// checkPeer returns the peer's credentials and "" when it may use the API,
// else why not.
func checkPeer(c net.Conn, gid int) (*unix.Ucred, string) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return nil, refusedNoCredentials
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, refusedNoCredentials
	}
	var cred *unix.Ucred
	var groups []uint32
	var cerr error
	err = raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		if cerr == nil && cred.Uid != 0 && gid >= 0 && cred.Gid != uint32(gid) {
			groups, cerr = peerGroups(int(fd))
		}
	})
	switch {
	case err != nil || cerr != nil:
		return cred, refusedNoCredentials
	case cred.Uid == 0:
		return cred, ""
	case gid >= 0 && (cred.Gid == uint32(gid) || slices.Contains(groups, uint32(gid))):
		return cred, ""
	}
	return cred, refusedPeer
}

// peerGroups reads SO_PEERGROUPS (Linux 4.13+), the peer's supplementary
// groups at connect: x/sys/unix has no wrapper for it.
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]uint32, 64)
	for {
		n := uint32(len(buf) * 4)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		switch {
		case e == unix.ERANGE && int(n/4) > len(buf) && n/4 <= 65536: // NGROUPS_MAX
			buf = make([]uint32, n/4)
			continue
		case e != 0:
			return nil, e
		}
		return buf[:n/4], nil
	}
}

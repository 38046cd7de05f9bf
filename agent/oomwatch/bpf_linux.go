//go:build linux

package oomwatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
)

// bpfBackend holds the loaded programs, their links and the ring buffer.
type bpfBackend struct {
	objs    oomwatchObjects
	links   []link.Link
	rd      *ringbuf.Reader
	taskArg bool // mark_victim passes the task (Linux 6.8+)
}

// startBPF is the feature probe: it succeeds only when the programs are
// loaded, attached and the ring buffer is open. Its error says which step
// failed and wraps ErrUnavailable.
//
// A refusal (EPERM) names the capability a container most likely lacks:
// cilium/ebpf's memlock probe is a bpf(2) call, which the runtime's
// seccomp profile refuses without CAP_BPF, and it then takes the kernel for
// one before memcg accounting (5.11) and tries to raise the limit.
func startBPF(w *Watcher) (*bpfBackend, error) {
	fail := func(step string, err error) (*bpfBackend, error) {
		return nil, fmt.Errorf("%w: ebpf %s: %w", ErrUnavailable, step, err)
	}
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return fail("kernel BTF (CONFIG_DEBUG_INFO_BTF)", err)
	}
	kspec, err := btf.LoadKernelSpec()
	if err != nil {
		return fail("load kernel BTF", err)
	}
	taskArg, err := markVictimPassesTask(kspec)
	if err != nil {
		return fail("tracepoint oom:mark_victim", err)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return fail("raise RLIMIT_MEMLOCK"+permissionHint(err, memlockHint), err)
	}
	b := &bpfBackend{taskArg: taskArg && !w.cfg.forcePidPath}
	spec, err := loadOomwatch()
	if err != nil {
		return fail("read embedded object", err)
	}
	if w.cfg.forcePidPath {
		if err := spec.Variables["force_pid_path"].Set(true); err != nil {
			return fail("set force_pid_path", err)
		}
	}
	if err := spec.LoadAndAssign(&b.objs, &ebpf.CollectionOptions{Programs: ebpf.ProgramOptions{KernelTypes: kspec}}); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			w.log.V(1).Info("verifier log", "log", fmt.Sprintf("%+v", ve))
		}
		return fail("load tp_btf programs"+permissionHint(err, loadHint), err)
	}
	progs := []*ebpf.Program{b.objs.OnMarkVictim}
	if !b.taskArg {
		progs = append(progs, b.objs.RememberKill)
	}
	for _, p := range progs {
		l, err := link.AttachTracing(link.TracingOptions{Program: p, AttachType: ebpf.AttachTraceRawTp})
		if err != nil {
			b.close()
			return fail("attach "+p.String(), err)
		}
		b.links = append(b.links, l)
	}
	if b.rd, err = ringbuf.NewReader(b.objs.Events); err != nil {
		b.close()
		return fail("open ring buffer", err)
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		b.run(w)
	}()
	return b, nil
}

// markVictimPassesTask reports whether the kernel's mark_victim
// tracepoint passes the task (6.8+: its record has anon_rss) or the pid.
func markVictimPassesTask(k *btf.Spec) (bool, error) {
	var proto *btf.Typedef
	if err := k.TypeByName("btf_trace_mark_victim", &proto); err != nil {
		return false, err
	}
	var rec *btf.Struct
	if err := k.TypeByName("trace_event_raw_mark_victim", &rec); err != nil {
		return false, err
	}
	for _, m := range rec.Members {
		if m.Name == "anon_rss" {
			return true, nil
		}
	}
	return false, nil
}

func (b *bpfBackend) describe() string {
	if b.taskArg {
		return "eBPF tp_btf/mark_victim (the kernel passes the victim task: Linux 6.8+ or a backport), ring buffer"
	}
	return "eBPF tp_btf/mark_victim (the kernel passes only the pid, as before 6.8) with tp_btf/signal_generate for the task, ring buffer"
}

func (b *bpfBackend) run(w *Watcher) {
	var raw oomwatchEvent
	for {
		rec, err := b.rd.Read()
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				w.log.Error(err, "ring buffer read failed; no more BPF events")
			}
			return
		}
		seen := Monotonic()
		_ = w.cfg.Guard.Do(Loop, func() {
			if _, err := binary.Decode(rec.RawSample, binary.NativeEndian, &raw); err != nil {
				w.log.Error(err, "short BPF event", "len", len(rec.RawSample))
				return
			}
			e := Event{
				Time:       wallAt(time.Duration(raw.KtimeNs)),
				Kernel:     time.Duration(raw.KtimeNs),
				Seen:       seen,
				PID:        int(raw.Pid),
				Comm:       string(bytes.TrimRight(raw.Comm[:], "\x00")),
				MemcgInode: raw.MemcgIno,
				CgroupID:   raw.CgroupId,
				Source:     SourceBPF,
			}
			e.Dir = w.match(e.MemcgInode, e.CgroupID)
			w.emit(e)
		})
	}
}

func (b *bpfBackend) close() error {
	var errs []error
	if b.rd != nil {
		errs = append(errs, b.rd.Close())
	}
	for _, l := range b.links {
		errs = append(errs, l.Close())
	}
	errs = append(errs, b.objs.Close())
	return errors.Join(errs...)
}

const (
	memlockHint = " (refused: on Linux 5.11+ the container lacks CAP_BPF; before 5.11 raising the limit also needs CAP_SYS_RESOURCE; see deploy/kustomize/components/ebpf-oom)"
	loadHint    = " (refused: a tp_btf program needs CAP_BPF and CAP_PERFMON; see deploy/kustomize/components/ebpf-oom)"
)

// permissionHint is hint when err is a permission refusal, else "".
func permissionHint(err error, hint string) string {
	if errors.Is(err, os.ErrPermission) {
		return hint
	}
	return ""
}

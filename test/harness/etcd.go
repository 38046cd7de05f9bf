//go:build linux

package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// EtcdRevision returns etcd's current revision: the newest resourceVersion
// any object of the test bed can have.
func (cp *ControlPlane) EtcdRevision(ctx context.Context) (int64, error) {
	var resp struct {
		Header struct {
			Revision json.Number `json:"revision"`
		} `json:"header"`
	}
	// A range over one key that need not exist: only the header matters.
	if err := cp.etcdCall(ctx, "/v3/kv/range", map[string]any{"key": []byte("cgpilot-harness-revision")}, &resp); err != nil {
		return 0, err
	}
	rev, err := resp.Header.Revision.Int64()
	if err != nil || rev <= 0 {
		return 0, fmt.Errorf("harness: etcd range: revision %q: %v", resp.Header.Revision, err)
	}
	return rev, nil
}

// CompactEtcd compacts etcd's history up to its current revision (and
// returns it), as the API server's periodic compaction does with older
// ones: a watch that resumes from an earlier resourceVersion then gets
// 410 Gone ("too old resource version") from etcd, and its informer
// relists. Served by the API server's watch cache, a watch does not
// notice; see Options.DisableWatchCache.
func (cp *ControlPlane) CompactEtcd(ctx context.Context) (int64, error) {
	rev, err := cp.EtcdRevision(ctx)
	if err != nil {
		return 0, err
	}
	// physical: return once the compaction is applied to the backend, so a
	// watch started afterwards cannot still see the old revisions.
	body := map[string]any{"revision": strconv.FormatInt(rev, 10), "physical": true}
	if err := cp.etcdCall(ctx, "/v3/kv/compaction", body, nil); err != nil {
		return 0, err
	}
	return rev, nil
}

// etcdCall posts a request to etcd's JSON gateway (part of its client
// listener, so no etcd client library is needed) and decodes the answer.
func (cp *ControlPlane) etcdCall(ctx context.Context, path string, req, resp any) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	url := "http://127.0.0.1:" + strconv.Itoa(cp.State.Ports["etcd-client"]) + path
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return err
	}
	r.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(r)
	if err != nil {
		return fmt.Errorf("harness: etcd %s: %w", path, err)
	}
	defer res.Body.Close()
	out, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("harness: etcd %s: %w", path, err)
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("harness: etcd %s: HTTP %d: %s", path, res.StatusCode, bytes.TrimSpace(out))
	}
	if resp == nil {
		return nil
	}
	if err := json.Unmarshal(out, resp); err != nil {
		return fmt.Errorf("harness: etcd %s: %w: %s", path, err, out)
	}
	return nil
}

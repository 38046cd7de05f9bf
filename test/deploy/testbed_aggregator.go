package deploy

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// AggregatorBed is what differs between a real cluster and the test bed
// for the aggregator component (components/aggregator). The test bed has
// no kube-proxy, no cluster DNS and no cert-manager, so:
//   - the aggregator runs one replica on the host network, listening on
//     127.0.0.1 at SecurePort and HTTPPort: the agents (host network), the
//     API server (the webhook) and the user reach it there;
//   - its serving certificate (for 127.0.0.1) is made by the caller and
//     put in the Secret cert-manager would have written (CertFile,
//     KeyFile, CAFile); the Issuer and Certificate are left out; the CA is
//     also published at once in the agents' ConfigMap (the aggregator
//     keeps it so) and given to the webhook configuration (caBundle), as
//     cert-manager's injector would;
//   - the callers' client CA (the test bed's cluster CA, which signed the
//     API server's client certificate) is ClientCAFile;
//   - the report period is ReportPeriod and the agents sample every
//     TestBed.SampleInterval (the demo's short windows); its requests are
//     small (a 2-CPU node).
type AggregatorBed struct {
	// Image is the aggregator image, imported into the node (pulled never).
	Image                        string
	SecurePort, HTTPPort         int
	CertFile, KeyFile, CAFile    string
	ClientCAFile                 string
	ReportPeriod, SampleInterval time.Duration
}

// aggregatorName names the aggregator's objects.
const aggregatorName = "cgpilot-aggregator"

func (a *AggregatorBed) validate() error {
	switch {
	case a.Image == "" || !strings.Contains(a.Image, ":"):
		return fmt.Errorf("%w: test bed aggregator image %q: want repository:tag", ErrRender, a.Image)
	case a.SecurePort <= 0 || a.SecurePort > 65535 || a.HTTPPort <= 0 || a.HTTPPort > 65535 || a.SecurePort == a.HTTPPort:
		return fmt.Errorf("%w: test bed aggregator ports %d, %d", ErrRender, a.SecurePort, a.HTTPPort)
	case a.ReportPeriod < time.Second || a.SampleInterval < time.Second:
		return fmt.Errorf("%w: test bed aggregator report period %v, sample interval %v", ErrRender, a.ReportPeriod, a.SampleInterval)
	}
	for _, f := range []string{a.CertFile, a.KeyFile, a.CAFile, a.ClientCAFile} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%w: test bed aggregator: %v", ErrRender, err)
		}
	}
	return nil
}

// URL is where the agents report: the aggregator on the host network.
func (a *AggregatorBed) URL() string { return "https://127.0.0.1:" + strconv.Itoa(a.SecurePort) }

// DashboardURL is the dashboard's address.
func (a *AggregatorBed) DashboardURL() string { return "http://127.0.0.1:" + strconv.Itoa(a.HTTPPort) }

func (a *AggregatorBed) notes() []string {
	return []string{
		"aggregator image " + a.Image + " (built from ./cmd/cgpilot-aggregator, imported with ctr), imagePullPolicy Never",
		"aggregator: 1 replica on the host network at " + a.URL() + " and " + a.DashboardURL() + ": no kube-proxy or cluster DNS, so neither the agents (host network) nor the API server reach the Service",
		"aggregator serving certificate made by the demo (no cert-manager): Secret cgpilot-aggregator-tls, its CA in ConfigMap cgpilot-aggregator-ca (the agents') and the webhook's caBundle; Issuer and Certificate left out",
		"webhook and agents pointed at " + a.URL() + "; the webhook's callers: the test bed's cluster CA (ConfigMap cgpilot-aggregator-client-ca), which signed the API server's client certificate",
		"report period " + a.ReportPeriod.String() + " (agents and aggregator), --agent-sample-interval " + a.SampleInterval.String() + ", requests 20m/64Mi: a small node",
	}
}

// aggregatorArgs rewrites the aggregator's arguments for the test bed.
func (a *AggregatorBed) aggregatorArgs(base []string) ([]string, error) {
	set := map[string]string{
		"--secure-addr":           "127.0.0.1:" + strconv.Itoa(a.SecurePort),
		"--http-addr":             "127.0.0.1:" + strconv.Itoa(a.HTTPPort),
		"--report-period":         a.ReportPeriod.String(),
		"--agent-sample-interval": a.SampleInterval.String(),
	}
	var out []string
	for _, arg := range base {
		name, _, _ := strings.Cut(arg, "=")
		if v, ok := set[name]; ok {
			arg = name + "=" + v
			delete(set, name)
		}
		out = append(out, arg)
	}
	if len(set) > 0 {
		return nil, fmt.Errorf("%w: the aggregator's Deployment lacks the flags %v to change", ErrRender, set)
	}
	return out, nil
}

// aggregatorOverlay returns the overlay's patches of the aggregator's
// objects (documents of the strategic-merge patch file) and its JSON
// patch of the webhook, and writes the certificate files into dir.
// apiHost and apiPort are where it reaches the API server: the test bed
// runs no kube-proxy, so the kubernetes Service IP that in-cluster
// configuration reads does not route (as for the agents).
func (a *AggregatorBed) aggregatorOverlay(dir string, aggArgs []string, apiHost, apiPort string) (docs []any, webhookPatch string, generators string, err error) {
	args, err := a.aggregatorArgs(aggArgs)
	if err != nil {
		return nil, "", "", err
	}
	for name, from := range map[string]string{"tls.crt": a.CertFile, "tls.key": a.KeyFile, "ca.crt": a.CAFile, "client-ca.crt": a.ClientCAFile} {
		b, err := os.ReadFile(from)
		if err != nil {
			return nil, "", "", fmt.Errorf("%w: %v", ErrRender, err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, "", "", fmt.Errorf("%w: %v", ErrRender, err)
		}
	}
	ca, err := os.ReadFile(a.CAFile)
	if err != nil {
		return nil, "", "", fmt.Errorf("%w: %v", ErrRender, err)
	}
	// Probes on 127.0.0.1 (it listens there only), from a few seconds on:
	// it is not ready before its pod cache has synced, and a probe that
	// fails meanwhile is a Warning Event the demo would have to explain.
	probe := func(path string, delay int) map[string]any {
		return map[string]any{"httpGet": map[string]any{"host": "127.0.0.1", "port": "http", "path": path}, "initialDelaySeconds": delay}
	}
	docs = []any{
		map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": aggregatorName, "namespace": Namespace},
			"spec": map[string]any{"replicas": 1, "template": map[string]any{"spec": map[string]any{
				"hostNetwork": true, "dnsPolicy": "ClusterFirstWithHostNet",
				"containers": []any{map[string]any{
					"name": "aggregator", "imagePullPolicy": "Never", "args": args,
					"env": []any{
						map[string]any{"name": "KUBERNETES_SERVICE_HOST", "value": apiHost},
						map[string]any{"name": "KUBERNETES_SERVICE_PORT", "value": apiPort},
					},
					"ports": []any{map[string]any{"$patch": "replace"},
						map[string]any{"name": "https", "containerPort": a.SecurePort, "protocol": "TCP"},
						map[string]any{"name": "http", "containerPort": a.HTTPPort, "protocol": "TCP"}},
					"readinessProbe": probe("/readyz", 5), "livenessProbe": probe("/healthz", 10),
					"resources": map[string]any{"requests": map[string]any{"cpu": "20m", "memory": "64Mi"}},
				}},
			}}}},
		map[string]any{"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": map[string]any{"name": aggregatorName, "namespace": Namespace}, "$patch": "delete"},
		map[string]any{"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": map[string]any{"name": aggregatorName, "namespace": Namespace}, "$patch": "delete"},
	}
	webhookPatch = fmt.Sprintf(`- op: remove
  path: /webhooks/0/clientConfig/service
- op: add
  path: /webhooks/0/clientConfig/url
  value: %s/admission/mutate
- op: add
  path: /webhooks/0/clientConfig/caBundle
  value: %s
`, a.URL(), base64.StdEncoding.EncodeToString(ca))
	generators = fmt.Sprintf(`secretGenerator:
  - name: %[1]s-tls
    namespace: %[2]s
    type: kubernetes.io/tls
    files: [tls.crt, tls.key, ca.crt]
    options: {disableNameSuffixHash: true}
configMapGenerator:
  - name: %[1]s-ca
    namespace: %[2]s
    files: [ca.crt]
    options: {disableNameSuffixHash: true}
  - name: %[1]s-client-ca
    namespace: %[2]s
    files: [ca.crt=client-ca.crt]
    options: {disableNameSuffixHash: true}
`, aggregatorName, Namespace)
	return docs, webhookPatch, generators, nil
}

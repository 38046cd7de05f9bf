package deploy

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/cgpilot/cgpilot/test/harness"
	"github.com/cgpilot/cgpilot/test/tier"
)

// podMonitorCRD stands in for the prometheus-operator's CRD, which the
// metrics layouts need, and for cert-manager's Issuer and Certificate,
// which the aggregator layout needs: they accept any object, so the dry
// run checks only that the objects reach the API server well-formed.
const podMonitorCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: podmonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  names: {kind: PodMonitor, listKind: PodMonitorList, plural: podmonitors, singular: podmonitor}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: issuers.cert-manager.io}
spec:
  group: cert-manager.io
  names: {kind: Issuer, listKind: IssuerList, plural: issuers, singular: issuer}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: certificates.cert-manager.io}
spec:
  group: cert-manager.io
  names: {kind: Certificate, listKind: CertificateList, plural: certificates, singular: certificate}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// TestRendersPassServerSideDryRun: every layout, rendered by kustomize and
// by helm, passes server-side apply with dry run on the test bed's
// kube-apiserver (schema validation, the CEL of the CRD and the admission
// policy, admission), and kubectl apply -k deploy/kustomize itself (with
// kubectl's embedded kustomize) does too and renders what Kustomize does.
func TestRendersPassServerSideDryRun(t *testing.T) {
	bins := tier.E2E(t)
	helm := helmBinary(t)
	root := repoRoot(t)
	cp := harness.MustStart(t, bins, harness.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	stub, err := Decode([]byte(podMonitorCRD))
	if err != nil {
		t.Fatal(err)
	}
	// Server-side dry run creates nothing, so the namespace a render
	// creates must exist for its namespaced objects.
	prereq := append(stub, Find(render(t), "Namespace", Namespace))
	if err := Apply(ctx, cp.Config, prereq, ApplyOptions{FieldManager: "cgpilot-test"}); err != nil {
		t.Fatal(err)
	}
	for _, l := range layouts {
		for _, tool := range []string{"kustomize", "helm"} {
			t.Run(l.name+"/"+tool, func(t *testing.T) {
				var objs []*unstructured.Unstructured
				if tool == "kustomize" {
					objs = render(t, l.components...)
				} else {
					b, err := Helm(ctx, helm, root, Namespace, l.values)
					if err != nil {
						t.Fatal(err)
					}
					if objs, err = Decode(b); err != nil {
						t.Fatal(err)
					}
				}
				if err := Apply(ctx, cp.Config, objs, ApplyOptions{FieldManager: "cgpilot-" + tool, DryRun: true}); err != nil {
					t.Error(err)
				}
			})
		}
	}

	kubectl := filepath.Join(bins, "kubectl")
	cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", cp.Kubeconfig(), "apply", "--server-side", "--dry-run=server", "-k", filepath.Join(root, "deploy", "kustomize"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("kubectl apply --server-side --dry-run=server -k deploy/kustomize: %v\n%s", err, out)
	} else if n := strings.Count(string(out), "(server dry run)"); n != len(render(t)) {
		t.Errorf("kubectl applied %d objects, the base has %d:\n%s", n, len(render(t)), out)
	}
	want, err := Kustomize(root)
	if err != nil {
		t.Fatal(err)
	}
	got, err := exec.CommandContext(ctx, kubectl, "kustomize", filepath.Join(root, "deploy", "kustomize")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("kubectl kustomize and Kustomize render differently (kustomize library versions differ?):\n%s\n---- vs ----\n%s", got, want)
	}
}

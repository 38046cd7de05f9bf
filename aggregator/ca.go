package aggregator

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CAKey is the key of the CA ConfigMap the agents mount.
const CAKey = "ca.crt"

// publishCA keeps ConfigMap CAConfigMap holding the serving certificate's
// CA (CAFile) as ca.crt, checked every 30 s: agents verify the aggregator
// with it. They mount this ConfigMap, never the serving Secret: a Secret
// volume makes the kubelet fetch the whole Secret, tls.key included, onto
// every node, even when the pod mounts only ca.crt of it. Every replica
// publishes (they serve the same Secret), so a rotated CA reaches the
// agents within a minute of its Secret, plus the kubelet's ConfigMap
// refresh.
func (a *Aggregator) publishCA(ctx context.Context) {
	t := time.NewTicker(30 * time.Second)
	defer t.Stop()
	var last []byte
	for {
		ca, err := readCA(a.cfg.CAFile)
		if err != nil {
			a.log.Error(err, "the serving CA is not published for the agents; retrying", "file", a.cfg.CAFile)
		} else if !bytes.Equal(ca, last) {
			if err := a.writeCA(ctx, ca); err != nil {
				a.log.Error(err, "publishing the serving CA for the agents; retrying", "configmap", a.cfg.Namespace+"/"+a.cfg.CAConfigMap)
			} else {
				last = ca
				a.log.Info("the serving CA is published for the agents", "configmap", a.cfg.Namespace+"/"+a.cfg.CAConfigMap)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readCA reads PEM certificates and refuses anything else (a private
// key put in by mistake never reaches the ConfigMap).
func readCA(file string) ([]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("%s holds a %s block: only certificates are published", file, b.Type)
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return nil, fmt.Errorf("%s: %v", file, err)
		}
		_ = pem.Encode(&out, b)
	}
	if out.Len() == 0 {
		return nil, fmt.Errorf("%s holds no certificate", file)
	}
	return out.Bytes(), nil
}

func (a *Aggregator) writeCA(ctx context.Context, ca []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cms := a.cs.CoreV1().ConfigMaps(a.cfg.Namespace)
	cm, err := cms.Get(ctx, a.cfg.CAConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: a.cfg.CAConfigMap, Namespace: a.cfg.Namespace,
			Labels: map[string]string{"app.kubernetes.io/name": "cgpilot-aggregator", "app.kubernetes.io/part-of": "cgpilot"}},
			Data: map[string]string{CAKey: string(ca)}}
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: "cgpilot-aggregator"})
		return err
	}
	if err != nil {
		return err
	}
	if cm.Data[CAKey] == string(ca) {
		return nil
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[CAKey] = string(ca)
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "cgpilot-aggregator"})
	return err
}

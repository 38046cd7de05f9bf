package deploy

// AggregatorFlags is the contract between the manifests and
// cgpilot-aggregator: the flags every render of the aggregator's
// Deployment passes (value per flag). cmd/cgpilot-aggregator's tests parse
// them, so a flag the command does not know fails there.
var AggregatorFlags = map[string]string{
	"--secure-addr":          ":8443",
	"--http-addr":            ":8080",
	"--tls-cert-file":        "/etc/cgpilot-aggregator/tls/tls.crt",
	"--tls-private-key-file": "/etc/cgpilot-aggregator/tls/tls.key",
	// The CA the agents verify the aggregator with, published in a
	// ConfigMap: they never mount the serving Secret.
	"--tls-ca-file":  "/etc/cgpilot-aggregator/tls/ca.crt",
	"--ca-configmap": "cgpilot-aggregator-ca",
	// The webhook's and the extender's callers: client certificates of
	// this CA (ConfigMap cgpilot-aggregator-client-ca).
	"--webhook-client-ca-file":  "/etc/cgpilot-aggregator/client-ca/ca.crt",
	"--extender-client-ca-file": "/etc/cgpilot-aggregator/client-ca/ca.crt",
	"--report-period":           "1m",
	// The agents' rightsizing.sampleInterval.
	"--agent-sample-interval": "10s",
	"--hot-watermark":         "0.8",
}

// AggregatorRescheduleFlags are the flags the rescheduling component adds
// to the aggregator's Deployment (its defaults; Helm's values set them).
// cmd/cgpilot-aggregator's tests parse them.
var AggregatorRescheduleFlags = map[string]string{
	"--reschedule":                     "true",
	"--reschedule-max-per-node":        "2",
	"--reschedule-max-per-workload":    "1",
	"--reschedule-max-per-hour":        "30",
	"--reschedule-emergency-watermark": "0.9",
}

// AgentAggregatorFlags are the flags the aggregator component adds to the
// agent's DaemonSet so that it reports (value per flag, in the namespace
// cgpilot-system). cmd/cgpilot-agent's tests parse them.
var AgentAggregatorFlags = map[string]string{
	"--aggregator-url":           "https://cgpilot-aggregator.cgpilot-system.svc",
	"--aggregator-ca-file":       "/var/run/cgpilot/aggregator-ca/ca.crt",
	"--aggregator-token-file":    "/var/run/cgpilot/aggregator-token/token",
	"--aggregator-report-period": "1m",
}

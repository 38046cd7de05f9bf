// Command cgpilot-aggregator is cgpilot's cluster aggregator (a Deployment
// of two replicas; see deploy/). It only turns flags into an
// aggregator.Config and calls aggregator.Run.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/cgpilot/cgpilot/aggregator"
	"github.com/cgpilot/cgpilot/aggregator/reschedule"
	"github.com/cgpilot/cgpilot/cmd/internal/daemon"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stderr))
}

// parse turns the arguments into a Config and the debug flag; ok is false
// after a usage error (already printed).
func parse(args []string, stderr io.Writer) (cfg aggregator.Config, debug, ok bool) {
	fs := flag.NewFlagSet("cgpilot-aggregator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	d := aggregator.DefaultConfig()
	cfg = d
	fs.StringVar(&cfg.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty = in-cluster service account")
	fs.StringVar(&cfg.Namespace, "namespace", "", "namespace of the leader Lease (default $POD_NAMESPACE, else cgpilot-system)")
	fs.StringVar(&cfg.LeaseName, "lease-name", d.LeaseName, "name of the leader Lease")
	fs.StringVar(&cfg.Identity, "identity", "", "this replica's identity (default $POD_NAME)")
	fs.StringVar(&cfg.PodIP, "pod-ip", "", "this replica's pod IP, published in the Lease so followers forward to the leader (default $POD_IP)")
	fs.StringVar(&cfg.SecureAddr, "secure-addr", d.SecureAddr, "HTTPS address: agent API, admission webhook, scheduler extender")
	fs.StringVar(&cfg.HTTPAddr, "http-addr", d.HTTPAddr, "HTTP address: dashboard, JSON API, /metrics, /healthz, /readyz")
	fs.StringVar(&cfg.CertFile, "tls-cert-file", "", "serving certificate (PEM), re-read when it changes")
	fs.StringVar(&cfg.KeyFile, "tls-private-key-file", "", "serving key (PEM)")
	fs.DurationVar(&cfg.Period, "report-period", d.Period, "report grid period; agents must use the same")
	fs.DurationVar(&cfg.Grace, "grace", 0, "how long after a window ends its reports are awaited (default 2 periods)")
	fs.DurationVar(&cfg.Step, "step", 0, "how often a recommendation is recomputed when its policy does not say (default 1h)")
	fs.Float64Var(&cfg.HotWatermark, "hot-watermark", d.HotWatermark, "share of allocatable CPU or memory in real use above which a node is hot")
	fs.Float64Var(&cfg.Placement.CPU, "placement-watermark-cpu", d.Placement.CPU, "the scheduler filter's rule: share of allocatable CPU the 7-day peaks of a node's pods stay under")
	fs.Float64Var(&cfg.Placement.Memory, "placement-watermark-memory", d.Placement.Memory, "the same for memory")
	fs.DurationVar(&cfg.LoadInterval, "profile-interval", 0, "how often the nodes' placement loads (sums of their pods' 7-day peaks) are recomputed (default 1m)")
	rs := &cfg.RescheduleConfig
	fs.BoolVar(&cfg.Reschedule, "reschedule", false, "run the rescheduler: the descheduler's utilization query, the eviction webhook's caps, the move records (off by default)")
	fs.Float64Var(&rs.Emergency, "reschedule-emergency-watermark", 0.9, "share of allocatable CPU in real use above which a node is queued at once, whatever the hour")
	fs.DurationVar(&rs.QueueInterval, "reschedule-queue-interval", 10*time.Minute, "how often nodes that break the placement rule or are hot are queued")
	fs.DurationVar(&rs.CheckInterval, "reschedule-check-interval", time.Minute, "how often admitted moves are followed (failed ones re-queued)")
	fs.DurationVar(&rs.MoveTimeout, "reschedule-move-timeout", 10*time.Minute, "how long an evicted pod's replacement may take to be placed")
	hours := fs.String("reschedule-hours", "", "hours (UTC) when the queue pass may queue nodes, e.g. 22-6 or 1-5,13; empty: any hour (emergencies: any hour)")
	fs.IntVar(&rs.PerNode, "reschedule-max-per-node", 2, "moves from one node per sliding hour")
	fs.IntVar(&rs.PerWorkload, "reschedule-max-per-workload", 1, "moves of one workload per sliding hour")
	fs.IntVar(&rs.PerHour, "reschedule-max-per-hour", 30, "moves in all per sliding hour")
	deschedAud := fs.String("descheduler-token-audiences", "", "comma-separated audiences accepted of the descheduler's token on its query (default those of the aggregator's own service-account token: the API server's)")
	fs.StringVar(&rs.DeschedulerUser, "descheduler-user", "", "the descheduler's username, whose evictions the webhook judges (default system:serviceaccount:<namespace>:cgpilot-descheduler)")
	fs.StringVar(&cfg.Audience, "token-audience", d.Audience, "audience of the agents' projected tokens")
	users := fs.String("agent-users", "", "comma-separated usernames allowed to report (default system:serviceaccount:<namespace>:cgpilot-agent)")
	userAud := fs.String("user-audiences", "", "comma-separated audiences accepted of dashboard, JSON API and /metrics users' tokens (default the --token-audience)")
	fs.StringVar(&cfg.WebhookClientCAFile, "webhook-client-ca-file", "", "CA (PEM) of the kube-apiserver's client certificate for the admission webhook; without it the webhook refuses every caller")
	webhookNames := fs.String("webhook-client-names", strings.Join(d.WebhookClientNames, ","), "comma-separated names (subject CN or DNS SAN) admitted of webhook client certificates; * for any the CA signed")
	fs.BoolVar(&cfg.WebhookAnyClient, "insecure-webhook-any-client", false, "INSECURE: serve the admission webhook to any caller (clusters whose API server cannot present a client certificate)")
	fs.StringVar(&cfg.ExtenderClientCAFile, "extender-client-ca-file", "", "CA (PEM) of the kube-scheduler's client certificate for the extender; without it the extender refuses every caller")
	extNames := fs.String("extender-client-names", strings.Join(d.ExtenderClientNames, ","), "comma-separated names (subject CN or DNS SAN) admitted of extender client certificates; * for any the CA signed")
	fs.BoolVar(&cfg.ExtenderAnyClient, "insecure-extender-any-client", false, "INSECURE: serve the scheduler extender to any caller")
	fs.StringVar(&cfg.CAFile, "tls-ca-file", "", "CA (PEM) of the serving certificate, published for the agents with --ca-configmap")
	fs.StringVar(&cfg.CAConfigMap, "ca-configmap", "", "ConfigMap in --namespace kept holding --tls-ca-file as ca.crt, which the agents mount (never the serving Secret)")
	fs.DurationVar(&cfg.SampleInterval, "agent-sample-interval", d.SampleInterval, "the agents' rightsizing.sampleInterval: a pod gives at most one sample per interval (bounds a node's weight in a merge)")
	fs.DurationVar(&cfg.PodRetention, "pod-retention", 0, "how long a deleted pod still vouches for its node's reports of its workload (default 1h)")
	fs.StringVar(&cfg.StaticTokens, "insecure-static-tokens", "", "LOAD TESTS ONLY: a token,node file replacing TokenReview")
	fs.BoolVar(&cfg.Standalone, "standalone", false, "LOAD TESTS ONLY: run without an API server (needs --insecure-static-tokens)")
	fs.Float64Var(&cfg.CheckpointBudget, "checkpoint-budget", 0, "WorkloadRecommendation writes per second (default 20)")
	fs.DurationVar(&cfg.CheckpointMinAge, "checkpoint-min-age", 0, "least time between two writes of one workload (default 5m)")
	fs.DurationVar(&cfg.AnnotateInterval, "annotate-interval", 0, "how often node usage-profile annotations are refreshed (default 5m)")
	fs.BoolVar(&debug, "debug", false, "debug logging")
	fs.BoolVar(&cfg.Pprof, "pprof", false, "serve net/http/pprof under /debug/pprof/ on --http-addr")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", 0, "close connections idle this long (default 5s: agents reconnect for each report rather than hold idle TLS buffers)")
	if err := fs.Parse(args); err != nil {
		return cfg, false, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "cgpilot-aggregator: unexpected arguments %q\n", fs.Args())
		return cfg, false, false
	}
	list := func(v string) []string {
		var out []string
		for _, x := range strings.Split(v, ",") {
			if x = strings.TrimSpace(x); x != "" {
				out = append(out, x)
			}
		}
		return out
	}
	cfg.AgentUsers, cfg.UserAudiences, cfg.DeschedulerAudiences = list(*users), list(*userAud), list(*deschedAud)
	cfg.WebhookClientNames, cfg.ExtenderClientNames = list(*webhookNames), list(*extNames)
	h, err := reschedule.ParseHours(*hours)
	if err != nil {
		fmt.Fprintf(stderr, "cgpilot-aggregator: --reschedule-hours: %v\n", err)
		return cfg, false, false
	}
	rs.Hours = h
	return cfg, debug, true
}

func run(args []string, stderr io.Writer) int {
	cfg, debug, ok := parse(args, stderr)
	if !ok {
		return 2
	}
	return daemon.Run("cgpilot-aggregator", debug, stderr, func(ctx context.Context, log logr.Logger) int {
		err := aggregator.Run(ctx, cfg, log)
		switch {
		case errors.Is(err, aggregator.ErrConfig):
			fmt.Fprintln(stderr, "cgpilot-aggregator:", err)
			return 2
		case errors.Is(err, aggregator.ErrLostLease):
			log.Info("lost the leader lease: exiting to restart as a follower")
			return 1
		case err != nil:
			log.Error(err, "cgpilot-aggregator failed")
			return 1
		}
		return 0
	})
}

package main

// walls.go: the one table of cgpilot's package walls. Each package's doc
// comment says what it imports in prose; this table is what make lint
// holds it to. A wall names its packages, what their dependency graph
// (or, with direct, their own import lists) must not contain, the
// exceptions, whether their tests count, and which packages may import
// them. "@" stands for the module path; patterns are Go regular
// expressions over import paths.

// wall is one rule.
type wall struct {
	// pkg is a package path under the module ("agent/pools") or a tree
	// ("internal/...").
	pkg string
	// forbid and allow: no package in the dependency graph matches forbid
	// unless it matches allow (a package may always use itself and its
	// children).
	forbid, allow string
	// direct checks the packages' own imports instead of their whole
	// dependency graph.
	direct bool
	// tests: the packages' tests (both kinds) count too.
	tests bool
	// importers, when set, are the only packages that may import these
	// in production code (their own tests, and test packages, may too
	// where testImporters says so).
	importers string
	// testImporters are the packages whose tests may import these
	// besides their own ("" none).
	testImporters string
	// doc is what the package's doc comment promises, for the message.
	doc string
}

const (
	cpuset   = `^k8s\.io/utils/cpuset$`
	internal = `^@/internal/`
	clientgo = `^k8s\.io/client-go(/|$)`
	k8sapi   = `^k8s\.io/api(/|$)`
	// clientsets is what agent/kube keeps out of the agent's binary.
	clientsets = `^k8s\.io/client-go/(kubernetes|discovery|informers|dynamic/dynamicinformer|metadata/metadatainformer)(/|$)`
)

var walls = []wall{
	// ---- leaf helpers
	{pkg: "internal/...", forbid: `^k8s\.io/|^@/`, allow: cpuset + `|` + internal,
		doc: "internal/* imports the standard library and k8s.io/utils/cpuset only"},

	// ---- the libraries know nothing of Kubernetes, cgpilot's API or each other
	{pkg: "topology/...", tests: true, forbid: `^k8s\.io/|^@/(agent|cmd|api|aggregator|cgroup|recommend)(/|$)`, allow: cpuset,
		doc: "topology: no k8s.io/* but cpuset, none of cgroup, recommend, api or agent"},
	{pkg: "cgroup/...", tests: true, forbid: `^k8s\.io/|^@/(agent|cmd|api|aggregator|topology|recommend)(/|$)`, allow: cpuset,
		doc: "cgroup: no k8s.io/* but cpuset, none of topology, recommend, api or agent"},
	{pkg: "recommend/...", tests: true, forbid: `^k8s\.io/|^@/(agent|cmd|api|aggregator|topology|cgroup)(/|$)`, allow: cpuset,
		doc: "recommend: no k8s.io/*, none of topology, cgroup, api or agent"},

	// ---- the wire contracts and the API
	{pkg: "api/local/...", forbid: `^k8s\.io/|^@/`, allow: cpuset + `|` + internal,
		doc: "api/local: the standard library, cpuset and internal/* only (cgpilotctl links it)"},
	{pkg: "api/report/...", tests: true, forbid: `^k8s\.io/|^@/`, allow: internal + `|^@/recommend$`,
		doc: "api/report: the standard library, recommend and internal/* only"},
	{pkg: "api/v1alpha1", forbid: `^k8s\.io/(client-go|api)(/|$)|^@/`, allow: internal,
		doc: "api/v1alpha1: k8s.io/apimachinery only, no client-go, no k8s.io/api, no other cgpilot package"},
	{pkg: "api/v1alpha1/policy", forbid: `^k8s\.io/(client-go|api)(/|$)|^@/`, allow: internal + `|^@/recommend$|^@/api/v1alpha1$`,
		doc: "api/v1alpha1/policy: apimachinery, api/v1alpha1 and recommend; no client-go, no k8s.io/api"},
	{pkg: "api/v1alpha1/policy", tests: true, forbid: clientgo,
		doc: "api/v1alpha1/policy: no client-go, tests included"},
	{pkg: "api/v1alpha1/policy/feed", forbid: clientsets + `|^@/`, allow: internal + `|^@/recommend$|^@/api/v1alpha1(/policy)?$`,
		doc: "api/v1alpha1/policy/feed: client-go's cache and the policy compiler; never a clientset, no other cgpilot package"},

	// ---- the agent's rooms
	{pkg: "agent/pools", tests: true, forbid: `^k8s\.io/|^@/(agent|cmd|aggregator|recommend)(/|$)`, allow: cpuset,
		importers: `^@/agent$`, testImporters: `^@/cmd/cgpilotctl$|^@/test/`,
		doc: "agent/pools: cgroup, topology, api/local, internal/*; no k8s.io/* but cpuset (tests included); only package agent imports it"},
	{pkg: "agent/rightsize", tests: true, forbid: clientgo + `|` + k8sapi + `|^@/(cmd|aggregator)(/|$)|^@/agent$|^@/agent/(pools|history|kube|reporter|podspec)(/|$)`,
		doc: "agent/rightsize: no client-go, no k8s.io/api; of the agent only collector"},
	{pkg: "agent/rightsize", direct: true, forbid: `^k8s\.io/`,
		doc: "agent/rightsize: no k8s.io package of its own (Kubernetes' meaning comes through api/v1alpha1/policy)"},
	{pkg: "agent/rightsize/runner", forbid: clientsets + `|^@/(cmd|aggregator)(/|$)|^@/agent$|^@/agent/pools(/|$)`,
		importers: `^@/agent$`, testImporters: `^@/test/`,
		doc: "agent/rightsize/runner: never package agent or agent/pools (the agent is its Host), the aggregator or a clientset; only package agent imports it"},
	{pkg: "agent/rightsize/runner", tests: true, forbid: `^@/agent$|^@/agent/pools(/|$)`,
		doc: "agent/rightsize/runner: never package agent or agent/pools, tests included"},
	{pkg: "agent/reporter", direct: true, forbid: `^k8s\.io/`,
		doc: "agent/reporter: no k8s.io package of its own"},
	{pkg: "agent/reporter", tests: true, forbid: clientgo + `|` + k8sapi + `|^@/(cmd|aggregator)(/|$)|^@/agent$|^@/agent/(pools|kube|history|oomwatch|podspec|rightsize/runner)(/|$)`,
		importers: `^@/agent$|^@/agent/rightsize/runner$`,
		doc:       "agent/reporter: api/report, agent/rightsize, agent/collector, procfs and Prometheus; no client-go, no k8s.io/api, nothing else of the agent"},
	{pkg: "agent/podspec", tests: true, forbid: clientgo + `|^@/(cmd|aggregator|topology)(/|$)|^@/agent(/|$)`,
		doc: "agent/podspec: k8s.io/api's core types, apimachinery, cgroup, the policy compiler's quantities and internal/*; no client-go, no other package of the agent"},
	{pkg: "agent/collector/...", forbid: `^k8s\.io/|^@/`, allow: cpuset + `|` + internal + `|^@/cgroup$`,
		doc: "agent/collector: cgroup, Prometheus and the standard library; no client-go, no other cgpilot package"},
	{pkg: "agent/history/...", direct: true, forbid: `.`, allow: `^@/agent/collector$`,
		doc: "agent/history: agent/collector and the standard library only"},
	{pkg: "agent/oomwatch/...", forbid: `^k8s\.io/|^@/`, allow: cpuset + `|` + internal + `|^@/cgroup$`,
		doc: "agent/oomwatch: cgroup, logr, no k8s.io package, never agent"},
	{pkg: "agent/kube", forbid: clientsets,
		doc: "agent/kube: never k8s.io/client-go/kubernetes or anything that imports it (informer factories, discovery)"},
	{pkg: "agent/kube/kubetest", importers: `^$`, testImporters: `^@/agent(/|$)|^@/test/`,
		doc: "agent/kube/kubetest: only tests import it"},
	{pkg: "agent", importers: `^@/(cmd|test)/`, testImporters: `^@/test/`,
		doc: "agent: only cmd/* and test/* import it, its sub-packages never do"},

	// ---- the aggregator never imports the agent; its rooms
	{pkg: "aggregator/...", tests: true, forbid: `^@/agent(/|$)`,
		doc: "aggregator: never agent (agents and the aggregator meet in api/*)"},
	{pkg: "aggregator/auth", forbid: `^k8s\.io/|^@/`, doc: "aggregator/auth: the standard library only"},
	{pkg: "aggregator/profile", forbid: `^k8s\.io/|^@/`, allow: `^@/api/report$|^@/recommend$|` + internal,
		doc: "aggregator/profile: api/report only"},
	{pkg: "aggregator/analysis", forbid: `^k8s\.io/|^@/`, allow: `^@/api/report$|^@/recommend$|` + internal,
		doc: "aggregator/analysis: api/report only"},
	{pkg: "aggregator/state", forbid: `^k8s\.io/|^@/`, allow: `^@/api/report$|^@/recommend$|` + internal,
		doc: "aggregator/state: api/report and recommend; no client-go"},
	{pkg: "aggregator/trust", forbid: `^k8s\.io/|^@/`, allow: `^@/api/report$|^@/recommend$|` + internal,
		doc: "aggregator/trust: judges reports on its own (api/report only)"},
	{pkg: "aggregator/web", forbid: `^k8s\.io/|^@/`, allow: `^@/api/report$|^@/recommend$|` + internal + `|^@/aggregator/(state|analysis|profile|auth)$`,
		doc: "aggregator/web: reads state, analysis and profile; auth's interfaces"},
	{pkg: "aggregator/ingest", forbid: `^k8s\.io/|^@/`, allow: `^@/api/report$|^@/recommend$|` + internal + `|^@/aggregator/(state|auth|trust)$`,
		doc: "aggregator/ingest: the agent API; no client-go (auth's and trust's interfaces only)"},
	{pkg: "aggregator/extender", forbid: clientgo + `|^@/`, allow: `^@/api/report$|^@/recommend$|` + internal + `|^@/api/v1alpha1(/policy)?$|^@/aggregator/profile$`,
		doc: "aggregator/extender: k8s.io/api types, no client-go"},
	{pkg: "aggregator/webhook", forbid: clientgo + `|^@/`, allow: `^@/api/report$|^@/recommend$|` + internal + `|^@/api/v1alpha1(/policy)?$|^@/aggregator/profile$`,
		doc: "aggregator/webhook: k8s.io/api types and the policy compiler, no client-go"},
	{pkg: "aggregator/reschedule", forbid: clientgo + `|^@/`, allow: `^@/api/report$|^@/recommend$|` + internal + `|^@/aggregator/profile$`,
		doc: "aggregator/reschedule: the descheduler's query, the eviction webhook, the queue and records; k8s.io/api types, no client-go"},
	{pkg: "aggregator/kube", forbid: `^@/aggregator/(ingest|web|webhook|extender|reschedule)$`,
		doc: "aggregator/kube: talks to the API server; imports no HTTP room"},

	// ---- the commands
	{pkg: "cmd/cgpilotctl", forbid: clientgo + `|^@/(agent|aggregator)(/|$)`,
		doc: "cgpilotctl: no client-go, nothing of the agent or the aggregator (it talks to the agent's socket)"},
	{pkg: "cmd/cgpilot-agent", forbid: clientsets + `|^@/agent/kube/kubetest$`,
		doc: "cgpilot-agent: never client-go's clientset, discovery or informer factories (agent/kube says why)"},

	// ---- test helpers that promise walls of their own
	{pkg: "test/harness", forbid: `^@/(agent|aggregator|api|cgroup|topology|recommend|internal|cmd)(/|$)`,
		doc: "test/harness: nothing of cgpilot's production packages (the agent is tested against it, not built from it)"},
	{pkg: "test/images/...", forbid: `^k8s\.io/|^@/`, doc: "test/images: the standard library only"},
	{pkg: "test/v2", forbid: `^@/`, allow: `^@/test/tier$`, doc: "test/v2: nothing of cgpilot but test/tier"},
	{pkg: "test/deploy", forbid: `^@/`, doc: "test/deploy: no cgpilot package (its tests: test/tier, the aggregator's constants, test/harness)"},
	{pkg: "test/deploy", tests: true, forbid: `^@/agent(/|$)`, doc: "test/deploy: never agent, tests included"},
	{pkg: "test/demo", forbid: `^@/agent(/|$)`, doc: "test/demo: never the agent package (it sees the agent only through the cluster)"},
}

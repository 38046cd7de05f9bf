// Package report is the wire contract between cgpilot agents and the
// cluster aggregator (cgpilot-aggregator): the versioned Report an agent
// sends every period, its encoding and validation, the merged
// recommendations an agent fetches back, the one rule that names a pod's
// workload (WorkloadOf), and the agent's side of the exchange: a Builder
// that counts samples per window of the report grid and a Client that
// sends reports over HTTPS and keeps them until the aggregator takes them.
//
// # The report
//
// One Report per node and window of the grid (every 60 s by default;
// windows end on multiples of the period since the Unix epoch, so every
// node's windows line up). Per workload-container (namespace, kind, name,
// container; see WorkloadOf) it carries the window's samples as
// recommend.Counts in the sparse histogram encoding (whole counts per
// bucket, no decay), which the aggregator sums over nodes and merges
// exactly (recommend.AddCounts); the pods' mean usage; requests and limits
// in force and as declared; QoS class; the agent's own recommendation;
// the RightsizePolicy that covers the container (or the conflicting ones)
// and whether it can be adjusted and why not. Per node it carries OOM
// kills and adjustments (applied or failed) since the last report,
// capacity, requests and real usage, the CPU pools' state, and the
// sampling rounds done and missed. types.go documents each field.
//
// Replays: each report names its agent process (a random ID and start
// time) and a sequence number from 1; the aggregator accepts per node only
// a higher sequence from the same process or a later process, and answers
// 409 to anything else (a duplicate the agent retried after a lost answer
// is therefore harmless).
//
// Bounds: MaxWireBytes as sent, MaxBodyBytes of JSON, MaxContainers,
// MaxOOMKills, MaxAdjustments, names as Kubernetes bounds them; Decode
// refuses anything past them with ErrOversized, and anything else it cannot
// use with ErrMalformed, naming the field. Decode never panics on input
// (FuzzDecode).
//
// # The client
//
// Client.Enqueue stamps and buffers a report; Client.Run sends the buffer
// oldest first with exponential backoff and full jitter while the
// aggregator is away or busy, reading the projected service-account token
// again whenever the kubelet rotates it. The buffer is bounded
// (MaxBufferBytes): past it the oldest reports are coalesced, keeping
// their samples at a coarser time. Prefer picks the merged recommendation
// while it is fresh and the agent's own otherwise.
//
// # Files
//
// types.go (the Report, the merged recommendations and the aggregator's
// paths and answers; each field's rules), codec.go (Encode, Decode and
// Validate, and the bounds they hold a report to), builder.go (the
// Builder and the grid's timing: period, grace, staleness), client.go
// (the Client's buffer, sending, coalescing and token, Fetch of the
// merged recommendations, Prefer), workload.go (WorkloadOf, shared by the
// agent and the aggregator's webhook so both key a pod alike).
//
// # Imports
//
// The standard library, recommend (the counts encoding) and internal/*
// only: no client-go and no k8s.io/* at all, so the agent's reporting costs
// no Kubernetes machinery and the contract is readable on its own.
package report

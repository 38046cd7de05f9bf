// Package aggtest supports the aggregator's tests and its load generator:
// serving certificates for a loopback aggregator (Certs), a replica run
// for the length of a test (Start), and a synthetic fleet of nodes whose
// agents' reports it builds with the real report.Builder (Fleet).
//
// Error contract: Certs and ClientCerts return the file's name with an
// error writing it; Start fails the test. It imports the aggregator (to
// run it) and api/report; never agent.
//
// # Files
//
// aggtest.go holds the test PKI (a serving CA and certificate, a client
// CA and client certificates, the kube-apiserver's admission
// configuration that presents one to the webhooks), HTTP clients that
// trust the CA, the in-process replica (Start, Replica) and Wait.
// fleet.go is the synthetic cluster: its workloads, pods and nodes, and
// each node's report of a window. proc_linux.go reads a process's CPU
// time and its resident memory and peak from /proc, for the benchmarks
// that measure a process's footprint.
package aggtest

// Package kubelet is a simulated kubelet that runs many nodes in one process: it registers
// Nodes and keeps their Leases renewed, runs the pods bound to them through a Runner (local
// processes or stand-ins), remaps host paths into a per-node directory, gives pods loopback
// addresses (never in IMEXSentinelPrefix), an /etc/hosts and an /etc/resolv.conf (rendered
// from the pod's dnsPolicy and dnsConfig) and service-account credentials, tells every
// container the simulated IMEX's stand-ins (imexsim's environment variables), plays the kubelet's side of DRA (plugin
// registration, NodePrepareResources / NodeUnprepareResources, CDI edits), and serves container
// logs to the apiserver. docs/simulated-kubelet.md is the contract.
package kubelet

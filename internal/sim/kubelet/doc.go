// Package kubelet is a simulated kubelet that runs many nodes in one process: it registers
// Nodes and keeps their Leases renewed, runs the pods bound to them through a Runner (local
// processes or stand-ins), remaps host paths into a per-node directory, gives pods loopback
// addresses and service-account credentials, plays the kubelet's side of DRA (plugin
// registration, NodePrepareResources / NodeUnprepareResources, CDI edits), and serves container
// logs to the apiserver. docs/simulated-kubelet.md is the contract.
package kubelet

// Package imex holds the contract between the ComputeDomain daemon and the IMEX daemon it runs:
// rendering IMEX's configuration files (nodes.cfg, the hosts file, the imexd config), parsing
// them as IMEX does, and supervising the IMEX process through one Interface. NewReal runs
// nvidia-imex, with nvidia-imex-ctl -q as the readiness query, both found on PATH (or at the
// paths given in Options). Other implementations (the simulated cluster's) satisfy the same
// Interface; the daemon does not know which one it runs.
package imex

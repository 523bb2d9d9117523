package imexsim

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"

	"cdplane/internal/imex"
)

// MinHostnameDriverVersion is the oldest NVIDIA driver whose IMEX accepts host names in its
// node list; older ones take addresses only. One fact, kept where the product keeps it.
const MinHostnameDriverVersion = imex.HostnamesMinDriverVersion

// kernelDriverVersion returns the loaded kernel module's version from the content of
// DriverVersionPath ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  580.82.07
// Release Build …"): the first field of the NVRM line that is a dotted version, as the kubelet
// plugin reads it (kubeletplugin.KernelDriverVersion).
func kernelDriverVersion(data []byte) (string, bool) {
	for line := range strings.SplitSeq(string(data), "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "NVRM version:")
		if !ok {
			continue
		}
		for f := range strings.FieldsSeq(rest) {
			if _, ok := versionParts(f); ok {
				return f, true
			}
		}
	}
	return "", false
}

// versionParts splits a dotted version (at least two numbers) into its numbers.
func versionParts(v string) ([]int, bool) {
	fields := strings.Split(v, ".")
	if len(fields) < 2 {
		return nil, false
	}
	parts := make([]int, len(fields))
	for i, f := range fields {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 || strings.Trim(f, "0123456789") != "" {
			return nil, false
		}
		parts[i] = n
	}
	return parts, true
}

// compareVersions compares two dotted versions number by number (570.158.01 and 570.158.1 are
// equal; a missing number counts as 0). Both must be dotted versions.
func compareVersions(a, b string) int {
	pa, _ := versionParts(a)
	pb, _ := versionParts(b)
	for i := range max(len(pa), len(pb)) {
		var x, y int
		if i < len(pa) {
			x = pa[i]
		}
		if i < len(pb) {
			y = pb[i]
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// checkDriverForNames refuses a node list that holds a host name when the node's loaded driver
// (DriverVersionPath below the node directory) predates MinHostnameDriverVersion, naming the
// first such entry and both versions. Without a node directory, or a version file it can read,
// there is nothing to check.
func (s *simServer) checkDriverForNames(nodes []imex.Node) error {
	if s.env.nodeDir == "" {
		return nil
	}
	path := s.env.onNode(DriverVersionPath)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	version, ok := kernelDriverVersion(data)
	if !ok || compareVersions(version, MinHostnameDriverVersion) >= 0 {
		return nil
	}
	for _, n := range nodes {
		if _, err := netip.ParseAddr(n.Entry); err == nil {
			continue
		}
		return &imex.ConfigError{File: s.cfg.NodesConfigPath, Line: n.Line, Text: n.Entry, Reason: fmt.Sprintf(
			"host names in the node list need NVIDIA driver %s or later, but the loaded driver is %s (%s)",
			MinHostnameDriverVersion, version, path)}
	}
	return nil
}

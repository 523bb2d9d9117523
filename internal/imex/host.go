package imex

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// SessionInUseCode is the status the NVIDIA driver gives IMEX when the node's IMEX session is
// already held: the kernel allows one IMEX per node, so a container's IMEX fails with it while
// a host nvidia-imex.service runs. IMEX prints it on its way out.
const SessionInUseCode = "NV_ERR_IN_USE"

// IsSessionInUse reports whether a run of IMEX ended (or failed to start) because another IMEX
// holds the node's session. Retrying does not help until that one is stopped.
func IsSessionInUse(err error) bool {
	return err != nil && strings.Contains(err.Error(), SessionInUseCode)
}

// HostnamesMinDriverVersion is the first driver version whose IMEX resolves host names in its
// node list; older ones accept addresses only.
const HostnamesMinDriverVersion = "570.158.01"

// DriverSupportsHostnames reports whether IMEX of the given driver version (as in
// /proc/driver/nvidia/version, e.g. "580.82.07") accepts host names in its node list.
func DriverSupportsHostnames(version string) (bool, error) {
	have, err := parseDriverVersion(version)
	if err != nil {
		return false, err
	}
	want, _ := parseDriverVersion(HostnamesMinDriverVersion)
	for i := range max(len(have), len(want)) {
		var h, w int
		if i < len(have) {
			h = have[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if h != w {
			return h > w, nil
		}
	}
	return true, nil
}

// IsDottedVersion reports whether s reads as a driver version: at least two numbers (digits
// only) separated by single dots, as in "570.133.20".
func IsDottedVersion(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) < 2 {
		return false
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}

// parseDriverVersion splits a dotted driver version into its numbers.
func parseDriverVersion(v string) ([]int, error) {
	if v == "" {
		return nil, errors.New("driver version is empty")
	}
	parts := strings.Split(v, ".")
	out := make([]int, len(parts))
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("driver version %q: want dot-separated numbers", v)
		}
		out[i] = n
	}
	return out, nil
}

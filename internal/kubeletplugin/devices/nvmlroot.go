package devices

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"cdplane/internal/driverroot"
	"cdplane/internal/nvml"
)

// NewRootNVML returns the discoverer through the NVML library found under root.
func NewRootNVML(root driverroot.Root) *RootNVML {
	return &RootNVML{root: root}
}

// RootNVML finds NVML under a driver root on the first discovery, and again after a discovery
// that could not load it: a driver container mounts its root after the plugin started, and a
// driver upgrade replaces libnvidia-ml.so.<version>.
type RootNVML struct {
	root driverroot.Root
	mu   sync.Mutex
	path string
	d    nvml.Discoverer
}

// Discover discovers through the library found under the root. A miss is an error wrapping
// nvml.ErrNVMLUnavailable that names every place tried (the plugin logs it and posts it as the
// node's NVMLUnavailable event).
func (n *RootNVML) Discover(ctx context.Context) (nvml.Result, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.d == nil {
		p, l := n.root.FindNVML()
		if p == "" {
			return nvml.Result{Backend: nvml.BackendNVML}, fmt.Errorf("%w: %w", nvml.ErrNVMLUnavailable, n.root.Miss(driverroot.NVMLLibrary, l, " (is the NVIDIA driver installed, and nvidiaDriverRoot its root?)"))
		}
		d, err := nvml.New(p)
		if err != nil {
			return nvml.Result{Backend: nvml.BackendNVML}, err
		}
		n.d, n.path = d, p
	}
	res, err := n.d.Discover(ctx)
	if errors.Is(err, nvml.ErrNVMLUnavailable) {
		n.d = nil
	}
	return res, err
}

// Path is the library loaded last ("" before the first discovery found one).
func (n *RootNVML) Path() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.path
}

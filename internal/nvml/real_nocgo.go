//go:build !cgo

package nvml

import "fmt"

// Without cgo, go-nvml cannot be built and the real backend does not exist.

func newNVML(string) (Discoverer, error) {
	return nil, fmt.Errorf("%w: this binary was built without cgo; choose backend %q to run without GPUs", ErrNVMLUnavailable, BackendSim)
}

func probeLibrary(string) error {
	return fmt.Errorf("%w: this binary was built without cgo", ErrNVMLUnavailable)
}

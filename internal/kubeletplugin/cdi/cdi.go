// Package cdi names the kubelet plugin's per-claim CDI specs and their devices, and writes and
// removes the spec files in the CDI directory (Writer). What a claim's spec holds is prepare's.
package cdi

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin/failure"
)

// CDI names of this driver's transient, per-claim specs.
const (
	Vendor = "k8s." + cdv1beta1.DriverName
	Class  = "claim"
	Kind   = Vendor + "/" + Class
)

// SpecName is the file name (without directory) of a claim's CDI spec.
func SpecName(claimUID types.UID) string {
	return cdiapi.GenerateTransientSpecName(Vendor, Class, string(claimUID)) + ".json"
}

// DeviceName is the CDI device name of one prepared device of a claim: unique per claim, so
// that a runtime's cache never mistakes one claim's device for another's.
func DeviceName(claimUID types.UID, device string) string {
	return string(claimUID) + "-" + device
}

// DeviceID is the fully qualified CDI device id the kubelet passes to the runtime.
func DeviceID(claimUID types.UID, device string) string {
	return parser.QualifiedName(Vendor, Class, DeviceName(claimUID, device))
}

// Writer writes and removes claim specs in one CDI directory.
type Writer struct {
	cache *cdiapi.Cache
	dir   string
}

// NewWriter returns the writer of claim specs in dir.
func NewWriter(dir string) (*Writer, error) {
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("CDI directory %s: %w", dir, err)
	}
	return &Writer{cache: cache, dir: dir}, nil
}

// Exists reports whether the spec file name is in the CDI directory. The directory is a tmpfs
// on GPU nodes (/var/run/cdi): a reboot empties it while the checkpoint stays.
func (w *Writer) Exists(name string) bool {
	_, err := os.Stat(filepath.Join(w.dir, filepath.Base(name)))
	return err == nil
}

// Write validates spec, sets the lowest CDI version that can express it, and writes it
// atomically under name.
func (w *Writer) Write(spec *cdispec.Spec, name string) error {
	version, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return failure.Tag(failure.CDI, fmt.Errorf("CDI spec %s: %w", name, err))
	}
	spec.Version = version
	if err := w.cache.WriteSpec(spec, name); err != nil {
		return failure.Tag(failure.CDI, fmt.Errorf("writing CDI spec %s: %w", name, err))
	}
	return nil
}

// Remove deletes a spec; a missing one is not an error.
func (w *Writer) Remove(name string) error {
	if name == "" {
		return nil
	}
	if err := w.cache.RemoveSpec(filepath.Base(name)); err != nil {
		return failure.Tag(failure.CDI, fmt.Errorf("removing CDI spec %s: %w", name, err))
	}
	return nil
}

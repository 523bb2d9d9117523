package kubelet

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// Device is a device node given to a container: where the container expects it and the
// (remapped) host file that stands for it.
type Device struct {
	ContainerPath string
	HostPath      string
}

// Mount is a host directory or file seen by a container at ContainerPath.
type Mount struct {
	ContainerPath string
	HostPath      string
	ReadOnly      bool
}

// Edits are the container edits of a set of CDI devices, with host paths remapped into the
// node's directory.
type Edits struct {
	Env     []EnvVar
	Devices []Device
	Mounts  []Mount
}

// CDI directories of a node, relative to its directory.
var cdiDirs = []string{"etc/cdi", "var/run/cdi"}

// cdiResolver resolves CDI device ids from a node's CDI directories.
type cdiResolver struct {
	nodeDir string
	mu      sync.Mutex
	cache   *cdiapi.Cache
}

// resolve reads the node's CDI specs again and returns, for each id in order, the spec's and
// then the device's container edits.
func (r *cdiResolver) resolve(ids []string) ([]*cdispec.ContainerEdits, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cache == nil {
		dirs := make([]string, len(cdiDirs))
		for i, d := range cdiDirs {
			dirs[i] = filepath.Join(r.nodeDir, d)
		}
		c, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dirs...), cdiapi.WithAutoRefresh(false))
		if err != nil && c == nil {
			return nil, fmt.Errorf("CDI cache: %w", err)
		}
		r.cache = c
	}
	// Errors of unrelated specs do not matter; an id that does not resolve does.
	_ = r.cache.Refresh()
	var out []*cdispec.ContainerEdits
	seenSpec := map[*cdiapi.Spec]bool{}
	var missing []string
	for _, id := range ids {
		d := r.cache.GetDevice(id)
		if d == nil {
			missing = append(missing, id)
			continue
		}
		if s := d.GetSpec(); !seenSpec[s] {
			seenSpec[s] = true
			e := s.ContainerEdits
			out = append(out, &e)
		}
		e := d.ContainerEdits
		out = append(out, &e)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("unresolvable CDI devices %s in %s", strings.Join(missing, ", "), r.nodeDir)
	}
	return out, nil
}

// applyCDIEdits turns CDI container edits into what a simulated container gets: env entries
// in order (a later one replacing an earlier one of the same name), device nodes and mounts
// whose host paths are remapped into nodeDir (see OnNode; a device node without hostPath is
// its path on the host), a later device or mount at the same container path replacing an
// earlier one. Hooks and other edits have no meaning here and are ignored. A device's host file
// need not exist: the container's view (containerPaths) leaves out one that does not.
func applyCDIEdits(nodeDir string, edits []*cdispec.ContainerEdits) Edits {
	var out Edits
	for _, e := range edits {
		if e == nil {
			continue
		}
		for _, kv := range e.Env {
			name, value, _ := strings.Cut(kv, "=")
			out.Env = mergeEnv(out.Env, EnvVar{Name: name, Value: value})
		}
		for _, d := range e.DeviceNodes {
			host := d.HostPath
			if host == "" {
				host = d.Path
			}
			out.Devices = slices.DeleteFunc(out.Devices, func(x Device) bool { return x.ContainerPath == d.Path })
			out.Devices = append(out.Devices, Device{ContainerPath: d.Path, HostPath: OnNode(nodeDir, host)})
		}
		for _, m := range e.Mounts {
			out.Mounts = slices.DeleteFunc(out.Mounts, func(x Mount) bool { return x.ContainerPath == m.ContainerPath })
			out.Mounts = append(out.Mounts, Mount{
				ContainerPath: m.ContainerPath, HostPath: OnNode(nodeDir, m.HostPath),
				ReadOnly: slices.Contains(m.Options, "ro"),
			})
		}
	}
	return out
}

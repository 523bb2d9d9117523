package kubelet

import (
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// PathMapping says that a path inside a container is the directory (or file) HostPath on the
// host filesystem.
type PathMapping struct {
	ContainerPath string
	HostPath      string
}

// PathMap rewrites container paths into host paths: processes of a simulated node run on the
// real host filesystem, so every path they are told about must be the remapped one.
//
// A value is rewritten when it is equal to a mapped container path or starts with it followed
// by "/"; the longest matching container path wins. A value of the form "-x=V" or "--name=V"
// has its V rewritten the same way. Relative paths and other values are left alone.
type PathMap struct {
	entries []PathMapping // cleaned, longest container path first
}

// NewPathMap builds a map; for a container path given twice the last mapping wins (as with a
// CDI mount replacing a volume mount at the same place).
func NewPathMap(mappings []PathMapping) *PathMap {
	byPath := map[string]string{}
	for _, m := range mappings {
		if !path.IsAbs(m.ContainerPath) {
			continue
		}
		byPath[path.Clean(m.ContainerPath)] = filepath.Clean(m.HostPath)
	}
	pm := &PathMap{entries: make([]PathMapping, 0, len(byPath))}
	for c, h := range byPath {
		pm.entries = append(pm.entries, PathMapping{ContainerPath: c, HostPath: h})
	}
	sort.Slice(pm.entries, func(i, j int) bool {
		a, b := pm.entries[i].ContainerPath, pm.entries[j].ContainerPath
		if len(a) != len(b) {
			return len(a) > len(b)
		}
		return a < b
	})
	return pm
}

// Path returns the host path of an absolute container path, and whether a mapping applied.
func (m *PathMap) Path(p string) (string, bool) {
	if m == nil || !strings.HasPrefix(p, "/") {
		return p, false
	}
	for _, e := range m.entries {
		switch {
		case e.ContainerPath == "/":
			return filepath.Join(e.HostPath, p), true
		case p == e.ContainerPath:
			return e.HostPath, true
		case strings.HasPrefix(p, e.ContainerPath+"/"):
			return e.HostPath + p[len(e.ContainerPath):], true
		}
	}
	return p, false
}

// Value rewrites one argument or environment value: a path as Path does, or the value of a
// "-x=V" / "--name=V" flag.
func (m *PathMap) Value(v string) string {
	if got, ok := m.Path(v); ok {
		return got
	}
	if strings.HasPrefix(v, "-") {
		if i := strings.IndexByte(v, '='); i > 0 {
			if got, ok := m.Path(v[i+1:]); ok {
				return v[:i+1] + got
			}
		}
	}
	return v
}

// Values rewrites each value of a list; nil stays nil.
func (m *PathMap) Values(vs []string) []string {
	if vs == nil {
		return nil
	}
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = m.Value(v)
	}
	return out
}

// OnNode returns where host path p of a simulated node lies on the real host: p itself when
// it is already inside nodeDir (a plugin running in this process, or given remapped paths),
// else nodeDir joined with p.
func OnNode(nodeDir, p string) string {
	nodeDir = filepath.Clean(nodeDir)
	p = filepath.Clean(p)
	if p == nodeDir || strings.HasPrefix(p, nodeDir+string(filepath.Separator)) {
		return p
	}
	return filepath.Join(nodeDir, p)
}

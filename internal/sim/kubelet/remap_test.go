package kubelet

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPathMapValue(t *testing.T) {
	pm := NewPathMap([]PathMapping{
		{ContainerPath: "/var/lib/kubelet", HostPath: "/n/var/lib/kubelet"},
		{ContainerPath: "/var/lib/kubelet/plugins_registry/", HostPath: "/n/registry"},
		{ContainerPath: "/data", HostPath: "/pods/u/volumes/data"},
		{ContainerPath: "/etc/cfg", HostPath: "/first"},
		{ContainerPath: "/etc/cfg", HostPath: "/second"}, // the later mapping wins
		{ContainerPath: "relative", HostPath: "/ignored"},
	})
	for name, tc := range map[string]struct{ in, want string }{
		"equal":                      {in: "/data", want: "/pods/u/volumes/data"},
		"below":                      {in: "/data/x/y", want: "/pods/u/volumes/data/x/y"},
		"longest first":              {in: "/var/lib/kubelet/plugins_registry/x.sock", want: "/n/registry/x.sock"},
		"shorter when longer misses": {in: "/var/lib/kubelet/pods", want: "/n/var/lib/kubelet/pods"},
		"prefix without separator":   {in: "/database", want: "/database"},
		"unmapped":                   {in: "/usr/bin/x", want: "/usr/bin/x"},
		"relative":                   {in: "relative/x", want: "relative/x"},
		"long flag":                  {in: "--dir=/data/sub", want: "--dir=/pods/u/volumes/data/sub"},
		"short flag":                 {in: "-d=/data", want: "-d=/pods/u/volumes/data"},
		"flag unmapped":              {in: "--dir=/other", want: "--dir=/other"},
		"not a flag":                 {in: "x=/data", want: "x=/data"},
		"duplicate container path":   {in: "/etc/cfg/a", want: "/second/a"},
		"empty":                      {in: "", want: ""},
	} {
		t.Run(name, func(t *testing.T) {
			if got := pm.Value(tc.in); got != tc.want {
				t.Errorf("Value(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestPathMapRoot(t *testing.T) {
	pm := NewPathMap([]PathMapping{{ContainerPath: "/", HostPath: "/host"}, {ContainerPath: "/data", HostPath: "/d"}})
	if diff := cmp.Diff([]string{"/host/etc/x", "/d/y", "/host"}, pm.Values([]string{"/etc/x", "/data/y", "/"})); diff != "" {
		t.Errorf("Values (-want +got):\n%s", diff)
	}
}

func TestOnNode(t *testing.T) {
	for name, tc := range map[string]struct{ dir, in, want string }{
		"container path":  {dir: "/s/nodes/a", in: "/dev/x", want: "/s/nodes/a/dev/x"},
		"already on node": {dir: "/s/nodes/a", in: "/s/nodes/a/var/run/cdi", want: "/s/nodes/a/var/run/cdi"},
		"the node dir":    {dir: "/s/nodes/a/", in: "/s/nodes/a", want: "/s/nodes/a"},
		"sibling node":    {dir: "/s/nodes/a", in: "/s/nodes/ab/x", want: "/s/nodes/a/s/nodes/ab/x"},
		"unclean":         {dir: "/s/nodes/a", in: "/var//lib/../run", want: "/s/nodes/a/var/run"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := OnNode(tc.dir, tc.in); got != tc.want {
				t.Errorf("OnNode(%q, %q) = %q, want %q", tc.dir, tc.in, got, tc.want)
			}
		})
	}
}

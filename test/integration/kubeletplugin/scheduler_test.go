package kubeletplugin

import (
	"context"
	"fmt"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin"
)

// nodeSlices lists the ResourceSlices of this driver for a node.
func nodeSlices(e *env, nodeName string) ([]resourcev1.ResourceSlice, error) {
	var list resourcev1.ResourceSliceList
	if err := e.C.List(context.Background(), &list, client.MatchingFields{"spec.nodeName": nodeName}); err != nil {
		return nil, err
	}
	var out []resourcev1.ResourceSlice
	for _, s := range list.Items {
		if s.Spec.Driver == cdv1beta1.DriverName {
			out = append(out, s)
		}
	}
	return out, nil
}

// TestPublishedSlicesAreScheduled: a node publishes channel-0 … channel-2047 and daemon-0 in
// slices of at most 128 devices, with the type, id and controlPlane attributes; a pod whose claim
// uses the default channel DeviceClass is placed by a real kube-scheduler on that node with
// channel-0 allocated, and the allocated claim prepares.
func TestPublishedSlicesAreScheduled(t *testing.T) {
	t.Parallel()
	installManifests(t)
	e := newEnv(t)
	n := e.addNode(10, schedulable())
	n.start(kubeletplugin.MaxChannels)

	want := kubeletplugin.MaxChannels + 1
	var slices []resourcev1.ResourceSlice
	e.Eventually(60*time.Second, "all devices published", func() (bool, error) {
		var err error
		slices, err = nodeSlices(e, n.name)
		if err != nil {
			return false, fmt.Errorf("listing slices: %w", err)
		}
		count := 0
		for _, s := range slices {
			count += len(s.Spec.Devices)
		}
		return count == want, fmt.Errorf("%d devices in %d slices", count, len(slices))
	})
	seen := map[string]bool{}
	for _, s := range slices {
		if len(s.Spec.Devices) > kubeletplugin.MaxDevicesPerSlice {
			t.Errorf("slice %s holds %d devices, more than %d", s.Name, len(s.Spec.Devices), kubeletplugin.MaxDevicesPerSlice)
		}
		if s.Spec.Pool.Name != n.name || s.Spec.NodeName == nil || *s.Spec.NodeName != n.name {
			t.Errorf("slice %s: pool %q node %v, want both %s", s.Name, s.Spec.Pool.Name, s.Spec.NodeName, n.name)
		}
		for _, d := range s.Spec.Devices {
			seen[d.Name] = true
			if cp := d.Attributes[kubeletplugin.AttributeControlPlane].StringValue; cp == nil || *cp != "" {
				t.Errorf("device %s: controlPlane %v, want the empty string of the legacy plane", d.Name, cp)
			}
		}
	}
	for _, name := range []string{"channel-0", "channel-2047", "daemon-0"} {
		if !seen[name] {
			t.Errorf("device %s not published", name)
		}
	}
	if len(seen) != want {
		t.Errorf("%d distinct devices published, want %d", len(seen), want)
	}

	cd := e.createCD(e.ns, "sched")
	e.setClique(cd, n, cdv1beta1.StatusReady)
	claim, pod := e.scheduledWorkload(t, n, cd, "workload")
	e.waitScheduled(pod, 60*time.Second)
	if pod.Spec.NodeName != n.name {
		t.Fatalf("pod scheduled on %s, want %s", pod.Spec.NodeName, n.name)
	}
	if err := e.C.Get(e.Ctx(), client.ObjectKeyFromObject(claim), claim); err != nil {
		t.Fatal(err)
	}
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claim allocation %+v, want one device", claim.Status.Allocation)
	}
	r := claim.Status.Allocation.Devices.Results[0]
	if r.Driver != cdv1beta1.DriverName || r.Pool != n.name || r.Device != "channel-0" {
		t.Errorf("scheduler allocated %s/%s/%s, want %s/%s/channel-0", r.Driver, r.Pool, r.Device, cdv1beta1.DriverName, n.name)
	}

	// The kubelet prepares the claim as the scheduler allocated it (config copied from the spec).
	n.mustPrepare(claim)
	spec, ok := n.cdiSpec(claim.UID)
	if !ok || len(spec.Devices) != 1 || !cmpPaths(deviceNodePaths(spec.Devices[0]), "/dev/nvidia-caps-imex-channels/channel0") {
		t.Errorf("CDI spec of the scheduled claim: %+v", spec)
	}
}

func cmpPaths(got []string, want ...string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

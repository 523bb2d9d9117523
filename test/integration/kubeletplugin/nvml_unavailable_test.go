package kubeletplugin

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	eventsv1 "k8s.io/api/events/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin"
	"cdplane/internal/nvml"
)

// switchableNVML is the node's simulated NVML, made unloadable while down is set (a node
// without NVIDIA's driver, or one whose driver is being reinstalled).
type switchableNVML struct {
	disc nvml.Discoverer
	down atomic.Bool
}

func (s *switchableNVML) Discover(ctx context.Context) (nvml.Result, error) {
	if s.down.Load() {
		return nvml.Result{}, fmt.Errorf("%w: libnvidia-ml.so.1 cannot be loaded (test)", nvml.ErrNVMLUnavailable)
	}
	return s.disc.Discover(ctx)
}

// TestNodeWithoutNVMLPublishesNoDevices: on a node where NVML cannot be loaded the plugin keeps
// running and publishes no devices, so the scheduler places no ComputeDomain workload or daemon
// there; when NVML loads again it publishes them, and stops when NVML goes away.
func TestNodeWithoutNVMLPublishesNoDevices(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := e.addNode(1)
	disc := &switchableNVML{disc: n.sim}
	disc.down.Store(true)
	n.startWith(8, testr.NewWithOptions(t, testr.Options{Verbosity: 1}), func(o *kubeletplugin.Options) {
		o.Discoverer = disc
		o.CliqueRefreshPeriod = 100 * time.Millisecond
		o.PodName, o.PodUID = "plugin-"+n.name, "plugin-uid-"+types.UID(n.name)
	})
	devices := func() (int, error) {
		list := &resourcev1.ResourceSliceList{}
		if err := e.C.List(e.Ctx(), list); err != nil {
			return 0, err
		}
		count := 0
		for _, s := range list.Items {
			if s.Spec.Driver == cdv1beta1.DriverName && s.Spec.NodeName != nil && *s.Spec.NodeName == n.name {
				count += len(s.Spec.Devices)
			}
		}
		return count, nil
	}
	// Started without NVML: the plugin is up (it registered with the kubelet) and the node's
	// pool holds no device, sampled over several refresh periods.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for range 10 {
		if got, err := devices(); err != nil || got != 0 {
			t.Fatalf("devices of a node without NVML: %d (%v), want 0", got, err)
		}
		<-tick.C
	}
	select {
	case <-n.drv.Done():
		t.Fatalf("the plugin stopped on a node without NVML: %v", n.drv.Err())
	default:
	}

	waitNodeEvent(e, n, kubeletplugin.ReasonNVMLUnavailable, "node "+n.name+" offers no ComputeDomain devices: NVML cannot be loaded")

	disc.down.Store(false)
	e.Eventually(time.Minute, "the node's devices published once NVML loads", func() (bool, error) {
		got, err := devices()
		return got == 9, err // 8 channels and the daemon device
	})
	waitNodeEvent(e, n, kubeletplugin.ReasonDevicesPublished, "node "+n.name+" offers its ComputeDomain devices again")
	disc.down.Store(true)
	e.Eventually(time.Minute, "the node's devices withdrawn when NVML goes away", func() (bool, error) {
		got, err := devices()
		return got == 0, err
	})
}

// waitNodeEvent waits for an event about node n with this reason: regarding its plugin's pod
// (PodName "plugin-<node>"), in the driver namespace, the node as the related object, reported
// by the driver from the node (as the admission policy on the plugin's events requires), its
// note containing note.
func waitNodeEvent(e *env, n *node, reason, note string) {
	e.T.Helper()
	e.Eventually(time.Minute, "event "+reason+" about node "+n.name, func() (bool, error) {
		list := &eventsv1.EventList{}
		if err := e.C.List(e.Ctx(), list, client.InNamespace(e.driverNS)); err != nil {
			return false, err
		}
		for _, ev := range list.Items {
			if ev.Reason == reason && ev.Regarding.Kind == "Pod" && ev.Regarding.Name == "plugin-"+n.name &&
				ev.Related != nil && ev.Related.Kind == "Node" && ev.Related.Name == n.name && strings.Contains(ev.Note, note) &&
				ev.ReportingController == cdv1beta1.DriverName && ev.ReportingInstance == n.name {
				return true, nil
			}
		}
		return false, fmt.Errorf("%d events in %s, none matching", len(list.Items), e.driverNS)
	})
}

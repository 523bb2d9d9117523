package controller

import (
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"cdplane/internal/controller"
)

// TestLeaseNamesTheLeadingPod: with an identity (the chart gives the pod's name), the leader
// election lease's holder is that name, so an operator can tell which replica leads.
func TestLeaseNamesTheLeadingPod(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true, func(o *controller.Options) {
		o.LeaderElection = true
		o.LeaderElectionID = "lease-test"
		o.LeaderElectionIdentity = "cdplane-controller-7d9f-abcde"
	})
	e.eventually(time.Minute, "the lease held by the named pod", func() (bool, error) {
		lease := &coordinationv1.Lease{}
		if err := e.c.Get(e.ctx(), client.ObjectKey{Namespace: e.driverNS, Name: "lease-test"}, lease); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		holder := ptr.Deref(lease.Spec.HolderIdentity, "")
		return holder == "cdplane-controller-7d9f-abcde", fmt.Errorf("holder %q", holder)
	})
}

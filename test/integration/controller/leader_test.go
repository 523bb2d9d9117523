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

// TestStoppedLeaderReleasesItsLease: a leader asked to stop (SIGTERM cancels its context) gives
// its lease up on the way out, so that another replica takes over at once instead of after the
// lease duration, and a rollout is not held up. How long the stop took is logged (no bound is
// asserted: timing belongs in benchmarks).
func TestStoppedLeaderReleasesItsLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, true, func(o *controller.Options) {
		o.LeaderElection = true
		o.LeaderElectionID = "lease-release"
		o.LeaderElectionIdentity = "cdplane-controller-0"
	})
	get := func() (string, error) {
		lease := &coordinationv1.Lease{}
		if err := e.c.Get(e.ctx(), client.ObjectKey{Namespace: e.driverNS, Name: "lease-release"}, lease); err != nil {
			return "", client.IgnoreNotFound(err)
		}
		return ptr.Deref(lease.Spec.HolderIdentity, ""), nil
	}
	e.eventually(time.Minute, "the lease held", func() (bool, error) {
		holder, err := get()
		return holder == "cdplane-controller-0", err
	})
	start := time.Now()
	e.stopMgr()
	t.Logf("the controller manager stopped %s after its context ended", time.Since(start).Round(time.Millisecond))
	holder, err := get()
	if err != nil || holder != "" {
		t.Errorf("lease holder after the stop: %q (%v), want none: the lease is released", holder, err)
	}
}

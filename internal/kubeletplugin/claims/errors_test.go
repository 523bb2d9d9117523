package claims

import (
	"errors"
	"strings"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin/claimlock"
	"cdplane/internal/kubeletplugin/failure"
	"cdplane/internal/kubeletplugin/readiness"
	"cdplane/internal/testutil"
)

// domainMetaIn is a cached ComputeDomain's metadata.
func domainMetaIn(ns, name string, deleting bool) *metav1.PartialObjectMetadata {
	m := readiness.DomainMeta()
	m.Namespace, m.Name, m.UID = ns, name, testUID
	if deleting {
		m.DeletionTimestamp = &metav1.Time{Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	}
	return m
}

// planErr is planClaim's error for the claim.
func planErr(w *testutil.ResourceClaimWrapper) error {
	_, err := planClaim(w.Obj())
	return err
}

// TestUserFixableFailures: each failure of a prepare is, or is not, one the claim's author can
// fix; a tagged failure keeps the message and the permanent/retryable kind the kubelet sees.
func TestUserFixableFailures(t *testing.T) {
	claimSrc := resourcev1.AllocationConfigSourceClaim
	daemonCfg := `{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainDaemonConfig","domainID":"` + testUID + `"}`
	channel := func() *testutil.ResourceClaimWrapper { return device(allocated(), "channel", "channel-0") }
	cases := map[string]struct {
		err        error
		wantReason string // "" not user-fixable
		wantDomain string
		retryable  bool
		wantMsg    string
	}{
		"domain in another namespace": {
			err:        CheckDomain("ns", "c", testUID, domainMetaIn("other", "cd", false), nil),
			wantReason: failure.ReasonComputeDomainInOtherNamespace, wantDomain: "other/cd",
			wantMsg: "permanent error: claim ns/c is in namespace ns, but its ComputeDomain cd is in namespace other",
		},
		"domain not found": {
			err:        CheckDomain("ns", "c", testUID, nil, &failure.RetryableError{Err: &readiness.DomainNotFoundError{UID: testUID}}),
			wantReason: failure.ReasonComputeDomainNotFound, wantDomain: "with UID " + testUID, retryable: true,
			wantMsg: "retryable error: ComputeDomain with UID " + testUID + " not found",
		},
		"domain being deleted": {
			err:        CheckDomain("ns", "c", testUID, domainMetaIn("ns", "cd", true), nil),
			wantReason: failure.ReasonComputeDomainDeleting, wantDomain: "ns/cd",
			wantMsg: "permanent error: ComputeDomain ns/cd (UID " + testUID + ") is being deleted (since 2026-01-02T03:04:05Z)",
		},
		"domain lookup failed": {
			err:     CheckDomain("ns", "c", testUID, nil, failure.Retryablef("looking up ComputeDomain %s: %w", testUID, errors.New("cache stopped"))),
			wantMsg: "retryable error: looking up ComputeDomain", retryable: true,
		},
		"node serves another domain": {
			err:        labelRefusal(func() error { _, err := addLabelDecision("n1", "uid-a", testUID); return err }(), "ns/cd"),
			wantReason: failure.ReasonNodeServesOtherComputeDomain, wantDomain: "ns/cd", retryable: true,
			wantMsg: "retryable error: node n1 already serves ComputeDomain uid-a",
		},
		"node label write failed": {
			err:     labelRefusal(errors.New("reading node n1: connection refused"), "ns/cd"),
			wantMsg: "reading node n1",
		},
		"channel config missing": {
			err:        planErr(channel()),
			wantReason: failure.ReasonComputeDomainConfigMissing,
			wantMsg:    `permanent error: request "channel": no opaque config of driver compute-domain.nvidia.com applies`,
		},
		"unknown field in the config": {
			err: planErr(channel().AllocatedConfig(claimSrc, cdv1beta1.DriverName,
				`{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":"x","allocationMod":"All"}`, "channel")),
			wantReason: failure.ReasonInvalidComputeDomainConfig,
			wantMsg:    `permanent error: status.allocation.devices.config[0].opaque.parameters: opaque config ComputeDomainChannelConfig: unknown field "allocationMod"`,
		},
		"daemon config on a channel": {
			err:        planErr(channel().AllocatedConfig(claimSrc, cdv1beta1.DriverName, daemonCfg, "channel")),
			wantReason: failure.ReasonInvalidComputeDomainConfig,
			wantMsg:    "permanent error: request \"channel\": a channel device needs a ComputeDomainChannelConfig, got a ComputeDomainDaemonConfig",
		},
		"requests of two domains": {
			err: planErr(device(channel(), "second", "channel-1").
				AllocatedConfig(claimSrc, cdv1beta1.DriverName, channelCfg(testUID, "Single"), "channel").
				AllocatedConfig(claimSrc, cdv1beta1.DriverName, channelCfg("other-uid", "Single"), "second")),
			wantReason: failure.ReasonConflictingComputeDomainConfig,
			wantMsg:    "permanent error: requests of one claim name different ComputeDomains",
		},
		"requests of two allocation modes": {
			err: planErr(device(channel(), "second", "channel-1").
				AllocatedConfig(claimSrc, cdv1beta1.DriverName, channelCfg(testUID, "Single"), "channel").
				AllocatedConfig(claimSrc, cdv1beta1.DriverName, channelCfg(testUID, "All"), "second")),
			wantReason: failure.ReasonConflictingComputeDomainConfig, wantDomain: testUID,
			wantMsg: "permanent error: requests of one claim ask for different allocation modes (Single and All)",
		},
		"channels and the daemon device": {
			err: planErr(device(channel(), "daemon", "daemon-0").
				AllocatedConfig(claimSrc, cdv1beta1.DriverName, channelCfg(testUID, "Single"), "channel").
				AllocatedConfig(claimSrc, cdv1beta1.DriverName, daemonCfg, "daemon")),
			wantReason: failure.ReasonConflictingComputeDomainConfig,
			wantMsg:    "permanent error: claim holds both channel and daemon devices",
		},
		"claim not allocated": {
			err:     planErr(testutil.MakeResourceClaim("claim", "ns")),
			wantMsg: "retryable error: claim is not allocated", retryable: true,
		},
		"daemon claim outside the driver namespace": {
			err:     failure.Tag(failure.WrongNamespace, checkDaemonNamespace("ns", "d", "cdplane")),
			wantMsg: "permanent error: daemon claim ns/d is not in the driver namespace cdplane",
		},
		"daemon not Ready within the wait": {
			err:     failure.Tag(failure.IMEXNotReady, failure.Retryablef("the ComputeDomain daemon on node n1 is not Ready after 10s: clique lists the node as NotReady")),
			wantMsg: "retryable error: the ComputeDomain daemon on node n1 is not Ready", retryable: true,
		},
		"driver root": {
			err:     failure.Tag(failure.Driver, failure.Permanentf("NVIDIA driver root /run/nvidia/driver has no nvidia-imex")),
			wantMsg: "permanent error: NVIDIA driver root", // the operator's to fix
		},
		"clique not known yet": {
			err:     failure.Tag(failure.CliqueUnknown, failure.Retryablef("NVLink fabric registration in progress")),
			wantMsg: "retryable error: NVLink fabric", retryable: true,
		},
		"an unprepare came meanwhile": {
			err:     &failure.RetryableError{Err: claimlock.ErrUnpreparedMeanwhile},
			wantMsg: "retryable error: ", retryable: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if tc.err == nil {
				t.Fatal("no error")
			}
			// As the prepare returns it: counted under a failure reason.
			err := failure.Tag(failure.Other, tc.err)
			ue, ok := failure.UserErrorOf(err)
			switch {
			case tc.wantReason == "" && ok:
				t.Errorf("user-fixable with reason %s, want not", ue.Reason)
			case tc.wantReason != "" && !ok:
				t.Errorf("not user-fixable, want reason %s", tc.wantReason)
			case ok && (ue.Reason != tc.wantReason || ue.Domain != tc.wantDomain):
				t.Errorf("reason %s, domain %q; want %s, %q", ue.Reason, ue.Domain, tc.wantReason, tc.wantDomain)
			}
			if !strings.HasPrefix(err.Error(), tc.wantMsg) {
				t.Errorf("message %q, want it to start with %q", err.Error(), tc.wantMsg)
			}
			wantPermanent := strings.HasPrefix(tc.wantMsg, "permanent error")
			if failure.IsRetryable(err) != tc.retryable || failure.IsPermanent(err) != wantPermanent {
				t.Errorf("retryable %v, permanent %v; want %v, %v", failure.IsRetryable(err), failure.IsPermanent(err), tc.retryable, wantPermanent)
			}
		})
	}
}

func TestUserFixableKeepsNil(t *testing.T) {
	if err := failure.UserFixable(nil, failure.ReasonComputeDomainNotFound, ""); err != nil {
		t.Errorf("failure.UserFixable(nil) = %v", err)
	}
	if err := CheckDomain("ns", "c", testUID, domainMetaIn("ns", "cd", false), nil); err != nil {
		t.Errorf("a live domain of the claim's namespace: %v", err)
	}
}
